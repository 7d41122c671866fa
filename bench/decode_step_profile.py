"""Where a whole-model decode step's time goes, per cache scheme: host graph building vs execution, and what the
cache's update and attention each cost (ablations that skip one of them; timing only, their tokens are not meaningful).

    python3 bench/decode_step_profile.py --shape llama-3.2-1b --context 32768 --kv fp16 turbo:4 affine:4 --out DIR

Per scheme, with every cache layer filled to --context (as `mlx-kvq bench --whole-model`):
- `pipelined`: tokens/s of mlx-lm's generate_step (graph of step n+1 built while step n runs);
- `build ms`: Python time to build one step's graph (model call + argmax, nothing evaluated);
- `submit ms`: the `mx.async_eval` call of that step (MLX walks the graph and launches its kernels on the host thread);
- `sync ms`: one step built and evaluated before the next starts (no overlap);
- `no attend` / `no update`: pipelined tokens/s with the caches' attention replaced by returning the queries, or with
  `update_and_fetch` returning the already-filled cache unchanged (no encode, no write);
- `KVQ_KNOBS="NAME=VALUE ..."` sets knobs of `attention_kernels`, `attention` or `packing` for the run (e.g. `LEAN=False`: the kernel
  before the lean loops; `META_ROWS=0`: a host-made `meta` array per decode call);
- a cProfile of the build (16 more steps, top functions by own time) for every scheme (fp16: the model's own Python), written to DIR.
"""
import argparse, cProfile, io, json, os, platform, pstats, sys, time
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq.bench import shape_model, bench_caches, bench_calibration, _bench_scheme, _fill
from mlx_kvq.integrate import probe_kv_shapes
from knobs import apply_knobs; apply_knobs()   # KVQ_KNOBS="NAME=VALUE ..." (bench/knobs.py)


def filled(model, scheme, context, dtype, shapes, seed=0, calib=None):
    "`calib`: `bench_calibration`'s keywords, planned once by the caller (default: planned here, as `mlx-kvq bench` plans auto:B)"
    caches = bench_caches(model, _bench_scheme(scheme), **(calib if calib is not None else bench_calibration(model, [scheme], None, seed)[0]))
    fetched = [_fill(c, shapes[str(i)][1][:3], context, dtype, seed + 7919 * i) for i, c in enumerate(caches)]
    return caches, fetched


def pipelined(model, caches, steps, warmup=3):
    gen = generate_step(mx.array([1]), model, prompt_cache=caches, max_tokens=warmup + steps)
    for _ in range(warmup): next(gen)
    t0 = time.perf_counter()
    for _ in range(steps): next(gen)
    dt = time.perf_counter() - t0
    for _ in gen: pass
    return steps / dt


def build_and_sync(model, caches, steps, prof=None):
    """(build, submit, sync) ms per step, one step at a time: `build` the Python graph building, `submit` the
    `mx.async_eval` call (MLX walks the graph and launches every kernel on the host thread), `sync` build + submit + the
    wait for the result. In the pipelined loop the host pays build + submit per step while the GPU runs the previous
    step, so a step costs about max(build + submit, GPU time)."""
    y = mx.array([[1]])
    build = submit = sync = 0.0
    for i in range(steps):
        t0 = time.perf_counter()
        if prof: prof.enable()
        logits = model(y, cache=caches)
        nxt = mx.argmax(logits[:, -1, :], axis=-1, keepdims=True)
        if prof: prof.disable()
        t1 = time.perf_counter()
        mx.async_eval(nxt)
        t2 = time.perf_counter()
        mx.eval(nxt)
        t3 = time.perf_counter()
        build += t1 - t0; submit += t2 - t1; sync += t3 - t0
        y = nxt
    return 1e3 * build / steps, 1e3 * submit / steps, 1e3 * sync / steps


