"""On the GPU itself: `packing.decode_turbo_pair` / `decode_affine_pair` (both sides of a layer's past decoded to the
model's space in one launch) against the codecs' own decode of the held slices, and a prefill chunk through
`attention.attend` (the `_pair_prefill` route) against `codec_attention` in float32, over dims, bits, dtypes and storages holding fewer tokens than their capacity;
`packing.quantize_append_pair` (a prefill chunk quantized into grown storages) against the held slices, the reference
quantization and zeros, `packing.quantize_into_pair` (a decode token quantized into a full ring) against the kept
rows and the reference quantization, `packing.affine_into_pair` (an affine pair's decode token into a full ring) against
the kept rows and MLX's CUDA `mx.quantize`, sliding-window caches of both kinds against their slice path, and the kept launches of verified pair decodes at other token counts.

    python3 bench/check_prefill_pair.py [--ring | --affine-ring | --cal]   # one line per case and 'N failing' at the end; --ring: the ring
                                                                   # writes and the sliding-window caches only (they run first);
                                                                   # --affine-ring: the affine ones only; --cal: the prefill chunks
                                                                   # of the calibrated kinds `auto:B` plans only"""
import sys, warnings
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq import packing as P, attention as A
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.codecs import codec_attention, AffineCodec

TOL = {mx.float32: 1e-5, mx.float16: 2e-3, mx.bfloat16: 1.6e-2}


def side(bits, dim, seed, cap, key):
    c = TurboCodec(bits, seed=seed); c.check_dim(dim)
    w, n = P.quantize_pack(mx.random.normal((2, 4, cap, dim), key=mx.random.key(key)), c.rotation, c.codebook)
    return (w, n, c.rotation, c.codebook), c


def ring_cache(label, codecs, keep, dim, dt, flag):
    """A sliding-window cache (window 64, `keep` sink tokens, the codecs `codecs()` makes) fed a 40-token prompt and 149
    decode tokens: the ring kernel and its held launch against the same cache with packing.`flag` off (slice writes), bit
    for bit at every step, and its attention (the held launch once full) against the reference; prints a line, returns ok"""
    from mlx_kvq.kvsplit import QuantizedRotatingKVCache
    make = lambda: QuantizedRotatingKVCache(64, keep, *codecs())
    h = lambda L, key: mx.random.normal((1, 2, L, dim), key=mx.random.key(key)).astype(dt)
    ring, sliced, same, held, worst, runs = make(), make(), True, 0, 0.0, 0
    for i in range(150):
        k, v = (h(40, 0), h(40, 1)) if i == 0 else (h(1, 2 * i), h(1, 2 * i + 1))
        a = ring.update_and_fetch(k, v)
        held += ring.__dict__.get('_ringw') is not None
        if i:     # the ring's attention (its held launch once full) against the reference over what it holds
            q = mx.random.normal((1, 8, 1, dim), key=mx.random.key(1000 + i)).astype(dt)
            runs += ring.__dict__.get('_ringa') is not None
            out = ring.attend(q, *a, scale=dim ** -0.5)
            ref = codec_attention(q.astype(mx.float32), A.CachedSide(ring.k_codec, parts=tuple(a[0])), A.CachedSide(ring.v_codec, parts=tuple(a[1])), scale=dim ** -0.5)
            worst = max(worst, mx.abs(out.astype(mx.float32) - ref).max().item() / mx.abs(ref).max().item())
        setattr(P, flag, False); b = sliced.update_and_fetch(k, v); setattr(P, flag, True)
        same = same and (ring.offset, ring._idx) == (sliced.offset, sliced._idx) and all(
            x.shape == y.shape and mx.array_equal(x, y).item() for x, y in zip((*a[0], *a[1]), (*b[0], *b[1])))
    ok = same and held >= 100 and runs >= 100 and worst <= max(TOL[dt], 2e-3)
    print(f"ring cache {label}: 150 steps bit-equal to the slice path {same}, held write on {held} steps, "
          f"held attention on {runs}, attention vs reference {worst:.2e} {'ok' if ok else 'FAIL'}")
    return ok


