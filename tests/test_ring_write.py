"""A sliding-window ring's decode token quantized into the ring by one CUDA launch (`packing.quantize_into_pair`, the
append kernel with every other row kept), run through its host code with MLX's `cuda_kernel` replaced by the CPU
emulator (tests/kernel_emulator.py): against the reference (the pair kernel's codes written into slices), and a
`QuantizedRotatingKVCache` on that path against the same cache on the slice-writing path, over steps that wrap the ring."""
import sys, warnings
from pathlib import Path
import pytest
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_emulator as E
from mlx_kvq import packing as P
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.kvsplit import QuantizedRotatingKVCache


@pytest.fixture
def emulated(emulated_packing):
    "The CUDA code path with the emulated kernels, fresh guards and kernels (conftest.py)"


def _ring_case(bits, dim, dtype, pos, n=1, cap=12):
    "Full ring storages (capacity `cap`) of a turbo pair, an update of n tokens, and `quantize_into_pair`'s arguments"
    kc, vc = TurboCodec(bits, seed=1), TurboCodec(bits, seed=2); kc.check_dim(dim); vc.check_dim(dim)
    old = lambda c, key: c.encode(mx.random.normal((2, 3, cap, dim), key=mx.random.key(key)))
    x = lambda key: (mx.random.normal((2, 3, n, dim), key=mx.random.key(key)) * 3).astype(dtype)
    return (old(kc, 1), old(vc, 2), pos, x(3), kc.rotation, kc.codebook, x(4), vc.rotation, vc.codebook), (kc, vc)


@pytest.mark.parametrize('bits,dim,dtype,pos,n', [(4, 64, mx.float16, 5, 1), (4, 256, mx.float16, 11, 1), (3, 128, mx.float32, 0, 1),
                                                  (2, 32, mx.bfloat16, 3, 2), (8, 128, mx.float16, 7, 1)])
def test_quantize_into_pair_writes_its_rows_and_keeps_the_others(emulated, bits, dim, dtype, pos, n):
    """One launch: rows pos .. pos + n - 1 hold the update as the pair kernel quantizes it (the codecs decode it back), every
    other row is the old storage's, bit for bit; the first-use check passed, and the verified launch gives the same"""
    args, (kc, vc) = _ring_case(bits, dim, dtype, pos, n)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        (wk, nk), (wv, nv) = P.quantize_into_pair(*args)
    assert P._QIGUARDS['cuda'].state[P._qi_class(*args)] is True
    old_k, old_v, _, xk, _, _, xv, _, _ = args
    for got, old, x, c in (((wk, nk), old_k, xk, kc), ((wv, nv), old_v, xv, vc)):
        for g, o in zip(got, old):
            assert g.shape == o.shape and g.dtype == o.dtype
            assert mx.array_equal(g[..., :pos, :], o[..., :pos, :]) and mx.array_equal(g[..., pos + n:, :], o[..., pos + n:, :])
            assert not mx.array_equal(g[..., pos:pos + n, :], o[..., pos:pos + n, :])     # the row did change
        dec, ref = c.decode(tuple(g[..., pos:pos + n, :] for g in got)), c.decode(c.encode(x.astype(mx.float32)))
        assert mx.abs(dec - ref).max().item() <= 1e-2 * mx.abs(ref).max().item()
    again = P.quantize_into_pair(*args)                                                   # verified: the kept launch
    assert all(mx.array_equal(a, b) for a, b in zip((*again[0], *again[1]), (wk, nk, wv, nv)))


def test_a_wrong_ring_kernel_is_refused(emulated, monkeypatch):
    "Not vacuous: a kernel that keeps only the rows before the write (the append's rule) zeroes the rest, and the first-use check returns the reference"
    wrong = P._QA_CUDA.replace("|| t < (unsigned int)keep_end", "")
    assert wrong != P._QA_CUDA
    monkeypatch.setattr(P, '_QA_CUDA', wrong)
    args, _ = _ring_case(4, 64, mx.float16, 4)
    with pytest.warns(RuntimeWarning, match='quantize_into'):
        got = P.quantize_into_pair(*args)
    assert P._QIGUARDS['cuda'].state[P._qi_class(*args)] is False
    ref = P._qi_reference(*args)
    assert all(mx.array_equal(a, b) for a, b in zip((*got[0], *got[1]), (*ref[0], *ref[1])))


