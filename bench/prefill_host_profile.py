"""Where a prefill chunk's host build goes on the machine that runs it (on a GPU: the real CUDA path, real kernels):
a cProfile of the model's graph build (`model(chunk, cache)`, not MLX's submission) over the chunks of a prompt after a
warm pass, per scheme.

    python3 bench/prefill_host_profile.py [--shape gemma-3-1b] [--kv fp16 auto:5] [--tokens 16384] [--chunk 2048] [--top 25]

Prints, per scheme, the build's ms a chunk (median, without the profiler, chunks 2..), then with the profiler: the
functions with the most own time and mlx_kvq's / mlx-lm's cache functions by cumulative time, us a chunk."""
import argparse, cProfile, pstats, statistics as st, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.bench import shape_model, bench_caches, _bench_scheme, bench_calibration, planned_labels
from mlx_kvq.integrate import install


def passes(model, kv, T, C, prof=None):
    prompt = mx.random.randint(0, 1000, (1, T), key=mx.random.key(1))
    calib = bench_calibration(model, [kv], None, 0)[0]
    out = []
    for p in range(3):
        cache = bench_caches(model, _bench_scheme(kv), **calib)
        build = []
        for s in range(0, T, C):
            on = prof is not None and p == 2 and s
            if on: prof.enable()
            t = time.perf_counter(); y = model(prompt[:, s:s + C], cache=cache); build.append(1e3 * (time.perf_counter() - t))
            if on: prof.disable()
            mx.eval(y, [c.state for c in cache])
        out.append(build[1:])
    return out, planned_labels(cache)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--shape', default='gemma-3-1b')
    p.add_argument('--kv', nargs='+', default=['fp16', 'auto:5'])
    p.add_argument('--tokens', type=int, default=16384)
    p.add_argument('--chunk', type=int, default=2048)
    p.add_argument('--top', type=int, default=25)
    p.add_argument('--dtype', default='float16', choices=['float16', 'float32'])
    a = p.parse_args()
    install()
    model = shape_model(a.shape, getattr(mx, a.dtype))
    n = a.tokens // a.chunk - 1
    print(f"# prefill host build profile: {a.shape}, {a.tokens} tokens in chunks of {a.chunk}, {mx.default_device()}, MLX {mx.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    for kv in a.kv:
        pr = cProfile.Profile()
        (w, plain, profiled), plan = passes(model, kv, a.tokens, a.chunk, pr)
        print(f"\n## {kv}{f' (planned: {plan})' if plan else ''}\nbuild ms a chunk: {st.median(plain):.2f} (no profiler), {st.median(profiled):.2f} (profiled)")
        stats = pstats.Stats(pr).stats
        rows = sorted(stats.items(), key=lambda kv_: -kv_[1][2])[:a.top]
        print("own us a chunk | cum us a chunk | calls a chunk | function")
        for (f, l, fn), (cc, nc, tt, ct, _) in rows:
            print(f"{1e6 * tt / n:9.1f} | {1e6 * ct / n:9.1f} | {nc / n:6.1f} | {Path(f).name}:{l}({fn})")
        print("-- mlx_kvq / mlx-lm cache functions by cumulative time")
        rows = [r for r in sorted(stats.items(), key=lambda kv_: -kv_[1][3]) if 'mlx_kvq' in r[0][0] or r[0][0].endswith('cache.py')][:a.top]
        for (f, l, fn), (cc, nc, tt, ct, _) in rows:
            print(f"{1e6 * tt / n:9.1f} | {1e6 * ct / n:9.1f} | {nc / n:6.1f} | {Path(f).name}:{l}({fn})")
        sys.stdout.flush()


if __name__ == '__main__':
    main()
