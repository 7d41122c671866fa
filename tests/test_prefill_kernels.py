"""The prefill kernels of a turbo past (`packing.rotate_rows`, `packing.decode_rotated_storage`) run through their host
code with MLX's `cuda_kernel` replaced by the CPU emulator (tests/kernel_emulator.py), against the float32 route they
replace; and compiled by NVRTC for sm_90 where NVIDIA's wheels are installed (test_cuda_compile.py's tools)."""
import sys, warnings
from pathlib import Path
import numpy as np
import pytest
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_emulator as E
from nvrtc_util import ptxas_available
from mlx_kvq import packing as P
from mlx_kvq.rotation import get_rotation
from mlx_kvq.turbo_codec import TurboCodec


@pytest.fixture
def emulated(emulated_packing):
    "The CUDA code path with the emulated kernels, fresh guards and kernels (conftest.py)"


@pytest.mark.parametrize('dim', [64, 128, 256])
@pytest.mark.parametrize('dtype', [mx.float32, mx.float16])
def test_rotate_rows_matches_the_rotation(emulated, dim, dtype):
    rot = get_rotation(dim, 3)
    x = (mx.random.normal((1, 3, 5, dim), key=mx.random.key(dim)) * 2).astype(dtype)
    for inverse in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter('error')       # a refusal by the first-use check would warn
            got = P.rotate_rows(x, rot, inverse)
        ref = (rot.inverse(x) if inverse else rot.forward(x))
        assert got.dtype == dtype and got.shape == x.shape
        assert P._RGUARDS['cuda'].state[P._rot_class(x, rot, inverse)] is True    # the kernel served it, verified
        err = mx.abs(got.astype(mx.float32) - ref).max().item()
        assert err <= (1e-5 if dtype == mx.float32 else 2e-3) * mx.abs(ref).max().item()
    back = P.rotate_rows(P.rotate_rows(x, rot), rot, inverse=True)     # the inverse undoes the rotation
    assert mx.abs(back.astype(mx.float32) - x.astype(mx.float32)).max().item() <= (1e-5 if dtype == mx.float32 else 4e-3) * mx.abs(x).max().item()


def test_a_wrong_rotation_kernel_is_refused(emulated, monkeypatch):
    "Not vacuous: the kernel without its sign flips disagrees with the rotation and the first-use check falls back"
    wrong = P._R_CUDA.replace(': (float)xr[lane * E + e] * signs[lane * E + e];', ': (float)xr[lane * E + e];')
    assert wrong != P._R_CUDA
    monkeypatch.setattr(P, '_R_CUDA', wrong)
    rot = get_rotation(128, 0); x = mx.random.normal((4, 128), key=mx.random.key(1))
    with pytest.warns(RuntimeWarning, match='rotate_rows'):
        got = P.rotate_rows(x, rot)
    assert P._RGUARDS['cuda'].state[P._rot_class(x, rot, False)] is False
    assert mx.allclose(got, rot.forward(x), atol=1e-6)     # the reference was returned


@pytest.mark.parametrize('bits,dim', [(4, 64), (3, 128), (2, 96)])
@pytest.mark.parametrize('dtype', [mx.float32, mx.float16])
def test_decode_rotated_storage_reads_the_held_tokens(emulated, bits, dim, dtype):
    "Storage of capacity 12 holding 7 tokens per head: the kernel decodes exactly those, as the slices' reference does"
    c = TurboCodec(bits); c.check_dim(dim)
    x = mx.random.normal((2, 3, 12, dim), key=mx.random.key(bits))
    words, norms = P.quantize_pack_ref(x, c.rotation, c.codebook)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = P.decode_rotated_storage(words, norms, 7, c.codebook, dim, dtype)
    ref = P.dequantize_unpack_ref(words[..., :7, :], norms[..., :7, :], c.codebook, dim)
    assert got.shape == (2, 3, 7, dim) and got.dtype == dtype
    assert P._DTGUARDS['cuda'].state[P._dt_class(words, norms, 7, c.codebook, dim, dtype)] is True
    assert mx.abs(got.astype(mx.float32) - ref).max().item() <= (1e-6 if dtype == mx.float32 else 1e-3) * mx.abs(ref).max().item()
    other = P.decode_rotated_storage(words, norms, 12, c.codebook, dim, dtype)     # all 12: the last 5 rows are there too
    assert mx.abs(other[..., 7:, :].astype(mx.float32) - P.dequantize_unpack_ref(words[..., 7:, :], norms[..., 7:, :], c.codebook, dim)).max().item() \
        <= (1e-6 if dtype == mx.float32 else 1e-3) * mx.abs(ref).max().item()