def test_quantize_into_pair_declines_what_it_does_not_take(emulated, monkeypatch):
    "A rotation the kernel does not apply, different widths, rows past the storage, other storage, RING off, off CUDA: None (the cache writes slices)"
    assert P.quantize_into_pair(*_ring_case(4, 96, mx.float16, 2)[0]) is None      # 96 dims: not one Walsh-Hadamard block
    args, _ = _ring_case(4, 64, mx.float16, 2)
    kc3 = TurboCodec(3, seed=1); kc3.check_dim(64)
    assert P.quantize_into_pair(*args[:4], kc3.rotation, kc3.codebook, *args[6:]) is None
    assert P.quantize_into_pair(*args[:2], 12, *args[3:]) is None                    # row 12 of a 12-token ring
    assert P.quantize_into_pair(*args[:2], -1, *args[3:]) is None
    assert P.quantize_into_pair(args[0][:1], *args[1:]) is None
    assert not P._QIGUARDS
    monkeypatch.setattr(P, 'RING', False); assert P.quantize_into_pair(*args) is None
    monkeypatch.setattr(P, 'RING', True); monkeypatch.setattr(P, 'kernel_backend', lambda: None)
    assert P.quantize_into_pair(*args) is None


@pytest.mark.parametrize('keep,kv,prompt', [(0, (4, 4), 5), (2, (4, 4), 5), (0, (3, 2), 5), (0, (4, 4), 2)])
def test_a_ring_on_the_cuda_path_holds_what_the_slice_path_holds(emulated, monkeypatch, keep, kv, prompt):
    """A QuantizedRotatingKVCache (window 8, `keep` sink tokens) fed a prompt and 14 decode tokens on the emulated CUDA path:
    with the same widths every decode token after the ring is allocated is written by the ring kernel, the first through
    `quantize_into_pair` (verified), the others by the launch the cache holds (`into_writer`), and again through
    `quantize_into_pair` once the storage was replaced (step 9: same contents, new arrays); none with widths that differ.
    After every step the ring's parts, offset and write index equal those of the same cache with RING off (the pair
    kernel's codes written into slices), bit for bit, as do the keys and values `update_and_fetch` returns"""
    make = lambda: QuantizedRotatingKVCache(8, keep, TurboCodec(kv[0]), TurboCodec(kv[1], seed=1))
    h = lambda L, key: mx.random.normal((1, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    steps = [(h(prompt, 0), h(prompt, 1))] + [(h(1, 2 * i + 2), h(1, 2 * i + 3)) for i in range(19 - prompt)]
    into, held = [], []
    monkeypatch.setattr(P, '_fused_into_pair', lambda *a, f=P._fused_into_pair: into.append(a[2]) or f(*a))
    def writer(*a, f=P.into_writer):
        w = f(*a)
        return None if w is None else (lambda ok, ov, pos, xk, xv: held.append(pos) or w(ok, ov, pos, xk, xv))
    monkeypatch.setattr(P, 'into_writer', writer)
    from mlx_kvq import turbo_codec as T
    monkeypatch.setattr(T, 'into_writer', writer)
    ring, sliced = make(), make()
    for i, (k, v) in enumerate(steps):
        if i == 9: ring.keys, ring.values = (type(ring.keys)(tuple(mx.array(p) for p in s)) for s in (ring.keys, ring.values))
        a = ring.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'RING', False)
        b = sliced.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'RING', True)
        assert (ring.offset, ring._idx) == (sliced.offset, sliced._idx)
        for x, y in zip((*a[0], *a[1], *ring.keys, *ring.values), (*b[0], *b[1], *sliced.keys, *sliced.values)):
            assert x.shape == y.shape and mx.array_equal(x, y)
    if kv[0] == kv[1]:
        # the prompt is one concatenation, the first decode token grows the ring to 8 (slices), then 18 - prompt writes by
        # the kernel: positions prompt + 1 .. 7, then keep .. 7 around the ring; at step 9 (the storage replaced)
        # quantize_into_pair again. With a 2-token prompt the held launch writes tokens 4 .. 7 of a ring not yet full:
        # `update_and_fetch` returns their first `offset` tokens, as the slice path does
        first = list(range(prompt + 1, 8))
        assert len(into) == 2 and len(held) == 16 - prompt and into[0] == prompt + 1 and held[:len(first)] == first[1:] + [keep]
        assert sorted(into + held) == sorted(first + [keep + j % (8 - keep) for j in range(18 - prompt - len(first))])
    else:
        assert into == [] and held == []


