#!/bin/bash
# Where the combine and the decode kernel stall (turbo:4, 32/8 heads, d128, float16), on the GPU machine: Nsight Compute
# at the GPU's own clocks with warm caches (--clock-control none --cache-control none), warp-state and source-level (SASS)
# stall samples of one launch of each kernel, then the combine's durations for its knobs (CSPLIT, CU).
#   bash bench/ncu_stalls.sh OUTDIR [N=4096] [KNOB=VALUE ...]   (ncu at /usr/local/cuda/bin/ncu; PYTHONPATH with mlx for CUDA)
# Writes OUTDIR/stall_{decode,combine}_{details.txt,sass.csv} and OUTDIR/combine_knobs.txt.
set -u
O=${1:-$OUT}; N=${2:-4096}; shift $(( $# > 2 ? 2 : $# )); KNOBS="$*"; NCU=/usr/local/cuda/bin/ncu
SEC="--section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --section SchedulerStats --section SpeedOfLight"
for pair in "combine:mlx_kvq_decode_combine" "decode:mlx_kvq_decode_[0-9a-f]"; do
  nm=${pair%%:*}; re=${pair#*:}
  $NCU --clock-control none --cache-control none --kernel-name "regex:$re" --launch-skip 4 --launch-count 1 $SEC --import-source no \
       -o "$O/stall_$nm" python3 bench/ncu_decode.py turbo:4 "$N" $KNOBS > "$O/stall_${nm}_run.txt" 2>&1
  $NCU -i "$O/stall_$nm.ncu-rep" --page details > "$O/stall_${nm}_details.txt" 2>&1
  $NCU -i "$O/stall_$nm.ncu-rep" --page source --csv --print-source sass > "$O/stall_${nm}_sass.csv" 2>&1
done
for kv in CSPLIT_1 CSPLIT_2 CSPLIT_8 CU_2 CU_16; do
  $NCU --clock-control none --cache-control none --kernel-name regex:mlx_kvq_decode_combine --launch-skip 4 --launch-count 2 --section SpeedOfLight \
       python3 bench/ncu_decode.py turbo:4 "$N" $KNOBS "${kv/_/=}" 2>&1 | grep -E "Duration" | sed "s/^/$kv /" >> "$O/combine_knobs.txt"
done
cat "$O/combine_knobs.txt"; grep -E "Duration|Warp Cycles Per Issued|Issued Warp" "$O"/stall_*_details.txt
