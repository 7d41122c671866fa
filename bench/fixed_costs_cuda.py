"""Fixed costs of a decode call on the GPU: what one layer's `attend` costs beside reading the cache, against fp16 SDPA.

    python3 bench/fixed_costs_cuda.py [--contexts 4096,32768] [--out DIR]

Per context (32 query / 8 KV heads, d128, float16, one query token) and scheme: ms per call (median of 15 evaluations)
with 1 call per `mx.eval` (what a decode step sees: every layer's call evaluated in one graph, but each call its own
launches) and with 8 independent calls per `mx.eval`; for `attend` with the decode `meta` made per call on the host
(`META_ROWS = 0`) and as a row of a device table (`META_ROWS = 256`, the default). Then two empty custom kernels, one
with a 45 KB source (the size of the turbo:4 decode kernel's): MLX hashes and copies a kernel's whole source at every
call. Timings only; the fused path's answers are checked by bench/check_fused_cuda.py and bench/check_decode_steps.py.
"""
import argparse, os, sys, time
from pathlib import Path
import numpy as np
import mlx.core as mx
sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turboquant import TurboQuantKVCache

ap = argparse.ArgumentParser(); ap.add_argument('--contexts', default='4096,32768'); ap.add_argument('--out', default=os.environ.get('OUT', '.'))
args = ap.parse_args()
lines = []
def log(s=''):
    print(s, flush=True); lines.append(s)

def build_only(fn, calls=64, repeats=7):
    "Host microseconds to build one call's graph (nothing evaluated while timed; the graphs are evaluated after)"
    ts = []
    for r in range(repeats):
        t = time.perf_counter(); outs = [fn(i) for i in range(calls)]; ts.append((time.perf_counter() - t) / calls)
        mx.eval(outs)
    return 1e6 * float(np.median(ts))

def per_call(fn, calls, repeats=15):
    for _ in range(3): mx.eval([fn(i) for i in range(calls)])
    ts = []
    for r in range(repeats):
        t = time.perf_counter(); mx.eval([fn(i) for i in range(calls)]); ts.append((time.perf_counter() - t) / calls)
    return 1e3 * float(np.median(ts))

log(f"# fixed_costs_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; mlx {mx.__version__}; {mx.default_device()}; "
    f"command: bench/fixed_costs_cuda.py --contexts {args.contexts}")
B, Hkv, G, D, dt = 1, 8, 4, 128, mx.float16
for N in [int(x) for x in args.contexts.split(',')]:
    log(f"\n## {N:,} tokens: ms per call (median)")
    qs = [mx.random.normal((B, Hkv * G, 1, D)).astype(dt) for _ in range(8)]
    k, v = mx.random.normal((B, Hkv, N, D)).astype(dt), mx.random.normal((B, Hkv, N, D)).astype(dt)
    mx.eval(qs, k, v)
    f16 = lambda i: mx.fast.scaled_dot_product_attention(qs[i % 8], k, v, scale=D ** -0.5)
    row = {'fp16 SDPA': [per_call(f16, c) for c in (1, 8)] + [build_only(f16)]}
    del k, v
    for scheme in ('turbo:4', 'affine:4'):
        c = TurboQuantKVCache(4, 4) if scheme.startswith('turbo') else CodecKVCache(AffineCodec(4), AffineCodec(4))
        for s in range(0, N - 1, 8192):
            m = min(8192, N - 1 - s)
            c.update_and_fetch(mx.random.normal((B, Hkv, m, D)).astype(dt), mx.random.normal((B, Hkv, m, D)).astype(dt)); mx.eval(c.keys, c.values)
        ks, vs = c.update_and_fetch(mx.random.normal((B, Hkv, 1, D)).astype(dt), mx.random.normal((B, Hkv, 1, D)).astype(dt))
        for rows in (0, 256):
            A.META_ROWS = rows
            fa = lambda i: c.attend(qs[i % 8], ks, vs, scale=D ** -0.5)
            row[f'{scheme} attend, META_ROWS={rows}'] = [per_call(fa, cc) for cc in (1, 8)] + [build_only(fa)]
        A.META_ROWS = 256
        del c, ks, vs
    log("call | 1 call per eval (ms) | 8 calls per eval (ms) | graph build only (us per call)")
    for name, (a, b, bo) in row.items(): log(f"{name} | {a:.4f} | {b:.4f} | {bo:.1f}")

log("\n## empty custom kernels (one float in, one out): ms per call, 1 / 8 calls per mx.eval")
x = mx.zeros((1,), mx.float32); mx.eval(x)
for label, pad in (('small source', 0), ('45 KB source', 45000)):
    kern = mx.fast.cuda_kernel(name=f"kvq_empty_{pad}", input_names=['inp'], output_names=['out'],
                               source=("/*" + "x" * pad + "*/\n" if pad else "") + "if (threadIdx.x == 0) out[0] = inp[0];")
    f = lambda i: kern(inputs=[x], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])[0]
    log(f"{label} | {per_call(f, 1):.4f} | {per_call(f, 8):.4f} | {build_only(f):.1f}")
Path(args.out).mkdir(parents=True, exist_ok=True)
(Path(args.out) / 'fixed_costs_cuda.log').write_text('\n'.join(lines) + '\n')
