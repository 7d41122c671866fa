"""One attention call of the embedded Gemma's first layer (a 512-token sliding window: mlx-lm's RotatingKVCache, or
mlx_kvq's QuantizedRotatingKVCache) on the CPU, per scheme and filled length: what a decode step pays per
sliding-window layer. Run it on a quiet machine (a concurrent test run scatters these timings 2-6x).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python3 bench/ring_layer_cpu.py [--kv fp16 turbo:4 auto:5] [--context 64 256 1024]
    KVQ_KNOBS="LOOKUP_COMPILE=False" ...   # knobs of the package (bench/knobs.py), e.g. the CPU decode uncompiled

Prints a markdown table: ms per call (median of --repeats, after 3 warm-up calls), float32 model.
"""
import argparse, datetime, os, platform, statistics, time
import mlx.core as mx
from knobs import apply_knobs
from mlx_kvq.models import load
from mlx_kvq.bench import bench_caches, _fill
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention

ap = argparse.ArgumentParser()
ap.add_argument('--kv', nargs='+', default=['fp16', 'turbo:4', 'auto:5'])
ap.add_argument('--context', type=int, nargs='+', default=[64, 256, 1024])
ap.add_argument('--repeats', type=int, default=15)
a = ap.parse_args()
knobs = apply_knobs()
model, _ = load(None, dtype=mx.float32)
shape = probe_kv_shapes(model)['0'][1][:3]
mx.random.seed(0)
q = mx.random.normal((1, 4, 1, shape[1]))
print(f"embedded Gemma 3 270M, layer 0 (sliding window), float32; {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
      f"MLX {mx.__version__} CPU{' + OpenBLAS' if 'openblas' in os.environ.get('LD_PRELOAD', '') else ''}; "
      f"median of {a.repeats}; {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC{'; knobs ' + ' '.join(knobs) if knobs else ''}\n")
print("| scheme | " + " | ".join(f"{n:,} tokens" for n in a.context) + " |\n| --- |" + " ---: |" * len(a.context))
for kv in a.kv:
    row = []
    for n in a.context:
        c = bench_caches(model, kv)[0]
        k, v = _fill(c, shape, n, mx.float32, 0)
        def call(): return scaled_dot_product_attention(mx.stop_gradient(q), k, v, c, scale=shape[1] ** -0.5, mask=None)
        for _ in range(3): mx.eval(call())
        ts = []
        for _ in range(a.repeats):
            t = time.perf_counter(); mx.eval(call()); ts.append(time.perf_counter() - t)
        row.append(f"{1e3 * statistics.median(ts):.3f} ms")
    print(f"| {kv} | " + " | ".join(row) + " |", flush=True)
