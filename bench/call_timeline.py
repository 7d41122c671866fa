"""Every GPU kernel of one attention call, as the bench times it, for Nsight Compute / Nsight Systems (GPU machine):

    ncu --profile-from-start off --section SpeedOfLight python3 bench/call_timeline.py auto:5 turbo:4 --context 131072
    nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat -o OUT python3 bench/call_timeline.py ...

One layer of the bench's shape (`--heads 4 --kv-heads 1 --head-dim 256`, Gemma's, by default), caches built and filled as
`mlx-kvq bench` does (`bench_caches`, `_fill`, an `auto:B` plan on seeded random ids), three warm-up evaluations, then for each
scheme one profiled region (`cuProfilerStart` / `cuProfilerStop`) holding `--evals` evaluations of `--calls` calls each. It
prints each region's wall time per call, so the profile's kernels can be set against what the bench reports."""
import argparse, ctypes, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.bench import bench_caches, _bench_scheme, layer_model, bench_calibration, _fill
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention

p = argparse.ArgumentParser()
p.add_argument("schemes", nargs="+")
p.add_argument("--context", type=int, default=131072)
p.add_argument("--heads", type=int, default=4); p.add_argument("--kv-heads", type=int, default=1); p.add_argument("--head-dim", type=int, default=256)
p.add_argument("--calls", type=int, default=8); p.add_argument("--evals", type=int, default=2)
a = p.parse_args()
from mlx_kvq.cli import CliError
for s in a.schemes:                              # a bad scheme fails before any cache is filled
    try: _bench_scheme(s)
    except (CliError, ValueError) as e: p.error(str(e))
try: cuda = ctypes.CDLL("libcuda.so.1")
except OSError: cuda = None                      # no GPU driver here: the regions are only timed
subject = layer_model(a.heads, a.kv_heads, a.head_dim)
shapes = probe_kv_shapes(subject)
(i, shp), = [(int(k), s[:3]) for k, (_, s) in shapes.items() if s is not None and k.isdigit()][:1]
dt = mx.float16 if mx.default_device() == mx.gpu else mx.float32
qs = [mx.random.normal((1, a.heads, 1, a.head_dim)).astype(dt) for _ in range(a.calls)]; mx.eval(qs)
for s in a.schemes:
    sch = _bench_scheme(s)
    cache = bench_caches(subject, sch, **bench_calibration(subject, [s], None, 0)[0])[i]
    kv = _fill(cache, shp, a.context, dt, 7)      # left lazy, as `mlx-kvq bench` leaves it: evaluated here, MLX CUDA took its sdpa_vector kernels for fp16 (bench/fp16_paths.py)
    def run(): return [scaled_dot_product_attention(mx.stop_gradient(q), kv[0], kv[1], cache, scale=a.head_dim ** -0.5, mask=None) for q in qs]
    for _ in range(3): mx.eval(run())
    mx.synchronize()
    if cuda: cuda.cuProfilerStart()
    t0 = time.perf_counter()
    for _ in range(a.evals): mx.eval(run())
    mx.synchronize(); t1 = time.perf_counter()
    if cuda: cuda.cuProfilerStop()
    print(f"{s} {a.context}: {1e3 * (t1 - t0) / (a.evals * a.calls):.3f} ms per call (profiled region, {a.evals} x {a.calls} calls)", flush=True)
    del kv, cache
