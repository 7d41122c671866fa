"""Soak test of a bounded quantized cache (issue 14): many decode steps, constant `nbytes` once the window is
full, flat process memory, and attention equal to the reference at checkpoints.

Every attention layer's cache is wrapped in a `Twin`: the mlx_kvq cache serves the model, and beside it an
mlx-lm `RotatingKVCache` of the same size is fed the same keys/values fake-quantized by the same codecs
(`codec.decode(codec.encode(x))`). At each checkpoint step the attention of the layer's queries over the
reference (mlx-lm's own `scaled_dot_product_attention`) is compared with the mlx_kvq cache's attention.

    python bench/soak.py tiny  --steps 50000
    python bench/soak.py gemma --steps 5000
Results are merged into bench/soak.json and bench/soak.md.
"""
from __future__ import annotations
import argparse, datetime, json, os, platform, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import mlx.core as mx
from mlx_lm.models.cache import RotatingKVCache
from mlx_lm.models import base as lm_base

import mlx_kvq
from mlx_kvq.integrate import make_prompt_cache, install
from mlx_kvq.kvsplit import QuantizedRotatingKVCache

HERE = Path(__file__).parent
STOP = []          # set by SIGTERM / SIGINT: stop after the current step and write what was measured
signal.signal(signal.SIGTERM, lambda *a: STOP.append(1)); signal.signal(signal.SIGINT, lambda *a: STOP.append(1))


def rss_mb():
    "Resident set size of this process now (MiB), from /proc"
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'): return int(line.split()[1]) / 1024
    return float('nan')


class Twin:
    "A quantized rotating cache serving the model, with a fake-quantized mlx-lm RotatingKVCache beside it"
    def __init__(self, q: QuantizedRotatingKVCache):
        self.q = q
        self.ref = RotatingKVCache(q.max_size, q.keep)
        self.check, self.worst = False, 0.0
    def __getattr__(self, name): return getattr(self.q, name)
    @property
    def offset(self): return self.q.offset
    def update_and_fetch(self, keys, values):
        fk = self.q.k_codec.decode(self.q.k_codec.encode(keys), keys.dtype)
        fv = self.q.v_codec.decode(self.q.v_codec.encode(values), values.dtype)
        self._ref_kv = self.ref.update_and_fetch(fk, fv)
        return self.q.update_and_fetch(keys, values)
    def make_mask(self, *a, **k): return self.q.make_mask(*a, **k)
    def attend(self, queries, keys, values, *, scale, mask=None, sinks=None):
        out = self.q.attend(queries, keys, values, scale=scale, mask=mask, sinks=sinks)
        if self.check:
            rk, rv = self._ref_kv
            ref = lm_base._mlx_kvq_original_sdpa(queries, rk, rv, self.ref, scale=scale, mask=mask, sinks=sinks)
            err = float(mx.max(mx.abs(out - ref)) / (mx.max(mx.abs(ref)) + 1e-30))
            self.worst = max(self.worst, err)
        return out


def tiny_model():
    from mlx_lm.models import llama
    args = llama.ModelArgs(model_type='llama', hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5,
                           vocab_size=256, tie_word_embeddings=True)
    mx.random.seed(0)
    m = llama.Model(args)
    mx.eval(m.parameters())
    return m, 256


def gemma_model():
    from mlx_kvq.models import load
    m, tok = load()
    return m, m.args.vocab_size