def test_decode_rotated_storage_off_cuda_is_the_slices(monkeypatch):
    "Without CUDA (this machine's default): the slices decoded by `dequantize_unpack` and cast"
    c = TurboCodec(4); c.check_dim(64)
    words, norms = P.quantize_pack_ref(mx.random.normal((1, 2, 9, 64), key=mx.random.key(0)), c.rotation, c.codebook)
    got = P.decode_rotated_storage(words, norms, 5, c.codebook, 64, mx.float16)
    assert got.dtype == mx.float16 and mx.array_equal(got, P.dequantize_unpack(words[..., :5, :], norms[..., :5, :], c.codebook, 64).astype(mx.float16))


@pytest.mark.skipif(not ptxas_available(), reason='needs nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12')
@pytest.mark.parametrize('ty', ['__half', '__nv_bfloat16', 'float'])
def test_prefill_kernels_compile(ty):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
    import cuda_registers as CR
    head = f"constexpr int N = 128;\nconstexpr int E = 4;\nconstexpr bool INV = true;\nconstexpr int WARPS = 4;\nusing T = {ty};\n"
    regs, spill, _ = CR.compile_ptxas('r', CR.wrap('r', head + P._R_CUDA, [('x', ty), ('signs', 'float'), ('meta', 'int32_t')], [('out', ty)]), 'sm_90')
    assert 0 < regs <= 255 and spill == 0
    head = f"constexpr int N = 128;\nconstexpr int BITS = 3;\nconstexpr int W = 12;\nusing T = {ty};\n"
    regs, spill, _ = CR.compile_ptxas('d', CR.wrap('d', head + P._DT_CUDA, [('words', 'uint32_t'), ('norms', '__half'), ('cent', 'float'), ('meta', 'int32_t')], [('out', ty)]), 'sm_90')
    assert 0 < regs <= 255 and spill == 0
    head = (f"constexpr int NK = 128;\nconstexpr int BK = 4;\nconstexpr int WK = 16;\nconstexpr int NV = 256;\nconstexpr int BV = 3;\nconstexpr int WV = 24;\nconstexpr int WARPS = 4;\nusing T = {ty};\n"
            "constexpr bool CALK = true;\nconstexpr bool CALV = false;\n")   # a calibrated key side beside a turbo value side
    side = [('w', 'uint32_t'), ('n', '__half'), ('c', 'float'), ('g', 'float'), ('s', 'float'), ('m', 'float')]
    regs, spill, _ = CR.compile_ptxas('dp', CR.wrap('dp', head + P._DP_CUDA, [(a + 'k', t) for a, t in side] + [(a + 'v', t) for a, t in side] + [('meta', 'int32_t')],
                                                    [('ok', ty), ('ov', ty)]), 'sm_90')
    assert 0 < regs <= 255 and spill == 0
    head = f"constexpr int DK = 128;\nconstexpr int BK = 8;\nconstexpr int GK = 64;\nconstexpr int DV = 128;\nconstexpr int BV = 4;\nconstexpr int GV = 32;\nusing T = {ty};\n"
    side = [('w', 'uint32_t'), ('s', '__half'), ('b', '__half')]
    regs, spill, _ = CR.compile_ptxas('ap', CR.wrap('ap', head + P._AP_CUDA, [(a + 'k', t) for a, t in side] + [(a + 'v', t) for a, t in side] + [('meta', 'int32_t')],
                                                    [('ok', ty), ('ov', ty)]), 'sm_90')
    assert 0 < regs <= 255 and spill == 0
    head = f"constexpr int N = 128;\nconstexpr int BITS = 3;\nconstexpr int W = 12;\nconstexpr int E = 4;\nconstexpr bool ROTATE = true;\nconstexpr int WARPS = 4;\n"
    regs, spill, _ = CR.compile_ptxas('qa', CR.wrap('qa', head + P._QA_CUDA, [('xk', ty), ('xv', ty), ('owk', 'uint32_t'), ('onk', '__half'), ('owv', 'uint32_t'), ('onv', '__half'),
                                                                         ('sgk', 'float'), ('sgv', 'float'), ('bnk', 'float'), ('bnv', 'float'), ('meta', 'int32_t')],
                                                    [('wk', 'uint32_t'), ('nk', '__half'), ('wv', 'uint32_t'), ('nv', '__half')]), 'sm_90')
    assert 0 < regs <= 255 and spill == 0


