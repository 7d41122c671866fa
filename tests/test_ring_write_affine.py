"""An affine sliding-window ring's decode token quantized into the ring by one CUDA launch (`packing.affine_into_pair`:
`mx.quantize`'s arithmetic, codes packed into words, every other row copied), run through its host code with MLX's
`cuda_kernel` replaced by the CPU emulator (tests/kernel_emulator.py; its rounding is MLX's CPU build's, ties to even, so
the emulated kernel must equal the CPU `mx.quantize` bit for bit): against the reference, and `QuantizedRotatingKVCache` /
`BatchQuantizedRotatingKVCache` on that path against the same caches writing slices, over steps that wrap the ring."""
import sys, warnings
from pathlib import Path
import pytest
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq import packing as P
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.kvsplit import QuantizedRotatingKVCache


@pytest.fixture
def emulated(emulated_packing):
    "The CUDA code path with the emulated kernels, fresh guards and kernels (conftest.py)"


def _case(kv, gs, dim, dtype, pos, n=1, cap=12, B=2, H=3):
    "Full ring storages (capacity `cap`) of an affine pair of widths `kv`, an update of n tokens, and `affine_into_pair`'s arguments"
    kc, vc = AffineCodec(kv[0], gs), AffineCodec(kv[1], gs)
    old = lambda c, key: c.encode(mx.random.normal((B, H, cap, dim), key=mx.random.key(key)))
    x = lambda key: (mx.random.normal((B, H, n, dim), key=mx.random.key(key)) * 3 + 0.5).astype(dtype)
    return (old(kc, 1), old(vc, 2), pos, x(3), (kv[0], gs), x(4), (kv[1], gs)), (kc, vc)


@pytest.mark.parametrize('kv,gs,dim,dtype,pos,n', [((4, 4), 64, 128, mx.float16, 5, 1), ((8, 4), 64, 256, mx.float16, 11, 1),
                                                   ((4, 8), 32, 64, mx.float32, 0, 1), ((8, 8), 128, 128, mx.float32, 3, 2),
                                                   ((4, 4), 32, 96, mx.float16, 7, 1)])
def test_affine_into_pair_is_mx_quantize_written_into_the_ring(emulated, kv, gs, dim, dtype, pos, n):
    """One launch: rows pos .. pos + n - 1 hold `AffineCodec.encode` of the update (words, scales, biases bit for bit),
    every other row the old storage's; the first-use check passed, and the verified launch gives the same"""
    args, (kc, vc) = _case(kv, gs, dim, dtype, pos, n)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = P.affine_into_pair(*args)
    assert P._AIGUARDS['cuda'].state[P._ai_class(*args)] is True
    old_k, old_v, _, xk, _, xv, _ = args
    for side, old, x, c in ((got[0], old_k, xk, kc), (got[1], old_v, xv, vc)):
        assert len(side) == 3
        for g, o, e in zip(side, old, c.encode(x)):
            assert g.shape == o.shape and g.dtype == o.dtype
            assert mx.array_equal(g[..., :pos, :], o[..., :pos, :]) and mx.array_equal(g[..., pos + n:, :], o[..., pos + n:, :])
            assert mx.array_equal(g[..., pos:pos + n, :], e)
    again = P.affine_into_pair(*args)                                                     # verified: the kept launch
    assert all(mx.array_equal(a, b) for a, b in zip((*again[0], *again[1]), (*got[0], *got[1])))


@pytest.mark.parametrize('mutation', [("(e * BK)", "(e * BV)"), ("bk[orow * NGR + grp] = __float2half_rn((float)(T)bias)", "bk[orow * NGR + grp] = __float2half_rn(0.0f)"),
                                      ("if (t >= (unsigned int)pos && t < (unsigned int)(pos + n)) return;", "if (t == (unsigned int)pos) return;")])
def test_a_wrong_affine_ring_kernel_is_refused(emulated, monkeypatch, mutation):
    """Not vacuous: a kernel that packs the key codes with the value width, drops the key biases, or copies the old row
    over a second new row is refused by the first-use check, which returns the reference"""
    wrong = P._AI_CUDA.replace(*mutation)
    assert wrong != P._AI_CUDA
    monkeypatch.setattr(P, '_AI_CUDA', wrong)
    args, _ = _case((8, 4), 64, 128, mx.float16, 4, n=2)
    with pytest.warns(RuntimeWarning, match='affine_into'):
        got = P.affine_into_pair(*args)
    assert P._AIGUARDS['cuda'].state[P._ai_class(*args)] is False and not P._AIREADY
    ref = P._ai_reference(*args)
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


