"""A calibrated pair's update (the codecs `auto:B` plans) quantized on CUDA by one launch (`calibrated.calibrated_encode_pair`:
centering and scaling, each band's gather, norm, rotation, codes, gamma and packing in one kernel), run through its host
code with MLX's `cuda_kernel` replaced by the CPU emulator (tests/kernel_emulator.py): against each side's own encode,
refused when wrong, declined where it does not apply, and inside the caches that `auto:B` makes."""
import sys, warnings
from pathlib import Path
import numpy as np
import pytest
import mlx.core as mx

from mlx_kvq import calibrated as Cal
from mlx_kvq.calibrated import CalibratedTurboCodec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nvrtc_util import ptxas_available


@pytest.fixture
def emulated(emulated_packing):
    "The CUDA code path with the emulated kernels, fresh guards and kernels (conftest.py)"


def _codec(bits, D, outliers, seed, centred=True):
    r = np.random.default_rng(seed)
    o = sorted(r.choice(D, outliers, replace=False).tolist()) if outliers else None
    return CalibratedTurboCodec(bits, seed=seed, mean=(r.normal(size=D) * 0.1).tolist() if centred else None,
                                scale=r.uniform(0.5, 2.0, D).tolist() if centred else None,
                                outliers=o, outlier_bits=bits + 1 if outliers else None, dim=D)


def _x(shape, dtype, key): return (mx.random.normal(shape, key=mx.random.key(key)) * 2).astype(dtype)


def _verified_pair(kc, vc, xk, xv):
    "(the pair kernel's parts, each side's `_encode`) of one update, the kernel's first-use check passed without a warning"
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = kc.encode_pair(vc, xk, xv)
    assert Cal._CALGUARD['cuda'].state[Cal._cal_class(kc, xk, vc, xv)] is True
    return got, (kc._encode(xk), vc._encode(xv))


@pytest.mark.parametrize('kb,vb,D,outl,dtype,L', [(5, 4, 64, 8, mx.float32, 3), (4, 3, 64, 0, mx.float16, 1), (3, 2, 96, 0, mx.float32, 2),
                                                  (6, 5, 256, 32, mx.float16, 1), (8, 1, 128, 0, mx.float32, 1), (2, 7, 80, 16, mx.float16, 2)])
@pytest.mark.parametrize('bsearch', [False, True], ids=['scan', 'bsearch'])
def test_the_pair_kernel_is_each_sides_encode(emulated, monkeypatch, kb, vb, D, outl, dtype, L, bsearch):
    """One launch gives each side's `_encode` parts (words and float16 gammas per band, in storage order) for keys with an
    outlier band or none and values of another width; the first-use check passed, the verified launch gives the same,
    and every part decodes to what the reference's decodes to. With `CAL_BSEARCH` (codes by a binary search of the
    boundaries) the same parts bit for bit, 1 to 8 bits"""
    monkeypatch.setattr(Cal, 'CAL_BSEARCH', bsearch)
    assert ('? s : 0' in Cal._cal_side_source('k', D, [(D, kb, False)])[0]) is bsearch   # the knob picks the search's text
    kc, vc = _codec(kb, D, outl, 0), _codec(vb, D, 0, 1, centred=outl == 0)
    xk, xv = _x((2, 3, L, D), dtype, 1), _x((2, 3, L, D), dtype, 2)
    got, ref = _verified_pair(kc, vc, xk, xv)
    for side, want, c in ((got[0], ref[0], kc), (got[1], ref[1], vc)):
        assert len(side) == len(want) == 2 * len(c.bands(D))
        for a, b in zip(side, want):
            assert a.shape == b.shape and a.dtype == b.dtype and mx.array_equal(a, b)    # the emulator's float order matches here
        assert mx.allclose(c.decode(side), c.decode(want))
    again = kc.encode_pair(vc, xk, xv)
    assert all(mx.array_equal(a, b) for a, b in zip((*again[0], *again[1]), (*got[0], *got[1])))


