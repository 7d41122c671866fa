"""Which kernel serves fp16 decode attention, and what it costs, by how the keys and values reach MLX (GPU machine).

MLX's CUDA `scaled_dot_product_attention` takes cuDNN's flash kernel for one query token only where, when the call is
evaluated, the keys and values are slices of a cache buffer whose length is a multiple of 256 (mlx-lm's `KVCache`
step); otherwise its `sdpa_vector` kernels, which read each KV head once per query head. `bench/call_timeline.py`
(2026-11-30, issue's shape at 131K) met the second (`kernel_sdpav_2pass_1`, 847 us) where `mlx-kvq bench` reports
0.16 ms per call. This script times, for one layer (default the issue's: 32 / 8 heads, d128, float16), per call:

  bench    the keys / values `_fill` returned, left lazy until the warm-up evaluates them (what `mlx-kvq bench` does)
  evald    the same, evaluated right after the fill (what `bench/call_timeline.py` did)
  step     a decode step as mlx-lm runs it: each call writes one token (`update_and_fetch`) and attends to what that returns

for fp16 and each compressed scheme named (their `step` is the cache's own update + attention).

    python3 bench/fp16_paths.py --context 131072 --schemes turbo:4 affine:4
"""
import argparse, statistics, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.bench import bench_caches, bench_calibration, _bench_scheme, layer_model, _fill
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention

p = argparse.ArgumentParser()
p.add_argument("--context", type=int, default=131072)
p.add_argument("--schemes", nargs="*", default=["turbo:4"])
p.add_argument("--heads", type=int, default=32); p.add_argument("--kv-heads", type=int, default=8); p.add_argument("--head-dim", type=int, default=128)
p.add_argument("--calls", type=int, default=8); p.add_argument("--repeats", type=int, default=7)
a = p.parse_args()
subject = layer_model(a.heads, a.kv_heads, a.head_dim)
(i, shp), = [(int(k), s[:3]) for k, (_, s) in probe_kv_shapes(subject).items() if s is not None and k.isdigit()][:1]
dt = mx.float16 if mx.default_device() == mx.gpu else mx.float32
qs = [mx.random.normal((1, a.heads, 1, a.head_dim)).astype(dt) for _ in range(a.calls)]
new = [(mx.random.normal((1, shp[0], 1, shp[1])).astype(dt), mx.random.normal((1, shp[0], 1, shp[2])).astype(dt)) for _ in range(a.calls)]
mx.eval(qs, new)
sc = a.head_dim ** -0.5

def timed(run, warm=2):
    for _ in range(warm): mx.eval(run())
    mx.synchronize(); out = []
    for _ in range(a.repeats):
        t0 = time.perf_counter(); mx.eval(run()); out.append((time.perf_counter() - t0) / a.calls)
    return 1e3 * statistics.median(out)

print(f"layer {a.heads} / {a.kv_heads} heads, d{a.head_dim}, {str(dt).split('.')[-1]}, {a.context:,} tokens, {a.calls} calls per eval, median of {a.repeats}; {mx.default_device()}")
for s in ["fp16"] + list(a.schemes):
    res = {}
    for mode in ("bench", "evald", "step"):
        cache = bench_caches(subject, _bench_scheme(s), **bench_calibration(subject, [s], None, 0)[0])[i]   # auto:B planned as the bench plans it
        kv = _fill(cache, shp, a.context - (a.calls * (a.repeats + 2) if mode == "step" else 0), dt, 7)
        if mode == "evald": mx.eval(kv)
        if mode == "step":
            def run():
                outs = []
                for j in range(a.calls):
                    k, v = cache.update_and_fetch(*new[j])
                    outs.append(scaled_dot_product_attention(mx.stop_gradient(qs[j]), k, v, cache, scale=sc, mask=None))
                return outs
        else:
            def run(): return [scaled_dot_product_attention(mx.stop_gradient(q), kv[0], kv[1], cache, scale=sc, mask=None) for q in qs]
        res[mode] = timed(run)
        del kv, cache
    print(f"{s}: " + ", ".join(f"{m} {v:.3f} ms" for m, v in res.items()), flush=True)
