"""Staged decode tokens (`CodecKVCache.stage`; turbo, affine and calibrated codecs) on the GPU, step by step: a staging cache beside one that quantizes every
step's token (stage 0), fed the same tokens and queries through `attend` (the folded kernel that quantizes the staged
tokens itself, `attention_kernels._tail_source`, once verified). What must hold: both caches hold the same codes at
every step (`side_codes` bit-equal: the staged tokens as their codec encodes them against the pair kernel's stored
ones; `same_dequantized`: their decoded floats, which on the H200 differed at a lone staged token where the codes did not,
while `dequantize` decoded staged tokens apart from the stored ones), the two outputs agree to float32 rounding (float32 models: the kernel's in-kernel codes and norms are the
stored ones; one differing code would show as ~1e-3), and each output is within the final path's bar of the reference
(`codec_attention` on the CPU stream, float32). The quantize kernels are verified on a scratch cache first: until
2026-11-28 a kernel's first use returned the reference implementation's codes, which may differ from the kernel's at a
boundary (one cache's prefill then held other codes than the other's: `bench/h200_20261128h/qstage_first/`).

    python3 bench/check_staged_cuda.py [--out DIR] [--cases TEXT]

Calibrated cases (since 2026-12-01, `auto:B`'s codecs, `bench/calcodecs.py`): the kernel quantizes their staged tokens
by the calibrated pair kernel's own text; the stored side is that pair kernel's (one launch a stage, or a step).
"""
import argparse, json, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import codec_attention
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turbo_codec import TurboCodec
sys.path.insert(0, str(Path(__file__).resolve().parent))
from calcodecs import calibrated


def rel(a, b):
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    return (mx.abs(a - b).max() / mx.abs(b).max()).item()


def side_codes(cache):
    """Every token's parts (codes and their scalars) of both sides, in token order: the stored tokens' parts, then the
    staged tokens as their codec encodes them (`CachedSide.quantized_parts`). Compared as parts, not only as dequantized
    floats: on the H200 a lone staged token of the d256 calibrated case (one KV head), decoded apart from the stored
    tokens as `dequantize` did until 2026-12-02, came out other floats than the same codes among the stored tokens
    (cause not pinned down; `bench/h200_20261202e/README.md`)"""
    return [p for side in cache._fetch() for p in side.quantized_parts() or ()]


def case(name, kbits, vbits, B, Hkv, G, D, n0, dtype, stage=8, steps=20):
    "kbits / vbits: turbo bits, or a codec (affine, calibrated)"
    mx.random.seed(0)
    kc = kbits if not isinstance(kbits, int) else TurboCodec(kbits)
    vc = vbits if not isinstance(vbits, int) else TurboCodec(vbits, seed=1)
    w = CodecKVCache(kc, vc); w.stage = 0   # the quantize kernels verified first: a first use returns the reference's codes
    w.update_and_fetch(*(mx.random.normal((B, Hkv, 2, D)).astype(dtype),) * 2); w.update_and_fetch(*(mx.random.normal((B, Hkv, 1, D)).astype(dtype),) * 2)
    c, p = CodecKVCache(kc, vc), CodecKVCache(kc, vc); c.stage, p.stage = stage, 0
    ks, vs = mx.random.normal((B, Hkv, n0 + steps, D)).astype(dtype), mx.random.normal((B, Hkv, n0 + steps, D)).astype(dtype)
    for x in (c, p): x.update_and_fetch(ks[:, :, :n0], vs[:, :, :n0])
    rows = []
    for t in range(n0, n0 + steps):
        q = mx.random.normal((B, Hkv * G, 1, D)).astype(dtype)
        k, v = c.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
        deferred = c._pend is not None   # the token left for the decode kernel to write (`CodecKVCache._defer`)
        out = c.attend(q, k, v, scale=D ** -0.5)
        deferred = deferred and c._pend is None and c._stage is k.stage_buf   # ... and written by it (the buffer its call returned)
        pk, pv = p.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
        outp = p.attend(q, pk, pv, scale=D ** -0.5)
        tail = A._staged_tail(k, v)
        with mx.stream(mx.cpu):
            ref = codec_attention(q.astype(mx.float32), pk, pv, scale=D ** -0.5)
        same = all(mx.array_equal(a, b).item() for a, b in zip(side_codes(c), side_codes(p)))
        same_deq = all(mx.array_equal(a, b).item() for a, b in zip(c.dequantized(), p.dequantized()))
        r = dict(case=name, dtype=str(dtype).split('.')[-1], B=B, G=G, D=D, step=t, T=0 if tail is None else tail[2],
                 cap=A.stage_capacity(kc, vc), staged_vs_stored=rel(out, outp), staged_vs_reference=rel(out, ref),
                 stored_vs_reference=rel(outp, ref), same_codes=same, same_dequantized=same_deq, written_by_kernel=deferred)
        print(json.dumps(r), flush=True); rows.append(r)
    return rows