@pytest.mark.parametrize('mutation', [("word |= s >= 0 ? c << s : c >> (-s);", "word |= s >= 0 ? c << s : 0u;"),      # straddling codes dropped
                                      ("__fdiv_rn(__fmul_rn(nrm, uc), fmaxf(cc, 1e-30f))", "__fdiv_rn(uc, fmaxf(cc, 1e-30f))"),   # gamma without the norm
                                      ("ys[warp][(int)C[", "ys[warp][1 + (int)C[")])                                          # the band's channels one off
def test_a_wrong_calibrated_kernel_is_refused(emulated, monkeypatch, mutation):
    "Not vacuous: a kernel that drops straddling codes, forgets the norm in gamma or gathers the wrong channels is refused, and the reference answers"
    orig = Cal._cal_side_source
    def wrong(*a):
        src, off = orig(*a)
        assert mutation[0] in src
        return src.replace(*mutation), off
    monkeypatch.setattr(Cal, '_cal_side_source', wrong)
    kc, vc = _codec(5, 64, 8, 0), _codec(3, 64, 8, 1)
    xk, xv = _x((1, 2, 2, 64), mx.float32, 3), _x((1, 2, 2, 64), mx.float32, 4)
    with pytest.warns(RuntimeWarning, match='calibrated pair'):
        got = kc.encode_pair(vc, xk, xv)
    assert Cal._CALGUARD['cuda'].state[Cal._cal_class(kc, xk, vc, xv)] is False and not Cal._CALREADY
    ref = (kc._encode(xk), vc._encode(xv))
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


@pytest.mark.parametrize('mutation', [("C[{ob} + code + s - 1]", "C[{ob} + code + s]"),       # each probe one boundary up
                                      ("s > 0; s >>= 1", "s > 1; s >>= 1")])                       # the last step skipped
def test_a_wrong_binary_search_is_refused(emulated, monkeypatch, mutation):
    "Not vacuous for `CAL_BSEARCH`: a search that probes the wrong boundary or stops a step early is refused by the first-use check, and the reference answers"
    monkeypatch.setattr(Cal, 'CAL_BSEARCH', True)
    orig = Cal._code_search
    def wrong(bits, ob):
        src = orig(bits, ob); old = mutation[0].replace('{ob}', str(ob))
        assert old in src
        return src.replace(old, mutation[1].replace('{ob}', str(ob)))
    monkeypatch.setattr(Cal, '_code_search', wrong)
    kc, vc = _codec(5, 64, 0, 0), _codec(3, 64, 0, 1)
    xk, xv = _x((1, 2, 3, 64), mx.float32, 5), _x((1, 2, 3, 64), mx.float32, 6)
    with pytest.warns(RuntimeWarning, match='calibrated pair.*disagrees'):   # compiled and ran, and its codes were wrong
        got = kc.encode_pair(vc, xk, xv)
    assert Cal._CALGUARD['cuda'].state[Cal._cal_class(kc, xk, vc, xv)] is False
    ref = (kc._encode(xk), vc._encode(xv))
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


@pytest.mark.parametrize('kb,vb,D,outl,dtype,L,wht', [(4, 3, 64, 0, mx.float16, 1, True), (2, 6, 64, 0, mx.float32, 3, True), (5, 4, 80, 16, mx.float32, 2, True),
                                                      (6, 5, 256, 32, mx.float16, 1, True), (3, 7, 128, 0, mx.float32, 2, True),
                                                      (2, 6, 64, 0, mx.float16, 2, False), (3, 7, 128, 0, mx.float32, 1, False)])
