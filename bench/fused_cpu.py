"""CPU measurements of mlx_kvq.attention (float32, this machine's OpenBLAS), side by side in one run:
one layer decode at N tokens (32 query / 8 KV heads, d128) vs float32 `mx.fast.scaled_dot_product_attention`,
and the embedded Gemma 3 270M greedy decode tokens/s with `auto:5` vs the uncompressed cache.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python3 bench/fused_cpu.py [--context 32768] [--out bench/fused_cpu.md]"""
import argparse, os, platform, sys, time
from datetime import datetime, timezone

import numpy as np
import mlx.core as mx

from mlx_kvq.attention import attend
from mlx_kvq.codecs import AffineCodec, CachedSide, codec_attention
from mlx_kvq.turbo_codec import TurboCodec

ap = argparse.ArgumentParser()
ap.add_argument('--context', type=int, default=32768)
ap.add_argument('--repeats', type=int, default=5)
ap.add_argument('--gemma-prompt', type=int, default=1024)
ap.add_argument('--gemma-tokens', type=int, default=32)
ap.add_argument('--out', default='bench/fused_cpu.md')
args = ap.parse_args()
lines = [f"# mlx_kvq.attention on the CPU", "",
         f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} on {platform.machine()} {platform.system()}, "
         f"MLX {mx.__version__} CPU + OpenBLAS, float32; command: `python3 {' '.join(sys.argv)}`. Shared 2-core machine: "
         f"ratios are from one run, side by side. Load average (1, 5, 15 min) at the start: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}.", ""]

def med(fn, repeats):
    mx.eval(fn())
    ts = []
    for _ in range(repeats):
        t = time.perf_counter(); mx.eval(fn()); ts.append(time.perf_counter() - t)
    return float(np.median(ts))

def paired(fa, fb, repeats):
    "Medians of fa and fb timed alternately (a, b, a, b, ...): a shared machine's load hits both alike; and the median ratio"
    mx.eval(fa()); mx.eval(fb())
    ta, tb = [], []
    for _ in range(repeats):
        for f, ts in ((fa, ta), (fb, tb)):
            t = time.perf_counter(); mx.eval(f()); ts.append(time.perf_counter() - t)
    return float(np.median(ta)), float(np.median(tb)), float(np.median(np.array(tb) / np.array(ta)))

mx.random.seed(0)
N, Hq, Hkv, D = args.context, 32, 8, 128
k, v = mx.random.normal((1, Hkv, N, D)), mx.random.normal((1, Hkv, N, D))
q = mx.random.normal((1, Hq, 1, D))
mx.eval(k, v, q)
lines += [f"## One layer, one query token, {N:,} tokens, {Hq}/{Hkv} heads, d{D}", "",
          "Each scheme is timed alternately with fp32 SDPA (pairs of calls); the ratio is the median of the pairs' ratios.", "",
          "| kv | fast path (ms) | fp32 SDPA in the same pairs (ms) | / fp32 SDPA | reference `codec_attention` (ms) | max rel. error vs reference |",
          "| --- | ---: | ---: | ---: | ---: | ---: |"]
for name, (kc, vc) in {'turbo:4': (TurboCodec(4), TurboCodec(4, seed=1)), 'turbo:3': (TurboCodec(3), TurboCodec(3, seed=1)),
                       'affine:8,4': (AffineCodec(8), AffineCodec(4)), 'affine:4': (AffineCodec(4), AffineCodec(4))}.items():
    ks, vs = CachedSide(kc, parts=kc.encode(k)), CachedSide(vc, parts=vc.encode(v))
    mx.eval(ks.parts, vs.parts)
    ts32, tf, ratio = paired(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5),
                             lambda: attend(q, ks, vs, scale=D ** -0.5), args.repeats)
    tr = med(lambda: codec_attention(q, ks, vs, scale=D ** -0.5), max(1, args.repeats // 2))
    out, ref = attend(q, ks, vs, scale=D ** -0.5), codec_attention(q, ks, vs, scale=D ** -0.5)
    err = (mx.abs(out - ref).max() / mx.abs(ref).max()).item()
    lines.append(f"| {name} | {tf * 1e3:.1f} | {ts32 * 1e3:.1f} | {ratio:.2f} | {tr * 1e3:.1f} | {err:.1e} |")
    print(lines[-1], flush=True)
del k, v

if args.gemma_tokens:
    from pydoc_data.topics import topics
    from mlx_kvq.models import load
    from mlx_kvq import make_prompt_cache
    model, tok = load()
    text = ' '.join(topics[t] for t in sorted(topics))
    ids = mx.array(tok.encode(text)[:args.gemma_prompt])[None]
    lines += ["", f"## Embedded Gemma 3 270M (float32), greedy decode after a {ids.shape[1]}-token prompt (prefill in chunks of 256)", "",
              "Steps of the two caches alternate (one each in turn).", "", "| kv | decode tokens/s | ratio vs uncompressed |", "| --- | ---: | ---: |"]
    state = {}
    for kv in ('fp16', 'auto:5'):
        cache = make_prompt_cache(model, kv=kv, tokenizer=tok) if kv.startswith('auto') else make_prompt_cache(model, kv=kv)
        for s in range(0, ids.shape[1], 256): mx.eval(model(ids[:, s:s + 256], cache=cache))
        y = mx.argmax(model(ids[:, -1:], cache=cache)[:, -1:], -1); mx.eval(y)
        state[kv] = [cache, y, 0.0]
    for _ in range(args.gemma_tokens):          # one step of each in turn: a shared machine's load hits both alike
        for kv, st in state.items():
            t = time.perf_counter()
            st[1] = mx.argmax(model(st[1], cache=st[0])[:, -1:], -1); mx.eval(st[1])
            st[2] += time.perf_counter() - t
    base = args.gemma_tokens / state['fp16'][2]
    for kv, st in state.items():
        tps = args.gemma_tokens / st[2]
        lines.append(f"| {'uncompressed' if kv == 'fp16' else kv} | {tps:.1f} | {tps / base:.2f} |")
        print(lines[-1], flush=True)
lines += ['', f"Load average (1, 5, 15 min) at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}."]
open(args.out, 'w').write('\n'.join(lines) + '\n')
print('\n'.join(lines))