@pytest.mark.parametrize('kv', ['turbo:4', 'turbo:3,2'])
def test_prefill_attention_over_a_turbo_past(emulated, monkeypatch, kv):
    """A chunk of queries over a turbo cache's past by the CUDA prefill route (queries rotated, the past decoded from the
    storage to float16, fused SDPA, output rotated back; the kernels emulated) agrees with `codec_attention`"""
    from mlx_kvq import attention as A
    from mlx_kvq.qcache import CodecKVCache
    from mlx_kvq.codecs import codec_attention
    monkeypatch.setattr(A, 'kernel_backend', lambda: 'cuda')
    kb, _, vb = kv.split(':')[1].partition(',')
    cache = CodecKVCache(TurboCodec(int(kb)), TurboCodec(int(vb or kb), seed=1))
    k0, v0 = mx.random.normal((1, 2, 40, 64), key=mx.random.key(1)), mx.random.normal((1, 2, 40, 64), key=mx.random.key(2))
    cache.update_and_fetch(k0.astype(mx.float16), v0.astype(mx.float16))
    k1, v1 = mx.random.normal((1, 2, 8, 64), key=mx.random.key(3)), mx.random.normal((1, 2, 8, 64), key=mx.random.key(4))
    ks, vs = cache.update_and_fetch(k1.astype(mx.float16), v1.astype(mx.float16))
    assert ks.storage[0].shape[-2] > ks.n_quantized      # the storage holds more than the tokens (capacity grown in steps)
    q = mx.random.normal((1, 4, 8, 64), key=mx.random.key(5)).astype(mx.float16)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = A._prefill_sdpa(q, ks, vs, 0.125, 'causal', None)
    assert P._DTGUARDS['cuda'].state and all(P._DTGUARDS['cuda'].state.values()) and all(P._RGUARDS['cuda'].state.values())
    ref = codec_attention(q.astype(mx.float32), ks, vs, scale=0.125, mask='causal')
    err = mx.abs(got.astype(mx.float32) - ref).max().item()
    assert got.dtype == mx.float16 and err <= 2e-3 * mx.abs(ref).max().item() + 1e-3, err


def test_decode_rotated_storage_refuses_bad_storage_or_counts():
    "Mismatched parts or a token count the storage does not hold: a ValueError naming what it takes, nothing decoded"
    c = TurboCodec(4); c.check_dim(64)
    words, norms = P.quantize_pack_ref(mx.random.normal((1, 2, 9, 64), key=mx.random.key(0)), c.rotation, c.codebook)
    for n in (0, 10, 3.0, True):
        with pytest.raises(ValueError, match='n must be an integer in 1..9'):
            P.decode_rotated_storage(words, norms, n, c.codebook, 64, mx.float16)
    with pytest.raises(ValueError, match=r'norms \(B, H, capacity, 1\)'):
        P.decode_rotated_storage(words, norms[..., :5, :], 5, c.codebook, 64, mx.float16)
    with pytest.raises(ValueError, match=r'words \(B, H, capacity, W\)'):
        P.decode_rotated_storage(words[0], norms[0], 5, c.codebook, 64, mx.float16)


def _turbo_storage(bits, dim, seed, cap, key):
    "(words, norms, rotation, codebook) of `cap` random tokens per head, (2, 3) batch and heads"
    c = TurboCodec(bits, seed=seed); c.check_dim(dim)
    return (*P.quantize_pack_ref(mx.random.normal((2, 3, cap, dim), key=mx.random.key(key)), c.rotation, c.codebook), c.rotation, c.codebook), c


@pytest.mark.parametrize('kspec,vspec', [((4, 64), (4, 64)), ((3, 128), (2, 128)), ((4, 256), (8, 64)), ((2, 32), (3, 512))])
@pytest.mark.parametrize('dtype', [mx.float32, mx.float16])
def test_decode_turbo_pair_gives_the_codecs_decode(emulated, kspec, vspec, dtype):
    """Both sides decoded to the model's space in one launch (storages of capacity 12 and 10 holding 7 tokens, bits and
    dims of each side its own) equal `TurboCodec.decode` of the held slices, up to the dtype's rounding"""
    k, kc = _turbo_storage(*kspec, 1, 12, 1)
    v, vc = _turbo_storage(*vspec, 2, 10, 2)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        K, V = P.decode_turbo_pair(k, v, 7, dtype)
    assert P._DPGUARDS['cuda'].state[P._dp_class(k, v, 7, dtype)] is True      # the kernel served it, verified
    for got, (w, nm, *_), c in ((K, k, kc), (V, v, vc)):
        ref = c.decode((w[..., :7, :], nm[..., :7, :]))
        assert got.shape == ref.shape == (2, 3, 7, c.dim) and got.dtype == dtype
        assert mx.abs(got.astype(mx.float32) - ref).max().item() <= (1e-5 if dtype == mx.float32 else 2e-3) * mx.abs(ref).max().item()


