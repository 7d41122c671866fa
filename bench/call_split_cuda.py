"""Where one attention call's time goes, as `mlx-kvq bench` times it: the host's build of the calls' graph (Python and
MLX's ops; the GPU idle), MLX's submission of the built graph (`mx.async_eval`: the host walks it and launches every
kernel), and the wait for the GPU after that, per call, for `--calls` independent calls per evaluation over the bench's
caches (one layer, `--heads` / `--kv-heads` / `--head-dim`, filled as the bench fills them).

    [KVQ_KNOBS="NAME=VALUE ..."] python3 bench/call_split_cuda.py [--context 131072] [--kv fp16 turbo:4 affine:4] [--calls 8] [--repeats 7]

build + submit + wait is the bench's ms per call (its samples time the build and `mx.eval` together). Medians over
`--repeats` samples, schemes in alternating order each repeat. On a machine without a GPU it runs the CPU path (a smoke
test; the figures are the GPU machine's)."""
import argparse, platform, statistics as st, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from knobs import apply_knobs
knobs = apply_knobs()   # KVQ_KNOBS="NAME=VALUE ..." (bench/knobs.py)
from mlx_kvq.bench import bench_caches, _bench_scheme, layer_model, _fill, _round_order
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa

ap = argparse.ArgumentParser()
ap.add_argument('--context', type=int, default=131072); ap.add_argument('--kv', nargs='+', default=['fp16', 'turbo:4', 'affine:4'])
ap.add_argument('--calls', type=int, default=8); ap.add_argument('--repeats', type=int, default=7)
ap.add_argument('--heads', type=int, default=32); ap.add_argument('--kv-heads', type=int, default=8); ap.add_argument('--head-dim', type=int, default=128)
a = ap.parse_args()
schemes = [(s, _bench_scheme(s)) for s in a.kv]          # a bad scheme fails before anything is filled
dtype = mx.float16 if mx.default_device() == mx.gpu else mx.float32
m = layer_model(a.heads, a.kv_heads, a.head_dim); shp = probe_kv_shapes(m)['0'][1][:3]
qs = [mx.random.normal((1, a.heads, 1, a.head_dim)).astype(dtype) for _ in range(a.calls)]; mx.eval(qs)
runs = {}
for name, sc in schemes:
    c = bench_caches(m, sc)[0]; k, v = _fill(c, shp, a.context, dtype, 0)
    runs[name] = lambda j, c=c, k=k, v=v: sdpa(mx.stop_gradient(qs[j]), k, v, c, scale=a.head_dim ** -0.5, mask=None)
    for _ in range(3): mx.eval([runs[name](j) for j in range(a.calls)])
res = {n: [] for n in runs}
for r in range(a.repeats):
    for name in _round_order(list(runs), r):
        f = runs[name]
        t0 = time.perf_counter(); outs = [f(j) for j in range(a.calls)]
        t1 = time.perf_counter(); mx.async_eval(outs)
        t2 = time.perf_counter(); mx.eval(outs)
        t3 = time.perf_counter(); del outs
        res[name].append(tuple(1e6 * x / a.calls for x in (t1 - t0, t2 - t1, t3 - t2)))
print(f"# one attention call split, {a.heads} / {a.kv_heads} heads, d{a.head_dim}, {a.context} tokens, {a.calls} calls per evaluation, "
      f"median of {a.repeats}; {platform.system()} {platform.machine()}, MLX {mx.__version__} {mx.default_device()}, "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{'; knobs ' + ' '.join(knobs) if knobs else ''}")
print("| scheme | build us | submit us | wait us | sum (the bench's per call) |\n| --- | ---: | ---: | ---: | ---: |")
for name in runs:
    b, s, w = (st.median(x[i] for x in res[name]) for i in range(3))
    print(f"| {name} | {b:.1f} | {s:.1f} | {w:.1f} | {st.median(sum(x) for x in res[name]):.1f} |")
