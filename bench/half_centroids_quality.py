"""Quality of the planned caches with the calibrated codecs' codebooks rounded to float16 (`half_centroids`, the default
since 2026-12-01) against the same plans with float64 codebooks, on the embedded Gemma 3 270M (float32, this CPU):

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python3 bench/half_centroids_quality.py [--budgets 5 4] [--tokens 2048]

`mlx_kvq.recipe.plan` at each budget (the shipped probe, the calibration text `kv='auto:B'` uses), then the plan scored
as it is and with every calibrated codec's `half_centroids` set False, teacher-forced over the first tokens of the pydoc
topics in chunks of 256 (`recipe.score_caches`, the measure of `bench/recipe_pareto.md`). Prints one markdown table."""
import argparse, datetime, json, platform, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.models import load, pydoc_tokens
from mlx_kvq.recipe import plan, make_planned_cache, reference, score_caches, summarize, Plan


def with_codebooks(p, half):
    "A copy of plan `p` whose calibrated codecs have `half_centroids` = `half`"
    q = Plan.from_json(p.to_json())
    for e in q.layers.values():
        for side in ('keys', 'values'):
            if e[side]['codec'] == 'kvq_turbo': e[side]['half_centroids'] = half
    return q


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--budgets', nargs='+', type=float, default=[5.0, 4.0])
    ap.add_argument('--tokens', type=int, default=2048)
    args = ap.parse_args()
    gemma, tok = load()
    ids = pydoc_tokens(args.tokens, tok)
    t0 = time.time()
    ref = reference(gemma, ids)
    print(f"# planned caches, float16-rounded against float64 codebooks: embedded Gemma 3 270M (float32), first {args.tokens} "
          f"tokens of pydoc topics, chunks of 256; {platform.system()} {platform.machine()}, MLX {mx.__version__}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print("| budget | codebooks | bits | kl_mean | kl_median | kl_p99 | top1 | ppl_delta |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in args.budgets:
        p = plan(gemma, b)
        for half in (True, False):
            caches = make_planned_cache(gemma, with_codebooks(p, half))
            r = summarize(score_caches(gemma, ref, caches, name=f'auto:{b:g}'), ref)
            print(f"| auto:{b:g} | {'float16 (default)' if half else 'float64'} | {r['bits']:.2f} | {r['kl_mean']:.5f} | "
                  f"{r['kl_median']:.5f} | {r['kl_p99']:.4f} | {r['top1']:.3f} | {r['ppl_delta']:+.3f} |", flush=True)
    print(f"({time.time() - t0:.0f} s)")