@pytest.mark.parametrize('affine', [False, True])
def test_a_full_ring_holds_its_decode_launch(monkeypatch, affine):
    """Decode steps of a full turbo:4 or affine:4 ring (window 64, 2 KV heads x 4 queries, d64, float16) on the emulated CUDA path: the
    first full-ring attention is served by the fused path and the cache then holds its launch (`decode_runner`), which
    serves every later step; each output matches `codec_attention` over what the ring holds (the launcher's tolerance)
    and the held launch answers as the launcher's own path does, bit for bit; a ring whose codecs change drops it"""
    from mlx_kvq import attention as A, kvsplit as K
    from mlx_kvq.codecs import CachedSide, codec_attention
    monkeypatch.setattr(mx.fast, 'cuda_kernel', E.cuda_kernel, raising=False)
    for mod in (A, P): monkeypatch.setattr(mod, 'kernel_backend', lambda: 'cuda')
    for nm in ('_KERNELS', '_GUARDS', '_LAUNCHERS', '_OK', '_STAGE_CAPS'): monkeypatch.setattr(A, nm, {})
    for nm in ('_KERNELS', '_GUARDS', '_QREADY', '_QLAUNCH', '_PGUARDS', '_PREADY', '_QPLAUNCH', '_QAK', '_QIGUARDS', '_QIREADY', '_RING_META',
               '_AIK', '_AIGUARDS', '_AIREADY'):
        monkeypatch.setattr(P, nm, {})
    runs = []
    orig = K.decode_runner
    def counting(*a):
        r = orig(*a)
        return None if r is None else (lambda *b: runs.append(1) or r(*b))
    monkeypatch.setattr(K, 'decode_runner', counting)
    from mlx_kvq.codecs import AffineCodec
    c = QuantizedRotatingKVCache(64, 0, *((AffineCodec(4), AffineCodec(4)) if affine else (TurboCodec(4), TurboCodec(4, seed=1))))
    mx.random.seed(3)
    h = lambda L: mx.random.normal((1, 2, L, 64)).astype(mx.float16)
    c.update_and_fetch(h(70), h(70))                     # a full ring
    outs = []
    for step in range(4):
        q = mx.random.normal((1, 8, 1, 64)).astype(mx.float16)
        kk, vv = c.update_and_fetch(h(1), h(1))
        got = c.attend(q, kk, vv, scale=0.125)
        ref = codec_attention(q.astype(mx.float32), CachedSide(c.k_codec, parts=tuple(kk)), CachedSide(c.v_codec, parts=tuple(vv)), scale=0.125)
        assert mx.abs(got.astype(mx.float32) - ref).max().item() <= 2e-3 * mx.abs(ref).max().item() + 1e-3
        if step >= 1:   # the held launch against the launcher's path over the same storage
            assert mx.array_equal(got, A.attend(q, CachedSide(c.k_codec, parts=tuple(kk)), CachedSide(c.v_codec, parts=tuple(vv)), scale=0.125))
        outs.append(got)
    assert len(runs) == 3 and c.__dict__['_ringa'] is not None     # step 0 made it (the fused path served), steps 1-3 used it
    c.k_codec = AffineCodec(4) if affine else TurboCodec(4, seed=7)   # other codecs (an equal but new object, e.g. a requantize): the held launch is not used
    kk, vv = c.keys, c.values
    c.attend(mx.random.normal((1, 8, 1, 64)).astype(mx.float16), kk, vv, scale=0.125)
    assert len(runs) == 3


