"""Attention of mlx_kvq's quantized caches against dense attention over their own dequantized keys/values,
on whatever device MLX uses (run on the CUDA machine; see shared/gpu/README.md). Grouped-query shapes,
causal prefill and single-token decode, every affine and turbo width used by the schemes.

    python bench/check_attention_cuda.py > log
"""
import sys, platform
import mlx.core as mx
from mlx_kvq.qcache import AffineCodec, CodecKVCache
from mlx_kvq.turboquant import TurboCodec

print("device:", mx.default_device(), "mlx", mx.__version__, platform.node())
worst = 0.0
mx.random.seed(0)
codecs = {"affine:8": lambda: (AffineCodec(8), AffineCodec(8)), "affine:8,4": lambda: (AffineCodec(8), AffineCodec(4)),
          "affine:4": lambda: (AffineCodec(4), AffineCodec(4)), "turbo:4": lambda: (TurboCodec(4, seed=0), TurboCodec(4, seed=1)),
          "turbo:3": lambda: (TurboCodec(3, seed=0), TurboCodec(3, seed=1))}
for name, make in codecs.items():
    for Hq, Hkv, D in ((32, 8, 128), (8, 1, 256), (16, 16, 64)):
        for dtype in (mx.float32, mx.float16):
            c = CodecKVCache(*make())
            L = 300
            k = mx.random.normal((2, Hkv, L, D)).astype(dtype); v = mx.random.normal((2, Hkv, L, D)).astype(dtype)
            q = mx.random.normal((2, Hq, L, D)).astype(dtype)
            K, V = c.update_and_fetch(k, v)
            kd, vd = c.dequantized(dtype)
            errs = []
            for qq, mask in ((q, "causal"), (q[..., -1:, :], None)):
                got = c.attend(qq, K, V, scale=D ** -0.5, mask=mask)
                ref = mx.fast.scaled_dot_product_attention(qq.astype(mx.float32), kd.astype(mx.float32), vd.astype(mx.float32),
                                                           scale=D ** -0.5, mask=mask)
                e = (mx.abs(got.astype(mx.float32) - ref).max() / mx.abs(ref).max()).item()
                errs.append(e)
            worst = max(worst, max(errs))
            print(f"{name:11s} Hq={Hq:2d} Hkv={Hkv:2d} D={D:3d} {str(dtype):14s} prefill rel err {errs[0]:.2e}  decode {errs[1]:.2e}")
print(f"worst relative error {worst:.2e}")
sys.exit(0 if worst < 2e-2 else 1)
