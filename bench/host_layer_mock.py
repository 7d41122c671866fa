"""The host's Python cost of one layer's decode work (cache update + attention call), per cache scheme, for the GPU code
path, measured on a machine without a GPU (this one: Linux x86_64, MLX CPU): the kernels are replaced by stand-ins
that return zero arrays (`host_build_mock.gpu_path`), so the numbers are Python + MLX graph building only, per call.

    python3 bench/host_layer_mock.py [--rounds 5] [--calls 300] [--context 2048]

Shapes: Llama-3.2-1B's attention (32 query / 8 KV heads, head dim 64) for fp16 (mlx-lm's `KVCache` + SDPA), `turbo:4`,
`affine:4`; the embedded Gemma's (4 query / 1 KV head, head dim 256) for fp16, `turbo:4` and an auto:5-like pair of
calibrated codecs (centering, per-channel scales, an outlier band: what `auto:B` plans for Gemma). Each round times
every scheme in turn (median us per call over `--calls` calls, evaluated every 32 calls outside the timing); the table
gives the median over rounds. Absolute times are this machine's; compare schemes side by side."""
import argparse, platform, statistics as st, sys, time
from pathlib import Path
import numpy as np
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import host_build_mock as H
from mlx_lm.models.cache import KVCache
from mlx_kvq.calibrated import CalibratedTurboCodec
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turbo_codec import TurboCodec


def calibrated(bits, dim, seed):
    "A calibrated codec like those `auto:B` plans: per-channel mean and scale, 1/8 of the channels in an outlier band of bits + 1"
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=dim).astype(np.float32) * 0.3
    scale = np.exp(rng.normal(size=dim) * 0.3).astype(np.float32)
    out = sorted(rng.choice(dim, dim // 8, replace=False).tolist())
    return CalibratedTurboCodec(bits, seed=seed, mean=mean, scale=scale, outliers=out, outlier_bits=min(bits + 1, 8), dim=dim)


def make(kind, D):
    if kind == 'fp16': return KVCache()
    if kind == 'turbo:4': return CodecKVCache(TurboCodec(4), TurboCodec(4, seed=1))
    if kind == 'affine:4': return CodecKVCache(AffineCodec(4), AffineCodec(4))
    return CodecKVCache(calibrated(5, D, 0), calibrated(4, D, 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--calls', type=int, default=300)
    p.add_argument('--context', type=int, default=2048)
    a = p.parse_args()
    setups = [('llama-3.2-1b', 8, 32, 64, ['fp16', 'turbo:4', 'affine:4']), ('gemma-3-270m', 1, 4, 256, ['fp16', 'turbo:4', 'auto:5-like'])]
    runs = []
    for shape, Hkv, Hq, D, kinds in setups:
        h = lambda *sh: mx.random.normal(sh).astype(mx.float16)   # a float16 model's projections
        k, v, k1, v1, q = h(1, Hkv, a.context, D), h(1, Hkv, a.context, D), h(1, Hkv, 1, D), h(1, Hkv, 1, D), h(1, Hq, 1, D)
        for kind in kinds:
            c = make(kind, D); c.update_and_fetch(k, v); mx.eval(c.state)
            runs.append((shape, kind, c, q, k1, v1, D ** -0.5))
    H.gpu_path()
    def one(c, q, k1, v1, scale):
        t0 = time.perf_counter(); kk, vv = c.update_and_fetch(k1, v1)
        t1 = time.perf_counter(); o = sdpa(q, kk, vv, c, scale=scale, mask=None)
        return t1 - t0, time.perf_counter() - t1, o
    for _, _, c, q, k1, v1, s in runs:            # first-use checks, launchers memoized
        for _ in range(3): mx.eval(one(c, q, k1, v1, s)[2]); c.trim(1)
    res = {}
    for _ in range(a.rounds):
        for shape, kind, c, q, k1, v1, s in runs:
            tu, ta, keep = [], [], []
            for i in range(a.calls):
                x, y, o = one(c, q, k1, v1, s); tu.append(x); ta.append(y); keep.append(o)
                if i % 32 == 31: mx.eval(keep); keep = []; c.trim(32)
            mx.eval(keep); c.trim(a.calls % 32)
            res.setdefault((shape, kind), []).append((1e6 * st.median(tu), 1e6 * st.median(ta)))
    print(f"# host build per layer call, GPU code path with stand-in kernels; {a.context} tokens, {a.calls} calls x {a.rounds} rounds; "
          f"{platform.system()} {platform.machine()}, MLX {mx.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| shape | scheme | update_and_fetch us | attention us | sum | vs fp16 |\n| --- | --- | ---: | ---: | ---: | ---: |")
    for shape, _, _, _, kinds in setups:
        f = None
        for kind in kinds:
            u, t = st.median(r[0] for r in res[(shape, kind)]), st.median(r[1] for r in res[(shape, kind)])
            f = f or (u + t)
            print(f"| {shape} | {kind} | {u:.1f} | {t:.1f} | {u + t:.1f} | {(u + t) / f:.2f}x |")


if __name__ == '__main__': main()
