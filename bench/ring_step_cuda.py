"""What one decode step of a sliding-window (rotating) layer costs the host and the GPU, per scheme and by piece, on a
model's worth of layers: `--layers` independent full rings (window `--window`, Gemma-3's shape: 4 query / 1 KV head,
head dim 256) each taking one token and attending, all evaluated together, as a decode step evaluates its layers.

    python3 bench/ring_step_cuda.py [--layers 22] [--window 512] [--steps 40] [--rounds 3]

Rows: `fp16` (mlx-lm's RotatingKVCache + mx.fast SDPA), and per quantized scheme the whole layer step
(`update_and_fetch` + `attend`) and its pieces alone: `encode` (the codec pair's encode of the token), `update`
(`update_and_fetch`: encode + the writes into the ring), `attend` (the attention over a ring that does not change);
`step noring` / `update noring` with `packing.RING = packing.AFFINE_RING = False` (the token by the pair kernel and slice updates, not one
`quantize_into_pair` launch).
Columns: build (Python and MLX graph building), submit (`mx.async_eval`) and wait (until the GPU is done), us per layer,
medians over rounds of `--steps` steps each."""
import argparse, statistics, sys, time
from pathlib import Path
import mlx.core as mx
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_lm.models.cache import RotatingKVCache
from mlx_kvq.bench import _fill
from mlx_kvq.kvsplit import QuantizedRotatingKVCache
from mlx_kvq.integrate import parse_scheme
from mlx_kvq.integrate import _codecs
from mlx_kvq import packing as P

ap = argparse.ArgumentParser()
ap.add_argument('--layers', type=int, default=22); ap.add_argument('--window', type=int, default=512)
ap.add_argument('--steps', type=int, default=40); ap.add_argument('--rounds', type=int, default=3)
ap.add_argument('--kv', nargs='+', default=['turbo:4', 'affine:4'])
ap.add_argument('--heads', type=int, default=4); ap.add_argument('--kv-heads', type=int, default=1); ap.add_argument('--dim', type=int, default=256)
a = ap.parse_args()
gpu = mx.default_device() == mx.gpu
dt = mx.float16 if gpu else mx.float32
H, Hq, D, W = a.kv_heads, a.heads, a.dim, a.window
scale = D ** -0.5

def rings(kv):
    out = []
    for i in range(a.layers):
        if kv == 'fp16': c = RotatingKVCache(max_size=W)
        else:
            kc, vc = _codecs(parse_scheme(kv), 64, 0, 1)
            c = QuantizedRotatingKVCache(W, 0, kc, vc)
        _fill(c, (H, D, D), 2 * W + 7, dt, 7919 * i)        # wrapped: a full ring, writes in place
        out.append(c)
    return out

toks = [(mx.random.normal((1, H, 1, D)).astype(dt), mx.random.normal((1, H, 1, D)).astype(dt), mx.random.normal((1, Hq, 1, D)).astype(dt))
        for _ in range(8)]
mx.eval(toks)

def step_fn(kv, piece, cs):
    def layer(c, j):
        k, v, q = toks[j % len(toks)]
        if kv == 'fp16':
            if piece == 'attend': kk, vv = c.keys, c.values
            else: kk, vv = c.update_and_fetch(k, v)
            if piece == 'update': return [kk, vv]
            return [mx.fast.scaled_dot_product_attention(q, kk, vv, scale=scale)]
        if piece == 'encode': return [x for side in c.k_codec.encode_pair(c.v_codec, k, v) for x in side]
        if piece == 'attend': kk, vv = c.keys, c.values
        else: kk, vv = c.update_and_fetch(k, v)
        if piece == 'update': return list(kk) + list(vv)
        return [c.attend(q, kk, vv, scale=scale)]
    def step(j): return [x for c in cs for x in layer(c, j)]
    return step

def timed(step, n, ring=True):
    P.RING = P.AFFINE_RING = ring                                                 # off: a ring's token by the pair kernel and slice updates
    b = s = w = 0.0
    for j in range(n):
        t0 = time.perf_counter(); outs = step(j)
        t1 = time.perf_counter(); mx.async_eval(outs)
        t2 = time.perf_counter(); mx.eval(outs)
        t3 = time.perf_counter()
        b += t1 - t0; s += t2 - t1; w += t3 - t2
    P.RING = P.AFFINE_RING = True
    return [1e6 * x / (n * a.layers) for x in (b, s, w)]

rows = [('fp16', 'step'), ('fp16', 'update'), ('fp16', 'attend')] + [(kv, p) for kv in a.kv for p in ('step', 'encode', 'update', 'attend', 'step noring', 'update noring')]
sets = {(kv, nr): rings(kv) for kv in ['fp16'] + a.kv for nr in ((False, True) if kv != 'fp16' else (False,))}   # RING off: caches of their own (a cache holds its ring launch)
fns = {r: step_fn(r[0], r[1].split()[0], sets[(r[0], 'noring' in r[1])]) for r in rows}
for r in rows: timed(fns[r], 4, 'noring' not in r[1])                                   # warm: kernels compiled, first-use checks done
res = {r: [] for r in rows}
for rd in range(a.rounds):
    for r in (rows if rd % 2 == 0 else rows[::-1]): res[r].append(timed(fns[r], a.steps, 'noring' not in r[1]))
print(f"# one decode step of {a.layers} sliding-window layers (window {W}, {Hq}/{H} heads, d{D}, {str(dt).split('.')[-1]}), "
      f"{mx.default_device()}, MLX {mx.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; us per layer, "
      f"medians of {a.rounds} rounds x {a.steps} steps")
print("| scheme | piece | build | submit | wait | build + submit |\n| --- | --- | ---: | ---: | ---: | ---: |")
for r in rows:
    m = [statistics.median(x[i] for x in res[r]) for i in range(3)]
    print(f"| {r[0]} | {r[1]} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.1f} | {m[0] + m[1]:.1f} |")