def main():
    p = argparse.ArgumentParser(); p.add_argument("--out", default=None)
    p.add_argument("--cases", default="", help="only the cases whose name holds this text (e.g. affine)"); a = p.parse_args()
    from knobs import apply_knobs
    knobs = apply_knobs()   # KVQ_KNOBS (e.g. "CAL_WHT=True"), before the first launch
    if knobs: print('# knobs', *knobs)
    print(f"check_staged_cuda: MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    cases = [('turbo:4 d128', 4, 4, 1, 8, 4, 128, 5000), ('turbo:4 d64 B2', 4, 4, 2, 8, 4, 64, 3000),
             ('turbo:3/4 d128 G8', 3, 4, 1, 4, 8, 128, 4000), ('turbo:4 d256 (Gemma)', 4, 4, 1, 1, 4, 256, 3000),
             ('affine:4 d128', AffineCodec(4), AffineCodec(4), 1, 8, 4, 128, 5000), ('affine:8,4 d64 B2', AffineCodec(8), AffineCodec(4), 2, 8, 4, 64, 3000),
             ('affine:3 g32 / affine:6 g128 d256', AffineCodec(3, 32), AffineCodec(6, 128), 1, 1, 4, 256, 3000),
             ('calibrated 3o/6o d64 (Llama-3.2-1B)', calibrated(3, 0, 64), calibrated(6, 1, 64), 1, 8, 4, 64, 3000),
             ('calibrated 2 / 6, one band d64 B2', calibrated(2, 0, 64, outliers=False), calibrated(6, 1, 64, outliers=False), 2, 8, 4, 64, 3000),
             ('calibrated 4o keys / affine:8 d64', calibrated(4, 0, 64), AffineCodec(8), 1, 8, 4, 64, 3000),
             ('calibrated 4o/5o d128', calibrated(4, 0, 128), calibrated(5, 1, 128), 1, 8, 4, 128, 4000),
             ('calibrated 4o/5o d256 (Gemma)', calibrated(4, 0, 256), calibrated(5, 1, 256), 1, 1, 4, 256, 3000)]   # a stage of 4 since 2026-12-02
    for dt in (mx.float32, mx.float16, mx.bfloat16):
        for c in cases:
            if a.cases in c[0]: rows += case(*c, dt)
    staged = [r for r in rows if r['T']]
    worst = lambda k, rs: max((r[k] for r in rs), default=None)
    summary = dict(rows=len(rows), staged_rows=len(staged), written_by_kernel=sum(r['written_by_kernel'] for r in rows), all_same_codes=all(r['same_codes'] for r in rows), all_same_dequantized=all(r['same_dequantized'] for r in rows),
                   worst_staged_vs_stored_float32=worst('staged_vs_stored', [r for r in staged if r['dtype'] == 'float32']),
                   worst_staged_vs_stored_half=worst('staged_vs_stored', [r for r in staged if r['dtype'] != 'float32']),
                   worst_staged_vs_reference=worst('staged_vs_reference', staged), caps=sorted({(r['case'], r['cap']) for r in rows}))
    print("SUMMARY " + json.dumps(summary), flush=True)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True); (Path(a.out) / "check_staged_cuda.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__": main()
