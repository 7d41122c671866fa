"""A decode step's kernel calls replayed through `mx.compile` (`attention.COMPILED_LAUNCH`: the folded decode kernel's call
traced once per grid and storage shape; `packing.COMPILED_QUANTIZE`: a decode step's quantize launch, and affine's six
encode operations, traced once per configuration) against building them again on every call, on the GPU, one layer of
Llama-3.2-1B's attention shape scaled to 32 query / 8 KV heads, head dim 128, float16:

- the host's build per attention call and per cache update (1000 / 200 calls built in a row, no evaluation between
  them; three rounds, off and on alternating), and (build, submit, wait) per call with 8 calls per evaluation;
- the outputs with the knobs on against off (the same kernels: they must agree bit for bit), over 300 decode steps that
  cross the storages' growth (a new trace per storage shape).

    python3 bench/compiled_launch_cuda.py [--context 4096 32768] [--steps 300]
"""
import argparse, platform, statistics as st, sys, time, warnings
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq import attention as A, packing as P
from mlx_kvq.bench import bench_caches, _bench_scheme, layer_model, _fill
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa
from host_calls_cuda import per_call, split

SCHEMES = ('turbo:4', 'affine:4', 'affine:8,4')


def knobs(on):
    A.COMPILED_LAUNCH = P.COMPILED_QUANTIZE = bool(on)


def cache_of(kv, context, shp):
    c = bench_caches(layer_model(32, 8, 128), _bench_scheme(kv))[0]
    k, v = _fill(c, shp, context, mx.float16, 0)
    return c, k, v


def timing(context, shp):
    q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
    kt, vt = mx.random.normal((1, 8, 1, 128)).astype(mx.float16), mx.random.normal((1, 8, 1, 128)).astype(mx.float16)
    mx.eval(q, kt, vt)
    print(f"\n## {context} tokens: us per call, rounds off / on alternating (medians; each round's value in brackets)")
    print("| scheme | attention build off | on | update build off | on | 8 calls an evaluation, off: build / submit / wait | on |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kv in ('fp16',) + SCHEMES:
        c, k, v = cache_of(kv, context, shp)
        f = lambda: sdpa(q, k, v, c, scale=128 ** -0.5, mask=None)
        res = {('a', o): [] for o in (0, 1)} | {('u', o): [] for o in (0, 1)}
        outs = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for o in (0, 1):
                knobs(o)
                for _ in range(5): mx.eval(f())
                outs[o] = f(); mx.eval(outs[o])
            for r in range(3):
                for o in (0, 1):
                    knobs(o)
                    res[('a', o)].append(per_call(f, 1000, 10))
            sp = {}
            for o in (0, 1):
                knobs(o); sp[o] = split(lambda i: f(), 8)
            # cache updates: one cache per knob setting, filled alike (each grows by the calls it times)
            cu = {o: cache_of(kv, context, shp)[0] for o in (0, 1)}
            for r in range(3):
                for o in (0, 1):
                    knobs(o)
                    res[("u", o)].append(per_call(lambda: (cu[o].update_and_fetch(kt, vt), cu[o].keys)[1], 200, 5))
        knobs(0)
        diff = mx.abs(outs[0].astype(mx.float32) - outs[1].astype(mx.float32)).max().item()
        md = lambda x: f"{st.median(x):.1f} [{' '.join(f'{y:.1f}' for y in x)}]"
        print(f"| {kv} | {md(res[('a', 0)])} | {md(res[('a', 1)])} | {md(res[('u', 0)])} | {md(res[('u', 1)])} | "
              f"{' / '.join(f'{x:.1f}' for x in sp[0])} | {' / '.join(f'{x:.1f}' for x in sp[1])} |", flush=True)
        print(f"#   {kv}: outputs on vs off, max abs difference {diff:.3g}; warnings: {[str(w.message)[:160] for w in caught]}")


def equal_steps(context, steps, shp):
    "Two caches of each scheme filled alike, decoded `steps` steps with the knobs off / on: outputs and stored parts equal?"
    print(f"\n## {steps} decode steps from {context} tokens, knobs on against off (the storages grow every 256 tokens)")
    for kv in SCHEMES:
        cs = [cache_of(kv, context, shp)[0] for _ in range(2)]
        worst, traced = 0.0, set()
        for t in range(steps):
            kk = mx.random.key(t)
            k1, k2, k3 = mx.random.split(kk, 3)
            kt, vt = mx.random.normal((1, 8, 1, 128), key=k1).astype(mx.float16), mx.random.normal((1, 8, 1, 128), key=k2).astype(mx.float16)
            q = mx.random.normal((1, 32, 1, 128), key=k3).astype(mx.float16)
            o = []
            for on, c in zip((0, 1), cs):
                knobs(on)
                ks, vs = c.update_and_fetch(kt, vt)
                o.append(sdpa(q, ks, vs, c, scale=128 ** -0.5, mask=None))
                traced.add(ks.storage[0].shape[-2])
            mx.eval(o, [c.state for c in cs])
            worst = max(worst, mx.abs(o[0].astype(mx.float32) - o[1].astype(mx.float32)).max().item())
        knobs(0)
        same = all(mx.array_equal(a, b).item() for a, b in zip([*cs[0].keys, *cs[0].values], [*cs[1].keys, *cs[1].values]))
        print(f"{kv}: max abs output difference {worst:.3g}, stored parts equal: {same}, storage capacities seen {sorted(traced)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--context', type=int, nargs='+', default=[4096, 32768])
    ap.add_argument('--steps', type=int, default=300)
    a = ap.parse_args()
    print(f"# compiled_launch_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.node()}; MLX {mx.__version__} "
          f"{mx.default_device()}; backend {P.kernel_backend()}")
    shp = probe_kv_shapes(layer_model(32, 8, 128))['0'][1][:3]
    for n in a.context: timing(n, shp)
    equal_steps(a.context[0], a.steps, shp)


if __name__ == "__main__": main()
