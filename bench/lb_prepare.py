"""Offline checks of the knob sets `bash bench/gpu_round.sh lbpark` / `lbnomerge` time on a GPU (`bench/lb_experiment.sh`):
for each, the folded decode kernel of the issue's shape at 131K compiled by NVRTC + ptxas for sm_90 (registers, bytes
spilled, shared memory static + dynamic against what 5 blocks an SM may hold), the call's blocks and chunks a row, and
the kernel run on the emulator (`tests/kernel_emulator.py`: the real source compiled as C++) over 3,000 tokens in chunks
of the same length, 2 a block, against the float32 reference, unmasked and masked.

    pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12   # no GPU needed
    python3 bench/lb_prepare.py        # about 2 minutes on 2 cores"""
import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / 'bench'), str(ROOT / 'tests')]
import cuda_registers as CR
import kernel_emulator as E
from mlx_kvq import attention_kernels as AK
from mlx_kvq.attention import side_plan, _finish_kind
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec

SETS = {'turbo:4': ["PARK=True LB=5 CH_MAX=800 WAVE=660 PF=1 REP=8", "PARK=True LB=5 CH_MAX=800 WAVE=660 PF=2 REP=8",
                    "BMERGE=False LB=5 CH_MAX=800 WAVE=660 PF=1 REP=16", "BMERGE=False LB=5 CH_MAX=800 WAVE=660 PF=2 REP=16"],
        'affine:4': ["PARK=True LB=5 CH_MAX=800 WAVE=660 PF=1 REP=1", "PARK=True LB=5 CH_MAX=800 WAVE=660 PF=2 REP=1",
                     "BMERGE=False LB=5 CH_MAX=800 WAVE=660 PF=1 REP=1", "BMERGE=False LB=5 CH_MAX=800 WAVE=660 PF=2 REP=1"]}
CODECS = {'turbo:4': (TurboCodec(4), TurboCodec(4, seed=1)), 'affine:4': (AffineCodec(4), AffineCodec(4))}

def knobs(text):
    "Set the knobs of `text` (NAME=VALUE ...) on attention_kernels; returns the values they replaced"
    old = {}
    for kv in text.split():
        k, v = kv.split('='); old[k] = getattr(AK, k); setattr(AK, k, eval(v))
    return old

if __name__ == '__main__':
    for name, sets in SETS.items():
        kc, vc = CODECS[name]
        kp, vp = side_plan(kc, 128), side_plan(vc, 128)
        for st in sets:
            old = knobs(st)
            try:
                src = AK._decode_source(kp, vp, 4, 'cuda', _finish_kind(kp), fold=_finish_kind(vp))
                (regs, spill, smem), _ = CR.compile_decode(kp, vp, 4, True, mask='int32_t')
                tot = smem + AK.dynamic_shared_bytes(src)
                S = -(-131072 // AK._chunk(131072, 8, 4))
                line = (f"{name} {st}: {regs} registers, {spill} bytes spilled, {tot} shared bytes (5 an SM: {tot <= AK.SM_SHARED // 5 - 1024}), "
                        f"{8 * AK._grid_x(S, kp, vp, 4, 'cuda', R=8)} blocks, {S} chunks a row")
                more = knobs("BLOCKS=1 LPCH_MIN=0 LPCH=2")   # the emulated call: 3,000 tokens in chunks of CH_MAX, 2 a block
                try:
                    errs = [E.check_final(kc, vc, 1, 2, 4, 128, 3000, m, fold=True) for m in (False, True)]
                finally:
                    for k, v in more.items(): setattr(AK, k, v)
                ok = max(errs) <= E.final_tolerance(kc, vc, 4, 128)
                print(line + f"; emulated error {errs[0]:.2e} / {errs[1]:.2e} (masked) {'ok' if ok else 'FAILING'}", flush=True)
            finally:
                for k, v in old.items(): setattr(AK, k, v)
