"""What the calibrated stage at head dim 256 gives a Gemma-3-shaped model's decode: in one process, fp16 (mlx-lm's caches),
`auto:5` as `make_prompt_cache` makes it (its global layers' calibrated pairs stage up to `stage_capacity` tokens: 4 at
d256 since 2026-12-02), and the same `auto:5` caches with `stage = 0` on those layers (each decode token quantized by
the pair kernel's launch and written by slice updates, as before 2026-12-02), timed in turn per round (mlx-lm's
generate_step, pipelined; the order reversed every other round).

    python3 bench/stage256_gemma.py [--shape gemma-3-1b] [--context 32768] [--rounds 4] [--steps 32]

Prints each layer kind's cache class and stage capacity, tokens/s per round, the medians and per-round ratios, and the
staged token counts of the staging caches after the runs (nonzero: the stage engaged). On a machine without CUDA no
cache stages (capacity 0): the script runs, the two `auto:5` rows are the same thing."""
import argparse, json, platform, statistics as st, sys, time
from collections import Counter
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parent)); sys.path.append(str(Path(__file__).resolve().parents[1]))
from decode_step_profile import filled, pipelined
from mlx_kvq.attention import stage_capacity
from mlx_kvq.bench import shape_model, bench_calibration
from mlx_kvq.integrate import probe_kv_shapes


def kinds(caches):
    "Counter of (cache class, head dim, stage, capacity) over the layers"
    out = Counter()
    for c in caches:
        cap = stage_capacity(c.k_codec, c.v_codec) if hasattr(c, 'k_codec') and hasattr(c, 'stage') else None
        out[(type(c).__name__, getattr(c, 'stage', None), cap)] += 1
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--shape', default='gemma-3-1b'); p.add_argument('--context', type=int, default=32768)
    p.add_argument('--rounds', type=int, default=4); p.add_argument('--steps', type=int, default=32)
    a = p.parse_args()
    if a.context < 2 or a.rounds < 1 or a.steps < 1: p.error(f"--context must be 2 or more and --rounds / --steps 1 or more (got {a.context}, {a.rounds}, {a.steps})")
    dtype = mx.float16 if mx.default_device() == mx.gpu else mx.float32
    model = shape_model(a.shape, dtype); shapes = probe_kv_shapes(model)
    print(f"{a.shape} (random weights), {str(dtype).split('.')[-1]}, {a.context:,} tokens; {platform.system()} {platform.machine()}, MLX {mx.__version__} "
          f"{'GPU' if mx.default_device() == mx.gpu else 'CPU'}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    t0 = time.perf_counter()
    say = lambda what: print(f"# {time.perf_counter() - t0:6.1f} s  {what}", flush=True)   # where a run cut by its time limit stopped
    calib = bench_calibration(model, ['auto:5'])[0]; say('auto:5 planned')   # once: both auto:5 sets take this plan
    def fill(scheme):
        caches = filled(model, scheme, a.context, dtype, shapes, calib=calib if scheme != 'fp16' else {})[0]
        say(f'{scheme} filled'); return caches
    sets = {'fp16': fill('fp16'), 'auto:5': fill('auto:5')}
    unstaged = fill('auto:5')
    for c in unstaged:
        if hasattr(c, 'stage') and hasattr(c, 'k_codec'): c.stage = 0
    sets['auto:5, stage 0'] = unstaged
    for name in ('auto:5', 'auto:5, stage 0'): print(name, dict(kinds(sets[name])), flush=True)
    tps = {n: [] for n in sets}
    for r in range(a.rounds):
        for n in (list(sets) if r % 2 == 0 else list(sets)[::-1]): tps[n].append(pipelined(model, sets[n], a.steps))
        print(json.dumps(dict(round=r, tps={n: round(v[-1], 1) for n, v in tps.items()})), flush=True)
        for c in (c for cs in sets.values() for c in cs):   # back to the context where a cache can be trimmed
            if c.offset > a.context and c.is_trimmable(): c.trim(c.offset - a.context)
    for n, v in tps.items():
        rat = [x / f for x, f in zip(v, tps['fp16'])]
        print(f"| {n} | {st.median(v):.1f} | {min(v):.1f}-{max(v):.1f} | {st.median(rat):.2f}x ({min(rat):.2f}-{max(rat):.2f}) |")
    paired = [x / y for x, y in zip(tps['auto:5'], tps['auto:5, stage 0'])]
    print(f"auto:5 staged / stage 0, per round: {[round(x, 3) for x in paired]}, median {st.median(paired):.3f}")
    print('staged tokens held now (staging caches):', [c._n_tail() for c in sets['auto:5'] if hasattr(c, '_n_tail') and getattr(c, 'stage', 0)])


if __name__ == '__main__':
    main()