@pytest.mark.parametrize('what', ['values signs', 'keys mean'])
def test_a_wrong_pair_decode_kernel_is_refused(emulated, monkeypatch, what):
    """Not vacuous: the kernel without the values' sign flips, or one that forgets a calibrated side's mean, disagrees
    and the first-use check returns the reference"""
    old, new = {'values signs': ('v[e] = v[e] * scale * gv[lane * E + e];', 'v[e] = v[e] * scale;'),
                'keys mean': ('v[e] = v[e] / sk[lane * E + e] + mk[lane * E + e];', 'v[e] = v[e] / sk[lane * E + e];')}[what]
    wrong = P._DP_CUDA.replace(old, new)
    assert wrong != P._DP_CUDA
    monkeypatch.setattr(P, '_DP_CUDA', wrong)
    make = _turbo_storage if what == 'values signs' else _calibrated_storage
    (k, kc), (v, vc) = make(4, 64, 1, 9, 1), make(4, 64, 2, 9, 2)
    with pytest.warns(RuntimeWarning, match='decode_turbo_pair'):
        K, V = P.decode_turbo_pair(k, v, 9, mx.float32)
    assert P._DPGUARDS['cuda'].state[P._dp_class(k, v, 9, mx.float32)] is False
    assert mx.allclose(V, vc.decode(v[:2]), atol=1e-5) and mx.allclose(K, kc.decode(k[:2]), atol=1e-5)


def _calibrated_storage(bits, dim, seed, cap, key, mean=True, scale=True):
    """(words, gamma, rotation, codebook, mean, scale) of a one-band calibrated codec's storage (`cap` tokens per head,
    (2, 3) batch and heads; mean / scale None where not asked), and the codec"""
    from calcodecs import calibrated
    c = calibrated(bits, seed, dim, outliers=False)
    if not mean: c.mean = None
    if not scale: c.scale = None
    w, g = c.encode(mx.random.normal((2, 3, cap, dim), key=mx.random.key(key)) * 2 + 0.3)
    m, s, bands, _ = c._arrays(dim)
    return (w, g, bands[0][3], bands[0][4], m, s), c


@pytest.mark.parametrize('kspec,vspec', [((3, 64, True, True), (6, 64, True, True)), ((2, 128, True, False), (4, 128, False, True)),
                                         ((4, 256, True, True), None)])
@pytest.mark.parametrize('dtype', [mx.float32, mx.float16])
def test_decode_turbo_pair_undoes_a_calibration(emulated, kspec, vspec, dtype):
    """Calibrated sides of one band (`auto:B`'s tqBcs: the storage's band, then its scales undone and its mean added in
    the launch; either may be absent) beside each other or beside a turbo side: `CalibratedTurboCodec.decode` of the held
    slices, up to the dtype's rounding; then the kept launch at another token count"""
    k, kc = _calibrated_storage(*kspec[:2], 1, 12, 1, *kspec[2:])
    v, vc = _calibrated_storage(*vspec[:2], 2, 10, 2, *vspec[2:]) if vspec else _turbo_storage(3, 64, 2, 10, 2)
    for n in (7, 9):
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            K, V = P.decode_turbo_pair(k, v, n, dtype)
        assert P._DPGUARDS['cuda'].state[P._dp_class(k, v, 7, dtype)] is True      # the kernel served it, verified
        for got, s, c in ((K, k, kc), (V, v, vc)):
            ref = c.decode((s[0][..., :n, :], s[1][..., :n, :]))
            assert got.shape == ref.shape and got.dtype == dtype
            assert mx.abs(got.astype(mx.float32) - ref).max().item() <= (1e-5 if dtype == mx.float32 else 2e-3) * mx.abs(ref).max().item()


def _affine_storage(bits, gs, dim, cap, key):
    "(words, scales, biases, bits, group_size) of `cap` random tokens per head as `AffineCodec` stores them, and the codec"
    from mlx_kvq.codecs import AffineCodec
    c = AffineCodec(bits, gs)
    return (*c.encode(mx.random.normal((2, 3, cap, dim), key=mx.random.key(key))), bits, gs), c


@pytest.mark.parametrize('kspec,vspec', [((4, 64, 64), (4, 64, 64)), ((8, 64, 128), (4, 32, 128)), ((4, 128, 256), (8, 32, 64))])
@pytest.mark.parametrize('dtype', [mx.float32, mx.float16])
def test_decode_affine_pair_gives_the_codecs_decode(emulated, kspec, vspec, dtype):
    """Both affine sides in one launch (MLX's packing read in place: storages of capacity 12 and 10 holding 7 tokens)
    equal `AffineCodec.decode` of the held slices, up to the dtype's rounding"""
    k, kc = _affine_storage(*kspec, 12, 1)
    v, vc = _affine_storage(*vspec, 10, 2)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        K, V = P.decode_affine_pair(k, v, 7, dtype)
    assert P._APGUARDS['cuda'].state[P._ap_class(k, v, 7, dtype)] is True
    for got, x, c, d in ((K, k, kc, kspec[2]), (V, v, vc, vspec[2])):
        ref = c.decode(tuple(a[..., :7, :] for a in x[:3]), mx.float32)
        assert got.shape == (2, 3, 7, d) and got.dtype == dtype
        assert mx.abs(got.astype(mx.float32) - ref).max().item() <= (1e-5 if dtype == mx.float32 else 2e-3) * mx.abs(ref).max().item()