def test_affine_into_pair_declines_what_it_does_not_take(emulated, monkeypatch):
    "Widths the kernel does not pack, rows past the storage, storages of other widths or shapes, AFFINE_RING off, off CUDA: None (the cache writes slices)"
    assert P.affine_into_pair(*_case((3, 4), 64, 128, mx.float16, 2)[0]) is None
    assert P.affine_into_pair(*_case((4, 2), 64, 128, mx.float16, 2)[0]) is None
    args, _ = _case((4, 4), 64, 128, mx.float16, 2)
    assert P.affine_into_pair(*args[:2], 12, *args[3:]) is None                       # row 12 of a 12-token ring
    assert P.affine_into_pair(*args[:2], -1, *args[3:]) is None
    assert P.affine_into_pair(*args[:4], (8, 64), *args[5:]) is None                  # key storage of 4-bit words
    assert P.affine_into_pair(args[0][:2], *args[1:]) is None
    assert P.affine_into_pair(*args[:3], args[3][:1], *args[4:]) is None              # keys and values of other batches
    assert P.affine_into_pair(*args[:3], args[3].astype(mx.float32), *args[4:]) is None
    assert not P._AIGUARDS
    monkeypatch.setattr(P, 'AFFINE_RING', False); assert P.affine_into_pair(*args) is None
    monkeypatch.setattr(P, 'AFFINE_RING', True); monkeypatch.setattr(P, 'kernel_backend', lambda: None)
    assert P.affine_into_pair(*args) is None


@pytest.mark.parametrize('keep,kv,prompt', [(0, (4, 4), 5), (2, (8, 4), 5), (0, (4, 4), 2), (0, (4, 3), 5)])
def test_an_affine_ring_on_the_cuda_path_holds_what_the_slice_path_holds(emulated, monkeypatch, keep, kv, prompt):
    """A QuantizedRotatingKVCache of affine sides (window 8, `keep` sink tokens) fed a prompt and decode tokens on the
    emulated CUDA path: where both widths are the kernel's, every decode token after the ring is allocated is written by
    the ring kernel, the first through `affine_into_pair` (verified), the others by the launch the cache holds
    (`affine_into_writer`), and again through `affine_into_pair` once the storage was replaced (step 9); none with a
    3-bit side. After every step the ring's parts, offset and write index equal those of the same cache with
    AFFINE_RING off (`mx.quantize` written into slices), bit for bit, as do the keys and values `update_and_fetch` returns"""
    from mlx_kvq import codecs as C
    make = lambda: QuantizedRotatingKVCache(8, keep, AffineCodec(kv[0]), AffineCodec(kv[1]))
    h = lambda L, key: mx.random.normal((1, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    steps = [(h(prompt, 0), h(prompt, 1))] + [(h(1, 2 * i + 2), h(1, 2 * i + 3)) for i in range(19 - prompt)]
    into, held = [], []
    monkeypatch.setattr(P, '_fused_affine_into', lambda *a, f=P._fused_affine_into: into.append(a[2]) or f(*a))
    def writer(*a, f=P.affine_into_writer):
        w = f(*a)
        return None if w is None else (lambda ok, ov, pos, xk, xv: held.append(pos) or w(ok, ov, pos, xk, xv))
    monkeypatch.setattr(C, 'affine_into_writer', writer)
    ring, sliced = make(), make()
    for i, (k, v) in enumerate(steps):
        if i == 9: ring.keys, ring.values = (type(ring.keys)(tuple(mx.array(p) for p in s)) for s in (ring.keys, ring.values))
        a = ring.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'AFFINE_RING', False)
        b = sliced.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'AFFINE_RING', True)
        assert (ring.offset, ring._idx) == (sliced.offset, sliced._idx)
        for x, y in zip((*a[0], *a[1], *ring.keys, *ring.values), (*b[0], *b[1], *sliced.keys, *sliced.values)):
            assert x.shape == y.shape and mx.array_equal(x, y)
    if 3 not in kv:
        first = list(range(prompt + 1, 8))
        assert len(into) == 2 and len(held) == 16 - prompt and into[0] == prompt + 1 and held[:len(first)] == first[1:] + [keep]
        assert sorted(into + held) == sorted(first + [keep + j % (8 - keep) for j in range(18 - prompt - len(first))])
    else:
        assert into == [] and held == []


def test_an_affine_batch_ring_on_the_cuda_path_holds_what_the_slice_path_holds(emulated, monkeypatch):
    """A BatchQuantizedRotatingKVCache of `affine:8,4` (2 rows, left padding 3 and 0, window 8) fed a prompt and 12 decode
    tokens: the decode tokens that need no growth go through `affine_into_pair`, and after every step its parts,
    offsets, left padding, write index and rotation equal those of the same cache with AFFINE_RING off, bit for bit"""
    from mlx_kvq.batch import BatchQuantizedRotatingKVCache
    make = lambda: BatchQuantizedRotatingKVCache(AffineCodec(8), AffineCodec(4), 8, [3, 0])
    h = lambda L, key: mx.random.normal((2, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    into = []
    monkeypatch.setattr(P, '_fused_affine_into', lambda *a, f=P._fused_affine_into: into.append(a[2]) or f(*a))
    ring, sliced = make(), make()
    for k, v in [(h(5, 0), h(5, 1))] + [(h(1, 2 * i + 2), h(1, 2 * i + 3)) for i in range(12)]:
        a = ring.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'AFFINE_RING', False)
        b = sliced.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'AFFINE_RING', True)
        assert (ring._offset, ring._idx, ring.rotated) == (sliced._offset, sliced._idx, sliced.rotated)
        assert mx.array_equal(ring.offset, sliced.offset) and mx.array_equal(ring.left_padding, sliced.left_padding)
        for x, y in zip((*a[0], *a[1], *ring.keys, *ring.values), (*b[0], *b[1], *sliced.keys, *sliced.values)):
            assert x.shape == y.shape and mx.array_equal(x, y)
    assert into == [6, 7] + [j % 8 for j in range(9)]
