#!/bin/bash
# The GPU measurements of issue 12 in parts that each fit one device call (<= 600 s; durations seen on an H100 on
# 2026-11-25), run after the two staging calls of ../shared/gpu/README.md:
#   export PYTHONPATH=/tmp/site:$PWD && bash bench/gpu_round.sh PART $OUT
# PART: checks (check and steps at once, in parallel: their time is mostly NVRTC compiling on the host's cores)
#       check  (check_fused_cuda's check section, every configuration vs the reference: about 5 min)
#       steps  (decode steps through the caches and the memoized launchers, 37 configurations: about 4 min)
#       layer  (one layer, 4K / 32K / 128K, every scheme vs fp16 SDPA: about 1 min)
#       model  (whole Llama-3.2-1B-shaped model at 32K and 128K, fp16 / turbo:4 / affine:4 / affine:8,4, 3 rounds)
#       ncu    (Nsight Compute stall profiles of the decode and combine kernels at 4K and 128K, bench/ncu_stalls.sh)
#       variants (one layer, the defaults against PSUM=True and the previous combine, side by side: about 1.5 min)
#       rotab  (one layer, the lean loops' ROT and OPAQUE off vs on (default), alternating, 2 rounds: about 4 min)
#       lowab / lowncu (one layer / the decode kernel under Nsight Compute at 131K: low parts of queries and weights dropped, fewer registers for more resident blocks)
#       repab  (32 pair-table copies with 512-token chunks vs the default: Nsight Compute at 131K and one layer alternating: about 7 min)
#       stall131 (the default decode kernel's stall reasons at 131K, turbo:4, Nsight Compute: about 1 min)
#       sass131 (the default decode kernel's stall samples per SASS instruction at 131K, turbo:4; its duration at 3 resident blocks and PF=1: about 3 min)
#       rawsc  (RAWSC / VPRO against both off and each alone: the decode kernel at 131K under Nsight Compute, then the default's stall samples per SASS instruction: about 5 min)
#       dynlut (DYNLUT against off, and PF=1: the decode kernel at 131K under Nsight Compute: about 3 min)
#       final  (one layer per call, then checks with their time cut to 270 s: about 6.5 min)
#       knobncu (the decode kernel's duration at 131K under Nsight Compute for PSUM, LPCH, KACC, PF against the default: about 5 min)
#       wsmab  (the warps' own softmax and parallel sums against PSUM alone and neither: Nsight Compute at 131K, then one layer alternating: about 6 min)
#       knobncu2 (knobncu with PSUM / WSM on: PF=3, 512-token chunks, BLOCKS=1056)
#       bmergecheck / bmerge (BMERGE with 512-token chunks x 4 per block, low query halves off: the GPU checks; Nsight at 131K and one layer)
#       gemmablocks (Gemma's shape by the decode block target BLOCKS, 2 rounds: about 4.5 min)
#       gemmascap (Gemma's shape, SCAP=4096 vs the default 256 alternating, 2 rounds: about 3 min)
#       hostcalls (bench/host_calls_cuda.py twice: build / submit / wait per attend call and update, Llama and Gemma shapes: about 2 min)
#       inclcheck / inclhost / inclmodel (kernel bodies as one #include of a file, packing.INCLUDE: the GPU checks; host cost per call and whole model, without and with, alternating)
#       wavencu (Nsight Compute with BMERGE on: chunk length and the WAVE block cap at 131K, chunk and block counts at 32K)
#       short4k (Nsight Compute at 4K: the decode kernel by BLOCKS / REP / LPCH_MIN, and fp16 SDPA's kernels at 4K and 131K: about 4 min)
#       blocks300 (after BLOCKS 900 -> 300: decode steps, one layer twice, fp16 SDPA's kernel at 4K: about 7 min)
#       leanany (the calibrated codecs in the lean loops: their decode steps with LEAN_ANY on, Gemma's shape off vs on, two rounds: about 9 min)
#       diag131 (the decode kernel at 131K without its pair-table lookups / its code-word loads, diagnostics with wrong results: about 3.5 min)
#       issuerounds (issuebench in ROUNDS (default 3) alternating rounds: each scheme's ratio to fp16 per round, median and range)
#       gemmarounds (one call of Gemma's shape, fp16 / auto:5 / turbo:4, in ROUNDS alternating rounds)
#       issuebench (the issue's `python -m mlx_kvq bench` one-layer command: ms per call and its host-build part: about 2 min)
#       hostsplit (bench/host_calls_cuda.py --profile: the host's build of one attention call through the dispatcher, by function: about 1 min)
#       status1 (one layer per call and Gemma's shape, every scheme vs fp16: about 4 min)
#       status2 (`mlx-kvq bench --whole-model llama-3.2-1b`, fp16 / turbo:4 / affine:4 / affine:8,4 at 32K and 131K, 64 steps: about 8 min)
#       calupdate (the calibrated codecs' cache update, encode plain vs traced, bench/calibrated_update_cuda.py: about 1 min)
#       d256next (what 2026-12-02's last session could not run: the d256 staged check (is same_dequantized true now that dequantize decodes staged and stored tokens in one call?), one token's decode against many (cal_guard_cuda.py --decode-only), and mlx-kvq bench --whole-model's new host column at 131K: about 6 min)
#       stage256 (bench/stage256_gemma.py: a Gemma-3-shaped model ($SHAPE, default gemma-3-1b) at $CTX (32768), fp16 / auto:5 / auto:5 with stage 0 on its staging layers, $ROUNDS (4) rounds in one process: what the d256 calibrated stage gives a decode step; its planning and three fills took more than 190 s on 2026-12-02)
#       stagecheck (decode steps with staged tokens, CodecKVCache.stage=3, 8 steps: two stages quantized; about 4 min)
#       stagediag (bench/check_staged_cuda.py: staged-token kernels step by step against CPU references, their halves apart: about 2 min)
#       packcheck / packmodel (the folded kernels' constants packed as one input: staged-kernel checks and decode steps; whole model against .kvq_base, 8 rounds at 32K)
#       kvbuf  (one staging buffer for a cache's keys and values: staged-kernel checks, decode steps, whole model at 32K against .kvq_base, 24 rounds)
#       final3 (whole model, turbo:4 / affine:4 / affine:8,4 at 32K and 131K against .kvq_base, 8 rounds)
#       prefillprof (bench/prefill_profile.py: a 16K prompt in 2048-token chunks, ms per chunk, and one layer's update / attention pieces at a 14K past: about 3 min)
#       prefillab (prefill_profile.py, the pair routes against the previous ones (SCHEME/previous), fp16 first and last: about 1 min)
#       prefillncu (bench/prefill_ncu.py: every kernel of one layer's prefill chunk under Nsight Compute, fp16 / turbo:4 / affine:4, each pair route and previous; and bench/check_prefill_pair.py: about 5 min)
#       pairfinal (check_prefill_pair, the turbo:4 layer chunk's kernels under Nsight Compute, prefillab, then check_decode_steps cut at 230 s: about 8 min)
#       append (check_prefill_pair, then prefill_profile: turbo pairs' growing updates by quantize_append_pair against the pair kernel + concatenations (SCHEME/append against SCHEME/noappend, the default since these runs), fp16 first and last: about 4 min)
#       appendab (the append kernel: every kernel of a turbo:4 layer's chunk with and without it under Nsight Compute, then the whole prompt alternating: about 5 min)
#       graphenv (MLX's CUDA graphs off, or 1000 / 30 kernels a graph instead of 100: whole-model decode at 32K and the 16K prefill, fp16 / turbo:4 / affine:4: about 4 min)
#       il4    (the value loop's interleaved token pairs, IL4: decode steps of turbo:4 through the launchers, the decode kernel at 131K under Nsight Compute with IL4 off / on alternating (affine:4, which IL4 leaves alone, as the control), then one layer per call: about 7 min)
#       ablate (bench/decode_step_profile.py with its ablations: whole model at 32K and 131K, fp16 / turbo:4, pipelined tokens/s as is, without the caches' update, without their attention; build / submit / sync per step; cProfiles: about 8 min)
#       ablatestage (ablate's measurement with CodecKVCache.stage = 32, fp16 / turbo:4 / affine:4, then again without staging: about 3 min)
#       updatesplit (bench/update_split_cuda.py: whole-model tokens/s with turbo:4's update doing only parts of its work, alternating with fp16, 32K and 131K, 3 rounds: about 3 min)
#       qstage (staged tokens quantized in the decode kernel: bench/check_staged_cuda.py, then turbo:4 decode steps through the caches, 40 steps: stages stored)
#       stageserved (bench/stage_served.py: whole model, fp16 / turbo:4 staging / turbo:4 stage 0 in one process, how staged calls were served, a cProfile)
#       defer  (a staged step's token written by the decode kernel, CodecKVCache.defer_write: check_staged_cuda, then turbo:4 decode steps through the caches)
#       defermodel (bench/stage_served.py --written --baseline .kvq_base: whole model, fp16 / turbo:4 (token written by the kernel) / turbo:4 written at update / .kvq_base's turbo:4, 3 rounds)
#       astage (affine caches stage too: check_staged_cuda with its affine cases (codes bit-equal to mx.quantize's), decode steps of affine:4 / affine:8,4 / turbo:4 through the caches)
#       scratch (a folded call's partials and counters in one scratch output: decode steps of turbo:4 / affine:4, then the whole model at 32K against .kvq_base, 6 rounds)
#       fgcheck (the fold's merge in two levels: check_fused_cuda's check section, decode steps and the staged-token kernels in parallel, cut at LIMIT s)
#       calkern: NCUSHAPE= (empty) measures the issue's one-layer shape instead of Gemma's
#       calcheck (the calibrated and mixed-codec cases of check_fused_cuda (both kernels) and check_decode_steps' calibrated configurations, in parallel, cut at LIMIT s)
#       coldwarm (Gemma's shape at 131K: decode kernels L2-cold against warm, PF_WORDS=64, and one call per scheme rotating 0 / 64 / 512 MiB of caches: about 8 min)
#       kern   (Nsight Compute ($NCU_CC: cache control, default none): every kernel of a decode call per line of $KERN: 'SHAPE CTX SCHEME [KNOB=V...]', SHAPE gemma / issue / llama (32 / 8 heads, d64) / gemma@base / issue@base (the package of .kvq_base/old, bench/baseline_package.sh --plain), lines split by ';'; fp16: MLX's SDPA kernels)
#       hstep  (HSTEP: the calibrated GPU checks and decode steps, then the decode kernel at 131K on the issue's shape with HSTEP off / values only / on, alternating: about 7 min)
#       hstepcall (one call of the issue's shape, fp16 / auto:5, serial, 4K and 131K, HSTEP off then on, each its own process: about 2 min)
#       qrot   (CAL_QROT: one-band calibrated keys' queries prepared in the decode kernel: the calibrated GPU checks, staged-kernel checks and decode steps (stages of 3 crossed), then Nsight Compute of the query and decode kernels at 4K and 131K on the issue's shape, off / on alternating: about 8 min)
#       qrotcall (one call of the issue's shape, fp16 / auto:5 (and $MORE), serial, 3 rounds, 4K / 32K / 131K, CAL_QROT off then on, each its own process: about 3 min)
#       qrotmodel (whole model, Llama-3.2-1B's shape (auto:5 plans one-band keys in most layers), fp16 / auto:5 at $CTXS (32768), CAL_QROT off / on / off / on, each its own process, $ROUNDS (2) rounds)
#       gemmalayers (bench/gemma_layers.py: Gemma-3-shaped whole model, every layer compressed against only the global layers, against fp16, 3 rounds, host cProfiles)
#       ringstep (bench/ring_step_cuda.py: one decode step of 22 sliding-window layers, fp16 and quantized rings, by piece)
#       ring   (a sliding-window ring's decode token by one launch, quantize_into_pair: GPU check, cost by piece, Gemma-3-shaped whole model with it off / on)
#       aring  (an affine ring's decode token by one launch, affine_into_pair: GPU check, then ring steps by piece, turbo:4 / affine:4 / affine:8,4: about 5 min)
#       aringmodel (bench/gemma_layers.py --noring: Gemma-3-1B shape at 32K, affine:4 / affine:8,4 with the affine ring write on and off, every layer vs global layers only, fp16 beside, $ROUNDS (6) rounds: about 6 min)
#       gemmaall (Gemma-3-1B shape at 32K, turbo:4 / affine:4 / affine:8,4, every layer vs global layers only, fp16 beside, $ROUNDS (16) rounds; then Llama-3.1-8B's shape at 131K, 6 rounds: about 6 min)
#       calpair (bench/check_calibrated_cuda.py: a calibrated pair's update by one launch against each side's encode, then a decode token's update per layer with it on / off, rings and growing caches: about 2 min)
#       calsteps (check_decode_steps' calibrated configuration of two KV heads at 24,000 tokens, with the calibrated pair kernel off and on: about 1.5 min)
#       ceiling (whole model: fp16 and turbo:4 at 256 and 131K tokens on Llama-3.2-1B's shape (what a cache could gain at most on this host), then Llama-3.1-8B's shape at 32K / 131K: about 6 min)
#       fewrows (one / two KV heads over more than FOLD chunks, grouped per block so the call folds: decode steps on the GPU, then a Gemma-3-shaped model)
#       asteps (check_decode_steps for affine:4 / affine:8,4, 40 steps: stages written by the kernel and stored, against a reference whose staged tokens are encoded on the GPU)
#       amodel (bench/stage_served.py --more affine:4 affine:8,4 --unstaged: whole model, fp16 / turbo:4 / affine:4 / affine:8,4, the affine ones staged and with stage 0, one process, $ROUNDS (3) rounds)
#       leanab (bench/stage_served.py --baseline .kvq_base --more affine:4: whole model, fp16 / turbo:4 staging / affine:4, and the same two with the host code of the commit in .kvq_base (bench/baseline_package.sh), 3 rounds; CTX="32768" for one context)
#       hoststaged (bench/host_staged_cuda.py: a staged turbo:4 layer's update and attend against fp16's, and the decode kernel's own call replayed: about 1 min)
#       hostinputs (bench/host_inputs_cuda.py: an empty custom kernel's host cost by its number of inputs, a contiguous, a slice update, a slice: about 1 min)
#       qstagemodel (the whole model with CodecKVCache.stage 0 / 32, fp16 beside each, 2 rounds: about 6 min)
#       stagemodel (whole model, fp16 / turbo:4 / affine:4, CodecKVCache.stage=0 vs 32 alternating, 48 steps, 2 rounds: about 9 min)
#       vtlo2  (VTLO: Nsight Compute of the calibrated decode kernels with and without it (Gemma's shape cal:5,4 / cal:3,6 / cal:3,2, the issue's cal:5,4), then `mlx-kvq bench` on Gemma's shape through bench/kvq_knobs.py, VTLO off and on: about 8 min)
#       vtloprobe (VTLO's first-use check at the issue's shape by context and knobs: about 3 min)
#       exact  (the first-use check's error against the exact float32 reference for every kind of decode kernel at 131K, then Gemma's shape per call and auto:5's GPU plan's kernel with / without VTLO: about 8 min)
#       hltab  (HLTAB off / on: Nsight Compute of the calibrated decode kernels at 131K, the first-use check's error against the exact result, calibrated GPU checks and decode steps with it on: about 8 min)
#       hldefault (HLTAB by default where it applies: the default kernels under Nsight Compute, one call per scheme on Gemma's shape twice and the issue's once: about 8 min)
#       hlissue (the issue's shape with auto:5's plan there: HLTAB forced under LB = 4, the kernels at 2 blocks an SM; about 5 min)
#       lb3 (the issue's shape at 3 blocks an SM and one wave: turbo:4, affine:4, cal:4,5 against the default under Nsight Compute; about 6 min)
#       vpack  (VPACK, the weights' high and low parts in one tensor-core product: the GPU checks, then Nsight Compute at 131K against it off)
#       aint8  (AINT8, affine keys on the integer tensor cores, on since 2026-11-30: affine GPU checks with it on, Nsight Compute at 131K / 4K against it off)
#       vscb   (VSCB, affine values' scales in the weights, codes as subnormal halves: affine GPU checks with it on, Nsight Compute at 131K / 4K against it off)
#       maskc  (MASKC, an unmasked call's kernel compiled without mask code, on since 2026-11-30: GPU checks with it on, Nsight Compute at 131K / 4K against it off)
#       vpackgemma (VPACK_LB=2, on since 2026-11-30: VPACK at head dim 256 in Gemma's one-KV-head calls, Nsight Compute at 131K against it off)
#       vtlochk (VTLO's GPU checks: check_fused_cuda's calibrated cases and the 24K calibrated decode steps, in parallel, cut at LIMIT (300) s)
#       prefill5 (the 16K prefill with the calibration undone in the pair launch: Llama-3.2-1B fp16 / auto:5 / turbo:4 / fp16 / auto:5, then Gemma 3 1B fp16 / auto:5 / fp16)
#       appendrounds (turbo:4 with / without the fused append, 5 alternating rounds in one process: do 8 fewer launches a layer show? about 4 min)
#       calwht (CAL_WHT's GPU checks and Nsight chunk (T=check), then the prefill by rounds per process without / with it (T=time): two calls of about 5 min)
#       prefround (CAL_BSEARCH on: the calibrated kernels' GPU checks, then the 16K prefill by alternating rounds, then again with a 4,000-graph MLX cache: about 9 min)
#       calbsearch (CAL_BSEARCH off / on: auto:5's last prefill chunk under Nsight Compute, then the 16K prefill alternating)
#       prefab (check_prefill_pair --cal, then the 16K prefill by rounds, .kvq_base's package against this tree's in alternating processes: SHAPE, KV, R, AB, CHECK)
#       chunkncu / chunkncu2 (every kernel of a 16K prompt's last chunk under Nsight Compute, summed by kind: bench/prefill_chunk_ncu.py; then prefill_profile with its submit column)
# Each part writes its logs under OUT/PART/ and prints their last lines.
set -u
ncu_sets() {   # ncu_sets FILE REGEX KNOBSET...: the decode kernel's duration at $CTX tokens (default 131,072; Nsight Compute, GPU clocks, two launches) per knob set, for each scheme of $SCH (default turbo:4 then affine:4); caches warm as the previous launch left them (NCU_CC=none, the default: a cache larger than L2 partly L2-resident, durations optimistic) or flushed before every pass (NCU_CC=all, not CC: the GPU machine sets CC to its C compiler; the cache read from memory, as a real decode step's layers read theirs)
  local f=$1 re=$2 s k d; shift 2
  for s in ${SCH:-turbo:4 affine:4}; do for k in "$@"; do
    d=$(timeout 100 /usr/local/cuda/bin/ncu --clock-control none --cache-control ${NCU_CC:-none} --kernel-name "regex:$re" --launch-skip 4 --launch-count 2 \
      --section SpeedOfLight python3 bench/ncu_decode.py $s ${CTX:-131072} $k ${NCUFLAGS:-} 2>&1 | grep -E "^    Duration" | awk '{print $NF}' | tr '\n' ' ')
    echo "$s ${CTX:-131072} $k${NCU_CC:+ (caches $NCU_CC)}: duration us $d" | tee -a "$f"; done; done
}
bench_split() {   # bench_split FILE: per row of an mlx-kvq bench --json FILE, us per call of build / submit / the rest / submit + the rest (the GPU's part once many calls share an evaluation)
  python3 -c "import json, sys; [print(r['scheme'], 'build / submit / rest / submit+rest us per call:', *(round(1e3 * x, 1) for x in (r['build_ms'], r['submit_ms'], r['ms'] - r['build_ms'] - r['submit_ms'], r['ms'] - r['build_ms']))) for r in json.load(open(sys.argv[1]))['rows']]" "$1"
}
checks_with() {   # checks_with KNOBS CASES SCHEME...: check_fused_cuda's check section (CASES: its --cases regex, empty for all) and the decode steps of SCHEMEs, in parallel with KVQ_KNOBS=KNOBS, each cut at 320 s; their last lines
  local kn=$1 cs=$2; shift 2
  mkdir -p "$O/check" "$O/steps"
  KVQ_KNOBS="$kn" timeout 320 python3 bench/check_fused_cuda.py --quick --only check ${cs:+--cases "$cs"} --out "$O/check" > "$O/check/run.log" 2>&1 &
  KVQ_KNOBS="$kn" timeout 320 python3 bench/check_decode_steps.py --schemes "$@" --steps 40 --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
  tail -3 "$O/check/run.log" | cut -c1-300; tail -1 "$O/steps/run.log" | cut -c1-300; grep -c "using the reference" "$O/check/run.log" "$O/steps/run.log"
}
part=$1; O=${2:-$OUT}/$part; mkdir -p "$O"
case $part in
  check) timeout 560 python3 bench/check_fused_cuda.py --quick --only check --out "$O" > "$O/run.log" 2>&1; tail -3 "$O/run.log" ;;
  checks) mkdir -p "$O/check" "$O/steps"
         timeout 570 python3 bench/check_fused_cuda.py --quick --only check --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout 570 python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
         tail -3 "$O/check/run.log"; tail -2 "$O/steps/run.log"; grep -h "packing kernels" "$O/check/run.log" | sort | uniq -c ;;
  steps) timeout 560 python3 bench/check_decode_steps.py --out "$O" > "$O/run.log" 2>&1; tail -2 "$O/run.log" ;;
  layer) timeout 300 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/run.log" 2>&1; grep -v "^#" "$O/run.log" | tail -5 ;;
  model) timeout 560 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 affine:4 affine:8,4 --rounds 3 --steps 24 --host \
           --no-ablations --out "$O" > "$O/run.log" 2>&1; grep -E "^\\| [0-9]|^\\{" "$O/run.log" | tail -16 ;;
  ncu)   mkdir -p "$O/4k" "$O/128k"; timeout 270 bash bench/ncu_stalls.sh "$O/4k" 4096 > /dev/null 2>&1
         timeout 270 bash bench/ncu_stalls.sh "$O/128k" 131072 > /dev/null 2>&1; grep -h "Duration" "$O"/*/stall_*_details.txt ;;
  variants) KVQ_VARIANTS="[('mma',1,1024,900,0,DEFAULT_LEAN), ('mma',1,1024,900,0,DEFAULT_LEAN+(('PSUM',True),)), ('mma',1,1024,900,0,DEFAULT_LEAN+(('CONLINE',False),))]" \
           timeout 500 python3 bench/check_fused_cuda.py --quick --only variants --variant-contexts 4096,32768,131072 --out "$O" > "$O/run.log" 2>&1
           grep -E "^context|^mma" "$O/run.log" ;;
  layerab) for i in 1 2; do for k in "FOLD=0" "FOLD=128"; do   # one layer, the decode kernel finishing the attention (FOLD=128, default) or the combine kernel (FOLD=0), alternating
             KVQ_KNOBS="$k" timeout 140 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/layer_${k/=/}_$i.log" 2>&1; done; done
           for f in "$O"/layer_*.log; do echo "$f"; grep -v "^#" "$f" | tail -4; done ;;
  modelab) for k in "FOLD=0" "FOLD=128"; do   # whole model, fp16 / turbo:4 / affine:4, 2 rounds, with and without the folded finish
             KVQ_KNOBS="$k" timeout 270 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 affine:4 --rounds 2 --steps 24 --host \
               --no-ablations --out "$O" > "$O/model_${k/=/}.log" 2>&1; done
           for f in "$O"/model_*.log; do echo "$f"; grep -E "^\\| [0-9]|^\\{" "$f" | tail -8; done ;;
  rotab) for i in 1 2; do for k in "ROT=False OPAQUE=False" "ROT=True OPAQUE=True"; do   # one layer, the lean loops with copied or rotated register sets and rebuilt or opaque row pointers (both on: the default since 2026-11-27 evening), alternating
             KVQ_KNOBS="$k" timeout 140 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/layer_$(echo $k | tr ' =' '__')_$i.log" 2>&1; done; done
           for f in "$O"/layer_*.log; do echo "$f"; grep -v "^#" "$f" | tail -4; done ;;
  lowab) for k in "QLO=True" "QLO=False VLO=False" "QLO=False VLO=False LB=5 CH_MAX=512 REP=16 PF=1" "QLO=False VLO=False LB=6 CH_MAX=512 REP=8 PF=1"; do   # one layer: the lean loops' low parts of queries / weights dropped (one product per fragment), then fewer registers and shared bytes for 5 / 6 resident blocks
             KVQ_KNOBS="$k" timeout 140 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/layer_$(echo $k | tr ' =' '__').log" 2>&1; done
           for f in "$O"/layer_*.log; do echo "$f"; grep -v "^#" "$f" | tail -4; done ;;
  lowncu) NCU=/usr/local/cuda/bin/ncu   # the decode kernel alone at 131,072 tokens (Nsight Compute, GPU clocks, warm caches) for lowab's knob sets
           for s in turbo:4 affine:4; do for k in "QLO=True" "QLO=False VLO=False" "QLO=False VLO=False LB=5 CH_MAX=512 REP=16 PF=1" "QLO=False VLO=False LB=6 CH_MAX=512 REP=8 PF=1"; do
             f="$O/ncu_${s/:/}_$(echo $k | tr ' =' '__').txt"
             timeout 100 $NCU --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 1 \
               --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section SchedulerStats python3 bench/ncu_decode.py $s 131072 $k > "$f" 2>&1
             echo "$s $k: $(grep -E '^    (Duration|Executed Instructions  |Achieved Occupancy|Warp Cycles Per Issued)' "$f" | awk '{print $1" "$NF}' | tr '\n' ' ')"; done; done ;;
  repab) NCU=/usr/local/cuda/bin/ncu   # 32 copies of the pair tables (no bank conflicts) where 512-token chunks leave room for them: the decode kernel under Nsight Compute (+ shared-memory and L1 tables), then one layer alternating
           for s in turbo:4 affine:4; do for k in "CH_MAX=1024" "CH_MAX=512" "CH_MAX=512 LPCH=4"; do
             f="$O/ncu_${s/:/}_$(echo $k | tr ' =' '__').txt"
             timeout 100 $NCU --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 1 \
               --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section MemoryWorkloadAnalysis_Tables python3 bench/ncu_decode.py $s 131072 $k > "$f" 2>&1
             echo "$s $k: $(grep -E '^    (Duration|L1/TEX Cache Throughput|Executed Instructions  |Achieved Occupancy)' "$f" | awk '{print $1" "$NF}' | tr '\n' ' ')"; done; done
           for i in 1 2; do for k in "CH_MAX=1024" "CH_MAX=512"; do
             KVQ_KNOBS="$k" timeout 140 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/layer_${k/=/_}_$i.log" 2>&1; done; done
           for f in "$O"/layer_*.log; do echo "$f"; grep -v "^#" "$f" | tail -4; done ;;
  stall131) NCU=/usr/local/cuda/bin/ncu   # where the default decode kernel's warps wait at 131,072 tokens (turbo:4): the stall reasons per issued instruction
           M=$(echo barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait | tr ' ' '\n' | sed 's/.*/smsp__average_warps_issue_stalled_&_per_issue_active.ratio/' | paste -sd,)
           timeout 200 $NCU --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 1 --metrics "$M" \
             --section SpeedOfLight python3 bench/ncu_decode.py turbo:4 131072 > "$O/ncu_stalls_turbo4.txt" 2>&1
           grep -E "stalled|Duration" "$O/ncu_stalls_turbo4.txt" | awk '{print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' ;;
  sass131) NCU=/usr/local/cuda/bin/ncu   # the default decode kernel at 131,072 tokens (turbo:4): stall samples per SASS instruction (bench/sass_stalls.py sums them by loop and opcode), then its duration at 3 resident blocks and PF=1 (about 3 min; `_DIAG` cannot run there: the first-use check refuses its wrong results)
           timeout 200 $NCU --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 1 \
             --section WarpStateStats --section SourceCounters --section SpeedOfLight --import-source no -o "$O/sass" python3 bench/ncu_decode.py turbo:4 131072 > "$O/sass_run.txt" 2>&1
           $NCU -i "$O/sass.ncu-rep" --page source --csv --print-source sass > "$O/sass_turbo4.csv" 2>&1
           $NCU -i "$O/sass.ncu-rep" --page details > "$O/details_turbo4.txt" 2>&1; rm -f "$O/sass.ncu-rep"
           grep -E "Duration|Warp Cycles Per Issued|Issued Warp" "$O/details_turbo4.txt"; wc -l "$O/sass_turbo4.csv"
           ncu_sets "$O/diag.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "LB=3" "PF=1" "PF=2" ;;
  rawsc) NCU=/usr/local/cuda/bin/ncu   # scalars prefetched raw (RAWSC) and the value prologue before the softmax (VPRO), both on by default since: the decode kernel at 131K under Nsight Compute against both off and each alone, then the new default's stall samples per SASS instruction (about 5 min)
           ncu_sets "$O/rawsc.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "RAWSC=False VPRO=False" "VPRO=False" "RAWSC=False" "PF=2"
           timeout 120 $NCU --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 1 \
             --section WarpStateStats --section SourceCounters --section SpeedOfLight --import-source no -o "$O/sass" python3 bench/ncu_decode.py turbo:4 131072 > "$O/sass_run.txt" 2>&1
           $NCU -i "$O/sass.ncu-rep" --page source --csv --print-source sass > "$O/sass_turbo4.csv" 2>&1; rm -f "$O/sass.ncu-rep"
           python3 bench/sass_stalls.py "$O/sass_turbo4.csv" | head -12 ;;
  dynlut) ncu_sets "$O/dynlut.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "DYNLUT=False" "PF=1" "PF=2" ;;   # 32 pair-table copies in dynamic shared memory (DYNLUT, on by default since): the decode kernel at 131K under Nsight Compute against it off, and PF=1 (the 2026-11-28 run also timed SMLANE, a softmax variant measured slower and removed: bench/h200_20261128e/)
  final) mkdir -p "$O/layer" "$O/check" "$O/steps"   # one layer per call (4K / 32K / 131K, every scheme vs fp16 SDPA), then the GPU checks with their time cut to fit a short device budget (about 6.5 min)
         timeout 90 python3 bench/check_fused_cuda.py --quick --only layer --out "$O/layer" > "$O/layer/run.log" 2>&1; grep -v "^#" "$O/layer/run.log" | tail -8
         timeout 270 python3 bench/check_fused_cuda.py --quick --only check --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout 270 python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
         tail -3 "$O/check/run.log"; tail -2 "$O/steps/run.log"; grep -c "using the reference" "$O/check/run.log" "$O/steps/run.log" ;;
  knobncu) ncu_sets "$O/knobncu.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "PSUM=True" "LPCH=4" "PSUM=True LPCH=4" "KACC=2" "PF=3" "PF=2" ;;   # knobs never timed on a GPU or timed before the lean loops' last changes, each after the default
  wsmab) NCU=/usr/local/cuda/bin/ncu   # the warps' own softmax (WSM) and parallel sums (PSUM), both the default since 2026-11-27 evening, against PSUM alone and neither: the decode kernel at 131K under Nsight Compute, then one layer alternating
           for s in turbo:4 affine:4; do for k in "WSM=False PSUM=False" "WSM=False PSUM=True" "WSM=True PSUM=True"; do
             d=$(timeout 100 $NCU --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 2 \
               --section SpeedOfLight python3 bench/ncu_decode.py $s 131072 $k 2>&1 | grep -E "^    Duration" | awk '{print $NF}' | tr '\n' ' ')
             echo "$s $k: duration us $d" | tee -a "$O/wsmncu.txt"; done; done
           for i in 1 2; do for k in "WSM=False PSUM=False" "WSM=True PSUM=True"; do
             KVQ_KNOBS="$k" timeout 140 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/layer_$(echo $k | tr ' =' '__')_$i.log" 2>&1; done; done
           for f in "$O"/layer_*.log; do echo "$f"; grep -v "^#" "$f" | tail -4; done ;;
  knobncu2) ncu_sets "$O/knobncu2.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "PF=3" "CH_MAX=512 LPCH=4" "CH_MAX=512" "BLOCKS=1056" "PF=2" ;;   # as knobncu, PSUM and WSM on (the defaults since e341502); this regex also matches the combine kernel
  bmergecheck) K="BMERGE=True QLO=False CH_MAX=512 LPCH=4"   # each block merging its chunks into one partial (BMERGE; on by default since these runs, with 1024-token chunks): the GPU checks with the configuration first timed (about 5 min; then `bmerge`)
           mkdir -p "$O/check" "$O/steps"
           KVQ_KNOBS="$K" timeout 560 python3 bench/check_fused_cuda.py --quick --only check --out "$O/check" > "$O/check/run.log" 2>&1 &
           KVQ_KNOBS="$K" timeout 560 python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
           tail -3 "$O/check/run.log"; tail -2 "$O/steps/run.log" ;;
  bmerge) K="BMERGE=True QLO=False CH_MAX=512 LPCH=4"   # after `bmergecheck`: the decode kernel at 131K under Nsight Compute (every launch matched: decode and any combine) against the default, then one layer alternating (about 6 min)
           ncu_sets "$O/bmergencu.txt" "mlx_kvq_decode_" "PF=2" "$K" "PF=2"
           for i in 1 2; do for k in "PF=2" "$K"; do
             KVQ_KNOBS="$k" timeout 100 python3 bench/check_fused_cuda.py --quick --only layer --out "$O" > "$O/layer_$(echo $k | tr ' =' '__')_$i.log" 2>&1; done; done
           for f in "$O"/layer_*.log; do echo "$f"; grep -v "^#" "$f" | tail -4; done ;;
  inclcheck) K="INCLUDE=True"   # kernel bodies given to MLX as one #include of a file (packing.INCLUDE, on by default since it was timed): the GPU checks with it on (about 5 min)
           mkdir -p "$O/check" "$O/steps"; export MLX_KVQ_KERNEL_DIR="$O/kernels"
           KVQ_KNOBS="$K" timeout 560 python3 bench/check_fused_cuda.py --quick --only check --out "$O/check" > "$O/check/run.log" 2>&1 &
           KVQ_KNOBS="$K" timeout 560 python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
           tail -3 "$O/check/run.log"; tail -2 "$O/steps/run.log"; ls "$O/kernels" | wc -l; rm -rf "$O/kernels" ;;
  inclhost) for i in 1 2; do for k in "INCLUDE=False" "INCLUDE=True"; do   # host cost per call with and without the included bodies, alternating (about 3 min)
             KVQ_KNOBS="$k" timeout 200 python3 bench/host_calls_cuda.py > "$O/hostcalls_${k/=/}_$i.log" 2>&1; done; done
           for f in "$O"/hostcalls_*.log; do echo "$f"; grep "^|" "$f" | grep -v "Gemma\|cuda_kernel call\|---"; done ;;
  inclmodel) for k in "INCLUDE=False" "INCLUDE=True"; do   # whole model, fp16 / turbo:4 / affine:4, 2 rounds, with and without the included bodies (about 8 min)
             KVQ_KNOBS="$k" timeout 280 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 affine:4 --rounds 2 --steps 24 --host \
               --no-ablations --out "$O" > "$O/model_${k/=/}.log" 2>&1; done
           for f in "$O"/model_*.log; do echo "$f"; grep -E "^\\| [0-9]|^\\{" "$f" | tail -8; done ;;
  wavencu) ncu_sets "$O/wave131k.txt" "mlx_kvq_decode_" "PF=2" "CH_MAX=256" "WAVE=1056" "CH_MAX=256 WAVE=1056" "CH_MAX=1024" "PF=2"   # with BMERGE on (the default since 2026-11-27 evening): chunk length and blocks per long call, every launch of the call matched (about 4 min)
           CTX=32768 ncu_sets "$O/wave32k.txt" "mlx_kvq_decode_" "PF=2" "BLOCKS=1800" "WAVE=264" "LPCH=1" "PF=2" ;;
  gemmablocks) for i in 1 2; do for k in "BLOCKS=900" "BLOCKS=300" "BLOCKS=128"; do   # the embedded Gemma's shape (one KV head) by the decode call's block target (fewer, longer chunks: fewer to merge)
             KVQ_KNOBS="$k" timeout 100 python3 bench/check_fused_cuda.py --quick --only gemma --out "$O" > "$O/gemma_${k/=/}_$i.log" 2>&1; done; done
           for f in "$O"/gemma_*.log; do echo "$f"; grep -v "^#" "$f" | tail -3; done ;;
  gemmascap) for i in 1 2; do for k in "SCAP=4096" "SCAP=256"; do   # Gemma's shape with and without the cap of ~256 chunks per row (the default since 2026-11-27)
             KVQ_KNOBS="$k" timeout 100 python3 bench/check_fused_cuda.py --quick --only gemma --out "$O" > "$O/gemma_${k/=/}_$i.log" 2>&1; done; done
           for f in "$O"/gemma_*.log; do echo "$f"; grep -v "^#" "$f" | tail -3; done ;;
  hostcalls) for i in 1 2; do timeout 200 python3 bench/host_calls_cuda.py > "$O/hostcalls_$i.log" 2>&1; done   # host cost per call (build / submit / wait), Llama and Gemma shapes, two runs
           for f in "$O"/hostcalls_*.log; do echo "$f"; grep "^|" "$f"; done ;;
  stagecheck) KVQ_KNOBS="CodecKVCache.stage=3" timeout 560 python3 bench/check_decode_steps.py --steps 8 --out "$O" > "$O/run.log" 2>&1; tail -2 "$O/run.log" ;;
  stagediag) timeout 300 python3 bench/check_staged_cuda.py --out "$O" > "$O/run.log" 2>&1; tail -30 "$O/run.log" | cut -c1-400 ;;
  il4)   timeout 200 python3 bench/check_decode_steps.py --schemes turbo:4 --steps 8 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log"
         ncu_sets "$O/il4.txt" "mlx_kvq_decode_" "IL4=False" "IL4=True" "IL4=False" "IL4=True"
         timeout 150 python3 bench/check_fused_cuda.py --quick --only layer --out "$O/layer" > "$O/layer.log" 2>&1; grep -v "^#" "$O/layer.log" | tail -5 ;;
  ablate) timeout 560 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 --steps 48 --out "$O" > "$O/run.log" 2>&1; grep -E "^\\{" "$O/run.log" ;;
  ablatestage) for m in stage32 stage0; do
           KVQ_KNOBS="CodecKVCache.stage=${m#stage}" timeout 280 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 affine:4 --steps 48 \
             --out "$O/$m" > "$O/$m.log" 2>&1; echo "$m"; grep -E "^\\{" "$O/$m.log"; done ;;
  updatesplit) timeout 500 python3 bench/update_split_cuda.py --context 32768 131072 --rounds 3 > "$O/run.log" 2>&1; grep -E "^\\|" "$O/run.log" ;;
  qstage) timeout 300 python3 bench/check_staged_cuda.py --out "$O/check" > "$O/check.log" 2>&1; grep SUMMARY "$O/check.log"; grep -c '"same_codes": false' "$O/check.log"
         timeout 250 python3 bench/check_decode_steps.py --schemes turbo:4 --steps 40 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log" ;;
  leanab) timeout 560 python3 bench/stage_served.py --context ${CTX:-32768 131072} --rounds 3 --no-stage0 --baseline .kvq_base --more affine:4 --out "$O" > "$O/run.log" 2>&1; grep -E "^\\||^\\{" "$O/run.log" ;;
  defer) timeout 200 python3 bench/check_staged_cuda.py --out "$O/check" > "$O/check.log" 2>&1; grep SUMMARY "$O/check.log"; grep -c '"same_codes": false' "$O/check.log"
         timeout 250 python3 bench/check_decode_steps.py --schemes turbo:4 --steps 40 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log" ;;
  astage) timeout 330 python3 bench/check_staged_cuda.py --cases affine --out "$O/check" > "$O/check.log" 2>&1; grep SUMMARY "$O/check.log"; grep -c '"same_codes": false' "$O/check.log"
         timeout 150 python3 bench/check_decode_steps.py --schemes affine:4 affine:8,4 --steps 40 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log" ;;
  scratch) timeout 150 python3 bench/check_decode_steps.py --schemes turbo:4 affine:4 --steps 40 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log"
         timeout 200 python3 bench/stage_served.py --context 32768 --rounds 6 --no-stage0 --baseline .kvq_base --more affine:4 --out "$O/model" > "$O/model.log" 2>&1; grep -E "^\\|" "$O/model.log" ;;
  packcheck) timeout 250 python3 bench/check_staged_cuda.py --cases d128 --out "$O/check" > "$O/check.log" 2>&1; grep SUMMARY "$O/check.log"; grep -c '"same_codes": false' "$O/check.log"
         timeout 170 python3 bench/check_decode_steps.py --schemes turbo:4 affine:4 --steps 40 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log" ;;
  packmodel) timeout 560 python3 bench/stage_served.py --context ${CTX:-32768} --rounds ${ROUNDS:-8} --no-stage0 --baseline .kvq_base --more affine:4 --out "$O" > "$O/run.log" 2>&1; grep -E "^\\|" "$O/run.log" ;;
  kvbuf) timeout 230 python3 bench/check_staged_cuda.py --cases d128 --out "$O/check" > "$O/check.log" 2>&1; grep SUMMARY "$O/check.log"; grep -c '"same_codes": false' "$O/check.log"
         timeout 150 python3 bench/check_decode_steps.py --schemes turbo:4 affine:4 --steps 40 --out "$O/steps" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log"
         timeout 190 python3 bench/stage_served.py --context 32768 --rounds ${ROUNDS:-24} --no-stage0 --baseline .kvq_base --more affine:4 --out "$O/model" > "$O/model.log" 2>&1; grep -E "^\\|" "$O/model.log" ;;
  final3) timeout 280 python3 bench/stage_served.py --context 32768 131072 --rounds ${ROUNDS:-8} --no-stage0 --baseline .kvq_base --more affine:4 affine:8,4 --out "$O" > "$O/run.log" 2>&1; grep -E "^\\|" "$O/run.log" ;;
  asteps) timeout 200 python3 bench/check_decode_steps.py --schemes affine:4 affine:8,4 --steps 40 --out "$O" > "$O/steps.log" 2>&1; tail -1 "$O/steps.log" ;;
  amodel) timeout 570 python3 bench/stage_served.py --context ${CTX:-32768 131072} --rounds ${ROUNDS:-3} --no-stage0 --more affine:4 affine:8,4 --unstaged --out "$O" > "$O/run.log" 2>&1; grep -E "^\\||^\\{" "$O/run.log" ;;
  defermodel) timeout 570 python3 bench/stage_served.py --context ${CTX:-32768 131072} --rounds 3 --no-stage0 --written --baseline .kvq_base --out "$O" > "$O/run.log" 2>&1; grep -E "^\\||^\\{" "$O/run.log" ;;
  hoststaged) timeout 300 python3 bench/host_staged_cuda.py > "$O/run.log" 2>&1; cat "$O/run.log" ;;
  hostinputs) timeout 300 python3 bench/host_inputs_cuda.py --rounds 3 > "$O/run.log" 2>&1; cat "$O/run.log" ;;
  stageserved) timeout 500 python3 bench/stage_served.py --out "$O" > "$O/run.log" 2>&1; grep -E "^\\||^\\{" "$O/run.log" ;;
  qstagemodel) for k in "CodecKVCache.stage=0" "CodecKVCache.stage=32"; do   # whole model, turbo:4 with and without staged decode tokens, fp16 beside each
           KVQ_KNOBS="$k" timeout 200 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 --rounds 2 --steps 40 --host \
             --no-ablations --out "$O/model_${k/*=/stage}" > "$O/model_${k/*=/stage}.log" 2>&1; echo "$k"; grep -E "^\\| [0-9]" "$O/model_${k/*=/stage}.log" | tail -6; done ;;
  stagemodel) for k in "CodecKVCache.stage=0" "CodecKVCache.stage=32"; do   # whole model with and without staged decode tokens (stage 32: the 48 timed steps quantize one or two stages)
             KVQ_KNOBS="$k" timeout 290 python3 bench/decode_step_profile.py --context 32768 131072 --kv fp16 turbo:4 affine:4 --rounds 2 --steps 48 --host \
               --no-ablations --out "$O" > "$O/model_${k/*=/stage}.log" 2>&1; done
           for f in "$O"/model_*.log; do echo "$f"; grep -E "^\\| [0-9]" "$f" | tail -8; done ;;
  short4k) NCU=/usr/local/cuda/bin/ncu   # 4,096 tokens: the decode kernel's duration under Nsight Compute by knob set (fewer, longer chunks: BLOCKS; fewer pair-table copies: REP; blocks serving two chunks: LPCH_MIN=0), default first and last, and fp16 SDPA's kernels at 4K and 131K (about 4 min)
         CTX=4096 ncu_sets "$O/short4k.txt" "mlx_kvq_decode_" "PF=2" "REP=8" "REP=2" "BLOCKS=300" "BLOCKS=128" "LPCH_MIN=0" "BLOCKS=128 REP=8" "PF=2"
         for n in 4096 131072; do timeout 100 $NCU --clock-control none --cache-control none --kernel-name regex:"(?i)sdpa" --launch-skip 2 --launch-count 2 --section SpeedOfLight \
           python3 bench/ncu_decode.py fp16 $n 2>&1 | grep -E "Context|^    Duration" | sed "s/^/fp16 $n: /" | cut -c1-160 | tee -a "$O/short4k.txt"; done ;;
  blocks300) mkdir -p "$O/steps" "$O/layer"   # after BLOCKS 900 -> 300: decode steps against the reference, then one layer twice, then fp16 SDPA's kernel at 4K under Nsight Compute (about 7 min)
         timeout 330 python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps/run.log" 2>&1; tail -1 "$O/steps/run.log"
         for i in 1 2; do timeout 170 python3 bench/check_fused_cuda.py --quick --only layer,gemma --out "$O/layer" > "$O/layer/run_$i.log" 2>&1; grep -v "^#" "$O/layer/run_$i.log" | tail -4; done
         timeout 60 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name regex:"(?i)sdpa" --launch-skip 2 --launch-count 2 --section SpeedOfLight \
           python3 bench/ncu_decode.py fp16 4096 2>&1 | grep -E "Context|^    Duration" | cut -c1-160 | tee "$O/fp16_4k_ncu.txt" ;;
  leanany) mkdir -p "$O/steps" "$O/gemma"   # the calibrated codecs in the lean loops (LEAN_ANY, off): their decode steps with it on against the reference (each new kernel ~20 s of NVRTC), then Gemma's shape without and with, alternating, two rounds (about 9 min; the 2026-11-28 run had 100 s for the steps: 1 of 5 done)
         KVQ_KNOBS="LEAN_ANY=True" timeout 280 python3 bench/check_decode_steps.py --schemes "calibrated 4o5" --out "$O/steps" > "$O/steps/run.log" 2>&1; tail -1 "$O/steps/run.log"
         for i in 1 2; do for k in "LEAN_ANY=False" "LEAN_ANY=True"; do KVQ_KNOBS="$k" timeout 65 python3 bench/check_fused_cuda.py --quick --only gemma --contexts 32768,131072 --out "$O/gemma" > "$O/gemma/${k#*=}_$i.log" 2>&1; echo "$k ($i)"; grep -v "^#" "$O/gemma/${k#*=}_$i.log" | tail -3; done; done ;;
  prefillprof) timeout 400 python3 bench/prefill_profile.py --kv fp16 affine:4 affine:8,4 turbo:4 turbo:3 --out "$O" > "$O/run.log" 2>&1; grep -E "^\\|" "$O/run.log"; grep -c "using the reference" "$O/run.log" ;;
  prefillab) timeout 560 python3 bench/prefill_profile.py --kv fp16 turbo:4 turbo:4/previous turbo:3 turbo:3/previous affine:4 affine:4/previous affine:8,4 affine:8,4/previous fp16 --out "$O" > "$O/run.log" 2>&1; grep -E "^\\|" "$O/run.log"; grep -c "using the reference" "$O/run.log" ;;
  prefillncu) timeout 220 python3 bench/check_prefill_pair.py > "$O/check_pair.log" 2>&1; tail -4 "$O/check_pair.log"
           for s in fp16 turbo:4 turbo:4/previous affine:4 affine:4/previous; do f="$O/ncu_$(echo $s | tr ':/,' '___').csv"
             timeout 120 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_ncu.py $s > "$f" 2> "${f%.csv}.err"; done
           python3 bench/prefill_ncu.py --parse "$O"/ncu_*.csv | tee "$O/kernels.txt" ;;
  pairfinal) timeout 200 python3 bench/check_prefill_pair.py > "$O/check_pair.log" 2>&1; tail -2 "$O/check_pair.log"; grep FAIL "$O/check_pair.log"
           timeout 100 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_ncu.py turbo:4 > "$O/ncu_turbo_4.csv" 2> "$O/ncu_turbo_4.err"
           python3 bench/prefill_ncu.py --parse "$O/ncu_turbo_4.csv" > "$O/kernels.txt"; grep -E "##|decode_turbo_pair" "$O/kernels.txt"; rm -f "$O/ncu_turbo_4.csv"
           bash bench/gpu_round.sh prefillab "$O"
           timeout 230 python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps_run.log" 2>&1; tail -2 "$O/steps_run.log" ;;
  append) timeout 200 python3 bench/check_prefill_pair.py > "$O/check_pair.log" 2>&1; tail -1 "$O/check_pair.log"; grep -E "FAIL|^append|^kept" "$O/check_pair.log" | cut -c1-160
         timeout 330 python3 bench/prefill_profile.py --kv fp16 turbo:4/append turbo:4/noappend turbo:3/append turbo:3/noappend affine:4 affine:8,4 turbo:4/append turbo:4/noappend fp16 --out "$O" > "$O/run.log" 2>&1
         grep -E "^\\|" "$O/run.log" | head -13; grep -c "using the reference" "$O/run.log" ;;
  appendab) for s in turbo:4/append turbo:4/noappend; do f="$O/ncu_$(echo $s | tr ':/,' '___').csv"   # every kernel of a layer's chunk with and without the append kernel, then the whole prompt alternating
             timeout 100 /usr/local/cuda/bin/ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_ncu.py $s > "$f" 2> "${f%.csv}.err"; done
           python3 bench/prefill_ncu.py --parse "$O"/ncu_*.csv > "$O/kernels.txt"; grep -E "##|append|quantize|concat|copy" "$O/kernels.txt" | cut -c1-120; rm -f "$O"/ncu_*.csv
           timeout 300 python3 bench/prefill_profile.py --skip-layer --kv fp16 turbo:4/append turbo:4/noappend turbo:4/noappend turbo:4/append turbo:3/append turbo:3/noappend turbo:3/noappend turbo:3/append turbo:4/append turbo:4/noappend fp16 --out "$O" > "$O/run.log" 2>&1
           grep -E "^\\| (fp16|turbo)" "$O/run.log" | head -12; grep -c "using the reference" "$O/run.log" ;;
  graphenv) for e in "X=0" "MLX_USE_CUDA_GRAPHS=0" "MLX_MAX_OPS_PER_BUFFER=1000" "MLX_MAX_OPS_PER_BUFFER=30" "X=0"; do   # MLX's CUDA graphs (on, 100 kernels a graph on an H200) off or sized otherwise: whole-model decode and prefill, fp16 and turbo:4
             env $e timeout 100 python3 bench/decode_step_profile.py --context 32768 --kv fp16 turbo:4 affine:4 --steps 32 --no-ablations --out "$O/d_${e%%=*}_${e#*=}" > "$O/decode_${e%%=*}_${e#*=}.log" 2>&1
             echo "$e decode"; grep -E "^\\| [0-9]" "$O/decode_${e%%=*}_${e#*=}.log"
             env $e timeout 100 python3 bench/prefill_profile.py --skip-layer --kv fp16 turbo:4 affine:4 fp16 --out "$O/p_${e%%=*}_${e#*=}" > "$O/prefill_${e%%=*}_${e#*=}.log" 2>&1
             echo "$e prefill"; grep -E "^\\| (fp16|turbo|affine)" "$O/prefill_${e%%=*}_${e#*=}.log" | cut -d'|' -f1,2,11-14; done ;;
  diag131) ncu_sets "$O/diag131.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "--unchecked _DIAG='nolds'" "--unchecked _DIAG='noload'" "PF=2" ;;   # what the decode kernel at 131K costs without its pair-table lookups (nolds) or without its code-word loads (noload): wrong results on purpose, past the first-use check (about 3.5 min)
  amagic|amagic2) mkdir -p "$O/check" "$O/steps"   # affine codes made halves by the float16 magic number (AMAGIC, on): the affine GPU checks, then the decode kernel under Nsight Compute with it on / off alternating, at 131K (amagic, then the issue's one-layer command: about 8 min) or at 4K (amagic2, run after the lean loops stopped filling those bands' pair tables: about 5 min)
         timeout 300 python3 bench/check_fused_cuda.py --quick --only check --cases affine --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout 300 python3 bench/check_decode_steps.py --schemes affine:4 affine:8,4 --steps 40 --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
         tail -3 "$O/check/run.log" | cut -c1-300; tail -1 "$O/steps/run.log" | cut -c1-300; grep -c "using the reference" "$O/check/run.log" "$O/steps/run.log"
         n=$([ "$part" = amagic ] && echo 131072 || echo 4096)
         for s in affine:4 affine:8,4; do for k in "AMAGIC=True" "AMAGIC=False" "AMAGIC=True" "AMAGIC=False"; do
           d=$(timeout 100 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 2 \
             --section SpeedOfLight python3 bench/ncu_decode.py $s ${CTX:-$n} $k 2>&1 | grep -E "^    Duration" | awk '{print $NF}' | tr '\n' ' ')
           echo "$s ${CTX:-$n} $k: duration us $d" | tee -a "$O/kern.txt"; done; done
         [ "$part" = amagic ] && { timeout 200 python3 -m mlx_kvq bench --kv fp16 affine:8,4 affine:4 turbo:4 --context 4096 32768 131072 --calls 8 --repeats 7 \
               --json "$O/bench.json" > "$O/bench.log" 2>&1; grep -E "^\|" "$O/bench.log"; grep -c "using the reference" "$O/bench.log"; } ;;
  amagic8b) n=0; for k in True False True False; do n=$((n + 1))   # a Llama-3.1-8B-shaped model at 131K, fp16 / affine:4 / affine:8,4, AMAGIC on / off alternating (about 4 min; a first run, off then on, printed its tables only: `=` in its log names)
           KVQ_KNOBS="AMAGIC=$k" timeout 140 python3 bench/kvq_knobs.py bench --whole-model llama-3.1-8b --kv fp16 affine:4 affine:8,4 --context 131072 --rounds 3 --steps 16 > "$O/model8b_${n}_$k.log" 2>&1
           echo "AMAGIC $k"; grep -E "^\|" "$O/model8b_${n}_$k.log" | tail -3; done ;;
  vpack) checks_with "" "" turbo:4 affine:4 affine:8,4 'calibrated 4o5'   # VPACK (on since 2026-11-30; its first runs were the parts vpbf / vpbf2 of commit 820a849, beside BFSTORE, since removed): the GPU checks, then the decode kernel at 131K under Nsight Compute against VPACK=False (about 8 min)
         SCH=${SCH:-turbo:4 affine:4 affine:8,4} ncu_sets "$O/kern.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "VPACK=False" "PF=2" "VPACK=False" ;;
  aint8) checks_with AINT8=True affine affine:4 affine:8,4   # AINT8 (affine keys on the integer tensor cores, the default since 2026-11-30): the affine GPU checks with it on, then the decode kernel at 131K and 4K under Nsight Compute against it off (about 8 min)
         SCH="affine:4 affine:8,4" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "AINT8=False" "AINT8=True" "AINT8=False" "AINT8=True"
         CTX=4096 SCH="affine:4 affine:8,4" ncu_sets "$O/kern4k.txt" "mlx_kvq_decode_[0-9a-f]" "AINT8=False" "AINT8=True" ;;
  vscb) checks_with VSCB=True affine affine:4 affine:8,4   # VSCB (affine values as subnormal halves, their scales in the weights; on since 2026-11-30): the affine GPU checks with it on, then the decode kernel at 131K and 4K under Nsight Compute against it off (about 7 min)
         SCH="affine:4 affine:8,4" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "VSCB=False" "VSCB=True" "VSCB=False" "VSCB=True"
         CTX=4096 SCH="affine:4 affine:8,4" ncu_sets "$O/kern4k.txt" "mlx_kvq_decode_[0-9a-f]" "VSCB=False" "VSCB=True" ;;
  cold) for cc in none all; do timeout 60 /usr/local/cuda/bin/ncu --clock-control none --cache-control $cc --kernel-name regex:"(?i)sdpa" --launch-skip 2 --launch-count 2 --section SpeedOfLight \
           python3 bench/ncu_decode.py fp16 ${CTX:-131072} 2>&1 | grep -E "^    Duration" | sed "s/^/fp16 ${CTX:-131072} (caches $cc): /" | tee -a "$O/fp16.txt"; done   # the memory-parallelism knobs with the caches flushed before every pass (NCU_CC=all; the earlier timings kept the previous launch's L2 contents), fp16 SDPA's kernel both ways (about 8 min at SCH="turbo:4 affine:4")
         NCU_CC=none SCH="${SCH:-turbo:4}" ncu_sets "$O/kern.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2"
         NCU_CC=all SCH="${SCH:-turbo:4}" ncu_sets "$O/kern.txt" "mlx_kvq_decode_[0-9a-f]" "PF=2" "STG=3" "STG=4" "PF=3" "STG=4 PF=1" "PF=2" ;;
  split) nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 50 > "$O/smi.csv" 2>&1 & smi=$!   # the SM clock while the calls run: a kernel bound by its own chains slows with it, fp16's memory-bound one hardly
         for v in "" "MLX_USE_CUDA_GRAPHS=0" "KVQ_KNOBS=FOLD=0"; do   # one call at 131K as build / submit / the rest (mlx-kvq bench's columns; 2026-11-30: the rest 103-104 us a call for 72-80 us kernels, fp16 142 for 139): with CUDA graphs off, without the fold (no counter chain between calls), 8 and 32 calls an evaluation (about 5 min)
           for n in 8 32; do f="$O/split_${v//[^A-Za-z0-9]/_}_$n"; env $v timeout 90 python3 bench/kvq_knobs.py bench --kv fp16 turbo:4 affine:4 --context 131072 --calls $n --repeats 5 --rounds 2 --json "$f.json" > "$f.log" 2>&1
             echo "${v:-default} calls $n"; bench_split "$f.json"; done; done
         kill $smi; cut -d, -f2 "$O/smi.csv" | sort | uniq -c | sort -rn | head -5 ;;
  stream) for v in "" "MLX_USE_CUDA_GRAPHS=0" "KVQ_KNOBS=FOLD=0"; do   # the GPU's rate over many calls: 128 calls an evaluation, so submit + the rest per call is the GPU's time per call in the stream (the first launch's delay spread over 128), to set against the kernels' Nsight Compute durations (about 4 min)
           f="$O/stream_${v//[^A-Za-z0-9]/_}"; env $v timeout 150 python3 bench/kvq_knobs.py bench --kv fp16 turbo:4 affine:4 --context 131072 --calls 128 --repeats 3 --rounds 3 --json "$f.json" > "$f.log" 2>&1
           echo "${v:-default} calls 128"; bench_split "$f.json"; done
         NCU_LIMIT=200 NCU_CALLS=2 SCHEMES="fp16 turbo:4 affine:4" TLARGS="--heads 32 --kv-heads 8 --head-dim 128" bash "$0" timeline "$O" | grep -v "^==" | head -60 ;;   # then every kernel of 2 calls per scheme, issue's shape, under Nsight Compute
  foldncu) for line in "issue 131072 turbo:4" "issue 131072 affine:4" "gemma 131072 turbo:4"; do for k in FOLD=256 FOLD=0; do set -- $line; flag=; [ $1 = gemma ] && flag=--gemma   # every mlx_kvq kernel of a call with the fold (the decode kernel merges) and without (decode + combine kernels) under Nsight Compute at 131K: duration, elapsed and SM-active cycles (about 4 min)
           timeout 100 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_decode" --launch-skip 6 --launch-count 4 --section SpeedOfLight python3 bench/ncu_decode.py $3 $2 $flag $k > "$O/ncu_$1_${3//[^a-z0-9]/_}_${k//=/_}.txt" 2>&1
           grep -E "^  [a-z]|^    (Duration|Elapsed Cycles|SM Active Cycles)" "$O/ncu_$1_${3//[^a-z0-9]/_}_${k//=/_}.txt" | sed -E 's/\(const.*\) (\([0-9, ]+\)x)/\1/; s/, Context.*//; s/ +/ /g' | paste -sd' ' | sed "s/^/$line $k: /" | tee -a "$O/foldncu.txt"; echo; done; done ;;
  serialbench) for run in "issue " "issue --serial" "issue --serial FOLD=0" "gemma " "gemma --serial"; do set -- $run; shp=$1 mode=${2:-} k=${3:-}; f="$O/${shp}${mode//-/_}${k:+_${k//=/_}}"   # one call per scheme, the calls of an evaluation independent (the bench's default: a GPU may overlap them) and serial (each call on the previous one's output, as a model's layers), and serial without the fold, issue's shape (5 schemes) and Gemma's (auto:5, turbo:4), 3 alternating rounds each (about 9 min: SHAPES=issue or gemma for one)
           case " ${SHAPES:-issue gemma} " in *" $shp "*) ;; *) continue;; esac
           if [ $shp = issue ]; then KVQ_KNOBS=$k timeout 200 python3 bench/kvq_knobs.py bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 --context ${CTXS:-4096 32768 131072} --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1
           else KVQ_KNOBS=$k timeout 150 python3 bench/kvq_knobs.py bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context ${CTXS:-4096 32768 131072} --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1; fi
           grep -E "^\| [0-9]" "$f.log" | cut -d'|' -f2-5,11,12 | sed "s/^/$run: /" | tee -a "$O/serialbench.txt"; grep -c "using the reference" "$f.log"; done ;;
  fmerge) KERN="issue 131072 turbo:4;issue@base 131072 turbo:4;issue 131072 affine:4;issue@base 131072 affine:4;issue 4096 turbo:4;issue@base 4096 turbo:4;gemma 131072 turbo:4;gemma@base 131072 turbo:4" bash "$0" kern "$O" ;;   # the fold's merges in one batch of loads a level (2026-11-30) against the package before it (bash bench/baseline_package.sh --plain 2dfc0b0 .kvq_base, carried): the decode kernel under Nsight Compute, alternating (about 6 min; its checks: LIMIT=300 bash bench/gpu_round.sh fgcheck)
  fb1check) checks_with FB1=8 "" turbo:4 affine:4 affine:8,4 ;;   # the group merge in batches of 8 (FB1=8: fewer spills by bench/cuda_registers.py --fold, one more round of loads in a group of 16): the GPU checks with it (about 5 min; then `fb1`)
  fb1) SCH="turbo:4 affine:4 affine:8,4" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "FB1=0" "FB1=8" "FB1=0" "FB1=8"
       CTX=4096 SCH="turbo:4 affine:4" ncu_sets "$O/kern4k.txt" "mlx_kvq_decode_[0-9a-f]" "FB1=0" "FB1=8"
       NCUFLAGS=--gemma SCH="turbo:4" ncu_sets "$O/kerngemma.txt" "mlx_kvq_decode_[0-9a-f]" "FB1=0" "FB1=8" ;;   # FB1=8 against FB1=0 (the default), the decode kernel under Nsight Compute at 131K, 4K and on Gemma's shape (about 5 min)
  fb1bench) for run in "issue --serial" "issue " "gemma --serial"; do set -- $run; shp=$1 mode=${2:-}; f="$O/${shp}${mode//-/_}_FB1_8"   # one call per scheme with FB1=8 (the default since): serial and independent calls on the issue's shape, serial on Gemma's, 3 alternating rounds (about 3 min)
           if [ $shp = issue ]; then KVQ_KNOBS=FB1=8 timeout 190 python3 bench/kvq_knobs.py bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 --context 4096 32768 131072 --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1
           else KVQ_KNOBS=FB1=8 timeout 140 python3 bench/kvq_knobs.py bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1; fi
           grep -E "^\| [0-9]" "$f.log" | cut -d'|' -f2-5,11,12 | sed "s/^/$run FB1=8: /" | tee -a "$O/serialbench.txt"; grep -c "using the reference" "$f.log"; done ;;
  fb1cal) NCUFLAGS=--gemma SCH="auto:5 cal:5,4" ncu_sets "$O/kerngemma_cal.txt" "mlx_kvq_decode_[0-9a-f]" "FB1=0" "FB1=8" "FB1=0" "FB1=8" ;;   # FB1 on Gemma's shape with the calibrated codecs (auto:5's plan, cal:5,4): about 7 min (the 2026-11-30 run was cut at 400 s after 7 of 8 lines)
  occprof) for s in affine:4 turbo:4; do KVQ_KNOBS=FB1=8 timeout 120 /usr/local/cuda/bin/ncu --clock-control none --kernel-name "regex:mlx_kvq_decode_[0-9a-f]" --launch-skip 4 --launch-count 1 --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats python3 bench/ncu_decode.py $s 131072 FB1=8 > "$O/${s/:/_}.txt" 2>&1   # the decode kernel at 131K: issue rate, eligible warps, occupancy (about 40 s)
           grep -E "Duration|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|DRAM Throughput" "$O/${s/:/_}.txt" | sed "s/^/$s /"; done ;;
  fexpcheck) checks_with "" "" turbo:4 affine:4 affine:8,4 'calibrated 4o5' ;;   # FEXP and SCV4 (on since 2026-12-01: the softmax's e^x by __expf, its scores and weights four heads a float4): the GPU checks with the defaults (about 5 min)
  fexp) SCH="turbo:4 affine:4 affine:8,4" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "FEXP=False SCV4=False" "FEXP=True SCV4=False" "FEXP=True SCV4=True" "FEXP=False SCV4=False" "FEXP=True SCV4=True" ;;   # the decode kernel at 131K under Nsight Compute: both off (the kernel before), FEXP alone, both on (about 5 min)
  fexp2) CTX=4096 SCH="turbo:4 affine:4" ncu_sets "$O/kern4k.txt" "mlx_kvq_decode_[0-9a-f]" "FEXP=False SCV4=False" "FEXP=True SCV4=True"
         NCUFLAGS=--gemma SCH="turbo:4 auto:5" ncu_sets "$O/kerngemma.txt" "mlx_kvq_decode_[0-9a-f]" "FEXP=False SCV4=False" "FEXP=True SCV4=True" "FEXP=False SCV4=False" "FEXP=True SCV4=True" ;;   # 4K and Gemma's shape (about 4 min)
  ringcheck) mkdir -p "$O/simt4"   # the launchers' ring of fold counters (RING = 4, the default since 2026-12-01): 12 independent calls an evaluation per configuration against the reference, beside the SIMT section's last 4 cases with FEXP (fexpcheck's run was cut before them), in parallel (about 3 min)
         timeout 300 python3 bench/check_fused_cuda.py --quick --only check --cases "1o/5o|2o/8o|turbo:4 / affine|affine:8 / turbo" --out "$O/simt4" > "$O/simt4/run.log" 2>&1 &
         timeout 300 python3 bench/check_ring_cuda.py > "$O/ring.log" 2>&1; wait
         cat "$O/ring.log" | cut -c1-200; grep -E "simt" "$O/simt4/run.log" | cut -c1-160; tail -2 "$O/simt4/run.log" | cut -c1-200 ;;
  ringbench) for run in "issue" "issue - RING=1" "issue --serial" "gemma" "gemma --serial"; do set -- $run; shp=$1 mode=${2:-} k=${3:-}; [ "$mode" = - ] && mode=; f="$O/${shp}${mode//-/_}${k:+_${k//=/_}}"   # one call per scheme with the ring of fold counters (RING = 4) and without (RING = 1: the chain), independent calls (the bench's default) and serial, issue's shape (5 schemes) and Gemma's (auto:5, turbo:4), 3 alternating rounds each (about 7 min)
           if [ $shp = issue ]; then KVQ_KNOBS=$k timeout 150 python3 bench/kvq_knobs.py bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 --context 4096 32768 131072 --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1
           else KVQ_KNOBS=$k timeout 110 python3 bench/kvq_knobs.py bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1; fi
           grep -E "^\| [0-9]" "$f.log" | cut -d'|' -f2-5,11,12 | sed "s/^/$run: /" | tee -a "$O/ringbench.txt"; grep -c "using the reference" "$f.log"; done ;;
  ring4k) for i in 1 2; do for k in "RING=4" "RING=1"; do f="$O/issue4k_${k/=/_}_$i"   # 4,096 tokens, issue's shape, independent calls (the bench's default): the ring of fold counters (RING = 4) and the chain (RING = 1) alternating, 5 rounds each, twice (about 4 min)
           KVQ_KNOBS=$k timeout 100 python3 bench/kvq_knobs.py bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 --context 4096 --calls 8 --repeats 5 --rounds 5 --json "$f.json" > "$f.log" 2>&1
           grep -E "^\| [0-9]" "$f.log" | cut -d'|' -f2-5,11,12 | sed "s/^/$k run $i: /"; grep -c "using the reference" "$f.log"; done; done ;;
  autocall) for mode in "" "--serial"; do f="$O/issue_auto${mode//-/_}"   # one call of the issue's shape with auto:5 (planned on seeded random ids, as the bench plans it) beside fp16 and turbo:4, independent and serial, 3 alternating rounds (about 3 min)
           timeout 200 python3 -m mlx_kvq bench --kv fp16 turbo:4 auto:5 --context 4096 32768 131072 --calls 8 --repeats 5 --rounds 3 $mode --json "$f.json" > "$f.log" 2>&1
           grep -E "^\| [0-9]|measured these" "$f.log" | cut -c1-220 | sed "s/^/auto ${mode:-independent}: /"; grep -c "using the reference" "$f.log"; done ;;
  hldir) mkdir -p "$O/check"   # HLDIR (on since 2026-12-01: with HLTAB, a value fragment register permuted straight from two tokens' (high, low) words): the calibrated GPU checks (cut at 200 s), then the decode kernel at 131K under Nsight Compute, off / on alternating, the issue's shape (cal:3,6, auto:5's plan there; cal:4,5) and Gemma's (cal:3,6) (about 7 min)
         timeout 200 python3 bench/check_fused_cuda.py --quick --only check --cases kvq_turbo --out "$O/check" > "$O/check/run.log" 2>&1
         grep -E "^kvq_turbo" "$O/check/run.log" | cut -c1-150; grep -E "failing|worst" "$O/check/run.log" | tail -2
         SCH="cal:3,6" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "HLDIR=False" "HLDIR=True" "HLDIR=False" "HLDIR=True"
         SCH="cal:4,5" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "HLDIR=False" "HLDIR=True"
         NCUFLAGS=--gemma SCH="cal:3,6" ncu_sets "$O/kerngemma.txt" "mlx_kvq_decode_[0-9a-f]" "HLDIR=False" "HLDIR=True" ;;
  hldir2) SCH="cal:5,4" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "HLDIR=False" "HLDIR=True"   # HLDIR with the wide codes' byte-offset lookups (`_tab_at`, keys and values): the decode kernel at 131K, issue's shape, cal:5,4 off / on (5-bit keys) and cal:3,6 on, then the calibrated GPU checks cut at 130 s (about 4 min)
          SCH="cal:3,6" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "HLDIR=True"
          mkdir -p "$O/check"; timeout 130 python3 bench/check_fused_cuda.py --quick --only check --cases kvq_turbo --out "$O/check" > "$O/check/run.log" 2>&1
          grep -E "^kvq_turbo" "$O/check/run.log" | cut -c1-150; grep -E "failing|worst" "$O/check/run.log" | tail -2 ;;
  scv4) SCH="turbo:4 affine:4" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "FEXP=True" "FEXP=False" "FEXP=True" "FEXP=False" ;;   # SCV4 alone (FEXP=False) against both on (the default): the decode kernel at 131K under Nsight Compute, alternating (about 3 min)
  lbexp) bash bench/lb_experiment.sh "$O" ;;   # more resident blocks (LB = 5 / 6: fewer registers, shorter chunks to fill the wave) against the default: the decode kernel at 131K under Nsight Compute, duration, grid, registers, achieved occupancy (about 4 min)
  lbpark) bash bench/lb_experiment.sh "$O" park ;;   # LB = 5 with PARK (the carried accumulators parked in shared memory through the key loop; off by default, emulator-checked by test_parked_accumulators) against the default, alternating (about 4 min; H200, 2026-12-01: slower, `bench/h200_20261201a/lbpark/`)
  lbnomerge) bash bench/lb_experiment.sh "$O" nomerge ;;   # LB = 5 without BMERGE (no accumulators carried through the key loop: no spills in the token loops at 96 registers offline, `bench/h200_20261130j/README.md`) against the default, alternating (about 3 min; H200, 2026-12-01: slower, `bench/h200_20261201a/lbnomerge/`)
  maskc) checks_with MASKC=True "" turbo:4 affine:4 affine:8,4 'calibrated 4o5'   # MASKC (an unmasked call's kernel without mask code, the default since 2026-11-30): the GPU checks with it on (masked and unmasked cases), then the decode kernel at 131K and 4K under Nsight Compute against it off (about 8 min)
         SCH="turbo:4 affine:4 turbo:3" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "MASKC=False" "MASKC=True" "MASKC=False" "MASKC=True"
         CTX=4096 SCH="turbo:4 affine:4" ncu_sets "$O/kern4k.txt" "mlx_kvq_decode_[0-9a-f]" "MASKC=False" "MASKC=True" ;;
  vpackgemma) NCUFLAGS=--gemma SCH="turbo:4 cal:5,4 auto:5" ncu_sets "$O/kern131.txt" "mlx_kvq_decode_[0-9a-f]" "VPACK_LB=0" "VPACK_LB=2" "VPACK_LB=0" "VPACK_LB=2" ;;   # VPACK at head dim 256 in the one-KV-head calls (LB_FEW, the default since 2026-11-30): Gemma's shape at 131K under Nsight Compute (about 4 min; checks: run the steps part with KVQ_KNOBS="VPACK_LB=2")
  issuebench) timeout 400 python3 -m mlx_kvq bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 --context 4096 32768 131072 --calls 8 --repeats 7 \
               --json "$O/bench.json" > "$O/bench.log" 2>&1; grep -E "^\|" "$O/bench.log"; grep -c "using the reference" "$O/bench.log" ;;   # the issue's own one-layer command, with the host-build column (about 2 min)
  issuerounds) timeout ${T:-400} python3 -m mlx_kvq bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 --context ${CTXS:-4096 32768 131072} --calls 8 --repeats 5 --rounds ${ROUNDS:-3} \
               --json "$O/bench.json" > "$O/bench.log" 2>&1; grep -E "^\|" "$O/bench.log"; grep -c "using the reference" "$O/bench.log" ;;   # issuebench with every scheme sampled in alternating rounds, all caches of a context kept (ratios per round, their median and range: about 2 min)
  gemmarounds) timeout ${T:-300} python3 -m mlx_kvq bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context ${CTXS:-4096 32768 131072} --calls 8 --repeats 5 --rounds ${ROUNDS:-3} \
               --json "$O/bench.json" > "$O/bench.log" 2>&1; grep -E "^\||measured these" "$O/bench.log" | cut -c1-200; grep -c "using the reference" "$O/bench.log" ;;   # one call of Gemma's shape (4 query / 1 KV head, d256), auto:5 (planned on seeded random ids) and turbo:4, in ROUNDS alternating rounds (about 1.5 min at two contexts)
  hostsplit) timeout 200 python3 bench/host_calls_cuda.py --profile > "$O/hostsplit.txt" 2>&1; cat "$O/hostsplit.txt" | cut -c1-150 ;;   # where the host's build of one attention call goes (cProfile, own time per call; MLX's cuda_kernel call one builtin entry: about 1 min)
  status1) mkdir -p "$O/layer" "$O/gemma"   # where the bars stand: one layer per call (the issue's shape, 4K / 32K / 131K) and auto:5's codec kinds on Gemma's shape, every scheme vs fp16 SDPA (about 4 min)
         timeout 150 python3 bench/check_fused_cuda.py --quick --only layer --out "$O/layer" > "$O/layer/run.log" 2>&1; grep -v "^#" "$O/layer/run.log" | tail -5
         timeout 200 python3 bench/check_fused_cuda.py --quick --only gemma --out "$O/gemma" > "$O/gemma/run.log" 2>&1; grep -v "^#" "$O/gemma/run.log" | tail -5
         grep -c "using the reference" "$O/layer/run.log" "$O/gemma/run.log" ;;
  status2) timeout 570 python3 -m mlx_kvq bench --whole-model llama-3.2-1b --kv fp16 turbo:4 affine:4 affine:8,4 --context 32768 131072 --steps 64 ${ROUNDS:+--rounds $ROUNDS} \
             --json "$O/whole.json" > "$O/whole.log" 2>&1; tail -14 "$O/whole.log"; grep -c "using the reference" "$O/whole.log" ;;   # the issue's whole-model bar: greedy decode tokens/s, Llama-3.2-1B shape (about 8 min)
  calstage) timeout 300 python3 bench/check_staged_cuda.py --cases calibrated --out "$O" > "$O/staged.log" 2>&1; grep SUMMARY "$O/staged.log" | cut -c1-700   # calibrated codecs' staged tokens (2026-12-01): quantized in the folded kernel by the pair kernel's text, step by step against stage 0 and the reference, then decode steps through the caches with stage 3 (about 5 min)
            grep -c "using the reference" "$O/staged.log"
            KVQ_KNOBS="CodecKVCache.stage=3" timeout 250 python3 bench/check_decode_steps.py --schemes "calibrated 4o5" --steps 8 --out "$O/steps" > "$O/steps.log" 2>&1; tail -3 "$O/steps.log" | cut -c1-300 ;;
  calstage0) for k in "CodecKVCache.stage=0" "CodecKVCache.stage=32"; do f="$O/whole32_${k#*=}"   # whole model at 32K, fp16 / auto:5 with calibrated staging (the default since 2026-12-01) and without (stage 0: each step quantized and written, as before), one run each (about 5 min)
              KVQ_KNOBS=$k timeout 270 python3 bench/kvq_knobs.py bench --whole-model llama-3.2-1b --kv fp16 auto:5 --context 32768 --steps 64 --rounds 2 --json "$f.json" > "$f.log" 2>&1
              grep -E "^\| [0-9]" "$f.log" | sed "s/^/$k: /"; grep -c "using the reference" "$f.log"; done ;;
  wholeauto) timeout 570 python3 -m mlx_kvq bench --whole-model ${SHAPE:-llama-3.2-1b} --kv ${KV:-fp16 turbo:4 affine:4 auto:5} --context ${CTX:-32768 131072} --steps 64 --rounds ${ROUNDS:-3} \
             --json "$O/whole.json" > "$O/whole.log" 2>&1; grep -vE "Warn|warn" "$O/whole.log" | tail -30; grep -c "using the reference" "$O/whole.log" ;;   # whole model with the default auto:5 beside fp16 / turbo:4 / affine:4 (2026-11-30: auto:5 one call was slower than fp16 on this shape's layer)
  gemmalayers) timeout ${LIMIT:-420} python3 bench/gemma_layers.py --shape ${SHAPE:-gemma-3-1b} --context ${CTX:-32768} --kv ${KV:-turbo:4 affine:4} --rounds ${ROUNDS:-3} --profile ${PROF:-16} \
               > "$O/run.log" 2>&1; grep -E "^\\||^round|^#" "$O/run.log"; grep -c "using the reference" "$O/run.log" ;;   # Gemma-3 shape: every layer compressed vs only the global ones, against fp16, with host cProfiles
  ringstep) timeout ${LIMIT:-300} python3 bench/ring_step_cuda.py --layers ${LAYERS:-22} > "$O/run.log" 2>&1; cat "$O/run.log" ;;   # a sliding-window layer's decode step by piece: build / submit / wait per layer (about 1.5 min)
  aring) timeout ${CLIM:-240} python3 bench/check_prefill_pair.py --affine-ring > "$O/check.log" 2>&1; grep -E "ring write|ring cache|failing" "$O/check.log" | cut -c1-220
        timeout 100 python3 bench/ring_step_cuda.py --kv turbo:4 affine:4 affine:8,4 --rounds 3 --steps 24 > "$O/ringstep.log" 2>&1; cat "$O/ringstep.log" ;;
  aringmodel) timeout ${LIMIT:-420} python3 bench/gemma_layers.py --kv affine:4 affine:8,4 --noring --rounds ${ROUNDS:-6} > "$O/model.log" 2>&1; grep -E "^\\||^round" "$O/model.log"; grep -c "using the reference" "$O/model.log" ;;
  gemmaall) timeout ${LIMIT:-300} python3 bench/gemma_layers.py --kv turbo:4 affine:4 affine:8,4 --rounds ${ROUNDS:-16} > "$O/gemma.log" 2>&1; grep -E "^\\|" "$O/gemma.log"; grep -c "using the reference" "$O/gemma.log"
           timeout ${ELIM:-250} python3 -m mlx_kvq bench --whole-model llama-3.1-8b --kv fp16 turbo:4 affine:4 --context 131072 --rounds 6 --steps 16 > "$O/model8b.log" 2>&1; grep -E "^\\|" "$O/model8b.log" ;;
  calpair) timeout ${LIMIT:-300} python3 bench/check_calibrated_cuda.py > "$O/check.log" 2>&1; grep -E "failing|FAIL|disagree|declined|Error" "$O/check.log" | cut -c1-300; grep -c "bit-equal False" "$O/check.log"; grep -E "^\\||^#" "$O/check.log" ;;
  calsteps) for k in "CUDA_PAIR=False" "CUDA_PAIR=True"; do   # the calibrated decode-step configuration of two KV heads over 24,000 tokens (float16) with each side's encode and with the pair kernel
             KVQ_KNOBS="$k" timeout 120 python3 -c "import sys; sys.argv = ['x']; sys.path.insert(0, 'bench'); import check_decode_steps as C, mlx.core as mx, json; print('$k', json.dumps(C.run('calibrated 4o5', 1, 2, 4, 128, 24000, mx.float16, steps=12)))" 2>&1 | tail -1; done ;;
  ceiling) timeout 100 python3 -m mlx_kvq bench --whole-model llama-3.2-1b --kv fp16 turbo:4 --context 256 131072 --rounds 4 --steps 32 > "$O/ceiling1b.log" 2>&1; grep -E "^\\|" "$O/ceiling1b.log"
           timeout ${ELIM:-240} python3 -m mlx_kvq bench --whole-model llama-3.1-8b --kv fp16 turbo:4 affine:4 affine:8,4 --context 32768 131072 --rounds 3 --steps 16 > "$O/model8b.log" 2>&1; grep -E "^\\|" "$O/model8b.log"; grep -c "using the reference" "$O"/*.log ;;
  ring) timeout 200 python3 bench/check_prefill_pair.py --ring > "$O/check.log" 2>&1; grep -E "ring write|ring cache|failing" "$O/check.log"   # the ring write on the GPU (the script's other cases too), then its cost by piece and a whole Gemma-3-shaped model with it off / on
        timeout 150 python3 bench/ring_step_cuda.py --kv turbo:4 > "$O/ringstep.log" 2>&1; cat "$O/ringstep.log"
        timeout ${LIMIT:-330} python3 bench/gemma_layers.py --kv turbo:4 --noring --rounds ${ROUNDS:-6} > "$O/model.log" 2>&1; grep -E "^\\||^round" "$O/model.log"; grep -c "using the reference" "$O/check.log" "$O/model.log" ;;
  fewrows) timeout ${LIMIT1:-150} python3 bench/check_decode_steps.py --schemes turbo:4 --steps ${STEPS:-12} > "$O/steps.log" 2>&1; grep -E '"Hkv": [12],' "$O/steps.log" | cut -c1-220; tail -1 "$O/steps.log"   # rows of one / two KV heads over more than FOLD chunks fold; then a Gemma-3-shaped model
           timeout ${LIMIT:-150} python3 bench/gemma_layers.py --kv turbo:4 --rounds ${ROUNDS:-4} > "$O/model.log" 2>&1; grep -E "^\\||^round" "$O/model.log"; grep -c "using the reference" "$O/steps.log" "$O/model.log" ;;
  autogemma) timeout ${LIMIT:-330} python3 bench/gemma_layers.py --kv auto:5 turbo:4 --rounds ${ROUNDS:-8} --profile ${PROF:-16} > "$O/gemma.log" 2>&1; grep -E "^\\||^round|^#" "$O/gemma.log"   # auto:5 (planned on random token ids) on Gemma-3-1B's shape against turbo:4 and fp16, every layer and only the global ones, with host cProfiles; then one attention call of Gemma's shape
             timeout ${BLIM:-200} python3 -m mlx_kvq bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 7 > "$O/layer.log" 2>&1; grep -E "^\\||^model|^one" "$O/layer.log"; grep -c "using the reference" "$O"/*.log ;;
  calncu) for ctx in ${CTXS:-131072 32768}; do for sk in "fp16 (?i)sdpa" "turbo:4 mlx_kvq_decode_" "cal:5,4 mlx_kvq_decode_" "cal:5,4 mlx_kvq_decode_ LEAN_ANY=True" "cal:4,4 mlx_kvq_decode_" "cal:4,4 mlx_kvq_decode_ LEAN_ANY=True"; do   # Gemma's shape (4 / 1 heads, d256): the decode kernel of auto:B's codec kinds against turbo:4's and fp16 SDPA's (Nsight Compute, two launches each)
            set -- $sk; d=$(timeout 120 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name "regex:$2" --launch-skip 4 --launch-count 2 \
              --section SpeedOfLight python3 bench/ncu_decode.py $1 $ctx --gemma ${3:-} 2>&1 | grep -E "^    Duration" | awk '{print $NF}' | tr '\n' ' ')
            echo "gemma $1 $ctx ${3:-}: duration us $d" | tee -a "$O/calncu.txt"; done; done ;;
  calkern) [ -n "${KSETS:-}" ] && IFS=';' read -ra SETS <<< "$KSETS" || SETS=("turbo:4" "cal:5,4" "cal:5,4 LEAN_ANY=True" "cal:4,4")   # KSETS: scheme and knobs, sets split by ';'
           for ctx in ${CTXS:-131072 32768}; do for sk in "${SETS[@]}"; do   # Gemma's shape: every kernel of one decode call (query map, decode, combine) by duration (Nsight Compute, launches 7-12), and any fallback to the reference
            set -- $sk; sc=$1; shift; kn="$*"; f="$O/ncu_$(echo "${sc}_${ctx}_$kn" | tr -c 'A-Za-z0-9_\n' '_').txt"
            timeout 120 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name "regex:mlx_kvq_(decode|qmap)" --launch-skip ${SKIP:-6} --launch-count ${COUNT:-6} \
              --section SpeedOfLight python3 bench/ncu_decode.py $sc $ctx ${NCUSHAPE---gemma} $kn > "$f" 2>&1
            grep -E "^    Duration|reference" "$f" | sed -E 's/ +/ /g' | paste -sd' ' | sed "s/^/${NCUSHAPE-gemma} $sc $ctx $kn: /" | tee -a "$O/calkern.txt"; done; done ;;
  fgcheck) mkdir -p "$O/check" "$O/steps" "$O/staged"   # the two-level fold (FGS): every decode configuration vs the reference, decode steps through the caches and the staged-token kernels, in parallel (their time is mostly NVRTC compiling)
         timeout ${LIMIT:-420} python3 bench/check_fused_cuda.py --quick --only check --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout ${LIMIT:-420} python3 bench/check_staged_cuda.py --out "$O/staged" > "$O/staged/run.log" 2>&1 &
         timeout ${LIMIT:-420} python3 bench/check_decode_steps.py --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
         tail -3 "$O/check/run.log"; tail -2 "$O/steps/run.log"; tail -3 "$O/staged/run.log" | cut -c1-300 ;;
  calcheck) mkdir -p "$O/check" "$O/steps"
         timeout ${LIMIT:-240} python3 bench/check_fused_cuda.py --only check --cases 'kvq_turbo| / ' --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout ${LIMIT:-240} python3 bench/check_decode_steps.py --schemes 'calibrated 4o5' --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
         grep -c "True" "$O/check/run.log"; grep -E "FAIL|failing|failed" "$O/check/run.log" | head; tail -2 "$O/check/run.log" | cut -c1-300; cat "$O/steps/run.log" | cut -c1-300 ;;
  hstep) # HSTEP (a band of n % 32 channels in ceil(n / 16) 16-dim steps): every calibrated case of check_fused_cuda (two shapes each: d64-d256, one of them d128's 112 + 16 bands)
         # and a calibrated cache's decode steps, in parallel (cut at LIMIT s), then the decode kernel at 131K under Nsight Compute, off / values only / both sides (the default), alternating
         mkdir -p "$O/check" "$O/steps"
         timeout ${LIMIT:-240} python3 bench/check_fused_cuda.py --only check --cases 'kvq_turbo' --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout ${LIMIT:-240} python3 bench/check_decode_steps.py --schemes 'calibrated 4o5' --out "$O/steps" > "$O/steps/run.log" 2>&1; wait
         grep -E "FAIL|failing|failed" "$O/check/run.log" | head; tail -2 "$O/check/run.log" | cut -c1-300; tail -4 "$O/steps/run.log" | cut -c1-300
         KERN=${HKERN:-'issue 131072 cal:3,6 HSTEP="";issue 131072 cal:3,6 HSTEP="v";issue 131072 cal:3,6;issue 131072 cal:5,4 HSTEP="";issue 131072 cal:5,4;issue 131072 cal:3,6 HSTEP="";issue 131072 cal:3,6;issue 131072 turbo:4'} bash "$0" kern "$O" ;;
  qrot) # CAL_QROT (a one-band calibrated key side's queries prepared in the decode kernel, no query kernel): check_fused_cuda's calibrated cases (one-band keys at d64 and d128 among them),
         # check_staged_cuda, decode steps of one-band keys and outlier-band ones (then with stages of 3 crossed), in parallel (cut at LIMIT s); then Nsight Compute, off / on alternating
         mkdir -p "$O/check" "$O/steps" "$O/staged" "$O/steps3"
         timeout ${LIMIT:-240} python3 bench/check_fused_cuda.py --only check --cases 'kvq_turbo' --out "$O/check" > "$O/check/run.log" 2>&1 &
         timeout ${LIMIT:-240} python3 bench/check_staged_cuda.py --out "$O/staged" > "$O/staged/run.log" 2>&1 &
         ( timeout ${LIMIT:-240} python3 bench/check_decode_steps.py --schemes 'calibrated 3/6o' 'calibrated 4o5' --out "$O/steps" > "$O/steps/run.log" 2>&1
           KVQ_KNOBS="CodecKVCache.stage=3" timeout ${LIMIT:-240} python3 bench/check_decode_steps.py --schemes 'calibrated 3/6o' --steps 8 --out "$O/steps3" > "$O/steps3/run.log" 2>&1 ) ; wait
         for f in check staged steps steps3; do echo "== $f"; grep -E "FAIL|failing|failed" "$O/$f/run.log" | head -5; tail -3 "$O/$f/run.log" | cut -c1-300; done
         KERN=${QKERN:-'issue 4096 cal1:3,6 CAL_QROT=False;issue 4096 cal1:3,6;issue 131072 cal1:3,6 CAL_QROT=False;issue 131072 cal1:3,6;issue 4096 cal1:3,6 CAL_QROT=False;issue 4096 cal1:3,6;issue 4096 turbo:4'} bash "$0" kern "$O" ;;
  qrotcall) # one call of the issue's shape, fp16 / auto:5 (and $MORE), serial, 3 rounds, CAL_QROT off then on (the default), each in its own process
         for h in False True; do
           KVQ_KNOBS="CAL_QROT=$h" timeout ${T:-170} python3 -c "import sys; sys.path.insert(0, 'bench'); from knobs import apply_knobs; print('knobs', apply_knobs()); from mlx_kvq.cli import main; sys.argv = ['mlx-kvq'] + sys.argv[1:]; sys.exit(main())" \
             bench --kv fp16 auto:5 ${MORE:-} --context ${CTXS:-4096 32768 131072} --calls 8 --repeats 5 --rounds 3 --serial --json "$O/qrot_$h.json" > "$O/qrot_$h.log" 2>&1
           grep -E "^\| [0-9]|measured these|^knobs|planned" "$O/qrot_$h.log" | cut -c1-200 | sed "s/^/CAL_QROT $h: /"; done ;;
  qrotmodel) # whole model of Llama-3.2-1B's shape, fp16 / auto:5, CAL_QROT off and on twice, each run its own process (the knob is read when a launcher is made)
         for h in False True False True; do
           KVQ_KNOBS="CAL_QROT=$h" timeout ${T:-200} python3 -c "import sys; sys.path.insert(0, 'bench'); from knobs import apply_knobs; print('knobs', apply_knobs()); from mlx_kvq.cli import main; sys.argv = ['mlx-kvq'] + sys.argv[1:]; sys.exit(main())" \
             bench --whole-model llama-3.2-1b --kv fp16 auto:5 --context ${CTXS:-32768} --steps 48 --rounds ${ROUNDS:-2} > "$O/model_$h.log" 2>&1
           grep -E "^\| [0-9a-z]|measured these|^knobs|planned" "$O/model_$h.log" | cut -c1-200 | sed "s/^/CAL_QROT $h: /"; done ;;
  hstepcall) # one call of the issue's shape, fp16 / auto:5 (and $MORE), serial, 3 rounds, at 4K and 131K, with HSTEP off then on (the default), each in its own process: the bench's plan is printed per run
         for h in '""' "'kv'"; do tag=$([ "$h" = '""' ] && echo off || echo on)
           KVQ_KNOBS="HSTEP=$h" timeout ${T:-140} python3 -c "import sys; sys.path.insert(0, 'bench'); from knobs import apply_knobs; print('knobs', apply_knobs()); from mlx_kvq.cli import main; sys.argv = ['mlx-kvq'] + sys.argv[1:]; sys.exit(main())" \
             bench --kv fp16 auto:5 ${MORE:-} --context ${CTXS:-4096 131072} --calls 8 --repeats 5 --rounds 3 --serial --json "$O/$tag.json" > "$O/$tag.log" 2>&1
           grep -E "^\| [0-9]|measured these|^knobs" "$O/$tag.log" | cut -c1-160 | sed "s/^/HSTEP $tag: /"; done ;;
  kern) [ -n "${KERN:-}" ] || { echo "kern: set KERN='SHAPE CTX SCHEME [KNOB=V...];...' (SHAPE gemma, issue, llama, gemma@base or issue@base)"; exit 2; }
        IFS=';' read -ra SETS <<< "$KERN"
        for line in "${SETS[@]}"; do set -- $line; shp=$1 ctx=$2 sc=$3; shift 3; kn="$*"
          pp=${PYTHONPATH:-}; case $shp in *@base) pp=$PWD/.kvq_base/old:${PYTHONPATH:-};; esac
          flag=; case $shp in gemma*) flag=--gemma;; llama*) flag=--llama;; esac
          rx="mlx_kvq_(decode|qmap)"; [ "$sc" = fp16 ] && rx="sdpa|attention"   # fp16: MLX's SDPA kernel(s)
          mkdir -p "$O/raw"; f="$O/raw/ncu_$(echo "${shp}_${sc}_${ctx}_${kn}_${NCU_CC:-none}" | tr -c 'A-Za-z0-9_\n' '_').txt"
          PYTHONPATH=$pp timeout 120 /usr/local/cuda/bin/ncu --clock-control none --cache-control ${NCU_CC:-none} --kernel-name "regex:$rx" --launch-skip ${SKIP:-6} --launch-count ${COUNT:-6} \
            --section SpeedOfLight python3 bench/ncu_decode.py $sc $ctx $flag $kn > "$f" 2>&1
          grep -E "^    Duration|reference|Error|error" "$f" | sed -E 's/ +/ /g' | paste -sd' ' | sed "s/^/$shp $sc $ctx $kn${NCU_CC:+ (cache-control $NCU_CC)}: /" | tee -a "$O/kern.txt"; done ;;
  coldwarm) # Gemma's shape at 131K: the decode kernels with L2 flushed before each (cache-control all) against warm (none: what every earlier Gemma-shape figure was, its 33-38 MiB cache fits the H200's L2),
            # the calibrated kinds' loads kept PF tiles in flight at d256 (PF_WORDS=64, LB_FEW's registers), then one call per scheme rotating 0 / 64 / 512 MiB of caches
         for cc in all none; do NCU_CC=$cc KERN="gemma 131072 turbo:4;gemma 131072 cal:5,4;gemma 131072 cal:5,4 PF_WORDS=64;gemma 131072 turbo:4 PF_WORDS=64" bash "$0" kern "$O/.."; done
         for r in 0 64 512; do timeout 150 python3 -m mlx_kvq bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 32768 131072 --calls 8 --repeats 7 --rotate-mib $r > "$O/layer_rot$r.log" 2>&1
           grep -E "^\| [0-9]" "$O/layer_rot$r.log" | sed "s/^/rotate $r MiB: /"; done ;;
  timeline) # every GPU kernel of the bench's calls (bench/call_timeline.py, Gemma's shape unless $TLARGS names another, e.g. "--heads 32 --kv-heads 8 --head-dim 128"; $CTX default 131072): plain wall times, then Nsight Compute on all kernels of one eval of 4 calls per scheme, then Nsight Systems' trace (start, duration) if it is installed
         c=${CTX:-131072}; S=${SCHEMES:-fp16 auto:5 turbo:4}
         timeout 300 python3 bench/call_timeline.py $S --context $c --evals 4 ${TLARGS:-} > "$O/plain.log" 2>&1; cat "$O/plain.log" | tail -4
         timeout ${NCU_LIMIT:-400} /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --cache-control none --section SpeedOfLight python3 bench/call_timeline.py $S --context $c --evals 1 --calls ${NCU_CALLS:-2} ${TLARGS:-} > "$O/ncu.txt" 2>&1
         grep -E "^  [A-Za-z_]|^    Duration|per call" "$O/ncu.txt" | sed -E 's/ +/ /g; s/, Context.*//' > "$O/ncu_kernels.txt"; head -80 "$O/ncu_kernels.txt"
         NS=$( (command -v nsys; ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null) | head -1)
         if [ -n "$NS" ]; then timeout 200 $NS profile --capture-range=cudaProfilerApi --capture-range-end=repeat -t cuda -f true -o "$O/tl" python3 bench/call_timeline.py $S --context $c --evals 2 > "$O/nsys.log" 2>&1
           for f in "$O"/tl*.nsys-rep; do timeout 100 $NS stats --report cuda_gpu_trace --format csv "$f" > "${f%.nsys-rep}_trace.csv" 2>/dev/null; timeout 100 $NS stats --report cuda_api_sum "$f" > "${f%.nsys-rep}_api.txt" 2>/dev/null; done
           python3 bench/trace_gaps.py "$O"/tl*_trace.csv | tee "$O/gaps.txt"; else echo "no nsys on this machine"; fi ;;
  lowkeys) # calibrated keys of 1-3 bits on the tensor cores (2026-11-30): the calibrated cases of check_fused_cuda.py (both kernels), Nsight Compute on Gemma's shape (cal:3,6 against cal:5,4), one call per scheme of Gemma's shape
         timeout ${LIMIT:-200} python3 bench/check_fused_cuda.py --only check --cases kvq_turbo --out "$O" > "$O/check.log" 2>&1; grep -E "kvq_turbo|failing|worst" "$O/check.log" | cut -c1-260 | tail -40
         KERN="gemma 131072 cal:3,6;gemma 131072 cal:5,4;gemma 32768 cal:3,6;gemma 4096 cal:3,6" bash "$0" kern "$O"
         timeout 200 python3 -m mlx_kvq bench --kv fp16 auto:5 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 7 > "$O/layer.log" 2>&1; grep -E "^\| [0-9]" "$O/layer.log" ;;
  vtlo2) # VTLO on the GPU, kernels and calls: Nsight Compute (Gemma's shape: cal:5,4 / cal:3,6 / cal:3,2 (auto:3's kinds) with and without VTLO; the issue's shape cal:5,4), then one call of Gemma's shape per scheme through `mlx-kvq bench` (its plan printed) without and with VTLO
         KERN="gemma 131072 cal:5,4;gemma 131072 cal:5,4 VTLO=True;gemma 131072 cal:3,6;gemma 131072 cal:3,2;gemma 131072 cal:3,2 VTLO=True;issue 131072 cal:5,4;issue 131072 cal:5,4 VTLO=True" bash "$0" kern "$O"
         for k in "VTLO=False" "VTLO=True"; do KVQ_KNOBS="$k" timeout 170 python3 bench/kvq_knobs.py bench --kv fp16 auto:5 auto:3 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 7 > "$O/layer_$k.log" 2>&1
           grep -E "^knobs|^\| [0-9]|planned|codecs" "$O/layer_$k.log"; done ;;
  vtloprobe) # where VTLO's first-use check failed (the issue's shape, cal:5,4 at 131K, 2026-11-30, while the check's oracle ran on the GPU in TF32): the first-use check's error by context and knobs (part exact); a "disagrees" line is a failure
         EXACT="issue cal:5,4 131072 VTLO=True;issue cal:5,4 131072 VTLO=True LB=2;issue cal:5,4 131072 VTLO=True LB_FEW=0;issue cal:5,4 32768 VTLO=True;issue cal:5,4 8192 VTLO=True;issue cal:5,4 131072 VTLO=True BMERGE=False;issue cal:5,4 131072;issue cal:4,3 131072 VTLO=True;issue cal:5,4 131072 VTLO=True FOLD=0" bash "$0" exact "$O/.." ;;
  exact) # the first-use check's error against the exact float32 reference (the CPU stream: attention._final_oracle since 2026-11-30) for every kind of decode kernel, then Gemma's shape per call (VTLO on by default) and the kernel of auto:5's GPU plan with and without VTLO
         IFS=';' read -ra LINES <<< "${EXACT:-issue turbo:4 131072;issue turbo:3 131072;issue affine:4 131072;issue affine:8,4 131072;issue cal:5,4 131072;issue cal:5,4 131072 VTLO=False;issue cal:3,6 131072;gemma turbo:4 131072;gemma cal:5,4 131072;gemma cal:5,4 131072 VTLO=False;gemma cal:3,2 131072;gemma auto:5 131072;issue cal:5,4 4096;issue turbo:4 4096}"
         for line in "${LINES[@]}"; do
           set -- $line; shp=$1; shift; flag=; [ $shp = gemma ] && flag=--gemma
           r=$(timeout 90 python3 bench/ncu_decode.py "$@" $flag --say-error 2>&1 | grep -E "planned|first-use|disagrees|done|Error" | sed -E 's/ for \(.*//' | paste -sd' '); echo "$line: $r" | tee -a "$O/exact.txt"; done
         [ -n "${EXACT:-}" ] && exit 0
         timeout 170 python3 -m mlx_kvq bench --kv fp16 auto:5 auto:3 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 7 > "$O/layer.log" 2>&1; grep -E "^\| [0-9]|measured these|disagrees" "$O/layer.log"
         KERN="gemma 131072 cal:3,6;gemma 131072 cal:3,6 VTLO=False" bash "$0" kern "$O" ;;
  hltab) # HLTAB (VTLO's wide value bands read high and low halves from one table): Nsight Compute on Gemma's shape (cal:3,6, auto:5's plan there, and cal:5,4) and the issue's cal:5,4, off / on; then the calibrated GPU checks and decode steps with it on, in parallel
         KERN="gemma 131072 cal:3,6;gemma 131072 cal:3,6 HLTAB=True;gemma 131072 cal:5,4;gemma 131072 cal:5,4 HLTAB=True;issue 131072 cal:5,4;issue 131072 cal:5,4 HLTAB=True;gemma 131072 cal:3,6" bash "$0" kern "$O"
         EXACT="issue cal:3,6 131072 HLTAB=True;gemma cal:3,6 131072 HLTAB=True" bash "$0" exact "$O/.."
         KVQ_KNOBS="HLTAB=True" timeout ${LIMIT:-240} python3 bench/check_fused_cuda.py --only check --cases kvq_turbo --out "$O" > "$O/check.log" 2>&1 &
         KVQ_KNOBS="HLTAB=True" timeout ${LIMIT:-240} python3 bench/check_decode_steps.py --schemes 'calibrated 4o5' --out "$O/steps" > "$O/steps.log" 2>&1; wait
         grep -E "failing|worst" "$O/check.log" | tail -4; tail -2 "$O/steps.log" ;;
  hldefault) # HLTAB on by default in the few-blocks kernels (HLTAB_LB): the default kernels under Nsight Compute (Gemma's shape cal:3,6 and cal:5,4, the issue's cal:5,4 unchanged), then one call per scheme, Gemma's shape twice and the issue's once (auto:5 as its planner plans that layer)
         KERN="gemma 131072 cal:3,6;gemma 131072 cal:5,4;issue 131072 cal:5,4;gemma 131072 cal:3,6 HLTAB=False" bash "$0" kern "$O"
         for i in 1 2; do timeout 170 python3 -m mlx_kvq bench --kv fp16 auto:5 auto:3 turbo:4 --heads 4 --kv-heads 1 --head-dim 256 --context 4096 32768 131072 --calls 8 --repeats 7 > "$O/gemma_layer_$i.log" 2>&1
           grep -E "^\| [0-9]|measured these|disagrees" "$O/gemma_layer_$i.log"; done
         timeout 200 python3 -m mlx_kvq bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 auto:5 --context 4096 32768 131072 --calls 8 --repeats 7 > "$O/issue_layer.log" 2>&1
         grep -E "^\| [0-9]|measured these|disagrees" "$O/issue_layer.log" ;;
  hlissue) # the issue's shape with auto:5's plan there (keys tq4cso / values tq5cs: 5-bit values, no pair table) and cal:4,5: HLTAB forced under LB = 4 (HLTAB_LB=4), and the kernels compiled for 2 blocks an SM (LB=2, one or two waves); the first-use check's error with HLTAB there
         KERN="issue 131072 auto:5;issue 131072 auto:5 HLTAB_LB=4;issue 131072 auto:5 LB=2;issue 131072 auto:5 LB=2 WAVE=264;issue 131072 cal:4,5;issue 131072 cal:4,5 HLTAB_LB=4;issue 131072 auto:5" bash "$0" kern "$O"
         EXACT="issue auto:5 131072 HLTAB_LB=4;issue cal:4,5 131072 HLTAB_LB=4;issue auto:5 131072 LB=2 WAVE=264" bash "$0" exact "$O" ;;
  lb3)   # the issue's shape with the kernels compiled for 3 blocks an SM (168 registers: offline every G4 d128 kind spills 0-32 bytes there against 28-168 under LB = 4) and WAVE = 132 x 3, so that a call is one wave (2026-11-28's LB=3 kept WAVE = 528: two waves, slower), against the default
         KERN="issue 131072 turbo:4;issue 131072 turbo:4 LB=3 WAVE=396;issue 131072 affine:4;issue 131072 affine:4 LB=3 WAVE=396;issue 131072 cal:4,5;issue 131072 cal:4,5 LB=3 WAVE=396;issue 32768 turbo:4;issue 32768 turbo:4 LB=3 WAVE=396" bash "$0" kern "$O" ;;
  vtlochk) # VTLO's GPU checks: the calibrated cases of check_fused_cuda.py (both kernels) and check_decode_steps' 24K calibrated configuration, in parallel
         KVQ_KNOBS="VTLO=True" timeout ${LIMIT:-300} python3 bench/check_fused_cuda.py --only check --cases kvq_turbo --out "$O" > "$O/check.log" 2>&1 &
         KVQ_KNOBS="VTLO=True" timeout ${LIMIT:-300} python3 bench/check_decode_steps.py --schemes 'calibrated 4o5' --out "$O/steps" > "$O/steps.log" 2>&1; wait
         grep -E "^kvq_turbo|failing|worst" "$O/check.log" | cut -c1-200 | tail -40; tail -4 "$O/steps.log" ;;
  halftab) mkdir -p "$O/check" "$O/check64"   # exact half tables (half_centroids, the calibrated codecs' default since 2026-12-01: no low parts): the calibrated GPU checks with them, with float64 codebooks (KVQ_HALF_CENTROIDS=0, VTLO) for two cases, and the 24K decode steps, in parallel, cut at LIMIT (280) s
         timeout ${LIMIT:-280} python3 bench/check_fused_cuda.py --quick --only check --cases kvq_turbo --out "$O/check" > "$O/check/run.log" 2>&1 &
         KVQ_HALF_CENTROIDS=0 timeout ${LIMIT:-280} python3 bench/check_fused_cuda.py --quick --only check --cases "kvq_turbo (3o/6o|5o/4o)" --out "$O/check64" > "$O/check64/run.log" 2>&1 &
         timeout ${LIMIT:-280} python3 bench/check_decode_steps.py --schemes 'calibrated 4o5' --out "$O/steps" > "$O/steps.log" 2>&1; wait
         for f in check check64; do echo "== $f"; grep -E "^kvq_turbo|failing|worst" "$O/$f/run.log" | cut -c1-200 | tail -30; done; tail -4 "$O/steps.log" ;;
  halfncu) KERN="${KERN:-llama 131072 cal1:2,6;llama 131072 cal1f:2,6;issue 131072 cal:3,6;issue 131072 calf:3,6;issue 131072 cal:5,4;issue 131072 calf:5,4;gemma 131072 cal:5,4;gemma 131072 calf:5,4;llama 131072 cal1:2,6;llama 131072 cal1f:2,6}" bash "$0" kern "$O/.." ;;   # the decode kernels with exact half tables against float64 codebooks' (VTLO), Nsight Compute at 131K
  bars1) # the issue's bars with the code of 2026-12-01 evening in one machine start: the 16K prefill in 2048-token chunks per scheme, auto:5 (the default) among them (never measured on a GPU before), fp16 first and last; then one call of the issue's shape, every scheme, serial, 3 alternating rounds (about 7 min)
         timeout ${LIMIT:-300} python3 bench/prefill_profile.py --kv fp16 turbo:4 auto:5 affine:4 affine:8,4 fp16 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| |planned|Error" "$O/prefill.log" | cut -c1-300
         timeout ${LIMIT2:-240} python3 -m mlx_kvq bench --kv fp16 affine:8,4 affine:4 turbo:4 turbo:3 auto:5 --context 4096 32768 131072 --calls 8 --repeats 5 --rounds 3 --serial --json "$O/issue.json" > "$O/issue.log" 2>&1
         grep -E "^\| [0-9]|measured these|disagrees|Error" "$O/issue.log" | cut -c1-300; bench_split "$O/issue.json" ;;
  calprefill) # auto:5's prefill (2026-12-01 evening): one-band calibrated pairs decoded by the turbo pair launch (`_pair_prefill`), other calibrated sides by their decode without the (.., words, 32) unpack: the calibrated prefill chunks against the reference, then the 16K prefill (auto:5/previous: PREFILL_PAIR off, each side's own decode), then Gemma 3 1B's shape (about 6 min)
         timeout 200 python3 bench/check_prefill_pair.py --cal > "$O/check.log" 2>&1; tail -12 "$O/check.log" | cut -c1-250
         timeout ${LIMIT:-250} python3 bench/prefill_profile.py --kv fp16 auto:5 turbo:4 auto:5/previous fp16 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| |planned|Error" "$O/prefill.log" | head -9 | cut -c1-300
         timeout ${LIMIT2:-200} python3 bench/prefill_profile.py --shape gemma-3-1b --kv fp16 auto:5 turbo:4 fp16 --skip-layer > "$O/gemma.log" 2>&1; grep -E "^\| |planned|Error" "$O/gemma.log" | head -8 | cut -c1-300 ;;
  calprefill2) # after calprefill: the calibrated centring undone by one fused operation (`uncentre`); the checks, the 16K prefill with each chunk's host build, then one layer's pieces for fp16 / turbo:4 / auto:5's Llama kinds (one-band pairs cal1:2,6, one-band keys with 8-bit affine values cal1:4,a8) at a 14K past (about 5 min)
         timeout 200 python3 bench/check_prefill_pair.py --cal > "$O/check.log" 2>&1; tail -11 "$O/check.log" | cut -c1-250
         timeout ${LIMIT:-200} python3 bench/prefill_profile.py --kv fp16 auto:5 turbo:4 fp16 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| |host build|Error" "$O/prefill.log" | head -10 | cut -c1-300
         timeout ${LIMIT2:-200} python3 bench/prefill_profile.py --skip-whole --layer-kv fp16 turbo:4 cal1:2,6 cal1:4,a8 > "$O/layer.log" 2>&1; grep -E "^\| |Error" "$O/layer.log" | cut -c1-300 ;;
  calprefill3) # after calprefill2: shared codecs across a plan's caches (`recipe.shared_codec`: the first chunk no longer builds every codec's constants again) and one-band calibrated keys beside affine values by the pair launch over the keys (`_side_alone`); the checks, the 16K prefill twice (fp16 first and last), one layer's pieces (about 6 min)
         timeout 200 python3 bench/check_prefill_pair.py --cal > "$O/check.log" 2>&1; tail -15 "$O/check.log" | cut -c1-250
         timeout ${LIMIT:-250} python3 bench/prefill_profile.py --kv fp16 auto:5 turbo:4 auto:5 fp16 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| |host build|Error" "$O/prefill.log" | head -12 | cut -c1-300
         timeout ${LIMIT2:-150} python3 bench/prefill_profile.py --skip-whole --layer-kv fp16 turbo:4 cal1:2,6 cal1:4,a8 > "$O/layer.log" 2>&1; grep -E "^\| |Error" "$O/layer.log" | cut -c1-300 ;;
  gemmaprefill) # after calprefill3: the 16K prefill on Gemma 3 1B's and 270M's shapes (outlier bands, sliding-window rings), fp16 first and last, each chunk's host build (about 5 min)
         for sh in gemma-3-1b gemma-3-270m; do timeout ${LIMIT:-170} python3 bench/prefill_profile.py --shape $sh --kv fp16 auto:5 turbo:4 fp16 --skip-layer > "$O/$sh.log" 2>&1
           echo "== $sh"; grep -E "^\| [a-z]|host build|Error" "$O/$sh.log" | head -8 | cut -c1-300; done ;;
  calprefill4) # after calprefill3: a calibrated side's scales and mean undone inside the pair decode launch (`_DP_SIDE`'s CAL), no second pass; the checks (cut at 100 s), then the 16K prefill, fp16 / auto:5 twice each, alternating (about 4 min)
         timeout 100 python3 bench/check_prefill_pair.py --cal > "$O/check.log" 2>&1; tail -15 "$O/check.log" | cut -c1-250
         timeout ${LIMIT:-130} python3 bench/prefill_profile.py --kv fp16 auto:5 fp16 auto:5 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| |host build|Error|Warning" "$O/prefill.log" | head -12 | cut -c1-300 ;;
  prefill5) # the in-kernel calibration of calprefill4 timed: the 16K prefill, Llama-3.2-1B's shape, fp16 / auto:5 / turbo:4 / fp16 / auto:5; then Gemma 3 1B's shape, fp16 / auto:5 / fp16 (about 9 min on a fresh start: the first process compiles every kernel)
         timeout ${LIMIT:-300} python3 bench/prefill_profile.py --kv fp16 auto:5 turbo:4 fp16 auto:5 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| |host build|Error|Warning|reference" "$O/prefill.log" | head -14 | cut -c1-300
         timeout ${LIMIT2:-240} python3 bench/prefill_profile.py --shape gemma-3-1b --kv fp16 auto:5 fp16 --skip-layer > "$O/gemma1b.log" 2>&1; grep -E "^\| |host build|Error|Warning|reference" "$O/gemma1b.log" | head -14 | cut -c1-300 ;;
  chunkncu) # every kernel of the last 2048-token chunk of a 16K prompt under Nsight Compute (bench/prefill_chunk_ncu.py), summed by kind, beside the chunk's wall / host build / submit without Nsight: Llama-3.2-1B's shape fp16 / auto:5 / turbo:4, Gemma 3 1B's fp16 / auto:5; then prefill_profile with the submit column (about 9 min)
         for line in "llama-3.2-1b fp16" "llama-3.2-1b auto:5" "gemma-3-1b fp16" "gemma-3-1b auto:5" "llama-3.2-1b turbo:4"; do set -- $line; f="$O/ncu_$1_$(echo $2 | tr ':/,' '___').csv"
           timeout ${T1:-110} /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_chunk_ncu.py $2 --shape $1 > "$f" 2> "${f%.csv}.err"
           grep "^#" "${f%.csv}.err" | cut -c1-250; done
         python3 bench/prefill_chunk_ncu.py --parse "$O"/ncu_*.csv | tee "$O/kernels.txt"
         timeout ${LIMIT:-200} python3 bench/prefill_profile.py --kv fp16 auto:5 turbo:4 fp16 auto:5 --skip-layer --out "$O" > "$O/prefill.log" 2>&1; grep -E "^\| [a-z]|host build|submit|Error|reference" "$O/prefill.log" | head -16 | cut -c1-300 ;;
  chunkncu2) # after chunkncu, whose auto:5 runs hit their time limit before the profiled chunk (planning inside Nsight): Llama-3.2-1B's and Gemma 3 1B's auto:5 only, longer limits (about 8 min)
         for line in "llama-3.2-1b auto:5 ${T1:-270}" "gemma-3-1b auto:5 ${T2:-200}"; do set -- $line; f="$O/ncu_$1_$(echo $2 | tr ':/,' '___').csv"
           timeout $3 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_chunk_ncu.py $2 --shape $1 > "$f" 2> "${f%.csv}.err"
           grep "^#" "${f%.csv}.err" | cut -c1-250; done
         python3 bench/prefill_chunk_ncu.py --parse "$O"/ncu_*.csv | tee "$O/kernels.txt" ;;
  calbsearch) # CAL_BSEARCH (the calibrated pair kernel's codes by a binary search, off by default): Llama-3.2-1B auto:5's last 16K-prompt chunk under Nsight Compute without / with it (the encode kernel's 63 us a layer, bench/h200_20261201i/), then the 16K prefill alternating (about 8 min on a fresh start)
         for k in "CAL_BSEARCH=False" "CAL_BSEARCH=True"; do f="$O/ncu_auto5_$(echo $k | tr '=' '_').csv"
           KVQ_KNOBS="$k" timeout ${T1:-200} /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_chunk_ncu.py auto:5 > "$f" 2> "${f%.csv}.err"
           grep "^#" "${f%.csv}.err" | cut -c1-200; done
         python3 bench/prefill_chunk_ncu.py --parse "$O"/ncu_*.csv | tee "$O/kernels.txt"
         for k in "CAL_BSEARCH=False" "CAL_BSEARCH=True" "CAL_BSEARCH=False" "CAL_BSEARCH=True"; do KVQ_KNOBS="$k" timeout ${LIMIT:-100} python3 bench/prefill_profile.py --kv fp16 auto:5 --skip-layer > "$O/prefill_$(echo $k | tr = _).log" 2>&1
           echo "== $k"; grep -E "^\| [a-z]|reference" "$O/prefill_$(echo $k | tr = _).log" | tail -2; done ;;
  prefround) # CAL_BSEARCH on (the default since 2026-12-02): the calibrated pair / ring kernels and staged tokens on the GPU (check_calibrated_cuda, check_staged_cuda, in parallel), then the 16K prefill by rounds (prefill_profile --rounds: fp16 / auto:5 / turbo:4 alternating, medians), then the same rounds with a 4,000-graph MLX graph cache (about 9 min on a fresh start)
         mkdir -p "$O/cal" "$O/staged"
         timeout ${T1:-200} python3 bench/check_calibrated_cuda.py > "$O/cal/check.log" 2>&1 &
         timeout ${T1:-200} python3 bench/check_staged_cuda.py --out "$O/staged" > "$O/staged/run.log" 2>&1; wait
         grep -E "failing|FAIL|disagree|declined|Error" "$O/cal/check.log" | cut -c1-300; grep -c "bit-equal False" "$O/cal/check.log"; grep SUMMARY "$O/staged/run.log" | cut -c1-300; grep -c "using the reference" "$O/cal/check.log" "$O/staged/run.log"
         timeout ${T2:-200} python3 bench/prefill_profile.py --kv fp16 auto:5 turbo:4 --rounds ${R:-5} --skip-layer > "$O/rounds.log" 2>&1; grep -E "^\\| [0-9m]|planned|Error|reference" "$O/rounds.log" | cut -c1-300
         MLX_CUDA_GRAPH_CACHE_SIZE=4000 timeout ${T3:-150} python3 bench/prefill_profile.py --kv fp16 auto:5 --rounds ${R:-5} --skip-layer > "$O/rounds_cache4000.log" 2>&1; grep -E "^\\| [0-9m]|Error|reference" "$O/rounds_cache4000.log" | cut -c1-300 ;;
  calwht) # CAL_WHT (off: the calibrated pair kernel's Walsh-Hadamard bands rotated by in-warp butterflies instead of the dense product; offline sm_90 31 registers against 93): its GPU checks (check_calibrated_cuda, check_staged_cuda's calibrated cases, in parallel), the last 16K-prompt chunk's kernels without / with it (Nsight Compute), then the prefill by rounds per process, without / with / without / with (about 10 min on a fresh start: run it as two calls, T=check then T=time)
         if [ "${T:-check}" = check ]; then mkdir -p "$O/cal" "$O/staged"
           KVQ_KNOBS="CAL_WHT=True" timeout ${T1:-220} python3 bench/check_calibrated_cuda.py > "$O/cal/check.log" 2>&1 &
           KVQ_KNOBS="CAL_WHT=True" timeout ${T1:-220} python3 bench/check_staged_cuda.py --cases calibrated --out "$O/staged" > "$O/staged/run.log" 2>&1; wait
           grep -E "failing|FAIL|disagree|declined|Error" "$O/cal/check.log" | cut -c1-300; grep -c "ok (" "$O/cal/check.log"; grep -c "bit-equal False" "$O/cal/check.log"; grep -c '"same_codes": false' "$O/staged/run.log"; grep -c '"same_codes": true' "$O/staged/run.log"; grep -c "using the reference" "$O/cal/check.log" "$O/staged/run.log"
           for k in "CAL_WHT=False" "CAL_WHT=True"; do f="$O/ncu_auto5_$(echo $k | tr '=' '_').csv"
             KVQ_KNOBS="$k" timeout ${T2:-150} /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_chunk_ncu.py auto:5 > "$f" 2> "${f%.csv}.err"; done
           python3 bench/prefill_chunk_ncu.py --parse "$O"/ncu_*.csv | tee "$O/kernels.txt"
         else i=0; for k in "CAL_WHT=False" "CAL_WHT=True" "CAL_WHT=False" "CAL_WHT=True"; do i=$((i + 1)); f="$O/rounds${i}_$(echo $k | tr '=' '_').log"
           KVQ_KNOBS="$k" timeout ${T3:-130} python3 bench/prefill_profile.py --kv fp16 auto:5 --rounds ${R:-3} --skip-layer > "$f" 2>&1; echo "== $k"; grep -E "^\\| (median)|Error|reference" "$f" | tail -2 | cut -c1-200; done; fi ;;
  appendrounds) # launches per layer as a lever, measured by rounds: turbo:4 with packing.APPEND (the pair kernel writes into the grown storages: 4 fewer concatenations, 8 fewer copy launches a layer) against without, in one process (SCHEME/append, SCHEME/noappend), 5 alternating rounds with fp16 first (single passes could not tell them apart on 2026-11-28: bench/h200_20261128d/); about 4 min
         timeout ${T1:-300} python3 bench/prefill_profile.py --kv fp16 turbo:4/noappend turbo:4/append --rounds ${R:-5} --skip-layer > "$O/rounds.log" 2>&1; grep -E "^\\| [0-9m]|Error|reference" "$O/rounds.log" | tail -6 | cut -c1-300 ;;
  prefab) # 2026-12-02's host changes (config texts kept by form, rings' one-step join, banded calibrated sides in _pair_prefill): check_prefill_pair --cal (calibrated prefill chunks on the GPU, the banded cases new), then the 16K prefill by rounds with .kvq_base's package (its own bench/prefill_profile.py) and this tree's, alternating processes: $SHAPE (default gemma-3-1b), --kv $KV (default fp16 auto:5), $R (3) rounds, $AB ("base new") passes; CHECK=0 skips the check
         [ "${CHECK:-1}" = 1 ] && { timeout ${T1:-200} python3 bench/check_prefill_pair.py --cal > "$O/check_cal.log" 2>&1; grep -E "prefill|failing" "$O/check_cal.log" | tail -20 | cut -c1-200; }
         i=0; for w in ${AB:-base new}; do i=$((i + 1)); S=bench/prefill_profile.py; [ $w = base ] && S=.kvq_base/bench/prefill_profile.py
           timeout ${T2:-240} python3 $S --shape ${SHAPE:-gemma-3-1b} --kv ${KV:-fp16 auto:5} --rounds ${R:-3} --skip-layer > "$O/${SHAPE:-gemma-3-1b}_${w}_$i.log" 2>&1
           echo "== $w ($i)"; grep -E "^\| (median|peak)|Error|reference" "$O/${SHAPE:-gemma-3-1b}_${w}_$i.log" | head -3 | cut -c1-200; done ;;
  calupdate) timeout 200 python3 bench/calibrated_update_cuda.py > "$O/run.log" 2>&1; cat "$O/run.log" | tail -12 ;;
  d256next) timeout ${L1:-200} python3 bench/check_staged_cuda.py --cases "calibrated 4o/5o d256" > "$O/staged.log" 2>&1; grep -c '"same_dequantized": false' "$O/staged.log"; tail -1 "$O/staged.log" | cut -c1-500
            timeout ${L2:-120} python3 bench/cal_guard_cuda.py --decode-only > "$O/decode_rows.log" 2>&1; grep decode_rows "$O/decode_rows.log"
            timeout ${L3:-200} python3 -m mlx_kvq bench --whole-model llama-3.2-1b --kv fp16 turbo:4 affine:8,4 --context 131072 --rounds 3 > "$O/whole.log" 2>&1; grep -E "^\\||^\\*" "$O/whole.log" ;;
  stage256) timeout ${LIMIT:-540} python3 bench/stage256_gemma.py --shape ${SHAPE:-gemma-3-1b} --context ${CTX:-32768} --rounds ${ROUNDS:-4} --steps 32 > "$O/run.log" 2>&1; tail -14 "$O/run.log"; grep -c "using the reference" "$O/run.log" ;;
  *) echo "unknown part $part (checks | check | steps | layer | model | ncu | variants)"; exit 2 ;;
esac
