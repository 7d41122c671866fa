"""Every GPU kernel of one whole-model prefill chunk, per scheme, for Nsight Compute: is a compressed cache's chunk
slower because the GPU has more to do, or because the GPU waits for the host?

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
        python3 bench/prefill_chunk_ncu.py SCHEME [--shape llama-3.2-1b] [--tokens 16384] [--chunk 2048] > F.csv
    python3 bench/prefill_chunk_ncu.py --parse F.csv [G.csv ...]

`KVQ_KNOBS` applies as in the other GPU benches (e.g. `KVQ_KNOBS="CAL_BSEARCH=True"`).

A random-weight model of the named shape (float16 unless `--dtype float32`), caches of the scheme (an `auto:B` plan on seeded random token ids,
as `mlx-kvq bench` plans it); a warm pass over the whole prompt (every kernel compiled and
checked), then fresh caches: the prompt's chunks but the last evaluated one by one, then the last chunk (the longest
past) inside the profiled region (`cuProfilerStart` / `cuProfilerStop`), once (a sliding-window ring that wrapped
cannot be trimmed back for a repeat). It prints that chunk's wall time, host build and submit (without Nsight a single
sample; `prefill_profile.py` times every chunk). `--parse` sums the kernels by kind: mlx_kvq's own, MLX's SDPA,
matmuls (GEMM), copies / concatenations, the rest."""
import argparse, csv, ctypes, sys, time
from collections import defaultdict
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def kind(name):
    n = name.lower()
    if 'mlx_kvq' in n: return 'mlx_kvq ' + name.split('mlx_kvq_')[-1].split('_')[0]
    if 'sdpa' in n or 'attention' in n or 'flash' in n: return 'sdpa'
    if 'gemm' in n or 'matmul' in n or 'cutlass' in n or 'sm90' in n or 'xmma' in n: return 'gemm'
    if 'copy' in n or 'concat' in n or 'slice' in n: return 'copy'
    return 'other'


def parse(files):
    for f in files:
        rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
        if not rows: print(f"{f}: no kernels"); continue
        h = rows[0]; ki, vi, ui = h.index('Kernel Name'), h.index('Metric Value'), h.index('Metric Unit')
        unit = {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}
        ks = [(r[ki], float(r[vi].replace(',', '')) * unit.get(r[ui], 1.0)) for r in rows[1:]]
        by = defaultdict(lambda: [0, 0.0])
        for n, d in ks: by[kind(n)][0] += 1; by[kind(n)][1] += d
        print(f"## {Path(f).stem}: {len(ks)} kernels, {sum(d for _, d in ks) / 1e3:.2f} ms")
        for k, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1]): print(f"  {k:28s} {c:5d} kernels {d / 1e3:8.3f} ms")


def main():
    p = argparse.ArgumentParser()
    p.add_argument('scheme'); p.add_argument('--shape', default='llama-3.2-1b')
    p.add_argument('--tokens', type=int, default=16384); p.add_argument('--chunk', type=int, default=2048)
    p.add_argument('--dtype', default='float16', choices=['float16', 'float32'])
    a = p.parse_args()
    from mlx_kvq.bench import shape_model, bench_caches, _bench_scheme, bench_calibration, planned_labels
    from mlx_kvq.integrate import install
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from knobs import apply_knobs
    apply_knobs()   # KVQ_KNOBS, as the other GPU benches
    install()
    try: cuda = ctypes.CDLL("libcuda.so.1")
    except OSError: cuda = None
    model = shape_model(a.shape, getattr(mx, a.dtype))
    calib = bench_calibration(model, [a.scheme], None, 0)[0]
    prompt = mx.random.randint(0, 1000, (1, a.tokens), key=mx.random.key(3))
    last = a.tokens - a.chunk
    def chunks(cache, upto):
        for s in range(0, upto, a.chunk): mx.eval(model(prompt[:, s:s + a.chunk], cache=cache), [c.state for c in cache])
    chunks(bench_caches(model, _bench_scheme(a.scheme), **calib), a.tokens)   # a warm pass: every kernel compiled and checked
    cache = bench_caches(model, _bench_scheme(a.scheme), **calib)             # (no trim and repeat: a wrapped ring cannot be trimmed)
    print(f"# {a.scheme}: caches made ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
    chunks(cache, last)
    x = prompt[:, last:]
    if cuda: cuda.cuProfilerStart()
    t0 = time.perf_counter(); y = model(x, cache=cache); t1 = time.perf_counter()
    mx.async_eval(y, [c.state for c in cache]); t2 = time.perf_counter()
    mx.eval(y, [c.state for c in cache]); mx.synchronize(); t3 = time.perf_counter()
    if cuda: cuda.cuProfilerStop()
    print(f"# {a.scheme} ({planned_labels(cache) or 'one codec'}): last chunk (past {last}) wall {1e3 * (t3 - t0):.2f} ms, host build "
          f"{1e3 * (t1 - t0):.2f}, submit {1e3 * (t2 - t1):.2f} (one pass; under Nsight these are Nsight's, not the chunk's)", file=sys.stderr, flush=True)

if __name__ == '__main__':
    if sys.argv[1] == '--parse': parse(sys.argv[2:])
    else: main()
