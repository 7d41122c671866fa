"""The prefill kernels of a turbo past (`packing.rotate_rows`, `packing.decode_rotated_storage`) run through their host
code with MLX's `cuda_kernel` replaced by the CPU emulator (tests/kernel_emulator.py), against the float32 route they
replace; and compiled by NVRTC for sm_90 where NVIDIA's wheels are installed (test_cuda_compile.py's tools)."""
import os, sys, warnings
from pathlib import Path
import numpy as np
import pytest
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_emulator as E
from mlx_kvq import packing as P
from mlx_kvq.rotation import get_rotation
from mlx_kvq.turbo_codec import TurboCodec


@pytest.fixture
def emulated(monkeypatch):
    "The CUDA code path with the emulated kernels, fresh guards and kernels (nothing verified yet)"
    monkeypatch.setattr(mx.fast, 'cuda_kernel', E.cuda_kernel, raising=False)
    monkeypatch.setattr(P, 'kernel_backend', lambda: 'cuda')
    monkeypatch.setattr(P, 'INCLUDE', False)
    monkeypatch.setattr(P, '_PKERNELS', {}); monkeypatch.setattr(P, '_RGUARDS', {}); monkeypatch.setattr(P, '_DTGUARDS', {})
    monkeypatch.setattr(P, '_GKERNELS', {}); monkeypatch.setattr(P, '_GGUARDS', {})


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
    monkeypatch.setattr(P, '_R_CUDA', P._R_CUDA.replace('* signs[lane * E + e];\n    for (int h', ';\n    for (int h'))
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


def _ptxas():
    try:
        import nvidia
        root = list(nvidia.__path__)[0]
        return os.path.exists(os.path.join(root, 'cuda_nvrtc', 'lib', 'libnvrtc.so.12')) and os.path.exists(os.path.join(root, 'cuda_nvcc', 'bin', 'ptxas'))
    except ImportError: return False

@pytest.mark.skipif(not _ptxas(), reason='needs nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12')
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
    tys = ['uint32_t', ty, 'uint32_t', ty]    # grow_storage of two sides' words and norms
    head = "".join(f"constexpr int L{p} = {w};\n" for p, w in enumerate((8, 1, 6, 1))) + "".join(f"using T{p} = {t};\n" for p, t in enumerate(tys))
    ins = [(f"o{p}", t) for p, t in enumerate(tys)] + [(f"x{p}", t) for p, t in enumerate(tys)] + [('meta', 'int32_t')]
    regs, spill, _ = CR.compile_ptxas('g', CR.wrap('g', head + P._grow_source(4), ins, [(f"g{p}", t) for p, t in enumerate(tys)]), 'sm_90')
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


def _parts(B, H, n, seed):
    "Storage-like parts of two sides: uint32 words (..., 8) and float16 norms (..., 1) per side"
    mk = lambda i, w: mx.random.randint(0, 2 ** 31, (B, H, n, w), key=mx.random.key(seed + i)).astype(mx.uint32)
    nm = lambda i: mx.random.normal((B, H, n, 1), key=mx.random.key(seed + i)).astype(mx.float16)
    return (mk(0, 8), nm(1), mk(2, 6), nm(3))


@pytest.mark.parametrize('prev,ocap,n,grow', [(0, 0, 5, 5), (0, 0, 5, 8), (7, 9, 5, 5), (7, 7, 3, 9)])
def test_grow_storage_writes_held_new_and_zero_rows(emulated, prev, ocap, n, grow):
    "Every part of both sides in one (emulated) launch equals the concatenations it replaces, zeros included"
    old, new = _parts(2, 3, ocap, 10) if ocap else (), _parts(2, 3, n, 20)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = P.grow_storage(old, new, prev, grow)
    ref = P._grow_reference(old if prev else new, new, prev, grow)
    assert P._GGUARDS['cuda'].state[P._grow_class(old, new, prev, grow)] is True
    for g, r in zip(got, ref):
        assert g.shape == (2, 3, prev + grow, r.shape[-1]) and g.dtype == r.dtype and mx.array_equal(g, r).item()


def test_a_wrong_grow_kernel_is_refused(emulated, monkeypatch):
    "Not vacuous: a kernel that leaves the rows past the new ones unwritten is refused (the emulator starts outputs as garbage)"
    orig = P._grow_source
    monkeypatch.setattr(P, '_grow_source', lambda k: orig(k).replace("i += stride) {", "i += stride) { if (i / L0 % cap >= prev + n) continue;"))
    old, new = _parts(1, 2, 6, 30), _parts(1, 2, 2, 40)
    with pytest.warns(RuntimeWarning, match='grow_storage'):
        got = P.grow_storage(old, new, 6, 4)
    assert all(mx.array_equal(g, r).item() for g, r in zip(got, P._grow_reference(old, new, 6, 4)))


def test_cache_updates_grow_the_same_storage_with_the_kernel(emulated, monkeypatch):
    "A turbo cache's updates (prefill chunks that grow it, decode tokens that do not) hold the same codes on both routes"
    from mlx_kvq.qcache import CodecKVCache
    from mlx_kvq import qcache as Q
    chunks = [mx.random.normal((1, 2, n, 64), key=mx.random.key(n)) for n in (300, 1, 260, 1)]
    def run():
        c = CodecKVCache(TurboCodec(4), TurboCodec(3, seed=1))
        for x in chunks: c.update_and_fetch(x, x * 0.5)
        return c
    with monkeypatch.context() as m:                 # grown by the concatenations
        m.setattr(Q, 'grow_storage', lambda old, new, prev, grow: P._grow_reference(tuple(old) if prev else tuple(new), tuple(new), prev, grow))
        ref = run()
    assert not P._GGUARDS
    got = run()                                      # by the (emulated) kernel
    assert P._GGUARDS['cuda'].state and all(P._GGUARDS['cuda'].state.values())
    for a, b in zip(got.keys + got.values, ref.keys + ref.values):
        assert a.shape == b.shape and mx.array_equal(a, b).item()
