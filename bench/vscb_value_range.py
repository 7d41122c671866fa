"""`VSCB` (affine values' scales in the weights, `03a_attention_kernels`) against the default value loop on the CPU kernel
emulator, by the values' magnitude and the softmax's spread: the weights p * s are one half each, so where the values'
scales s are tiny (values of ~1e-5, subnormal in float16 themselves) the products' inputs lose precision.

    python3 bench/vscb_value_range.py

Folded decode kernel, keys affine:8 / values affine:4 (group 64), d128, 2 KV heads x 4 query heads, 2,000 tokens,
float16 queries; values N(0, 1) x the scale, queries N(0, 1) x the scale; max error relative to the output's scale
against the blockwise reference (`attention._final_reference`)."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tests')); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx.core as mx
import kernel_emulator as E
import mlx_kvq.attention_kernels as AK, mlx_kvq.attention as A
from mlx_kvq.codecs import AffineCodec

def err(vscale, qscale, on, n=2000, D=128, G=4):
    AK.VSCB = on
    mx.random.seed(1)
    k, v = mx.random.normal((1, 2, n, D)), mx.random.normal((1, 2, n, D)) * vscale
    q = (mx.random.normal((1, 2 * G, 1, D)) * qscale).astype(mx.float16)
    kc, vc = AffineCodec(8), AffineCodec(4)
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    kparts, vparts = kc.encode(k), vc.encode(v)
    out = E.emulate_fold(q, kp, vp, kparts, vparts, None, n, D ** -0.5, 2)
    ref = A._final_reference(q, kp, vp, kparts, vparts, None, n, D ** -0.5)
    return (mx.abs(out.astype(mx.float32) - ref.astype(mx.float32)).max() / mx.abs(ref.astype(mx.float32)).max()).item()

print("| values x | queries x | VSCB off | VSCB on |\n| ---: | ---: | ---: | ---: |")
for vs, qs in ((1.0, 1.0), (1.0, 0.2), (0.01, 1.0), (0.001, 0.2), (1e-4, 0.05), (1e-5, 0.05), (1e-5, 3.0), (30.0, 1.0), (300.0, 1.0)):
    print(f"| {vs:g} | {qs:g} | {err(vs, qs, False):.2e} | {err(vs, qs, True):.2e} |", flush=True)
