"""Where one sliding-window attention call of the embedded Gemma goes on the CPU: the full call (a full 512-token ring,
`compiled_decode`'s traced graph), that graph alone, the blockwise path untraced, and its pieces timed apart (query
preparation, scores with the keys' decode, the softmax, the weighted values with their decode, the finish, each side's
decode alone), per scheme; fp32 SDPA over the same shape for scale. Run it on a quiet machine.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python3 bench/ring_parts_cpu.py [--kv turbo:4 auto:5] [--context 1024]

ms per call, median of 50 after 5 warm-up calls, float32 model."""
import argparse, datetime, statistics, time
import mlx.core as mx
from mlx_kvq.models import load
from mlx_kvq.bench import bench_caches, _fill
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention
import mlx_kvq.attention as A
import mlx_kvq.kvsplit as KS

ap = argparse.ArgumentParser()
ap.add_argument('--kv', nargs='+', default=['turbo:4', 'auto:5'])
ap.add_argument('--context', type=int, default=1024)
a = ap.parse_args()
model, _ = load(None, dtype=mx.float32)
shape = probe_kv_shapes(model)['0'][1][:3]
mx.random.seed(0)
q = mx.random.normal((1, 4, 1, shape[1]))

def tm(f, r=50):
    for _ in range(5): mx.eval(f())
    ts = []
    for _ in range(r):
        t = time.perf_counter(); mx.eval(f()); ts.append(time.perf_counter() - t)
    return f"{1e3 * statistics.median(ts):.3f}"

seen, orig = {}, A.compiled_decode
def spy(queries, keys, values, *, scale):   # the ring's call, as the cache makes it
    seen['args'] = (queries, keys, values, scale); return orig(queries, keys, values, scale=scale)

print(f"embedded Gemma 3 270M, layer 0 (sliding window), {a.context} tokens, float32; MLX {mx.__version__} CPU; {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC\n")
print("| scheme | call | traced graph | untraced | query prep | scores | softmax | weighted values | finish | keys' decode | values' decode |")
print("| --- |" + " ---: |" * 10)
for kv in a.kv:
    c = bench_caches(model, kv)[0]
    k, v = _fill(c, shape, a.context, mx.float32, 0)
    call = lambda: scaled_dot_product_attention(mx.stop_gradient(q), k, v, c, scale=shape[1] ** -0.5, mask=None)
    KS.compiled_decode = spy
    try: whole = tm(call)
    finally: KS.compiled_decode = orig
    if 'args' not in seen: raise SystemExit(f"{kv}: the call did not take the traced path (a ring not full at {a.context} tokens?)")
    qq, ks, vs, sc = seen.pop('args')
    D = qq.shape[-1]
    kplan, vplan = A.side_plan(ks.codec, D), A.side_plan(vs.codec, D)
    q5 = (qq.astype(mx.float32) * sc).reshape(1, 1, qq.shape[1], 1, D)
    qk, _ = A._prepared_queries(kplan, q5)
    s = sum(A._band_scores(b, qb, ks.storage) for b, qb in zip(kplan.bands, qk))
    mb, lb, p = A._softmax_partial(s)
    ob = [A._band_weighted(b, p, vs.storage) for b in vplan.bands]
    mx.eval(qk, s, p, lb, ob)
    row = [whole, tm(lambda: orig(qq, ks, vs, scale=sc)),
           tm(lambda: A._final_reference(qq, kplan, vplan, ks.storage, vs.storage, None, ks.n_quantized, sc)),
           tm(lambda: A._prepared_queries(kplan, q5)[0]),
           tm(lambda: sum(A._band_scores(b, qb, ks.storage) for b, qb in zip(kplan.bands, qk))),
           tm(lambda: A._softmax_partial(s)[2]), tm(lambda: [A._band_weighted(b, p, vs.storage) for b in vplan.bands]),
           tm(lambda: A._finished(vplan, ob, lb)),
           tm(lambda: [A._decode_band(b, ks.storage, mx.float32) for b in kplan.bands]),
           tm(lambda: [A._decode_band(b, vs.storage, mx.float32) for b in vplan.bands])]
    bands = lambda pl: '+'.join(f"{b.n}x{b.bits}b" for b in pl.bands)
    print(f"| {kv} (keys {bands(kplan)}, values {bands(vplan)}) | " + " | ".join(row) + " |", flush=True)
fq, kk, vv = mx.random.normal((1, 4, 1, shape[1])), mx.random.normal((1, 1, 512, shape[1])), mx.random.normal((1, 1, 512, shape[1]))
print(f"\nfp32 `mx.fast.scaled_dot_product_attention` over 512 tokens of that shape: {tm(lambda: mx.fast.scaled_dot_product_attention(fq, kk, vv, scale=1.0))} ms")
