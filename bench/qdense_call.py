"""One decode attention call over calibrated codecs whose keys have an outlier band ('dense' queries: auto:B's tqBcso),
with the query map in the decode kernel (`attention.CAL_QDENSE`, the default on CUDA) against the query kernel before it
(`CAL_QDENSE=False`), beside fp16 SDPA, in one process, serial calls (each on the previous call's output, as a model's
layers), alternating rounds.

    python3 bench/qdense_call.py [--shape issue|gemma] [--contexts 4096 131072] [--kinds 3,6 5,4] [--calls 8] [--repeats 5] [--rounds 3]

The codecs are `bench/calcodecs.py`'s (an outlier band of D/8 channels a side), so the comparison does not depend on
what `auto:5` plans on a given machine (on the H200 of 2026-12-02 it planned one-band keys on the issue's shape, which
prepare their queries in the kernel already). Each setting has its own codec objects, so its launcher is made, and
keeps, the setting it was made under. Timings only; the kernels are checked by `check_fused_cuda.py` and
`check_decode_steps.py`. ms per call: median of `repeats` evaluations of `calls` serial calls; the ratio to fp16 per round, its median."""
import argparse, statistics as st, sys, time
from pathlib import Path
import mlx.core as mx
sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from calcodecs import calibrated
from mlx_kvq import attention as A
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa
from mlx_lm.models.cache import KVCache

SHAPES = {'issue': (32, 8, 128), 'gemma': (4, 1, 256)}

def fill(c, Hk, D, n, dt):
    mx.random.seed(7)
    for s in range(0, n, 8192):
        m = min(8192, n - s)
        k, v = c.update_and_fetch(mx.random.normal((1, Hk, m, D)).astype(dt), mx.random.normal((1, Hk, m, D)).astype(dt))
        mx.eval(k, v)
    return k, v

def main():
    p = argparse.ArgumentParser()
    p.add_argument('--shape', default='issue', choices=sorted(SHAPES)); p.add_argument('--contexts', type=int, nargs='+', default=[4096, 131072])
    p.add_argument('--kinds', nargs='+', default=['3,6']); p.add_argument('--calls', type=int, default=8)
    p.add_argument('--repeats', type=int, default=5); p.add_argument('--rounds', type=int, default=3)
    a = p.parse_args()
    Hq, Hk, D = SHAPES[a.shape]; dt = mx.float16; scale = D ** -0.5
    print(f"# {a.shape} shape ({Hq} / {Hk} heads, d{D}, float16), serial calls x {a.calls}, {a.repeats} repeats, {a.rounds} rounds; MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for n in a.contexts:
        q0 = mx.random.normal((1, Hq, 1, D)).astype(dt); mx.eval(q0)
        runs = {}
        c = KVCache(); k, v = fill(c, Hk, D, n, dt)
        runs['fp16'] = (lambda q, k=k, v=v: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale))
        for kind in a.kinds:
            kb, vb = (int(x) for x in kind.split(','))
            for qd in (False, True):
                A.CAL_QDENSE = qd
                c = CodecKVCache(calibrated(kb, 0, D), calibrated(vb, 1, D)); k, v = fill(c, Hk, D, n, dt)
                f = (lambda q, c=c, k=k, v=v: sdpa(q, k, v, cache=c, scale=scale, mask=None))
                mx.eval(f(q0)); mx.eval(f(q0))   # the launcher made (and verified) under this setting
                runs[f'cal:{kind} ' + ('in-kernel map' if qd else 'query kernel')] = f
        A.CAL_QDENSE = True
        def chain(f):
            o = q0
            for _ in range(a.calls): o = f(o)
            return o
        ms = {k_: [] for k_ in runs}
        for r in range(a.rounds):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                f = runs[name]
                for _ in range(2): mx.eval(chain(f))
                ts = []
                for _ in range(a.repeats):
                    t = time.perf_counter(); mx.eval(chain(f)); ts.append((time.perf_counter() - t) / a.calls)
                ms[name].append(1e3 * st.median(ts))
        print(f"\n## {n:,} tokens\n\n| scheme | ms / call (median of rounds) | vs fp16 (median of rounds, range) |\n| --- | ---: | ---: |")
        for name, v in ms.items():
            rt = [x / y for x, y in zip(v, ms['fp16'])]
            print(f"| {name} | {st.median(v):.4f} | {st.median(rt):.2f}x ({min(rt):.2f}-{max(rt):.2f}) |")
        sys.stdout.flush()

if __name__ == '__main__': main()