def main():
    print(f"backend {P.kernel_backend()}, MLX {mx.__version__}, {mx.default_device()}")
    bad = 0
    warnings.simplefilter('error')     # a first-use refusal warns: a failure here
    if "--cal" in sys.argv:     # the calibrated kinds' prefill chunks only
        bad = prefill_cases((('cal1:3,4', 0), ('cal1:2,6', 16), ('cal1:4,4', 0), ('cal:5,4', 0), ('cal1:3,a8', 0), ('cal1:4,a8', 16), ('cal:5,a8', 0),
                             ('calko:3,6', 0), ('calvo:5,4', 16)))
        print(f"{bad} failing")
        sys.exit(1 if bad else 0)
    turbo_rings = "--affine-ring" not in sys.argv     # --affine-ring: the affine ring write and caches only
    for (bits, dim) in [(4, 64), (3, 128), (4, 256), (2, 256), (8, 128)] * turbo_rings:     # a decode token quantized into a full sliding-window ring
        for dt in (mx.float16, mx.bfloat16, mx.float32):
            (k, kc), (v, vc) = side(bits, dim, 1, 512, bits + dim + 2), side(bits, dim, 2, 512, bits + dim + 3)
            errs = []
            for n, pos in ((1, 0), (1, 300), (1, 511), (3, 17)):    # the first call checked by the guard, then its kept launch
                x = lambda key: (mx.random.normal((2, 4, n, dim), key=mx.random.key(key)) * 2).astype(dt)
                args = (k[:2], v[:2], pos, x(pos + 5), kc.rotation, kc.codebook, x(pos + 6), vc.rotation, vc.codebook)
                try:
                    out = P.quantize_into_pair(*args)
                    why = 'declined' if out is None else P._qi_agree(out, P._qi_reference(*args), *args)
                    ok = why is None and P._QIGUARDS['cuda'].state.get(P._qi_class(*args)) is True
                except Exception as e: ok, why = False, repr(e)[:200]
                errs.append(why)
                bad += not ok
            print(f"ring write pair {bits}b d{dim} {dt}: {errs} {'ok' if all(e is None for e in errs) else 'FAIL'}")
    for bits, dim, keep, dt in [(4, 256, 0, mx.float16), (3, 128, 4, mx.bfloat16), (4, 64, 0, mx.float32)] * turbo_rings:
        bad += not ring_cache(f"turbo:{bits} d{dim} keep {keep} {dt}", lambda: (TurboCodec(bits), TurboCodec(bits, seed=1)), keep, dim, dt, 'RING')
    for kv, gs, dim in [((4, 4), 64, 128), ((8, 4), 64, 256), ((4, 8), 32, 64), ((8, 8), 128, 128), ((4, 4), 128, 256), ((4, 4), 32, 96)]:
        for dt in (mx.float16, mx.bfloat16, mx.float32):     # an affine pair's decode token quantized into a full ring (`affine_into_pair`)
            kc, vc = AffineCodec(kv[0], gs), AffineCodec(kv[1], gs)
            k = kc.encode(mx.random.normal((2, 4, 512, dim), key=mx.random.key(kv[0] + dim)))
            v = vc.encode(mx.random.normal((2, 4, 512, dim), key=mx.random.key(kv[1] + dim + 1)))
            errs, exact = [], True
            for n, pos in ((1, 0), (1, 300), (1, 511), (3, 17)):
                x = lambda key: (mx.random.normal((2, 4, n, dim), key=mx.random.key(key)) * 2 + 0.3).astype(dt)
                args = (k, v, pos, x(pos + 5), (kv[0], gs), x(pos + 6), (kv[1], gs))
                try:
                    out = P.affine_into_pair(*args)
                    ref = P._ai_reference(*args)
                    why = 'declined' if out is None else P._ai_agree(out, ref, *args)
                    ok = why is None and P._AIGUARDS['cuda'].state.get(P._ai_class(*args)) is True
                    exact = exact and out is not None and all(mx.array_equal(a, b).item() for a, b in zip((*out[0], *out[1]), (*ref[0], *ref[1])))
                except Exception as e: ok, why = False, repr(e)[:200]
                errs.append(why)
                bad += not ok
            print(f"ring write affine {kv[0]}/{kv[1]}b g{gs} d{dim} {dt}: {errs} bit-equal to mx.quantize {exact} {'ok' if all(e is None for e in errs) else 'FAIL'}")
    for kv, gs, dim, keep, dt in [((4, 4), 64, 256, 0, mx.float16), ((8, 4), 64, 128, 4, mx.bfloat16), ((4, 4), 32, 64, 0, mx.float32)]:
        bad += not ring_cache(f"affine:{kv[0]},{kv[1]} g{gs} d{dim} keep {keep} {dt}", lambda: (AffineCodec(kv[0], gs), AffineCodec(kv[1], gs)), keep, dim, dt, 'AFFINE_RING')
    if "--ring" in sys.argv or not turbo_rings:     # the ring write and the sliding-window caches only
        print(f"{bad} failing")
        sys.exit(1 if bad else 0)
    for (bk, dk), (bv, dv) in [((4, 64), (4, 64)), ((3, 128), (3, 128)), ((4, 128), (2, 128)), ((2, 256), (4, 256)), ((8, 64), (1, 64)), ((4, 256), (3, 64))]:
        for dt in (mx.float16, mx.bfloat16, mx.float32):
            k, kc = side(bk, dk, 1, 300, bk * 7 + dk)
            v, vc = side(bv, dv, 2, 280, bv * 11 + dv)
            try:
                K, V = P.decode_turbo_pair(k, v, 257, dt)
                errs = []
                for got, s, c in ((K, k, kc), (V, v, vc)):
                    ref = c.decode((s[0][..., :257, :], s[1][..., :257, :]))
                    errs.append(mx.abs(got.astype(mx.float32) - ref).max().item() / mx.abs(ref).max().item())
                ok = max(errs) <= TOL[dt] and P._DPGUARDS['cuda'].state.get(P._dp_class(k, v, 257, dt)) is True
            except Exception as e: ok, errs = False, [repr(e)[:200]]
            bad += not ok
            print(f"pair k {bk}b d{dk} v {bv}b d{dv} {dt}: rel err {errs} {'ok' if ok else 'FAIL'}")
    P.APPEND = True     # off by default (measured no faster): checked all the same, as `SCHEME/append` runs it
    for (bits, dim) in [(4, 64), (3, 128), (2, 256), (8, 128), (1, 64)]:     # a prefill chunk quantized into grown storages
        for dt in (mx.float16, mx.bfloat16, mx.float32):
            (k, kc), (v, vc) = side(bits, dim, 1, 300, bits + dim), side(bits, dim, 2, 300, bits + dim + 1)
            errs = []
            for n, prev, cap in ((100, 257, 512), (7, 300, 320), (256, 40, 512)):   # the first call checked by the guard, then its kept launch
                x = lambda key: (mx.random.normal((2, 4, n, dim), key=mx.random.key(key)) * 2).astype(dt)
                args = (k[:2], v[:2], prev, cap, x(n), kc.rotation, kc.codebook, x(n + 1), vc.rotation, vc.codebook)
                try:
                    out = P.quantize_append_pair(*args)
                    why = 'declined' if out is None else P._qa_agree(out, P._qa_reference(*args), *args)
                    ok = why is None and P._QAGUARDS['cuda'].state.get(P._qa_class(*args)) is True
                except Exception as e: ok, why = False, repr(e)[:200]
                errs.append(why)
                bad += not ok
            print(f"append pair {bits}b d{dim} {dt}: {errs} {'ok' if all(e is None for e in errs) else 'FAIL'}")
    P.APPEND = False
    for (bk, dk), (bv, dv) in [((4, 64), (4, 64)), ((3, 128), (2, 256))]:   # kept launches of verified pair decodes: other counts
        k, kc = side(bk, dk, 1, 300, 5); v, vc = side(bv, dv, 2, 280, 6)
        for n in (1, 100, 280):
            K, V = P.decode_turbo_pair(k, v, n, mx.float16)
            refs = [c.decode((s[0][..., :n, :], s[1][..., :n, :])) for s, c in ((k, kc), (v, vc))]
            err = max(mx.abs(got.astype(mx.float32) - r).max().item() / mx.abs(r).max().item() for got, r in zip((K, V), refs))
            ok = err <= TOL[mx.float16]; bad += not ok
            print(f"kept pair decode k {bk}b d{dk} v {bv}b d{dv} n {n}: rel err {err:.3g} {'ok' if ok else 'FAIL'}")
    for (bk, gk, dk), (bv, gv, dv) in [((4, 64, 64), (4, 64, 64)), ((8, 64, 128), (4, 64, 128)), ((2, 32, 256), (1, 128, 128)), ((8, 128, 256), (8, 32, 64))]:
        for dt in (mx.float16, mx.bfloat16, mx.float32):
            kc, vc = AffineCodec(bk, gk), AffineCodec(bv, gv)
            tops = []
            k = (*kc.encode(mx.random.normal((2, 4, 300, dk))), bk, gk); v = (*vc.encode(mx.random.normal((2, 4, 280, dv))), bv, gv)
            try:
                K, V = P.decode_affine_pair(k, v, 257, dt)
                errs = []
                for got, x, c in ((K, k, kc), (V, v, vc)):
                    ref = c.decode(tuple(a[..., :257, :] for a in x[:3]), mx.float32)
                    tops.append(mx.abs(ref).max().item())     # a reference of zeros (MLX's own decode) is reported, not divided by
                    errs.append(mx.abs(got.astype(mx.float32) - ref).max().item() / max(tops[-1], 1e-30))
                launched = bk in P.AFFINE_PAIR_BITS and bv in P.AFFINE_PAIR_BITS   # other widths: MLX's dequantize, the kernel never launched
                ok = max(errs) <= TOL[dt] and P._APGUARDS['cuda'].state.get(P._ap_class(k, v, 257, dt)) is (True if launched else None)
            except Exception as e: ok, errs = False, [repr(e)[:200]]
            bad += not ok
            print(f"affine pair k {bk}b g{gk} d{dk} v {bv}b g{gv} d{dv} {dt}: rel err {errs} (reference max {[f'{t:.3g}' for t in tops]}) {'ok' if ok else 'FAIL'}")
    bad += prefill_cases((('turbo:4', 0), ('turbo:3,2', 0), ('turbo:4', 16), ('affine:4', 0), ('affine:8,4', 0), ('affine:4', 16)))
    print(f"{bad} failing")


