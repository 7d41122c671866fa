"""On the GPU itself: `calibrated.calibrated_encode_pair` (a calibrated pair's update, the codecs `auto:B` plans, quantized
by one launch) against each side's own encode, over the structures `auto:B` makes (an outlier band of 32 channels or
none, widths 3-7, head dims 64-256), dtypes and row counts (a decode token per head, a prefill chunk); the ring kernel
(`calibrated_into_pair`, a decode token into a full sliding-window ring) against the reference written into the ring,
and sliding-window caches on it against the same caches writing each side's encode into slices; then what a
decode step's update costs the host and the GPU per layer with it and without it (`CUDA_PAIR`), in sliding-window
rings and growing caches of Gemma's head shape.

    python3 bench/check_calibrated_cuda.py [--layers 22] [--steps 24] [--rounds 3]   # 'N failing' at the end"""
import argparse, statistics, sys, time, warnings
from pathlib import Path
import numpy as np
import mlx.core as mx
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq import calibrated as Cal
from mlx_kvq.calibrated import CalibratedTurboCodec
from mlx_kvq.packing import kernel_backend, unpack
from mlx_kvq.kvsplit import QuantizedRotatingKVCache
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.bench import _fill

ap = argparse.ArgumentParser()
ap.add_argument('--layers', type=int, default=22); ap.add_argument('--steps', type=int, default=24); ap.add_argument('--rounds', type=int, default=3)
a = ap.parse_args()
sys.path.insert(0, str(Path(__file__).resolve().parent))
from knobs import apply_knobs
knobs = apply_knobs()   # KVQ_KNOBS (e.g. "CAL_WHT=True"), before the first launch
if knobs: print('# knobs', *knobs)


def codec(bits, D, outliers, seed):
    r = np.random.default_rng(seed)
    o = sorted(r.choice(D, outliers, replace=False).tolist()) if outliers else None
    return CalibratedTurboCodec(bits, seed=seed, mean=(r.normal(size=D) * 0.1).tolist(), scale=r.uniform(0.5, 2.0, D).tolist(),
                                outliers=o, outlier_bits=bits + 1 if outliers else None, dim=D)