def soak(which, steps, kv, max_kv_size, n_checks, n_samples, tol):
    model, vocab = tiny_model() if which == 'tiny' else gemma_model()
    install()
    caches = make_prompt_cache(model, kv=kv, max_kv_size=max_kv_size)
    bad = [type(c).__name__ for c in caches if not isinstance(c, QuantizedRotatingKVCache)]
    if bad: raise SystemExit(f"expected only bounded quantized caches, got {bad}")
    twins = [Twin(c) for c in caches]
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, size=steps + 16)
    checks = set(np.linspace(0, steps - 1, n_checks).astype(int).tolist())
    samples = set(np.linspace(0, steps - 1, n_samples).astype(int).tolist())
    full_at, nbytes_full, nbytes_seen, rss, errs = None, None, set(), [], []
    max_size = max(c.max_size for c in caches)
    # prefill 16 tokens, then decode one token per step
    mx.eval(model(mx.array(tokens[None, :16]), cache=twins))
    t0 = time.time()
    done = 0
    for step in range(steps):
        if STOP:
            break
        check = step in checks or step == steps - 1
        for t in twins: t.check, t.worst = check, 0.0
        logits = model(mx.array(tokens[None, 16 + step:17 + step]), cache=twins)
        mx.eval(logits, [t.q.keys.parts for t in twins], [t.ref.keys for t in twins])
        if check: errs.append(dict(step=step, offset=int(twins[0].offset), worst_rel_err=max(t.worst for t in twins)))
        nb = sum(t.q.nbytes for t in twins)
        if twins[0].offset >= max_size:
            if full_at is None: full_at, nbytes_full = step, nb
            nbytes_seen.add(nb)
        if step in samples: rss.append(dict(step=step, rss_mb=round(rss_mb(), 1), nbytes=nb))
        done = step + 1
        if step % 1000 == 0: print(f"step {step}: {time.time() - t0:.0f} s, nbytes {nb}, rss {rss_mb():.1f} MiB", flush=True)
    dt = time.time() - t0
    after = [r['rss_mb'] for r in rss if full_at is not None and r['step'] >= full_at]
    res = dict(model=which, kv=kv, max_kv_size=max_kv_size, steps=done, steps_requested=steps, seconds=round(dt, 1),
               ms_per_step=round(1000 * dt / max(done, 1), 2), full_at_step=full_at, nbytes_when_full=nbytes_full,
               distinct_nbytes_after_full=sorted(nbytes_seen), rss_mb_first_after_full=after[0] if after else None,
               rss_mb_last=after[-1] if after else None, rss_mb_max_after_full=max(after) if after else None,
               rss_samples=rss, checkpoints=errs, worst_rel_err=max(e['worst_rel_err'] for e in errs), tolerance=tol,
               machine=f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores (shared), MLX {mx.__version__} "
                       f"{'CPU + OpenBLAS' if 'openblas' in os.environ.get('LD_PRELOAD', '') else 'CPU'}, float32",
               commit=subprocess.run(['git', '-C', str(HERE), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip(),
               date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))
    if done < steps: res['note'] = f"stopped after {done} of {steps} steps (time on the shared CPU ran out)"
    return derive(res)


def derive(res):
    "Memory after warm-up (the first 10% of the steps: allocator and graph caches fill) and the verdict"
    warm = [r for r in res['rss_samples'] if r['step'] >= res['steps'] // 10 and (res['full_at_step'] or 0) <= r['step']]
    res['rss_mb_after_warmup'] = warm[0]['rss_mb'] if warm else None
    res['rss_growth_mb_after_warmup'] = round(max(r['rss_mb'] for r in warm) - warm[0]['rss_mb'], 1) if warm else None
    res['ok'] = bool(len(res['distinct_nbytes_after_full']) == 1 and res['worst_rel_err'] <= res['tolerance'] and
                     warm and res['rss_growth_mb_after_warmup'] < 16)
    return res
    return res


def write(res):
    path = HERE / 'soak.json'
    allres = json.loads(path.read_text()) if path.exists() else {}
    allres[res['model']] = res
    path.write_text(json.dumps(allres, indent=1))
    lines = ["# Soak: bounded quantized cache, many decode steps", "",
             "Produced by `bench/soak.py` (issue 14). Every attention layer's mlx_kvq cache is checked at the checkpoints "
             "against an mlx-lm RotatingKVCache fed the same keys/values fake-quantized by the same codecs "
             "(relative max error of the attention output). Process RSS sampled from /proc/self/status.", "",
             "| model | kv | max_kv_size | steps (of requested) | ms/step | full at step | nbytes when full | distinct nbytes after full | "
             "RSS MiB first/last/max after full | RSS MiB after warm-up (10%) / growth since | checkpoints | worst rel err | ok | machine, date |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in allres.values():
        lines.append(f"| {r['model']} | {r['kv']} | {r['max_kv_size']} | {r['steps']} ({r.get('steps_requested', r['steps'])}) | {r['ms_per_step']} | {r['full_at_step']} | "
                     f"{r['nbytes_when_full']} | {len(r['distinct_nbytes_after_full'])} | {r['rss_mb_first_after_full']} / "
                     f"{r['rss_mb_last']} / {r['rss_mb_max_after_full']} | {r['rss_mb_after_warmup']} / {r['rss_growth_mb_after_warmup']} | {len(r['checkpoints'])} | {r['worst_rel_err']:.2e} | "
                     f"{r['ok']} | {r['machine']}, {r['date']}, commit {r.get('commit')} |")
    notes = [f"- {r['model']}: {r['note']}" for r in allres.values() if r.get('note')]
    if notes: lines += ["", "Notes:", *notes]
    (HERE / 'soak.md').write_text("\n".join(lines) + "\n")


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('model', choices=['tiny', 'gemma', 'render'], help="'render': rewrite soak.md from soak.json")
    ap.add_argument('--steps', type=int)
    ap.add_argument('--kv', default='turbo:4')
    ap.add_argument('--max-kv-size', type=int)
    ap.add_argument('--checks', type=int, default=50)
    ap.add_argument('--samples', type=int, default=200)
    ap.add_argument('--tol', type=float, default=1e-4)
    a = ap.parse_args()
    if a.model == 'render':
        allres = {k: derive(r) for k, r in json.loads((HERE / 'soak.json').read_text()).items()}
        (HERE / 'soak.json').write_text(json.dumps(allres, indent=1))
        write(next(iter(allres.values())))
        sys.exit(0)
    steps = a.steps or (50000 if a.model == 'tiny' else 5000)
    size = a.max_kv_size or (64 if a.model == 'tiny' else 256)
    r = soak(a.model, steps, a.kv, size, a.checks, a.samples, a.tol)
    write(r)
    print(json.dumps({k: v for k, v in r.items() if k not in ('rss_samples', 'checkpoints')}, indent=1))
    sys.exit(0 if r['ok'] else 1)
