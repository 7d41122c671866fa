"""Offline checks of the knob sets `bash bench/gpu_round.sh lbpark` / `lbnomerge` time on a GPU (read from
`bench/lb_experiment.sh`, so the two cannot drift apart):
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
import re
import cuda_registers as CR
import kernel_emulator as E
from knobs import apply_knobs
from mlx_kvq import attention_kernels as AK
from mlx_kvq.attention import side_plan, _finish_kind
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec

CODECS = {'turbo:4': (TurboCodec(4), TurboCodec(4, seed=1)), 'affine:4': (AffineCodec(4), AffineCodec(4))}

def experiment_sets(modes=('park', 'nomerge')):
    """(scheme, knob set) of every `run` of `bench/lb_experiment.sh`'s blocks for `modes` other than the default's
    (its variables, such as P5, expanded), in order, each once: what those GPU parts will time"""
    text = (ROOT / 'bench' / 'lb_experiment.sh').read_text()
    out = []
    for mode in modes:
        m = re.search(r'= %s \]; then(.*?)\nfi' % mode, text, re.S)
        if m is None: raise SystemExit(f"bench/lb_experiment.sh has no `{mode}` block (if [ \"${{2:-}}\" = {mode} ]; then ... fi): name one of its modes")
        block = m.group(1)
        vars_ = dict(re.findall(r'^\s*(\w+)="([^"]*)"', block, re.M))
        for scheme, rest in re.findall(r'run (\S+) ([^;\n]*)', block):
            st = re.sub(r'\$(\w+)', lambda m: vars_[m.group(1)], rest).strip()
            if st != 'FB1=8' and (scheme, st) not in out: out.append((scheme, st))
    return out

def knobs(text):
    "Set the knobs of `text` (NAME=VALUE ..., `bench/knobs.py`'s); returns the values they replaced"
    old = {kv.split('=', 1)[0]: getattr(AK, kv.split('=', 1)[0]) for kv in text.split()}
    apply_knobs(text.split())
    return old

if __name__ == '__main__':
    for name, st in experiment_sets():
        kc, vc = CODECS[name]
        kp, vp = side_plan(kc, 128), side_plan(vc, 128)
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
