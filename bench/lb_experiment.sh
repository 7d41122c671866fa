#!/bin/bash
# More resident blocks an SM for the decode kernel (`bash bench/gpu_round.sh lbexp $OUT`, after the staging calls): the
# kernel at 131K on the shape under Nsight Compute, per knob set its duration (us), grid, registers a thread and
# achieved occupancy (%), two launches. With a second argument `nomerge`: LB = 5 with BMERGE off (`lbnomerge`); `park`: LB = 5 with PARK (`lbpark`);
# both timed 2026-12-01 (`bench/h200_20261201a/`): slower than the default, affine:4 +7-10%, turbo:4 +20-34% with PF=1. LB = 5 / 6 cap the registers at 96 / 80 (spills in the score loop); CH_MAX and
# WAVE are set so that the call fills the larger wave (656 / 784 blocks); affine kernels read no pair table, so REP=1 frees
# the shared memory their tables would reserve; turbo:4 keeps 16 copies. H200, 2026-11-30: `bench/h200_20261130j/lb/`.
O=$1; mkdir -p "$O"
run() { s=$1; shift; d=$(timeout 100 /usr/local/cuda/bin/ncu --clock-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats python3 bench/ncu_decode.py $s 131072 "$@" 2>&1 | grep -E "^    (Duration|Achieved Occupancy|Registers Per|Grid Size)" | awk '{print $NF}' | tr '\n' ' '); echo "$s $*: dur/grid/regs/occ $d" | tee -a "$O/lb.txt"; }
if [ "${2:-}" = park ]; then   # LB = 5 with PARK (BMERGE's accumulators parked in shared memory through the key loop: score loops spill-free offline); turbo:4's pair tables then 8 copies (44.6 KB a block at 5 an SM)
  P5="FB1=8 PARK=True LB=5 CH_MAX=800 WAVE=660"
  run affine:4 FB1=8; run affine:4 $P5 PF=1 REP=1; run affine:4 $P5 PF=2 REP=1
  run turbo:4 FB1=8; run turbo:4 $P5 PF=1 REP=8; run turbo:4 $P5 PF=2 REP=8
  run affine:4 FB1=8; run affine:4 $P5 PF=1 REP=1; run turbo:4 FB1=8; run turbo:4 $P5 PF=1 REP=8; exit 0
fi
if [ "${2:-}" = nomerge ]; then   # the same without BMERGE, whose value accumulators carried through the key loop are what spills at 96 registers (offline, below)
  run affine:4 FB1=8; run affine:4 FB1=8 LB=5 PF=1 CH_MAX=800 WAVE=660 REP=1 BMERGE=False; run affine:4 FB1=8 LB=5 PF=2 CH_MAX=800 WAVE=660 REP=1 BMERGE=False
  run turbo:4 FB1=8; run turbo:4 FB1=8 LB=5 PF=1 CH_MAX=800 WAVE=660 REP=16 BMERGE=False; run turbo:4 FB1=8 LB=5 PF=2 CH_MAX=800 WAVE=660 REP=16 BMERGE=False
  run affine:4 FB1=8; run turbo:4 FB1=8; exit 0
fi
A5="FB1=8 LB=5 PF=1 CH_MAX=800 WAVE=660 REP=1"
run affine:4 FB1=8; run affine:4 $A5; run affine:4 FB1=8 LB=5 PF=2 CH_MAX=800 WAVE=660 REP=1; run affine:4 FB1=8 LB=6 PF=1 KACC=1 CH_MAX=672 WAVE=792 REP=1; run affine:4 FB1=8; run affine:4 $A5
run turbo:4 FB1=8; run turbo:4 FB1=8 LB=5 PF=1 CH_MAX=800 WAVE=660 REP=16; run turbo:4 FB1=8
