"""Whole-model decode of a Gemma-3-shaped model (random weights; 5 of every 6 layers sliding-window): where a compressed
cache's step goes between the sliding-window (rotating) layers and the global ones.

    python3 bench/gemma_layers.py [--shape gemma-3-1b] [--context 32768] [--kv turbo:4 affine:4] [--rounds 3] [--steps 32] [--profile 16]

Per scheme two cache sets beside fp16's: every layer compressed (what `make_prompt_cache(model, kv=SCHEME)` gives) and
`/global` (only the global layers compressed, the sliding-window layers left as mlx-lm's RotatingKVCache). All sets are
filled once to `--context` tokens (the rings hold their window) and timed in alternating rounds (mlx-lm `generate_step`,
pipelined), refilled between rounds where they cannot be trimmed. Prints tokens/s, the median of each round's ratio to
that round's fp16, the caches' bytes, and with `--profile N` the host's own time per function over N steps (cProfile).
`auto:B` is planned on seeded random token ids (`mlx_kvq.bench.bench_calibration`). `--noring` adds, per scheme, the same caches run with `packing.RING = packing.AFFINE_RING = False` (a ring's decode token written by the pair
kernel and slice updates instead of one `quantize_into_pair` launch), alternating with the others."""
import argparse, cProfile, io, pstats, statistics, time
import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import RotatingKVCache
from mlx_kvq import make_prompt_cache
from mlx_kvq.bench import shape_model, _fill, bench_calibration
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.kvsplit import QuantizedRotatingKVCache
from mlx_kvq import packing as P

ap = argparse.ArgumentParser()
ap.add_argument('--shape', default='gemma-3-1b'); ap.add_argument('--context', type=int, nargs='+', default=[32768])
ap.add_argument('--kv', nargs='+', default=['turbo:4', 'affine:4']); ap.add_argument('--rounds', type=int, default=3)
ap.add_argument('--steps', type=int, default=32); ap.add_argument('--warmup', type=int, default=3)
ap.add_argument('--profile', type=int, default=0); ap.add_argument('--noring', action='store_true')
a = ap.parse_args()
dtype = mx.float16 if mx.default_device() == mx.gpu else mx.float32
model = shape_model(a.shape, dtype)
shapes = probe_kv_shapes(model)
calib, note = bench_calibration(model, a.kv)     # auto:B: planned on seeded random token ids (random weights, no tokenizer)
print(f"# {a.shape} (random weights, {dtype}), {mx.default_device()}, MLX {mx.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{f'; {note}' if note else ''}", flush=True)

def caches_of(name):
    scheme, _, only = name.removesuffix(' noring').partition('/')
    cs = make_prompt_cache(model, kv=scheme, **calib)
    if only == 'global':
        cs = [RotatingKVCache(max_size=c.max_size, keep=c.keep) if isinstance(c, QuantizedRotatingKVCache) else c for c in cs]
    return cs

def filled(name, context):
    cs = caches_of(name)
    for i, c in enumerate(cs): _fill(c, shapes[str(i)][1][:3], context, dtype, 7919 * i)
    return cs

def run(cs, n, prof=None, ring=True):
    P.RING = P.AFFINE_RING = ring
    gen = generate_step(mx.array([1]), model, prompt_cache=cs, max_tokens=a.warmup + n)
    for _ in range(a.warmup): next(gen)
    if prof: prof.enable()
    t0 = time.perf_counter()
    for _ in range(n): next(gen)
    dt = time.perf_counter() - t0
    if prof: prof.disable()
    for _ in gen: pass
    P.RING = P.AFFINE_RING = True
    return n / dt

names = ['fp16'] + [n for s in a.kv for n in (s, s + '/global') + ((s + ' noring',) if a.noring else ())]
for context in a.context:
    sets = {n: filled(n, context) for n in names}
    nbytes = {n: sum(int(c.nbytes) for c in cs) for n, cs in sets.items()}
    tps = {n: [] for n in names}
    for r in range(a.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            tps[n].append(run(sets[n], a.steps, ring=not n.endswith(' noring')))
            sets[n] = filled(n, context)          # rings cannot be trimmed back: the same contents again
        print(f"round {r}: " + ', '.join(f"{n} {tps[n][-1]:.1f}" for n in names), flush=True)
    print("\n| context | caches | tokens/s (median) | vs fp16 (median of rounds, range) | KV MiB |\n| ---: | --- | ---: | ---: | ---: |")
    for n in names:
        rat = [t / f for t, f in zip(tps[n], tps['fp16'])]
        print(f"| {context} | {n} | {statistics.median(tps[n]):.1f} | {statistics.median(rat):.2f}x ({min(rat):.2f}-{max(rat):.2f}) | {nbytes[n] / 2**20:.1f} |")
    if a.profile:
        for n in names:
            pr = cProfile.Profile(); run(sets[n], a.profile, pr, ring=not n.endswith(' noring'))
            s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats('tottime').print_stats(14)
            print(f"\n## {n}: host own time over {a.profile} steps (cProfile)\n" + '\n'.join(l for l in s.getvalue().splitlines() if l.strip())[:3000])
    del sets; mx.clear_cache()