print(f"backend {kernel_backend()}, MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
warnings.simplefilter('error')
bad = 0
for (kb, ko), (vb, vo), D in [((5, 32), (5, 0), 256), ((6, 32), (5, 0), 256), ((5, 0), (6, 0), 256), ((4, 32), (3, 32), 256),
                              ((5, 8), (4, 0), 64), ((3, 16), (7, 0), 128), ((6, 0), (5, 0), 128)]:
    kc, vc = codec(kb, D, ko, 0), codec(vb, D, vo, 1)
    for dt in (mx.float16, mx.bfloat16, mx.float32):
        res = []
        for shape in ((1, 1, 1, D), (1, 8, 1, D), (1, 1, 2048, D)):
            xk = (mx.random.normal(shape, key=mx.random.key(kb + D)) * 2).astype(dt); xv = mx.random.normal(shape, key=mx.random.key(vb + D + 1)).astype(dt)
            try:
                got = Cal.calibrated_encode_pair(kc, xk, vc, xv)
                ref = (kc._encode(xk), vc._encode(xv))
                why = 'declined' if got is None else Cal._cal_agree(got, ref, kc, xk, vc, xv)
                ok = why is None and Cal._CALGUARD['cuda'].state.get(Cal._cal_class(kc, xk, vc, xv)) is True
                exact = got is not None and all(mx.array_equal(x, y).item() for x, y in zip((*got[0], *got[1]), (*ref[0], *ref[1])))
                res.append(f"{shape[1] * shape[2]} rows: {'ok' if ok else why} (bit-equal {exact})")
            except Exception as e: ok = False; res.append(f"{shape}: {repr(e)[:200]}")
            bad += not ok
        print(f"calibrated pair k {kb}b/{ko} outliers, v {vb}b/{vo}, d{D} {dt}: " + "; ".join(res))
for (kb, ko), (vb, vo), D in [((5, 32), (5, 0), 256), ((4, 32), (3, 32), 256), ((5, 8), (4, 0), 64), ((6, 0), (5, 0), 128)]:
    kc, vc = codec(kb, D, ko, 0), codec(vb, D, vo, 1)      # a decode token into a full ring (`calibrated_into_pair`)
    old_k = kc._encode(mx.random.normal((2, 4, 512, D), key=mx.random.key(3))); old_v = vc._encode(mx.random.normal((2, 4, 512, D), key=mx.random.key(4)))
    for dt in (mx.float16, mx.bfloat16, mx.float32):
        res = []
        for n, pos in ((1, 0), (1, 300), (1, 511), (3, 17)):
            xk = (mx.random.normal((2, 4, n, D), key=mx.random.key(pos + 5)) * 2).astype(dt); xv = mx.random.normal((2, 4, n, D), key=mx.random.key(pos + 6)).astype(dt)
            args = (kc, old_k, old_v, pos, xk, vc, xv)
            try:
                got = Cal.calibrated_into_pair(*args)
                ref = Cal._cal_into_reference(*args)
                why = 'declined' if got is None else Cal._cal_into_agree(got, ref, *args)
                ok = why is None and Cal._CALIGUARD['into'].state.get(Cal._cal_into_class(*args)) is True
                exact = got is not None and all(mx.array_equal(x, y).item() for x, y in zip((*got[0], *got[1]), (*ref[0], *ref[1])))
                res.append(f"slot {pos}: {'ok' if ok else why} (bit-equal {exact})")
            except Exception as e: ok = False; res.append(f"slot {pos}: {repr(e)[:200]}")
            bad += not ok
        print(f"calibrated ring write k {kb}b/{ko} outliers, v {vb}b/{vo}, d{D} {dt}: " + "; ".join(res))
from mlx_kvq.codecs import CachedSide, codec_attention
for (kb, ko), (vb, vo), D, dt in [((5, 32), (5, 0), 256, mx.float16), ((5, 8), (4, 0), 64, mx.bfloat16), ((6, 0), (5, 0), 128, mx.float32)]:
    kc, vc = codec(kb, D, ko, 0), codec(vb, D, vo, 1)      # sliding-window caches: the ring kernel and its held launch against each side's encode into slices
    make = lambda: QuantizedRotatingKVCache(64, 0, kc, vc)
    h = lambda L, key: mx.random.normal((1, 2, L, D), key=mx.random.key(key)).astype(dt)
    ring, sliced, same, held, worst = make(), make(), 0, 0, 0.0
    for i in range(150):
        k, v = (h(40, 0), h(40, 1)) if i == 0 else (h(1, 2 * i), h(1, 2 * i + 1))
        a_ = ring.update_and_fetch(k, v)
        held += ring.__dict__.get('_ringw') is not None
        Cal.CUDA_PAIR = False; b_ = sliced.update_and_fetch(k, v); Cal.CUDA_PAIR = True
        same += all(x.shape == y.shape and mx.array_equal(x, y).item() for x, y in zip((*a_[0], *a_[1]), (*b_[0], *b_[1])))
        if i:
            q = mx.random.normal((1, 8, 1, D), key=mx.random.key(1000 + i)).astype(dt)
            out = ring.attend(q, *a_, scale=D ** -0.5)
            ref = codec_attention(q.astype(mx.float32), CachedSide(kc, parts=tuple(a_[0])), CachedSide(vc, parts=tuple(a_[1])), scale=D ** -0.5)
            worst = max(worst, mx.abs(out.astype(mx.float32) - ref).max().item() / mx.abs(ref).max().item())
    ok = held >= 100 and worst <= (1e-5 if dt == mx.float32 else 2e-3 if dt == mx.float16 else 1.6e-2)
    bad += not ok
    print(f"calibrated ring cache k {kb}b/{ko}, v {vb}b/{vo}, d{D} {dt}: 150 steps, bit-equal to each side's encode into slices at {same}, "
          f"held write on {held} steps, attention vs reference {worst:.2e} {'ok' if ok else 'FAIL'}")
print(f"{bad} failing", flush=True)
warnings.simplefilter('default')

# a decode step's update per layer: 22 rings (window 512) or growing caches at 4K, 4 query / 1 KV head, d256, float16
dt = mx.float16
kc, vc = codec(5, 256, 32, 0), codec(5, 256, 0, 1)
toks = [(mx.random.normal((1, 1, 1, 256)).astype(dt), mx.random.normal((1, 1, 1, 256)).astype(dt)) for _ in range(8)]
def caches(kind):
    out = []
    for i in range(a.layers):
        c = QuantizedRotatingKVCache(512, 0, kc, vc) if kind == 'ring' else CodecKVCache(kc, vc)
        _fill(c, (1, 256, 256), 1031 if kind == 'ring' else 4096, dt, 7919 * i)
        out.append(c)
    return out
def timed(cs, on, n):
    Cal.CUDA_PAIR = on
    b = s = w = 0.0
    for j in range(n):
        k, v = toks[j % len(toks)]
        t0 = time.perf_counter(); outs = [p for c in cs for side in c.update_and_fetch(k, v) for p in (side if isinstance(side, tuple) else getattr(side, 'parts', ()) or ())]
        outs = outs or [p for c in cs for p in (*c.keys, *c.values)]
        t1 = time.perf_counter(); mx.async_eval(outs)
        t2 = time.perf_counter(); mx.eval(outs)
        t3 = time.perf_counter(); b += t1 - t0; s += t2 - t1; w += t3 - t2
    Cal.CUDA_PAIR = True
    return [1e6 * x / (n * a.layers) for x in (b, s, w)]
rows = [(kind, on) for kind in ('ring', 'growing') for on in (True, False)]
sets = {r: caches(r[0]) for r in rows}
for r in rows: timed(sets[r], r[1], 4)
res = {r: [] for r in rows}
for rd in range(a.rounds):
    for r in (rows if rd % 2 == 0 else rows[::-1]): res[r].append(timed(sets[r], r[1], a.steps))
print(f"\n# a decode token's update per layer ({a.layers} layers, 1 KV head, d256, keys 5 bits + 32 outlier channels at 6, values 5 bits), us, medians of {a.rounds} rounds x {a.steps} steps")
print("| caches | pair kernel | build | submit | wait | build + submit |\n| --- | --- | ---: | ---: | ---: | ---: |")
for r in rows:
    m = [statistics.median(x[i] for x in res[r]) for i in range(3)]
    print(f"| {r[0]} | {'on' if r[1] else 'off'} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.1f} | {m[0] + m[1]:.1f} |")
sys.exit(1 if bad else 0)