def test_a_wrong_affine_pair_kernel_is_refused_and_other_widths_take_mlx(emulated, monkeypatch):
    "Not vacuous: codes read high bits first disagree and are refused; 1-, 2- and 3-bit sides never launch (MLX's dequantize)"
    k, kc = _affine_storage(4, 64, 64, 9, 1)
    v, vc = _affine_storage(4, 64, 64, 9, 2)
    wrong = P._AP_CUDA.replace('(word >> (e * BITS))', '(word >> (32 - (e + 1) * BITS))')
    assert wrong != P._AP_CUDA
    monkeypatch.setattr(P, '_AP_CUDA', wrong)
    with pytest.warns(RuntimeWarning, match='decode_affine_pair'):
        K, V = P.decode_affine_pair(k, v, 9, mx.float32)
    assert P._APGUARDS['cuda'].state[P._ap_class(k, v, 9, mx.float32)] is False
    assert mx.allclose(K, kc.decode(k[:3]), atol=1e-5) and mx.allclose(V, vc.decode(v[:3]), atol=1e-5)
    for bits in (1, 2, 3):      # widths outside AFFINE_PAIR_BITS: MLX's dequantize of the slices, nothing launched
        kx, kcx = _affine_storage(bits, 64, 64, 9, 3)
        Kx, _ = P.decode_affine_pair(kx, v, 5, mx.float16)
        assert mx.array_equal(Kx, kcx.decode(tuple(a[..., :5, :] for a in kx[:3]), mx.float16))
    assert all(cls[0][1] in P.AFFINE_PAIR_BITS for cls in P._APGUARDS['cuda'].state)


@pytest.mark.parametrize('turbo', [True, False])
def test_a_verified_pair_decode_launches_again_without_the_guard(emulated, monkeypatch, turbo):
    """After the first-use check, the next calls of a configuration launch the kept launch (no guard, nothing rebuilt):
    other capacities and token counts decode right, and storage that does not fit it still gets the full checks' error"""
    if turbo: (k, kc), (v, vc), fn, guards = _turbo_storage(4, 64, 1, 12, 1), _turbo_storage(3, 64, 2, 10, 2), P.decode_turbo_pair, '_DPGUARDS'
    else: (k, kc), (v, vc), fn, guards = _affine_storage(4, 64, 64, 12, 1), _affine_storage(8, 32, 64, 10, 2), P.decode_affine_pair, '_APGUARDS'
    p = 2 if turbo else 3      # storage parts per side
    fn(k, v, 7, mx.float16)
    assert len(P._READY) == 1
    calls = []
    monkeypatch.setattr(getattr(P, guards)['cuda'], 'shape_class', lambda *a: calls.append(a))   # the guard, were it asked
    for cap, n in ((12, 5), (10, 10), (12, 1)):
        kk = (*(x[..., :cap, :] for x in k[:p]), *k[p:]); vv = (*(x[..., :10, :] for x in v[:p]), *v[p:])
        K, V = fn(kk, vv, n, mx.float16)
        for got, side, c in ((K, kk, kc), (V, vv, vc)):
            ref = c.decode(tuple(x[..., :n, :] for x in side[:p]))
            assert got.shape == ref.shape and mx.abs(got.astype(mx.float32) - ref).max().item() <= 2e-3 * mx.abs(ref).max().item()
    assert not calls                                   # every one of them took the kept launch
    with pytest.raises(ValueError, match='n must be an integer'):
        fn(k, v, 11, mx.float16)                       # more tokens than the values hold: not the kept launch's to take
    with pytest.raises(ValueError, match='disagree'):
        fn(k, (*(x[:1] for x in v[:p]), *v[p:]), 5, mx.float16)
    with pytest.raises(ValueError):                    # a scalar part of another width: the full checks name it
        fn(k, (v[0], mx.concatenate([v[1], v[1]], axis=-1), *v[2:]), 5, mx.float16)
    assert not calls
    fn(k, v, 7, mx.float32)                            # another dtype: its own first-use check
    assert calls


