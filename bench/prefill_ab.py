"""One layer's prefill-chunk attention over a turbo cache, two ways side by side (GPU machine): the past decoded and
rotated back to the original space (`rotate_back`) or kept in the rotated spaces (`rotated`, what `_prefill_sdpa` does),
alternating, median of the repeats; fp16 SDPA over a float16 past of the same length for scale.

    python3 bench/prefill_ab.py [--past 14336] [--chunk 2048] [--heads 32] [--kv-heads 8] [--head-dim 64]
"""
import argparse, statistics, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import CachedSide
from mlx_kvq.turbo_codec import TurboCodec


def rotate_back(q, ks, vs, scale):
    k, v = ks.dequantize(q.dtype), vs.dequantize(q.dtype)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask='causal')


def rotated(q, ks, vs, scale): return A._prefill_sdpa(q, ks, vs, scale, 'causal', None)


def main():
    p = argparse.ArgumentParser()
    for nm, d in (("past", 14336), ("chunk", 2048), ("heads", 32), ("kv-heads", 8), ("head-dim", 64), ("bits", 4), ("reps", 15)):
        p.add_argument(f"--{nm}", type=int, default=d)
    a = p.parse_args()
    D, H, Hkv = a.head_dim, a.heads, a.kv_heads
    kc, vc = TurboCodec(a.bits), TurboCodec(a.bits, seed=1)
    L = a.past + a.chunk
    k, v = mx.random.normal((1, Hkv, L, D)).astype(mx.float16), mx.random.normal((1, Hkv, L, D)).astype(mx.float16)
    ks, vs = CachedSide(kc, parts=kc.encode(k)), CachedSide(vc, parts=vc.encode(v))
    q = mx.random.normal((1, H, a.chunk, D)).astype(mx.float16)
    mx.eval(k, v, ks.parts, vs.parts, q)
    fns = dict(fp16=lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5, mask='causal'),
               rotate_back=lambda: rotate_back(q, ks, vs, D ** -0.5), rotated=lambda: rotated(q, ks, vs, D ** -0.5))
    err = (mx.abs(fns['rotated']().astype(mx.float32) - fns['rotate_back']().astype(mx.float32)).max()).item()
    times = {n: [] for n in fns}
    for _ in range(3):
        for f in fns.values(): mx.eval(f())
    for _ in range(a.reps):
        for n, f in fns.items():
            mx.synchronize(); t = time.perf_counter(); mx.eval(f()); mx.synchronize(); times[n].append(time.perf_counter() - t)
    print(f"past {a.past} + chunk {a.chunk}, {H}/{Hkv} heads, d{D}, turbo:{a.bits}, float16; {mx.default_device()}; "
          f"max |rotated - rotate_back| {err:.2e}")
    for n, ts in times.items(): print(f"  {n:12s} {1e3 * statistics.median(ts):.3f} ms (median of {a.reps})")


if __name__ == "__main__": main()
