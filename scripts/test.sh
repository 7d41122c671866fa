#!/usr/bin/env bash
# Install mlx_kvq with everything its tests need, then run them: every notebook (as nbdev-test does)
# and the tests in tests/, on KVQ_TEST_WORKERS (default 2) pytest-xdist workers. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh --flags slow`.
# `--install-only` stops after installing.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENBLAS=/usr/lib/x86_64-linux-gnu/libopenblas.so.0
if [ "$(uname -s)" = Linux ] && [ ! -e "$OPENBLAS" ] && command -v apt-get >/dev/null; then
  # MLX's CPU build bundles a slow BLAS; Debian's OpenBLAS makes float32 matmul ~40x faster.
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libopenblas0-pthread >/dev/null
fi

EXTRAS="gemma,dev"; [ "$(uname -s)" = Linux ] && EXTRAS="cpu,$EXTRAS"
python3 -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"

if [ "${1:-}" = "--install-only" ]; then exit 0; fi
[ -e "$OPENBLAS" ] && export LD_PRELOAD="$OPENBLAS${LD_PRELOAD:+:$LD_PRELOAD}"
# two pytest workers (pytest-xdist): 14-26 minutes on 2 cores (clean-clone runs of .ci/run: 534 tests, pytest 1,462-1,527 s on 2026-12-02 (541 tests later that day: 872 s with the emulator builds kept; 547 items that afternoon: 979 s), much of it the kernel emulator's g++ builds, kept per machine in $KVQ_EMULATOR_CACHE or the temp dir; 499 tests, 789-910 s on 2026-12-01)
exec python3 -m pytest -n "${KVQ_TEST_WORKERS:-2}" "$@"