def test_decode_affine_pair_refuses_bad_input():
    k, _ = _affine_storage(4, 64, 64, 9, 1)
    v, _ = _affine_storage(8, 64, 64, 9, 2)
    for n in (0, 10, 1.5, False):
        with pytest.raises(ValueError, match='n must be an integer in 1..9'):
            P.decode_affine_pair(k, v, n, mx.float16)
    with pytest.raises(ValueError, match='scales and biases must be'):
        P.decode_affine_pair((k[0], k[1][..., :5, :], *k[2:]), v, 3, mx.float16)
    with pytest.raises(ValueError, match='whole groups'):
        P.decode_affine_pair((k[0][..., :3], *k[1:]), v, 3, mx.float16)
    with pytest.raises(ValueError, match='disagree'):
        P.decode_affine_pair(k, tuple(a[:1] if isinstance(a, mx.array) else a for a in v), 3, mx.float16)


@pytest.mark.parametrize('kv,window', [('turbo:4', 0), ('turbo:3,2', 0), ('turbo:4', 5), ('affine:4', 0), ('affine:8,4', 0), ('affine:4', 5),
                                       ('cal1:3,4', 0), ('cal1:2,6', 5), ('cal1:4,4', 0), ('cal1:3,a8', 0), ('cal1:4,a8', 5)])