@pytest.mark.parametrize('kv', [(4, 4), (3, 2)])
def test_a_batch_ring_on_the_cuda_path_holds_what_the_slice_path_holds(emulated, monkeypatch, kv):
    """A BatchQuantizedRotatingKVCache (2 rows, left padding 3 and 0, window 8) fed a prompt and 12 decode tokens on the
    emulated CUDA path: with the same widths the decode tokens that need no growth go through `quantize_into_pair` (none
    with widths that differ), and after every step its parts, offsets, left padding, write index and rotation equal
    those of the same cache with RING off, bit for bit, as do the keys and values `update_and_fetch` returns"""
    from mlx_kvq.batch import BatchQuantizedRotatingKVCache
    make = lambda: BatchQuantizedRotatingKVCache(TurboCodec(kv[0]), TurboCodec(kv[1], seed=1), 8, [3, 0])
    h = lambda L, key: mx.random.normal((2, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    steps = [(h(5, 0), h(5, 1))] + [(h(1, 2 * i + 2), h(1, 2 * i + 3)) for i in range(12)]
    into = []
    monkeypatch.setattr(P, '_fused_into_pair', lambda *a, f=P._fused_into_pair: into.append(a[2]) or f(*a))
    ring, sliced = make(), make()
    for k, v in steps:
        a = ring.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'RING', False)
        b = sliced.update_and_fetch(k, v)
        monkeypatch.setattr(P, 'RING', True)
        assert (ring._offset, ring._idx, ring.rotated) == (sliced._offset, sliced._idx, sliced.rotated)
        assert mx.array_equal(ring.offset, sliced.offset) and mx.array_equal(ring.left_padding, sliced.left_padding)
        for x, y in zip((*a[0], *a[1], *ring.keys, *ring.values), (*b[0], *b[1], *sliced.keys, *sliced.values)):
            assert x.shape == y.shape and mx.array_equal(x, y)
    if kv[0] == kv[1]:   # the prompt, then a growth to 8 (slices), then 11 writes at 6, 7, 0, 1, ... around the ring
        assert into == [6, 7] + [j % 8 for j in range(9)]
    else:
        assert into == []


def test_a_batch_row_holds_what_a_single_ring_holds(emulated):
    """Batch equals single on the CUDA path: a one-row BatchQuantizedRotatingKVCache and a QuantizedRotatingKVCache (its held
    launch serving most steps) fed the same prompt and 14 decode tokens hold the same parts, bit for bit, after every step"""
    from mlx_kvq.batch import BatchQuantizedRotatingKVCache
    kc, vc = TurboCodec(4), TurboCodec(4, seed=1)
    single, batch = QuantizedRotatingKVCache(8, 0, kc, vc), BatchQuantizedRotatingKVCache(kc, vc, 8, [0])
    h = lambda L, key: mx.random.normal((1, 2, L, 64), key=mx.random.key(key)).astype(mx.float16)
    for i, (k, v) in enumerate([(h(5, 0), h(5, 1))] + [(h(1, 2 * i + 2), h(1, 2 * i + 3)) for i in range(14)]):
        a, b = single.update_and_fetch(k, v), batch.update_and_fetch(k, v)
        for x, y in zip((*a[0], *a[1]), (*b[0], *b[1])):
            assert x.shape == y.shape and mx.array_equal(x, y), i
    assert single.__dict__.get('_ringw') is not None
