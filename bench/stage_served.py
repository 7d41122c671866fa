"""Whole-model decode with staged decode tokens (`CodecKVCache.stage`), in one process: fp16, turbo:4 staging (the
default) and turbo:4 with stage 0, timed in turn per round (mlx-lm's generate_step, pipelined); how the staged steps'
attention calls were served (the memoized launcher with staged tokens, without, or the general path), the caches'
staged token counts, and a cProfile of the staged scheme's host build.

    python3 bench/stage_served.py [--context 32768 131072] [--rounds 2] [--steps 32] [--out DIR] [--no-stage0]
                                  [--baseline DIR] [--written] [--more SCHEMES [--unstaged]]

`--baseline DIR`: DIR holds another version of the package as `mlx_kvq_base` (`bash bench/baseline_package.sh REV DIR`
makes it from a commit): its turbo:4 caches (staging, as that version does by default) are timed in the same rounds,
so two versions of the host code compare in one process, on one host, alternating. `--written`: turbo:4 staging with
each step's token written at update (`CodecKVCache.defer_write` False) timed beside the default (written by the kernel).
"""
import argparse, cProfile, io, json, pstats, statistics as st, sys, time
from collections import Counter
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))
from decode_step_profile import filled, pipelined, build_and_sync
from mlx_kvq import attention as A
from mlx_kvq.bench import shape_model
from mlx_kvq.integrate import probe_kv_shapes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--context", type=int, nargs="+", default=[32768, 131072])
    p.add_argument("--rounds", type=int, default=2); p.add_argument("--steps", type=int, default=32)
    p.add_argument("--out", default="/tmp/stage_served")
    p.add_argument("--no-stage0", action="store_true", help="leave out turbo:4 with stage 0")
    p.add_argument("--baseline", help="a folder holding another version of the package as mlx_kvq_base: its turbo:4 timed beside")
    p.add_argument("--written", action="store_true", help="also turbo:4 staging with the token written at update (defer_write False: two slice updates a step)")
    p.add_argument("--unstaged", action="store_true", help="with --more: each of those schemes with stage 0 too")
    p.add_argument("--more", nargs="*", default=[], help="more schemes timed as they come (e.g. affine:4), with --baseline that version's too")
    a = p.parse_args()
    base = None
    if a.baseline:
        sys.path.insert(0, a.baseline)
        import mlx_kvq_base.bench as base
        base_rev = (Path(a.baseline) / "mlx_kvq_base" / "REV").read_text().strip() if (Path(a.baseline) / "mlx_kvq_base" / "REV").exists() else "?"
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    model = shape_model("llama-3.2-1b", mx.float16); shapes = probe_kv_shapes(model)
    print(f"stage_served: llama-3.2-1b shape, float16, MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    served = Counter(); orig = A._fast_final
    from mlx_kvq import qcache as Q
    orig_runner = Q.staged_runner
    def counting(queries, keys, values, scale):
        r = orig(queries, keys, values, scale)
        served[('launcher' if r is not None else 'general') + (' staged' if keys.staged is not None and keys.tail is not None and keys.tail.shape[-2] else '')] += 1
        return r
    def counting_runner(*a):   # a stage's later steps: the launcher's run that the cache holds for the stage
        r = orig_runner(*a)
        def go(f, what):
            def call(*b):
                out = f(*b); served[what + (' declined' if out is None else '')] += 1
                return out
            return call
        return None if r is None else (go(r[0], 'stage run'), go(r[1], 'stage run, written by the kernel'))
    rows = []
    for context in a.context:
        names = ("fp16", "turbo:4 staged") + (() if a.no_stage0 else ("turbo:4 stage 0",)) + (("turbo:4 staged, written at update",) if a.written else ())
        sets = {kv: filled(model, "fp16" if kv == "fp16" else "turbo:4", context, mx.float16, shapes)[0] for kv in names}
        for c in sets.get("turbo:4 staged, written at update", ()): c.defer_write = False
        if not a.no_stage0:
            for c in sets["turbo:4 stage 0"]: c.stage = 0
        for kv in a.more:
            sets[kv] = filled(model, kv, context, mx.float16, shapes)[0]
            if a.unstaged:
                sets[f"{kv} stage 0"] = filled(model, kv, context, mx.float16, shapes)[0]
                for c in sets[f"{kv} stage 0"]: c.stage = 0
        for kv in (["turbo:4"] + a.more) if base is not None else []:   # the other version's caches, filled as `filled` fills ours
            caches = base.bench_caches(model, base._bench_scheme(kv))
            for i, c in enumerate(caches): base._fill(c, shapes[str(i)][1][:3], context, mx.float16, 7919 * i)
            sets[f"{kv}{' staged' if kv == 'turbo:4' else ''}, baseline {base_rev}"] = caches
        A._fast_final, Q.staged_runner = counting, counting_runner; served.clear()
        pipelined(model, sets["turbo:4 staged"], a.steps)
        A._fast_final, Q.staged_runner = orig, orig_runner
        c0 = sets["turbo:4 staged"][0]
        print(json.dumps(dict(context=context, served=dict(served), stage_capacity=A.stage_capacity(c0.k_codec, c0.v_codec),
                              staged_now=c0._n_tail(), n_quantized=c0.n_quantized, offset=c0.offset)), flush=True)
        tps = {kv: [] for kv in sets}
        for r in range(a.rounds):
            for kv, caches in sets.items(): tps[kv].append(pipelined(model, caches, a.steps))
            host = {kv: [round(x, 2) for x in build_and_sync(model, caches, 8)] for kv, caches in sets.items()}
            print(json.dumps(dict(context=context, round=r, tps={k: round(v[-1], 1) for k, v in tps.items()}, host_build_submit_sync_ms=host)), flush=True)
        for kv in sets:
            rat = [x / f for x, f in zip(tps[kv], tps["fp16"])]
            rows.append(dict(context=context, scheme=kv, tps=tps[kv], ratios=rat, median_ratio=st.median(rat)))
            print(f"| {context:,} | {kv} | {st.median(tps[kv]):.1f} | {min(tps[kv]):.1f}-{max(tps[kv]):.1f} | {st.median(rat):.2f}x | {min(rat):.2f}-{max(rat):.2f} |", flush=True)
        prof = cProfile.Profile(); build_and_sync(model, sets["turbo:4 staged"], 16, prof)
        s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
        (out / f"profile_staged_{context}.txt").write_text(s.getvalue())
        del sets; mx.clear_cache()
    (out / "stage_served.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__": main()