def test_the_butterfly_rotation_is_each_sides_encode(emulated, monkeypatch, kb, vb, D, outl, dtype, L, wht):
    """With `CAL_WHT` (the default), a band whose rotation is one Walsh-Hadamard block of 32 to 1024 channels (64, 128; the 32-channel
    outlier band of d256) is rotated by in-warp butterflies, the others (224, 80's 64 + 16: the 16) by the dense product;
    with it off (`wht` False), every band by the dense product:
    the first-use check passes, each side's parts agree with the reference's as that check asks (`_cal_agree`: codes equal
    but for boundary neighbours, gammas to a float16 step) and decode to within the codecs' own rounding of the reference's"""
    monkeypatch.setattr(Cal, 'CAL_WHT', wht)
    kc, vc = _codec(kb, D, outl, 0), _codec(vb, D, 0, 1, centred=outl == 0)
    src = Cal._cal_side_source('k', D, Cal._cal_bands(kc, D))[0]
    butterflies = src.count('__shfl_xor_sync(0xffffffffu, v[e], m)')
    if wht: assert butterflies == sum(Cal._cal_wht(n) for n, _, _ in Cal._cal_bands(kc, D)) >= 1   # the knob picks the butterflies where the block allows
    else: assert butterflies == 0
    xk, xv = _x((2, 3, L, D), dtype, 11), _x((2, 3, L, D), dtype, 12)
    got, ref = _verified_pair(kc, vc, xk, xv)
    assert Cal._cal_agree(got, ref, kc, xk, vc, xv) is None       # shapes, dtypes, codes but for boundary neighbours, gammas
    for side, want, c in ((got[0], ref[0], kc), (got[1], ref[1], vc)):
        assert len(side) == len(want) == 2 * len(c.bands(D))
        assert mx.allclose(c.decode(side), c.decode(want), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize('mutation', [("? {yb}[j] : -{yb}[j]", "? {yb}[j] : {yb}[j]"),           # the signs dropped
                                      ("(lane & m) ? __fsub_rn(o, v[e])", "(lane & m) ? __fsub_rn(v[e], o)")])   # a butterfly's difference the wrong way round
def test_a_wrong_butterfly_is_refused(emulated, monkeypatch, mutation):
    "Not vacuous for `CAL_WHT`: butterflies without the signs, or with a difference reversed, are refused by the first-use check, and the reference answers"
    monkeypatch.setattr(Cal, 'CAL_WHT', True)
    orig = Cal._cal_rotate_code
    def wrong(n, bits, yb, *a):
        src = orig(n, bits, yb, *a); old = mutation[0].replace('{yb}', yb)
        assert old in src
        return src.replace(old, mutation[1].replace('{yb}', yb))
    monkeypatch.setattr(Cal, '_cal_rotate_code', wrong)
    kc, vc = _codec(4, 64, 0, 0), _codec(3, 64, 0, 1)
    xk, xv = _x((1, 2, 3, 64), mx.float32, 13), _x((1, 2, 3, 64), mx.float32, 14)
    with pytest.warns(RuntimeWarning, match='calibrated pair.*disagrees'):
        got = kc.encode_pair(vc, xk, xv)
    assert Cal._CALGUARD['cuda'].state[Cal._cal_class(kc, xk, vc, xv)] is False
    ref = (kc._encode(xk), vc._encode(xv))
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


def test_the_pair_kernel_declines_what_it_does_not_take(emulated, monkeypatch):
    "Keys and values of other shapes or dtypes, other codecs, CUDA_PAIR off, off CUDA: each side's own encode (the same parts), nothing launched"
    from mlx_kvq.turbo_codec import TurboCodec
    kc, vc = _codec(4, 64, 0, 0), _codec(4, 64, 0, 1)
    xk = _x((1, 2, 3, 64), mx.float32, 5)
    assert Cal.calibrated_encode_pair(kc, xk, vc, xk[..., :2, :]) is None
    assert Cal.calibrated_encode_pair(kc, xk, vc, xk.astype(mx.float16)) is None
    monkeypatch.setattr(Cal, 'CUDA_PAIR', False); assert Cal.calibrated_encode_pair(kc, xk, vc, xk) is None
    monkeypatch.setattr(Cal, 'CUDA_PAIR', True); monkeypatch.setattr(Cal, 'kernel_backend', lambda: None)
    assert Cal.calibrated_encode_pair(kc, xk, vc, xk) is None
    assert not Cal._CALGUARD
    tc = TurboCodec(4); tc.check_dim(64)          # another kind of codec beside it: each side its own encode (the calibrated one by its traced encode off CUDA)
    mixed = kc.encode_pair(tc, xk, xk)
    assert all(mx.array_equal(a, b) for a, b in zip(mixed[0], kc._encode(xk))) and all(mx.array_equal(a, b) for a, b in zip(mixed[1], tc.encode(xk)))
    assert not Cal._CALGUARD
    with pytest.raises(ValueError, match='calibrated for head dim 64'):
        monkeypatch.setattr(Cal, 'kernel_backend', lambda: 'cuda'); Cal.calibrated_encode_pair(kc, _x((1, 2, 1, 128), mx.float32, 6), vc, _x((1, 2, 1, 128), mx.float32, 7))


@pytest.mark.parametrize('rotating', [False, True], ids=['growing', 'ring'])
def test_calibrated_caches_on_the_cuda_path_hold_what_the_encode_path_holds(emulated, monkeypatch, rotating):
    """The caches `auto:B` plans, fed a prompt and decode tokens on the emulated CUDA path, store what the same caches
    store with CUDA_PAIR off (each side's traced encode), bit for bit, every update through one launch: a growing cache's
    by the pair kernel (the decode tokens after the first verified one by the launch held for their shapes), a ring's
    decode tokens once it holds its window by the ring kernel (`calibrated_into_pair`, then the launch the ring holds)"""
    from mlx_kvq.qcache import CodecKVCache
    from mlx_kvq.kvsplit import QuantizedRotatingKVCache
    calls, kinds = [], []
    def counted(backend, name, *a, f=Cal.make_kernel, **kw):     # every launch of the pair and ring kernels, the held ones included
        k = f(backend, name, *a, **kw)
        return lambda **kk: calls.append(kk['inputs'][0].shape[-2]) or kinds.append(name.rsplit('_', 1)[-1]) or k(**kk)
    monkeypatch.setattr(Cal, 'make_kernel', counted)
    kc, vc = _codec(5, 64, 8, 0), _codec(4, 64, 0, 1)
    make = (lambda: QuantizedRotatingKVCache(8, 0, kc, vc)) if rotating else (lambda: CodecKVCache(kc, vc))
    fast, slow = make(), make()
    def stored(c):
        if rotating: return [*c.keys, *c.values]
        assert c.n_quantized == c.offset          # nothing staged: every token quantized
        return [p[..., :c.n_quantized, :] for p in (*c.keys, *c.values)]
    h = lambda L, key: _x((1, 2, L, 64), mx.float16, key)
    for i, L in enumerate([5] + [1] * 10):
        k, v = h(L, 2 * i + 10), h(L, 2 * i + 11)
        a = fast.update_and_fetch(k, v)
        monkeypatch.setattr(Cal, 'CUDA_PAIR', False)
        b = slow.update_and_fetch(k, v)
        monkeypatch.setattr(Cal, 'CUDA_PAIR', True)
        for x, y in zip(stored(fast), stored(slow)):
            assert x.shape == y.shape and mx.array_equal(x, y)
    assert calls == [5] + [1] * 10
    if rotating:   # the prompt and the token that grows the ring encoded, then 9 tokens written into it (the first verified, the rest held)
        assert kinds == ['pair'] * 2 + ['into'] * 9 and fast.__dict__.get('_ringw') is not None
    else:
        assert kinds == ['pair'] * 11 and len(Cal._CALLAUNCH) == 1      # decode tokens 3-10 by the held launch


def _ring(kb, vb, D, outl, dtype, pos, n=1, cap=12):
    kc, vc = _codec(kb, D, outl, 0), _codec(vb, D, 0, 1)
    old_k, old_v = kc._encode(_x((2, 3, cap, D), mx.float32, 20)), vc._encode(_x((2, 3, cap, D), mx.float32, 21))
    return (kc, old_k, old_v, pos, _x((2, 3, n, D), dtype, 22), vc, _x((2, 3, n, D), dtype, 23))


@pytest.mark.parametrize('kb,vb,D,outl,dtype,pos,n', [(5, 4, 64, 8, mx.float16, 5, 1), (6, 5, 256, 32, mx.float32, 11, 1), (3, 3, 96, 0, mx.float16, 0, 2)])
def test_the_ring_kernel_writes_its_rows_and_keeps_the_others(emulated, kb, vb, D, outl, dtype, pos, n):
    """`calibrated_into_pair`: rows pos .. pos + n - 1 hold each side's encode of the update, every other row the old
    storage's, bit for bit; verified on first use, the verified launch gives the same"""
    args = _ring(kb, vb, D, outl, dtype, pos, n)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = Cal.calibrated_into_pair(*args)
    assert Cal._CALIGUARD['into'].state[Cal._cal_into_class(*args)] is True
    ref = Cal._cal_into_reference(*args)
    assert all(a.shape == b.shape and mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))
    assert not all(mx.array_equal(a[..., pos:pos + n, :], b[..., pos:pos + n, :]) for a, b in zip(got[0], args[1]))   # the rows did change
    again = Cal.calibrated_into_pair(*args)
    assert all(mx.array_equal(a, b) for a, b in zip((*again[0], *again[1]), (*got[0], *got[1])))


