"""The host's side of a prefill chunk on a GPU, by cache kind: how long building and submitting 16 layers' cache update
and attention take (Python's graph build, then `mx.async_eval`: MLX walks the graph and launches its kernels), beside
the wall time of the whole. Why: on the H200 the default `auto:5`'s 16K prefill spent a median 15.9 ms per chunk in
`mx.async_eval` against `turbo:4`'s 7.9 (`bench/h200_20261202b/`), with about as many kernels; this tells whether its
layer kinds' kernels are where that goes (they were not: see that folder's README)

    python3 bench/prefill_submit.py [--kinds fp16 turbo:4 cal1:2,6 cal1:4,a8] [--past 14336] [--chunk 2048] [--layers 16] [--repeats 9] [--what both update attend]

Kinds as `prefill_profile.layer_cache` (Llama-3.2-1B's attention: 8 KV / 32 query heads, head dim 64, float16): fp16
(mlx-lm's KVCache), the first layer's cache of a bench scheme, or a calibrated kind of `bench/calcodecs.py` (`cal1:K,V`
one band a side, `cal1:K,a8` one-band keys beside 8-bit affine values: the kinds `auto:5` plans for this shape). Each of
--layers independent caches holds --past tokens with its storage cut to them, so the chunk's update grows it as a real
prompt's does; the chunk's keys and values are transposed views (as a model hands them). --what: `update` the updates
alone (the states evaluated), `attend` the attention over updated caches alone, `both` as a model layer. Medians of
--repeats (each after one untimed); the caches trimmed back after each. `KVQ_KNOBS` applies."""
import argparse, platform, statistics as st, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from knobs import apply_knobs
from mlx_kvq.bench import layer_model
from mlx_kvq.integrate import install
from prefill_profile import layer_cache, arrays, cut


def run(kind, a, model):
    caches = [layer_cache(model, kind) for _ in range(a.layers)]
    mx.random.seed(1)
    for c in caches:
        for s in range(0, a.past, 4096):
            n = min(4096, a.past - s)
            c.update_and_fetch(mx.random.normal((1, 8, n, 64)).astype(mx.float16), mx.random.normal((1, 8, n, 64)).astype(mx.float16))
            mx.eval(arrays(c))
    k, v = (mx.random.normal((1, a.chunk, 8, 64)).astype(mx.float16).transpose(0, 2, 1, 3) for _ in range(2))
    q = mx.random.normal((1, 32, a.chunk, 64)).astype(mx.float16); mx.eval(k, v, q)
    def attend(c, ks, vs):
        if kind == 'fp16': return mx.fast.scaled_dot_product_attention(q, ks, vs, scale=0.125, mask='causal')
        return c.attend(q, ks, vs, scale=0.125, mask='causal')
    res = {}
    for what in a.what:
        b, s, w = [], [], []
        for r in range(a.repeats + 1):
            for c in caches: cut(c, a.past)
            if what == 'attend':   # the updates evaluated first, outside the timing
                sides = [c.update_and_fetch(k, v) for c in caches]; mx.eval([arrays(c) for c in caches]); mx.synchronize()
            t0 = time.perf_counter()
            if what == 'attend': outs = [attend(c, *sd) for c, sd in zip(caches, sides)]
            elif what == 'update': outs = [(c.update_and_fetch(k, v), arrays(c))[1] for c in caches]
            else: outs = [attend(c, *c.update_and_fetch(k, v)) for c in caches] + [arrays(c) for c in caches]
            t1 = time.perf_counter(); mx.async_eval(outs); t2 = time.perf_counter(); mx.eval(outs); mx.synchronize(); t3 = time.perf_counter()
            if r: b.append(1e3 * (t1 - t0)); s.append(1e3 * (t2 - t1)); w.append(1e3 * (t3 - t0))
            for c in caches: c.trim(a.chunk)
            del outs
        res[what] = tuple(st.median(x) for x in (b, s, w))
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--kinds', nargs='+', default=['fp16', 'turbo:4', 'cal1:2,6', 'cal1:4,a8'])
    p.add_argument('--past', type=int, default=14336)
    p.add_argument('--chunk', type=int, default=2048)
    p.add_argument('--layers', type=int, default=16)
    p.add_argument('--repeats', type=int, default=9)
    p.add_argument('--what', nargs='+', default=['both', 'update', 'attend'], choices=['both', 'update', 'attend'])
    a = p.parse_args()
    if a.past < 1 or a.chunk < 1 or a.layers < 1 or a.repeats < 1: p.error("--past, --chunk, --layers and --repeats must be positive")
    knobs = apply_knobs()
    install()
    model = layer_model(32, 8, 64)
    print(f"# prefill submission by cache kind: {a.layers} layers (8 KV / 32 query heads, d64, float16), past {a.past}, chunk {a.chunk}, "
          f"median of {a.repeats}; {platform.system()} {platform.machine()}, MLX {mx.__version__}, {mx.default_device()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}" + (f"; knobs {' '.join(knobs)}" if knobs else ""), flush=True)
    print("| kind | what | build ms | submit ms | wall ms |\n| --- | --- | ---: | ---: | ---: |", flush=True)
    for kind in a.kinds:
        for what, (b, s, w) in run(kind, a, model).items(): print(f"| {kind} | {what} | {b:.2f} | {s:.2f} | {w:.2f} |", flush=True)


if __name__ == '__main__': main()
