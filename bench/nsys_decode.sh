#!/bin/bash
# bash bench/nsys_decode.sh OUT CONTEXT SCHEME...: each scheme's whole-model decode under Nsight Systems (bench/nsys_decode.py,
# 96 timed steps), its GPU trace as CSV and bench/nsys_summary.py's busy time and kernels per step
set -u
O=$1; ctx=$2; shift 2; mkdir -p "$O"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
[ -z "$NSYS" ] && { echo "no nsys on this machine"; exit 1; }
for s in "$@"; do
  f="$O/${s//[:,]/_}_$ctx"
  timeout 170 "$NSYS" profile --cuda-graph-trace=node -t cuda -f true -o "$f" python3 bench/nsys_decode.py "$s" "$ctx" 96 > "$f.log" 2>&1
  grep WINDOW "$f.log" | sed 's/^WINDOW //' > "$f.window.json"
  "$NSYS" stats -q -r cuda_gpu_trace -f csv -o "$f" "$f.nsys-rep" > /dev/null 2>&1
  python3 bench/nsys_summary.py "${f}_cuda_gpu_trace.csv" "$f.window.json" | tee "$f.summary.txt"
  rm -f "$f.sqlite"
done
