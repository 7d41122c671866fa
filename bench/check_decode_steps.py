"""Decode steps through a cache exactly as a model runs them (update_and_fetch, then the cache's attention), checked step by
step against the reference attention over the same stored codes, on the GPU. The first step of a configuration goes
through the first-use check of the fused kernels; the later ones through the memoized launcher (`attention._fast_final`),
which this script confirms served them.

    python3 bench/check_decode_steps.py [--out DIR]
"""
import argparse, json, sys, time, warnings
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A, qcache as Q
from mlx_kvq.codecs import AffineCodec, CachedSide, codec_attention
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turboquant import TurboQuantKVCache
from calcodecs import calibrated_pair, calibrated as _calibrated   # bench/calcodecs.py
from knobs import apply_knobs; apply_knobs()   # KVQ_KNOBS="NAME=VALUE ..." (bench/knobs.py)

def calibrated(D):
    "Two calibrated turbo codecs as `auto:B` plans them (centered, scaled, an outlier band of 5 bits): decode steps through the final path's dense finish (query kernel, decode kernel finishing the attention)"
    return CodecKVCache(*calibrated_pair(4, 4, D))

CACHES = {'turbo:4': lambda D: TurboQuantKVCache(4, 4), 'turbo:3': lambda D: TurboQuantKVCache(3, 3),
          'turbo:4,2': lambda D: TurboQuantKVCache(4, 2), 'affine:4': lambda D: CodecKVCache(AffineCodec(4), AffineCodec(4)),
          'affine:8,4': lambda D: CodecKVCache(AffineCodec(8), AffineCodec(4)), 'calibrated 4o5': calibrated,
          # auto:B's one-band keys (tq3cs) beside outlier-band values: the keys' queries prepared in the decode kernel (`attention._query_kind`)
          'calibrated 3/6o': lambda D: CodecKVCache(_calibrated(3, 0, D, outliers=False), _calibrated(6, 1, D))}


def gpu_encoded(side):
    """The side with its staged tokens encoded on the default (GPU) stream, as the cache will store them, and appended
    to its quantized parts: the CPU stream's reference must not re-encode them (MLX's CPU `mx.quantize` rounds ties to
    even, its CUDA build away from zero: affine codes differ at ties, more often from bfloat16 / float16 inputs)"""
    if side.staged is None or side.tail is None or not side.tail.shape[-2]: return side
    enc = side.codec.encode(side.tail); mx.eval(enc)
    parts = tuple(mx.concatenate([p, e], axis=-2) for p, e in zip(side.parts, enc)) if side.n_quantized else enc
    return CachedSide(side.codec, side.head, parts, None)


def run(scheme, B, Hkv, G, D, n0, dtype, steps=4, seed=0):
    served = []
    orig, orig_runner = A._fast_final, Q.staged_runner
    A._fast_final = lambda *a: served.append(orig(*a)) or served[-1]
    def runner(*a):   # a stage's later steps: the launcher's run that the cache holds for the stage (`CodecKVCache.attend`)
        r = orig_runner(*a)
        return None if r is None else tuple((lambda *b, f=f: served.append(f(*b)) or served[-1]) for f in r)   # (read, write)
    Q.staged_runner = runner
    try:
        mx.random.seed(seed)
        c = CACHES[scheme](D)
        ks, vs = mx.random.normal((B, Hkv, n0 + steps, D)).astype(dtype), mx.random.normal((B, Hkv, n0 + steps, D)).astype(dtype)
        c.update_and_fetch(ks[:, :, :n0], vs[:, :, :n0])
        worst = 0.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for t in range(n0, n0 + steps):
                k, v = c.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
                q = mx.random.normal((B, Hkv * G, 1, D)).astype(dtype)
                out = c.attend(q, k, v, scale=D ** -0.5)
                kr, vr = gpu_encoded(k), gpu_encoded(v)
                with mx.stream(mx.cpu):   # the reference in exact float32 (a GPU's float32 matmul may round to TF32: staged tokens' exact scores)
                    ref = codec_attention(q.astype(mx.float32), kr, vr, scale=D ** -0.5)
                worst = max(worst, (mx.abs(out.astype(mx.float32) - ref).max() / mx.abs(ref).max()).item())
        n_served = sum(s is not None for s in served)
        tol = 1e-3 if dtype == mx.float32 else 2e-3 + (2 ** -8 if dtype == mx.bfloat16 else 0.0)   # the fused output is rounded to bfloat16
        ok = worst <= tol and n_served >= steps - 2 and not caught   # the first step verifies the kernel; a staging cache's first staged step the staged one
        return dict(scheme=scheme, B=B, Hkv=Hkv, G=G, D=D, n=n0, dtype=str(dtype).split('.')[-1], err=worst,
                    launcher_steps=n_served, warnings=[str(w.message)[:200] for w in caught], ok=ok)
    finally:
        A._fast_final, Q.staged_runner = orig, orig_runner