def test_a_wrong_ring_kernel_is_refused_and_the_ring_kernel_declines(emulated, monkeypatch):
    """Not vacuous: a ring kernel that copies the old row over the second new one is refused (the reference answers);
    rows past the storage, storages of other codecs, CUDA_PAIR off: None"""
    args = _ring(5, 4, 64, 8, mx.float16, 3, n=2)
    assert Cal.calibrated_into_pair(*args[:3], 11, *args[4:]) is None                      # rows 11, 12 of a 12-token ring
    assert Cal.calibrated_into_pair(*args[:2], args[1], *args[3:]) is None                  # the key storage as values' (other bands)
    monkeypatch.setattr(Cal, 'CUDA_PAIR', False); assert Cal.calibrated_into_pair(*args) is None
    monkeypatch.setattr(Cal, 'CUDA_PAIR', True)
    assert not Cal._CALIGUARD
    src = "if (t >= (unsigned int)pos && t < (unsigned int)(pos + n)) return;"
    orig_mk = Cal.make_kernel
    def mk(backend, name, ins, outs, source, **kw):
        if name.endswith('into'):
            assert src in source
            source = source.replace(src, "if (t == (unsigned int)pos) return;")
        return orig_mk(backend, name, ins, outs, source, **kw)
    monkeypatch.setattr(Cal, 'make_kernel', mk)
    with pytest.warns(RuntimeWarning, match='calibrated into'):
        got = Cal.calibrated_into_pair(*args)
    assert Cal._CALIGUARD['into'].state[Cal._cal_into_class(*args)] is False
    ref = Cal._cal_into_reference(*args)
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