def cal_cache(kv, window):
    """A cache of the calibrated kinds `auto:B` plans (`bench/calcodecs.py`): `cal1:K,V` one band a side (the turbo pair
    launch decodes both), `cal1:K,a8` one-band keys with 8-bit affine values (the keys by the pair launch over
    themselves), `cal:K,V` / `cal:K,a8` keys with an outlier band (each side by its own decode), `calko:K,V` one-band
    keys beside values with an outlier band and `calvo:K,V` the other way round (the one-band side by the pair launch
    over itself, the other by its decode: `_pair_prefill` since 2026-12-02)"""
    from calcodecs import calibrated
    kind, bits = kv.split(':'); kb, vb = bits.split(',')
    kc = calibrated(int(kb), 0, 128, outliers=kind in ('cal', 'calvo'))
    vc = AffineCodec(8) if vb == 'a8' else calibrated(int(vb), 1, 128, outliers=kind in ('cal', 'calko'))
    return CodecKVCache(kc, vc, window=window)


def prefill_cases(cases):
    """A chunk of 256 queries over a 3,256-token past through `attention.attend` (the pair route where it applies) against
    `codec_attention` in float32; calibrated cases also say whether the turbo pair launch served them. Returns failures"""
    bad = 0
    for kv, window in cases:
        kb, _, vb = kv.split(':')[1].partition(',')
        C = TurboCodec if kv.startswith('turbo') else AffineCodec
        for dt in (mx.float16, mx.bfloat16):
            cache = cal_cache(kv, window) if kv.startswith('cal') else CodecKVCache(C(int(kb)), C(int(vb or kb), **({'seed': 1} if C is TurboCodec else {})), window=window)
            cache.update_and_fetch(mx.random.normal((1, 8, 3000, 128)).astype(dt), mx.random.normal((1, 8, 3000, 128)).astype(dt))
            ks, vs = cache.update_and_fetch(mx.random.normal((1, 8, 256, 128)).astype(dt), mx.random.normal((1, 8, 256, 128)).astype(dt))
            q = mx.random.normal((1, 32, 256, 128)).astype(dt)
            calls, pair = [], A.decode_turbo_pair
            A.decode_turbo_pair = lambda *a: calls.append(1) or pair(*a)
            try:
                got = A.attend(q, ks, vs, scale=128 ** -0.5, mask='causal')
                ref = codec_attention(q.astype(mx.float32), ks, vs, scale=128 ** -0.5, mask='causal')
                err = mx.abs(got.astype(mx.float32) - ref).max().item() / mx.abs(ref).max().item()
                ok = err <= (2e-3 if dt == mx.float16 else 1.6e-2) and (not kv.startswith('cal') or bool(calls) == (kv.split(':')[0] in ('cal1', 'calko', 'calvo')))
            except Exception as e: ok, err = False, repr(e)[:200]
            finally: A.decode_turbo_pair = pair
            bad += not ok
            print(f"prefill {kv} window {window} {dt}: rel err {err}{f', turbo pair launch {bool(calls)}' if kv.startswith('cal') else ''} {'ok' if ok else 'FAIL'}")
    return bad


if __name__ == '__main__': main()
