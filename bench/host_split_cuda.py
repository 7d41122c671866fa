"""Where the host's time to build one attention call goes on the GPU machine: the call built through mlx_kvq's dispatcher
(as a model and `mlx-kvq bench` call it) 1000 times per scheme, then a cProfile of the same calls by own time per call
(the `cuda_kernel` call of MLX is one builtin entry: its C++ side counts there, not in mlx_kvq's functions).

    python3 bench/host_split_cuda.py [--context 4096] [--calls 1000]

One layer, 32 query / 8 KV heads, head dim 128, float16. Prints us per call."""
import argparse, cProfile, io, platform, pstats, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.bench import bench_caches, _bench_scheme, layer_model, _fill
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa

ap = argparse.ArgumentParser(); ap.add_argument('--context', type=int, default=4096); ap.add_argument('--calls', type=int, default=1000)
a = ap.parse_args()
print(f"# host build per attention call through the dispatcher; {a.context} tokens, {a.calls} calls; {platform.node()}, "
      f"MLX {mx.__version__} {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
m = layer_model(32, 8, 128); shp = probe_kv_shapes(m)['0'][1][:3]
q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
for kv in ('fp16', 'turbo:4', 'affine:4'):
    c = bench_caches(m, _bench_scheme(kv))[0]; k, v = _fill(c, shp, a.context, mx.float16, 0)
    f = lambda: sdpa(mx.stop_gradient(q), k, v, c, scale=128 ** -0.5, mask=None)
    for _ in range(5): mx.eval(f())
    ts = []
    for _ in range(5):
        t = time.perf_counter(); keep = [f() for _ in range(a.calls)]; ts.append((time.perf_counter() - t) / a.calls * 1e6); mx.eval(keep); del keep
    print(f"{kv}: build us per call, 5 runs: {' '.join(f'{x:.1f}' for x in ts)}")
    pr = cProfile.Profile(); keep = []
    pr.enable()
    for _ in range(a.calls): keep.append(f())
    pr.disable(); mx.eval(keep); del keep
    st = pstats.Stats(pr).stats
    top = sorted(((v[2], f"{Path(k[0]).name}:{k[1]}({k[2]})", v[0]) for k, v in st.items()), reverse=True)[:10]
    for tt, where, n in top: print(f"   {1e6 * tt / a.calls:7.2f} us own  {where}  ({n} calls)")
