"""Independent attention calls of one configuration evaluated together (as `mlx-kvq bench` makes them, and as a CUDA graph
may run side by side since the launchers keep a ring of `attention.RING` counter sets), each checked against the
reference attention over the same stored codes, on the GPU. Every call must come from the memoized folded launcher
(`attention._fast_final`), which this script confirms, and the calls are more than RING per evaluation, so later ones
start from counters an earlier call of the same evaluation returned.

    python3 bench/check_ring_cuda.py [--calls 12]
"""
import argparse, sys, time, warnings
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import AffineCodec, codec_attention
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turboquant import TurboQuantKVCache
from calcodecs import calibrated_pair   # bench/calcodecs.py
from knobs import apply_knobs; apply_knobs()   # KVQ_KNOBS="NAME=VALUE ..." (bench/knobs.py)

CACHES = {'turbo:4': lambda D: TurboQuantKVCache(4, 4), 'affine:4': lambda D: CodecKVCache(AffineCodec(4), AffineCodec(4)),
          'affine:8,4': lambda D: CodecKVCache(AffineCodec(8), AffineCodec(4)),
          'calibrated 5o/4o': lambda D: CodecKVCache(*calibrated_pair(5, 4, D))}
SHAPES = [(1, 8, 4, 128, 4096), (1, 8, 4, 128, 32768), (1, 1, 4, 256, 4096), (2, 2, 4, 128, 3000)]   # (B, Hkv, G, D, tokens)


def run(scheme, B, Hkv, G, D, n, calls, dtype=mx.float16, seed=0):
    served = []
    orig = A._fast_final
    A._fast_final = lambda *a: served.append(orig(*a)) or served[-1]
    try:
        mx.random.seed(seed)
        c = CACHES[scheme](D)
        k, v = c.update_and_fetch(mx.random.normal((B, Hkv, n, D)).astype(dtype), mx.random.normal((B, Hkv, n, D)).astype(dtype))
        mx.eval(k.parts, v.parts)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2): mx.eval(c.attend(mx.random.normal((B, Hkv * G, 1, D)).astype(dtype), k, v, scale=D ** -0.5))   # first-use checks
            served.clear()
            qs = [mx.random.normal((B, Hkv * G, 1, D)).astype(dtype) for _ in range(calls)]
            mx.eval(qs)
            outs = [c.attend(q, k, v, scale=D ** -0.5) for q in qs]
            mx.eval(outs)   # one evaluation: the calls independent of each other
        fast = sum(x is not None for x in served)
        errs = [(mx.abs(o.astype(mx.float32) - r).max() / mx.abs(r).max()).item()
                for o, r in zip(outs, (codec_attention(q.astype(mx.float32), k, v, scale=D ** -0.5) for q in qs))]
        return max(errs), fast, [str(w.message)[:200] for w in caught]
    finally:
        A._fast_final = orig


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--calls', type=int, default=12)
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, MLX {mx.__version__}, RING {A.RING}, {a.calls} calls an evaluation", flush=True)
    bad = total = 0
    for scheme in CACHES:
        for B, Hkv, G, D, n in SHAPES:
            if scheme.startswith('affine') and D % 64: continue
            err, fast, warns = run(scheme, B, Hkv, G, D, n, a.calls)
            ok = err <= 2e-3 and fast == a.calls and not any('reference' in w for w in warns)
            total += 1; bad += not ok
            print(f"{scheme} B{B} Hkv{Hkv} G{G} D{D} n{n}: worst {err:.2e} vs codec_attention (float32), {fast}/{a.calls} calls by the launcher"
                  f" {'ok' if ok else 'FAIL'} {warns[:2]}", flush=True)
    print(f"SUMMARY {total - bad}/{total} configurations right", flush=True)