def rounds(a, model, shapes, dtype, head, out):
    "Every scheme timed once per round, in turn, R rounds: the GPU host's drift between runs cancels in the per-round ratios"
    import statistics as st
    md = [f"# Whole-model decode, schemes in turn: {head}", "", f"Command: `python3 bench/decode_step_profile.py {' '.join(sys.argv[1:])}`", "",
          f"{a.rounds} rounds; each round times every scheme once ({a.steps} pipelined steps after 3 warm-up, mlx-lm's generate_step), "
          "in the order given; vs fp16 is the median of the per-round ratios.", "",
          "| context | scheme | median tok/s | min-max | vs fp16 (median) | ratio min-max |", "| ---: | --- | ---: | ---: | ---: | ---: |"]
    res = []
    for context in a.context:
        sets = {kv: filled(model, kv, context, dtype, shapes)[0] for kv in a.kv}
        tps = {kv: [] for kv in a.kv}
        for r in range(a.rounds):
            for kv in a.kv: tps[kv].append(pipelined(model, sets[kv], a.steps))
            host = {kv: [round(x, 2) for x in build_and_sync(model, sets[kv], 8)] for kv in a.kv} if a.host else None
            print(json.dumps(dict(context=context, round=r, tps={k: round(v[-1], 1) for k, v in tps.items()}, host_build_submit_sync_ms=host)), flush=True)
        for kv in a.kv:
            rat = [x / f for x, f in zip(tps[kv], tps.get("fp16", tps[kv]))]
            res.append(dict(context=context, scheme=kv, tps=tps[kv], ratios=rat))
            md.append(f"| {context:,} | {kv} | {st.median(tps[kv]):.1f} | {min(tps[kv]):.1f}-{max(tps[kv]):.1f} | "
                      f"{st.median(rat):.2f}x | {min(rat):.2f}-{max(rat):.2f} |")
        del sets; mx.clear_cache()
    (out / "decode_rounds.md").write_text("\n".join(md) + "\n")
    (out / "decode_rounds.json").write_text(json.dumps(dict(header=head, rows=res), indent=1))
    print("\n".join(md))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="llama-3.2-1b")
    p.add_argument("--context", type=int, nargs="+", default=[32768])
    p.add_argument("--kv", nargs="+", default=["fp16", "turbo:4", "affine:4", "affine:8,4"])
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument("--rounds", type=int, default=0,
                   help="instead of the profile: fill every scheme's caches, then R rounds each timing every scheme once in turn "
                        "(pipelined tok/s); medians and per-round ratios to fp16")
    p.add_argument("--host", action="store_true", help="with --rounds: also 8 steps one at a time per scheme and round, printed as "
                   "host_build_submit_sync_ms (build / submit / sync ms per step, as the profile's columns)")
    p.add_argument("--out", default="/tmp/decode_step_profile")
    p.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default=None, help="model dtype (default: float16 on a GPU, float32 on the CPU)")
    a = p.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(mx, a.dtype) if a.dtype else mx.float16 if mx.default_device() == mx.gpu else mx.float32
    model = shape_model(a.shape, dtype)
    shapes = probe_kv_shapes(model)
    head = (f"{a.shape} (random weights), {str(dtype).split('.')[-1]}; {platform.system()} {platform.machine()}, MLX {mx.__version__} "
            f"{'GPU' if mx.default_device() == mx.gpu else 'CPU'}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(head, flush=True)
    if a.rounds: return rounds(a, model, shapes, dtype, head, out)
    rows = []
    for context in a.context:
        for kv in a.kv:
            caches, fetched = filled(model, kv, context, dtype, shapes)
            r = dict(context=context, scheme=kv, pipelined=pipelined(model, caches, a.steps))
            r["build_ms"], r["submit_ms"], r["sync_ms"] = build_and_sync(model, caches, a.steps)
            prof = cProfile.Profile()
            build_and_sync(model, caches, 16, prof)
            s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40)
            pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(40)
            (out / f"profile_{context}_{kv.replace(':', '_').replace(',', '_')}.txt").write_text(s.getvalue())
            del caches, fetched; mx.clear_cache()
            if not a.no_ablations:
                caches, fetched = filled(model, kv, context, dtype, shapes)
                for c, f in zip(caches, fetched): c.update_and_fetch = (lambda f: lambda k, v: f)(f)
                r["no_update"] = pipelined(model, caches, a.steps)
                del caches, fetched; mx.clear_cache()
                if kv != "fp16":
                    caches, fetched = filled(model, kv, context, dtype, shapes)
                    for c in caches: c.attend = lambda q, k, v, **kw: q
                    r["no_attend"] = pipelined(model, caches, a.steps)
                    del caches, fetched; mx.clear_cache()
            rows.append(r)
            print(json.dumps(r), flush=True)
    md = [f"# Decode step profile: {head}", "", f"Command: `python3 bench/decode_step_profile.py {' '.join(sys.argv[1:])}`", "",
          "| context | scheme | pipelined tok/s | build ms | submit ms | sync ms | no update tok/s | no attend tok/s |",
          "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    f = lambda v, s: "-" if v is None else format(v, s)
    for r in rows:
        md.append(f"| {r['context']:,} | {r['scheme']} | {r['pipelined']:.1f} | {r['build_ms']:.2f} | {r['submit_ms']:.2f} | {r['sync_ms']:.2f} | "
                  f"{f(r.get('no_update'), '.1f')} | {f(r.get('no_attend'), '.1f')} |")
    (out / "decode_step_profile.md").write_text("\n".join(md) + "\n")
    (out / "decode_step_profile.json").write_text(json.dumps(dict(header=head, rows=rows), indent=1))
    print("\n".join(md))


if __name__ == "__main__": main()
