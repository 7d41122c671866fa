#!/bin/bash
# bash bench/baseline_package.sh REV DIR: the package as of commit REV, as DIR/mlx_kvq_base (its imports are relative),
# for `bench/stage_served.py --baseline DIR` (two versions of the host code timed in one process);
# bash bench/baseline_package.sh --plain REV DIR: as DIR/old/mlx_kvq, for a whole process run on it (PYTHONPATH=DIR/old first:
# gpu_round.sh's `kern` part, SHAPE@base)
set -eu
plain=0; [ "${1:-}" = "--plain" ] && { plain=1; shift; }
[ $# -eq 2 ] || { echo "usage: bash bench/baseline_package.sh [--plain] REV DIR (e.g. ae30bfe .kvq_base)"; exit 2; }
rev=$1; dir=$2; tmp=$(mktemp -d)
git archive "$rev" mlx_kvq | tar -x -C "$tmp"
if [ $plain = 1 ]; then dest="$dir/old/mlx_kvq"; rm -rf "$dest"; mkdir -p "$dir/old"
else dest="$dir/mlx_kvq_base"; rm -rf "$dest"; mkdir -p "$dir"; fi
mv "$tmp/mlx_kvq" "$dest"; rmdir "$tmp"
git rev-parse --short "$rev" > "$dest/REV"
echo "$dest: mlx_kvq at $(cat "$dest/REV")"