def prefill(scheme, B, Hkv, G, D, n0, Lq, dtype, seed=0):
    "A prefill chunk of Lq tokens after n0 cached ones (the GPU's decode-once + fused SDPA path) against the reference"
    mx.random.seed(seed)
    c = CACHES[scheme](D)
    c.update_and_fetch(mx.random.normal((B, Hkv, n0, D)).astype(dtype), mx.random.normal((B, Hkv, n0, D)).astype(dtype))
    k, v = c.update_and_fetch(mx.random.normal((B, Hkv, Lq, D)).astype(dtype), mx.random.normal((B, Hkv, Lq, D)).astype(dtype))
    q = mx.random.normal((B, Hkv * G, Lq, D)).astype(dtype)
    out = c.attend(q, k, v, scale=D ** -0.5, mask='causal')
    ref = codec_attention(q.astype(mx.float32), k, v, scale=D ** -0.5, mask='causal')
    err = (mx.abs(out.astype(mx.float32) - ref).max() / mx.abs(ref).max()).item()
    tol = 2e-3 if dtype == mx.float32 else 4e-3 if dtype == mx.float16 else 1.6e-2   # one fused SDPA in the model dtype (float32: the products on this backend differ by ~1e-3 between the two spaces)
    return dict(scheme=scheme, prefill=Lq, n=n0, D=D, G=G, dtype=str(dtype).split('.')[-1], err=err, ok=err <= tol)


def main():
    p = argparse.ArgumentParser(); p.add_argument("--out", default=None)
    p.add_argument("--steps", type=int, default=4, help="decode steps per configuration (with CodecKVCache.stage=S set by KVQ_KNOBS, more than S cross a stage's quantization)")
    p.add_argument("--schemes", nargs="+", default=None, choices=list(CACHES), help="only these cache schemes' decode steps, no prefill rows")
    a = p.parse_args()
    rows = []
    print(f"check_decode_steps: MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for scheme in a.schemes or CACHES:
        for (B, Hkv, G, D, n0, dt) in ((1, 8, 4, 64, 3000, mx.float16), (2, 8, 4, 128, 1500, mx.float16), (1, 1, 4, 256, 700, mx.bfloat16),
                                       (1, 4, 8, 128, 5000, mx.float32), (1, 2, 16, 128, 900, mx.float16),
                                       (1, 1, 4, 256, 20000, mx.float16), (1, 2, 4, 128, 24000, mx.float16)):   # one / two KV heads over more than FOLD chunks: grouped per block, folded
            if scheme.startswith('affine') and D % 64: continue
            r = run(scheme, B, Hkv, G, D, n0, dt, a.steps)
            rows.append(r)
            print(json.dumps(r), flush=True)
    for scheme in () if a.schemes else ('turbo:4', 'turbo:3', 'turbo:4,2', 'affine:4'):
        for (D, G, dt) in ((64, 4, mx.float16), (128, 4, mx.bfloat16), (128, 8, mx.float32)):
            r = prefill(scheme, 1, 8, G, D, 3000, 256, dt)
            rows.append(r)
            print(json.dumps(r), flush=True)
    bad = [r for r in rows if not r['ok']]
    print(f"decode steps: {len(rows) - len(bad)}/{len(rows)} configurations ok")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "check_decode_steps.json").write_text(json.dumps(rows, indent=1))
    sys.exit(1 if bad else 0)


if __name__ == "__main__": main()
