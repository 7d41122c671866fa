"""How far the float16 reference (`codec_attention` with float16 queries) is from the same attention in float32, next to
mlx_kvq's `attend`, for the case `bench/check_fused_cuda.py` once failed by 1e-5 on the GPU (turbo:6,3, batch 3 with
left padding, 2 KV heads x 4 query heads, d128, 4,100 quantized tokens between 4 exact head and 5 exact tail tokens,
attention sinks). Runs on any backend; on this CPU `attend` takes the blockwise path.

    python3 bench/fp16_reference_error.py [--seeds 4]"""
import argparse, platform, sys, time
from pathlib import Path
import mlx.core as mx
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import CachedSide, codec_attention
from mlx_kvq.turbo_codec import TurboCodec


def rel(a, b): return (mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max() / mx.abs(b.astype(mx.float32)).max()).item()


def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--seeds', type=int, default=4); a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; MLX {mx.__version__} {mx.default_device()}; {platform.machine()}; "
          f"kernel backend {A.kernel_backend()}")
    print("| seed | attend vs float16 reference | attend vs float32 reference | float16 vs float32 reference |\n| ---: | ---: | ---: | ---: |")
    B, Hkv, G, D, N, head, tail = 3, 2, 4, 128, 4100, 4, 5
    for seed in range(a.seeds):
        mx.random.seed(seed)
        kc, vc = TurboCodec(6), TurboCodec(3, seed=1)
        k, v = (mx.random.normal((B, Hkv, N + head + tail, D)).astype(mx.float16) for _ in range(2))
        q = mx.random.normal((B, Hkv * G, 1, D)).astype(mx.float16)
        side = lambda c, x: CachedSide(c, x[..., :head, :], c.encode(x[..., head:N + head, :]), x[..., N + head:, :])
        ks, vs = side(kc, k), side(vc, v)
        L = N + head + tail
        mask = (mx.arange(L)[None] >= mx.array([i * 37 for i in range(B)])[:, None]).reshape(B, 1, 1, L)
        sinks = mx.random.normal((Hkv * G,))
        kw = dict(scale=D ** -0.5, mask=mask, sinks=sinks)
        out, ref, ref32 = A.attend(q, ks, vs, **kw), codec_attention(q, ks, vs, **kw), codec_attention(q.astype(mx.float32), ks, vs, **kw)
        print(f"| {seed} | {rel(out, ref):.2e} | {rel(out, ref32):.2e} | {rel(ref, ref32):.2e} |", flush=True)


if __name__ == '__main__': main()