@pytest.mark.parametrize('other', ['affine8', 'half'])
def test_a_calibrated_side_beside_another_kind_takes_one_launch(emulated, monkeypatch, other):
    """`auto:B`'s mixed layers (calibrated keys beside 8-bit affine or float16 values, what it plans for most of a
    Llama-3.2-1B-shaped model's first layers): on the emulated CUDA path the calibrated side of every update is one launch
    of the pair kernel (the codec on both sides), and the growing cache holds bit for bit what it holds with each side's
    traced encode (CUDA_PAIR off); without the route each update was the traced encode's 60-97 operations a side"""
    from mlx_kvq.codecs import AffineCodec
    from mlx_kvq.calibrated import HalfCodec
    from mlx_kvq.qcache import CodecKVCache
    launches = []
    def counted(backend, name, *a, f=Cal.make_kernel, **kw):
        k = f(backend, name, *a, **kw)
        return lambda **kk: launches.append(kk['inputs'][0].shape[-2]) or k(**kk)
    monkeypatch.setattr(Cal, 'make_kernel', counted)
    kc = _codec(5, 64, 8, 0)
    vc = AffineCodec(8, 64) if other == 'affine8' else HalfCodec()
    fast, slow = CodecKVCache(kc, vc), CodecKVCache(kc, vc)
    stored = lambda c: [p[..., :c.n_quantized, :] for p in (*c.keys, *c.values)]
    for i, L in enumerate([5, 1, 1, 1]):
        k, v = _x((1, 2, L, 64), mx.float16, 40 + 2 * i), _x((1, 2, L, 64), mx.float16, 41 + 2 * i)
        fast.update_and_fetch(k, v)
        monkeypatch.setattr(Cal, 'CUDA_PAIR', False)
        slow.update_and_fetch(k, v)
        monkeypatch.setattr(Cal, 'CUDA_PAIR', True)
        assert fast.n_quantized == fast.offset == slow.n_quantized
        for x, y in zip(stored(fast), stored(slow)):
            assert x.shape == y.shape and x.dtype == y.dtype and mx.array_equal(x, y)
    assert launches == [5, 1, 1, 1]                            # the keys of every update by one launch, none for the slow cache
    assert Cal._CALGUARD['cuda'].state[Cal._cal_class(kc, k, kc, k)] is True