def test_pair_prefill_route(emulated, monkeypatch, kv, window):
    """A chunk of queries through `attend` on the CUDA route (`_pair_prefill`: both pasts decoded to the model's space in
    one emulated launch of `decode_turbo_pair` / `decode_affine_pair`, exact window tokens joined, fused SDPA) agrees with
    `codec_attention`; the previous route (`PREFILL_PAIR = False`) gives the same. `cal1:K,V`: calibrated codecs of one
    band a side (`auto:B`'s tqBcs, means drawn at sd 0.3, per-channel scales), decoded by the turbo pair launch, which
    also scales them back and re-centres them; `cal1:K,a8`: such keys beside 8-bit affine
    values (`auto:5`'s other Llama layers), the keys by the pair launch over themselves (`_side_alone`)"""
    from mlx_kvq import attention as A
    from mlx_kvq.qcache import CodecKVCache
    from mlx_kvq.codecs import codec_attention, AffineCodec
    monkeypatch.setattr(A, 'kernel_backend', lambda: 'cuda')
    name, bits = kv.split(':')
    kb, _, vb = bits.partition(',')
    turbo = name in ('turbo', 'cal1')
    if name == 'cal1': cache = CodecKVCache(E.calibrated(int(kb), 0, 64, outliers=False), AffineCodec(8) if vb == 'a8' else E.calibrated(int(vb), 1, 64, outliers=False), window=window)
    else: cache = (CodecKVCache(TurboCodec(int(kb)), TurboCodec(int(vb or kb), seed=1), window=window) if turbo
                   else CodecKVCache(AffineCodec(int(kb)), AffineCodec(int(vb or kb)), window=window))
    h = lambda L, key: mx.random.normal((1, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    cache.update_and_fetch(h(40, 1), h(40, 2))
    ks, vs = cache.update_and_fetch(h(8, 3), h(8, 4))
    assert ks.storage[0].shape[-2] > ks.n_quantized and (ks.tail is not None and ks.tail.shape[-2] == window or not window)
    q = mx.random.normal((1, 4, 8, 64), key=mx.random.key(5)).astype(mx.float16)
    fn, guards = ('decode_turbo_pair', P._DPGUARDS) if turbo else ('decode_affine_pair', P._APGUARDS)
    calls = []
    monkeypatch.setattr(A, fn, lambda *a: calls.append(a) or getattr(P, fn)(*a))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = A.attend(q, ks, vs, scale=0.125, mask='causal')
    assert len(calls) == 1 and guards['cuda'].state and all(guards['cuda'].state.values())     # the pair route served it, its kernel verified
    ref = codec_attention(q.astype(mx.float32), ks, vs, scale=0.125, mask='causal')
    err = mx.abs(got.astype(mx.float32) - ref).max().item()
    assert got.shape == q.shape and got.dtype == mx.float16 and err <= 2e-3 * mx.abs(ref).max().item() + 1e-3, err
    monkeypatch.setattr(A, 'PREFILL_PAIR', False)
    old = A.attend(q, ks, vs, scale=0.125, mask='causal')
    assert len(calls) == 1 and mx.abs(old.astype(mx.float32) - got.astype(mx.float32)).max().item() <= 2e-3 * mx.abs(ref).max().item() + 1e-3



@pytest.mark.parametrize('kv', ['cal:3,4', 'cal:3,a8', 'cal1:3,cal:4', 'cal:5,cal1:4'])
def test_pair_prefill_takes_banded_calibrated_sides(emulated, monkeypatch, kv):
    """Calibrated sides the pair launch cannot decode (an outlier band: two bands a side, `auto:B`'s tqBcso) are decoded
    by their codec inside `_pair_prefill` (beside another such side, 8-bit affine values, or a one-band calibrated side,
    which the pair launch decodes alone: one `decode_turbo_pair` call) and agree with `codec_attention` and with the
    general route (`PREFILL_PAIR = False`: `_prefill_sdpa`)"""
    from mlx_kvq import attention as A
    from mlx_kvq.qcache import CodecKVCache
    from mlx_kvq.codecs import codec_attention, AffineCodec
    monkeypatch.setattr(A, 'kernel_backend', lambda: 'cuda')
    side = {'cal:3,4': ('b3', 'b4'), 'cal:3,a8': ('b3', 'a8'), 'cal1:3,cal:4': ('o3', 'b4'), 'cal:5,cal1:4': ('b5', 'o4')}[kv]
    make = lambda s, seed: AffineCodec(8) if s == 'a8' else E.calibrated(int(s[1]), seed, 64, outliers=s[0] == 'b')
    kc, vc = make(side[0], 0), make(side[1], 1)
    assert (kc.outliers is not None) == (side[0][0] == 'b') and (getattr(vc, 'outliers', None) is not None) == (side[1][0] == 'b')
    cache = CodecKVCache(kc, vc)
    h = lambda L, key: mx.random.normal((1, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    cache.update_and_fetch(h(40, 1), h(40, 2))
    ks, vs = cache.update_and_fetch(h(8, 3), h(8, 4))
    q = mx.random.normal((1, 4, 8, 64), key=mx.random.key(5)).astype(mx.float16)
    calls = []
    monkeypatch.setattr(A, 'decode_turbo_pair', lambda *a: calls.append(a) or P.decode_turbo_pair(*a))
    got = A._pair_prefill(q, ks, vs, 0.125, 'causal', None)
    assert got is not None and len(calls) == any(s[0] == 'o' for s in side)
    assert all(c[0][0] is c[1][0] for c in calls)                       # a one-band side decoded alone (the launch over itself)
    ref = codec_attention(q.astype(mx.float32), ks, vs, scale=0.125, mask='causal')
    tol = 2e-3 * mx.abs(ref).max().item() + 1e-3
    assert got.dtype == mx.float16 and mx.abs(got.astype(mx.float32) - ref).max().item() <= tol
    monkeypatch.setattr(A, 'PREFILL_PAIR', False)
    old = A.attend(q, ks, vs, scale=0.125, mask='causal')
    assert mx.abs(old.astype(mx.float32) - got.astype(mx.float32)).max().item() <= tol

def _append_case(bits, dim, dtype, prev=7, cap_old=12, n=5, cap=16):
    "Old storages (capacity cap_old holding `prev` tokens) of a turbo pair, an update of n tokens, and the append's arguments"
    kc, vc = TurboCodec(bits, seed=1), TurboCodec(bits, seed=2); kc.check_dim(dim); vc.check_dim(dim)
    old = lambda c, key: c.encode(mx.random.normal((2, 3, cap_old, dim), key=mx.random.key(key)))
    x = lambda key: (mx.random.normal((2, 3, n, dim), key=mx.random.key(key)) * 3).astype(dtype)
    return (old(kc, 1), old(vc, 2), prev, cap, x(3), kc.rotation, kc.codebook, x(4), vc.rotation, vc.codebook), (kc, vc)


@pytest.mark.parametrize('bits,dim,dtype', [(4, 64, mx.float16), (3, 128, mx.float32), (2, 32, mx.float16), (8, 256, mx.float16), (4, 128, mx.bfloat16)])
def test_quantize_append_pair_grows_the_storages(emulated, bits, dim, dtype):
    """One launch: the held tokens copied (capacity 12 -> 16, 7 held), the update quantized into rows 7..11 as the pair
    kernel quantizes it (the codecs decode it back), the spare rows zero; the first-use check passed"""
    args, (kc, vc) = _append_case(bits, dim, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        (wk, nk), (wv, nv) = P.quantize_append_pair(*args)
    assert P._QAGUARDS['cuda'].state[P._qa_class(*args)] is True
    (owk, onk), (owv, onv), prev, cap, xk, *_ = args
    xv = args[7]
    for got, old, x, c in (((wk, nk), (owk, onk), xk, kc), ((wv, nv), (owv, onv), xv, vc)):
        assert got[0].shape == (2, 3, cap, owk.shape[-1]) and got[0].dtype == mx.uint32 and got[1].shape == (2, 3, cap, 1) and got[1].dtype == mx.float16
        for g, o in zip(got, old):
            assert mx.array_equal(g[..., :prev, :], o[..., :prev, :]) and not mx.any(g[..., prev + 5:, :]).item()
        dec, ref = c.decode(tuple(g[..., prev:prev + 5, :] for g in got)), c.decode(c.encode(x.astype(mx.float32)))
        assert mx.abs(dec - ref).max().item() <= 1e-2 * mx.abs(ref).max().item()     # the same codes (ties aside) and norms
    again = P.quantize_append_pair(*args)                                                 # verified: the kept launch
    assert all(mx.array_equal(a, b) for a, b in zip((*again[0], *again[1]), (wk, nk, wv, nv)))


def test_a_wrong_append_kernel_is_refused(emulated, monkeypatch):
    "Not vacuous: held tokens read with the new capacity as their stride disagree, and the first-use check returns the reference"
    wrong = P._QA_CUDA.replace("(size_t)bh * cap_old + (held", "(size_t)bh * cap + (held")
    assert wrong != P._QA_CUDA
    monkeypatch.setattr(P, '_QA_CUDA', wrong)
    args, _ = _append_case(4, 64, mx.float16)
    with pytest.warns(RuntimeWarning, match='quantize_append'):
        got = P.quantize_append_pair(*args)
    assert P._QAGUARDS['cuda'].state[P._qa_class(*args)] is False
    ref = P._qa_reference(*args)
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


def test_quantize_append_pair_declines_what_it_does_not_take(emulated, monkeypatch):
    "Nothing held, different widths, other storage, a rotation the kernel does not apply, APPEND off: None (the cache concatenates); off CUDA: None"
    assert P.quantize_append_pair(*_append_case(4, 96, mx.float16)[0]) is None    # 96 dims: not one Walsh-Hadamard block
    args, _ = _append_case(4, 64, mx.float16)
    assert P.quantize_append_pair(*args[:2], 0, *args[3:]) is None
    kc3 = TurboCodec(3, seed=1); kc3.check_dim(64)
    assert P.quantize_append_pair(*args[:5], kc3.rotation, kc3.codebook, *args[7:]) is None
    assert P.quantize_append_pair(args[0][:1], *args[1:]) is None
    assert P.quantize_append_pair(*args[:3], 11, *args[4:]) is None       # capacity below held + new
    assert not P._QAGUARDS
    monkeypatch.setattr(P, 'APPEND', False); assert P.quantize_append_pair(*args) is None
    monkeypatch.setattr(P, 'APPEND', True); monkeypatch.setattr(P, 'kernel_backend', lambda: None)
    assert P.quantize_append_pair(*args) is None


@pytest.mark.parametrize('kv', ['turbo:4', 'turbo:3,2'])
def test_prefill_chunks_grow_the_cache_as_the_cpu_path_does(emulated, monkeypatch, kv):
    """Prompt chunks through a CodecKVCache on the emulated CUDA path (turbo:4: the append kernel grows the storage; turbo:3,2:
    widths differ, the concatenations) hold what the CPU path's cache holds: the same tokens decoded, the same capacity"""
    from mlx_kvq import qcache as Q
    from mlx_kvq.qcache import CodecKVCache
    kb, _, vb = kv.split(':')[1].partition(',')
    monkeypatch.setattr(CodecKVCache, 'step', 16)     # capacity grows by 16 tokens (256 in use): small enough to emulate
    make = lambda: CodecKVCache(TurboCodec(int(kb)), TurboCodec(int(vb or kb), seed=1))
    h = lambda L, key: mx.random.normal((1, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    chunks = [(h(L, 2 * i), h(L, 2 * i + 1)) for i, L in enumerate((20, 20, 20, 1))]
    monkeypatch.setattr(P, 'kernel_backend', lambda: None); monkeypatch.setattr(Q, 'kernel_backend', lambda: None)
    cpu = make()
    for k, v in chunks: cpu.update_and_fetch(k, v)
    monkeypatch.setattr(P, 'kernel_backend', lambda: 'cuda'); monkeypatch.setattr(Q, 'kernel_backend', lambda: 'cuda')
    gpu, calls = make(), []
    monkeypatch.setattr(P, '_fused_append_pair', lambda *a, f=P._fused_append_pair: calls.append(a) or f(*a))
    for k, v in chunks: gpu.update_and_fetch(k, v)
    assert len(calls) == (2 if kb == (vb or kb) else 0)       # the growths after the first chunk (capacity 32 -> 48 -> 64; the last token fits)
    assert gpu.keys[0].shape == cpu.keys[0].shape and gpu.n_quantized == cpu.n_quantized == 61
    for a, b in zip(gpu.dequantized(), cpu.dequantized()):
        assert mx.abs(a - b).max().item() <= 1e-2 * mx.abs(b).max().item()
