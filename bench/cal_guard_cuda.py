"""Whether the calibrated pair kernel's first-use check accepts each launch class on this GPU: a side encoded alone
(`CalibratedTurboCodec.encode` on CUDA = the pair kernel with the codec on both sides, `_cal_encode_one`) and a key /
value pair, head dims 64 / 128 / 256, 1-64 tokens, float16 / bfloat16 / float32. A refused class makes every later
update of that class take the traced encode (MLX operations) and warns once; this prints each class's verdict, the
reason, and the codes that differ from the traced encode (`_encode_default`) on the same input; then whether a codec's
decode of a token's parts alone is bit-equal to its decode among 3,001 tokens.

    python3 bench/cal_guard_cuda.py [--out FILE] [--decode-only]

Written 2026-12-02 for the question `bench/h200_20261202d/README.md` left: a d256 stage's first token (encoded alone
by `dequantized`) differed from the pair kernel's codes on the H200 while the kernel-written tokens did not."""
import argparse, json, sys, time, warnings
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq import calibrated as C
from mlx_kvq.packing import unpack as unpack_codes
from calcodecs import calibrated


def codes_differ(kc, a, b, D):
    "Codes (and gammas beyond a float16 step) that differ between two parts tuples of codec kc"
    n_code, n_gam = 0, 0
    for (idx, bits), w, g, rw, rg in zip(kc.bands(D), a[0::2], a[1::2], b[0::2], b[1::2]):
        n = D if idx is None else len(idx)
        n_code += (unpack_codes(w, bits, n) != unpack_codes(rw, bits, n)).sum().item()
        x, y = g.astype(mx.float32), rg.astype(mx.float32)
        n_gam += (mx.abs(x - y) > 2e-3 * mx.abs(y) + 1e-6).sum().item()
    return n_code, n_gam


def main():
    p = argparse.ArgumentParser(); p.add_argument('--out', default=None)
    p.add_argument('--decode-only', action='store_true', help="only the last section (one token's decode against the same token's among 3,001)"); a = p.parse_args()
    print(f"cal_guard_cuda: MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    rows = []
    for D in () if a.decode_only else (64, 128, 256):
        kc, vc = calibrated(4, 0, D), calibrated(5, 1, D)
        for dt in (mx.float16, mx.bfloat16, mx.float32):
            for n in (1, 4, 64):
                for pair in ('alone', 'pair'):
                    mx.random.seed(n + D)
                    x = mx.random.normal((1, 2, n, D)).astype(dt); y = mx.random.normal((1, 2, n, D)).astype(dt)
                    with warnings.catch_warnings(record=True) as ws:
                        warnings.simplefilter('always')
                        if pair == 'alone': got = (kc.encode(x),); ref = (kc._encode_default(x),); cls = C._cal_class(kc, x, kc, x)
                        else: got = C.calibrated_encode_pair(kc, x, vc, y); ref = (kc._encode_default(x), vc._encode_default(y)); cls = C._cal_class(kc, x, vc, y)
                    state = C._CALGUARD['cuda'].state.get(cls) if 'cuda' in C._CALGUARD else None
                    diffs = [codes_differ(c, g, r, D) for c, g, r in zip((kc, vc), got or (), ref)] if got is not None else None
                    r = dict(D=D, dtype=str(dt).split('.')[-1], tokens=n, call=pair, verified=state, ready=bool(C._CALREADY.get(cls)),
                             warning=[str(w.message)[:400] for w in ws], codes_gammas_off_traced=diffs)
                    print(json.dumps(r), flush=True); rows.append(r)
    # A codec's decode of one token's parts against the same token decoded among many (its rotation's inverse is a
    # matmul over the rows given): on the GPU one row and many rows need not round alike.
    for D in (128, 256):
        kc = calibrated(5, 1, D)
        for H in (1, 8):
            mx.random.seed(D + H)
            parts = kc._encode_default(mx.random.normal((1, H, 3001, D)))
            full = kc.decode(parts)[..., -1:, :]
            for m in (1, 2, 4):
                alone = kc.decode(tuple(p[..., -m:, :] for p in parts))[..., -1:, :]
                r = dict(decode_rows=m, D=D, heads=H, bit_equal=mx.array_equal(full, alone).item(), max_abs=mx.abs(full - alone).max().item())
                print(json.dumps(r), flush=True); rows.append(r)
    refused = [r for r in rows if r.get('verified') is False]
    print(f"# {len(rows)} calls, {len(refused)} in refused classes")
    if a.out: Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    main()