@pytest.mark.parametrize('bits,D,outl,centred', [(1, 64, 0, True), (2, 64, 0, True), (3, 128, 16, True), (4, 96, 0, False),
                                                 (5, 256, 32, True), (6, 80, 8, True), (7, 64, 0, True), (8, 128, 0, True)])
@pytest.mark.parametrize('dtype', [mx.float32, mx.float16])
def test_decode_is_the_reference_arithmetic(bits, D, outl, centred, dtype):
    """`CalibratedTurboCodec.decode` (each band through `packing.dequantize_unpack`, the centring undone by the fused
    `packing.uncentre`) is bit for bit the reference arithmetic: the reference unpack, centroid * gamma in float32,
    the inverse rotation, the bands put back in channel order, / scale, + mean, then the cast"""
    from mlx_kvq.packing import unpack_ref
    c = _codec(bits, D, outl, bits, centred)
    parts = c.encode(_x((2, 3, 41, D), mx.float32, bits))
    mean, scale, bands, order = c._arrays(D)
    ys = [rot.inverse(cb.centroids_mx[unpack_ref(w, b, n)] * g.astype(mx.float32)) for (_, n, b, rot, cb), w, g in zip(bands, parts[0::2], parts[1::2])]
    y = ys[0] if len(ys) == 1 else mx.take(mx.concatenate(ys, axis=-1), order, axis=-1)
    if scale is not None: y = y / scale
    if mean is not None: y = y + mean
    got = c.decode(parts, dtype)
    assert got.dtype == dtype and mx.array_equal(got, y.astype(dtype)).item()


@pytest.mark.skipif(not ptxas_available(), reason='needs nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12')
@pytest.mark.parametrize('bsearch,wht', [(False, False), (True, False), (True, True)], ids=['scan', 'bsearch', 'bsearch-wht'])
@pytest.mark.parametrize('into', [False, True], ids=['pair', 'ring'])
def test_the_calibrated_kernels_compile(monkeypatch, bsearch, wht, into):
    """The pair and ring kernels (auto:B's Llama-shaped bands: 2-bit keys and 6-bit values at d64, and an outlier band at
    d128) compiled by NVRTC + ptxas for sm_90, with either code search (`CAL_BSEARCH`), with the dense rotation or the
    butterflies (`CAL_WHT`), float16 inputs: no spills"""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
    import cuda_registers as CR
    monkeypatch.setattr(Cal, 'CAL_BSEARCH', bsearch)
    monkeypatch.setattr(Cal, 'CAL_WHT', wht)
    for kb, vb in CR.CAL_PAIRS.values():
        regs, spill, got = CR.compile_cal_pair(kb, vb, into)
        assert ('? s : 0' in got['src']) is bsearch and ('v[e], m)' in got['src']) is wht and got['name'].endswith('into' if into else 'pair')
        assert 0 < regs <= 255 and spill == 0
