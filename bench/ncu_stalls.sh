#!/bin/bash
# Where the combine and the decode kernel stall at 4,096 tokens (turbo:4, 32/8 heads, d128, float16), on the GPU machine:
# Nsight Compute at the GPU's own clocks with warm caches (--clock-control none --cache-control none), warp-state and
# source-level (SASS) stall samples of one launch each, then the kernels' durations for combine knobs (CSPLIT, CU).
#   bash bench/ncu_stalls.sh OUTDIR      (ncu at /usr/local/cuda/bin/ncu; PYTHONPATH with mlx for CUDA)
set -u
O=${1:-$OUT}; NCU=/usr/local/cuda/bin/ncu
SEC="--section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --section SchedulerStats --section SpeedOfLight"
for k in combine decode_; do
  $NCU --clock-control none --cache-control none --kernel-name regex:mlx_kvq_${k} --launch-skip 4 --launch-count 1 $SEC --import-source no \
       -o $O/stall_$k python3 bench/ncu_decode.py turbo:4 4096 > $O/stall_${k}_run.txt 2>&1
  $NCU -i $O/stall_$k.ncu-rep --page details > $O/stall_${k}_details.txt 2>&1
  $NCU -i $O/stall_$k.ncu-rep --page source --csv --print-source sass > $O/stall_${k}_sass.csv 2>&1
done
for kv in CSPLIT_1 CSPLIT_2 CSPLIT_8 CU_2 CU_16; do
  $NCU --clock-control none --cache-control none --kernel-name regex:combine --launch-skip 4 --launch-count 2 --section SpeedOfLight \
       python3 bench/ncu_decode.py turbo:4 4096 ${kv/_/=} 2>&1 | grep -E "Duration" | sed "s/^/$kv /" >> $O/combine_knobs.txt
done
cat $O/combine_knobs.txt; grep -E "Duration|Stall|Warp Cycles Per|Issued Warp" $O/stall_*_details.txt | head -40
