#!/bin/bash
# bash bench/baseline_package.sh REV DIR: the package as of commit REV, as DIR/mlx_kvq_base (its imports are relative),
# for `bench/stage_served.py --baseline DIR` (two versions of the host code timed in one process)
set -eu
rev=$1; dir=$2; tmp=$(mktemp -d)
git archive "$rev" mlx_kvq | tar -x -C "$tmp"
rm -rf "$dir/mlx_kvq_base"; mkdir -p "$dir"; mv "$tmp/mlx_kvq" "$dir/mlx_kvq_base"; rmdir "$tmp"
git rev-parse --short "$rev" > "$dir/mlx_kvq_base/REV"
echo "$dir/mlx_kvq_base: mlx_kvq at $(cat "$dir/mlx_kvq_base/REV")"
