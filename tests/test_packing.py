"""Property tests for mlx_kvq.packing: the dense bit stream is a bijection on valid codes."""
import numpy as np
import mlx.core as mx
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from mlx_kvq.packing import pack, unpack, packed_words, pack_ref, unpack_ref

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _words_by_definition(codes, bits):
    "Plain-Python layout: code i at bits [i*bits, (i+1)*bits) of one little-endian stream"
    val = sum(int(c) << (i * bits) for i, c in enumerate(codes))
    return [(val >> (32 * j)) & 0xFFFFFFFF for j in range(-(-len(codes) * bits // 32))]


@st.composite
def code_arrays(draw):
    bits = draw(st.integers(1, 8))
    n = draw(st.integers(1, 200))
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    seed = draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from([np.uint8, np.uint32]))
    codes = np.random.default_rng(seed).integers(0, 2**bits, size=batch + (n,)).astype(dtype)
    return bits, codes


@SETTINGS
@given(code_arrays())
def test_roundtrip_and_layout(case):
    bits, codes = case
    n = codes.shape[-1]
    words = pack(mx.array(codes), bits)
    assert words.dtype == mx.uint32 and words.shape == codes.shape[:-1] + (packed_words(n, bits),)
    back = unpack(words, bits, n)
    assert back.dtype == mx.uint8
    np.testing.assert_array_equal(np.array(back), codes.astype(np.uint8))
    flat_codes, flat_words = codes.reshape(-1, n), np.array(words).reshape(-1, words.shape[-1])
    for c, w in zip(flat_codes[:4], flat_words[:4]):
        assert w.tolist() == _words_by_definition(c.tolist(), bits)


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 100), st.integers(0, 2**31 - 1))
def test_bijection(bits, n, seed):
    "pack is injective on valid codes, and unpack(pack(.)) is the identity; padding bits stay zero so pack(unpack(w)) == w"
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**bits, size=(n,)).astype(np.uint8)
    b = a.copy(); i = rng.integers(n); b[i] = (int(b[i]) + 1 + rng.integers(2**bits - 1)) % 2**bits if bits > 0 else b[i]
    wa, wb = np.array(pack(mx.array(a), bits)), np.array(pack(mx.array(b), bits))
    if not np.array_equal(a, b):
        assert not np.array_equal(wa, wb)
    np.testing.assert_array_equal(np.array(pack(unpack(mx.array(wa), bits, n), bits)), wa)
    tail = packed_words(n, bits) * 32 - n * bits
    if tail:
        assert int(wa[-1]) >> (32 - tail) == 0


@pytest.mark.parametrize("bits", range(1, 9))
def test_exhaustive_small(bits):
    "Every code value at every position of a word boundary straddle survives"
    n = 64 // bits + 3
    for v in range(2**bits):
        codes = np.full((n,), v, dtype=np.uint8)
        np.testing.assert_array_equal(np.array(unpack(pack(mx.array(codes), bits), bits, n)), codes)


def test_bad_input():
    c = mx.zeros((4,), dtype=mx.uint8)
    for bad in (0, 9, -1, 2.0, True):
        with pytest.raises(ValueError, match="1..8"):
            pack(c, bad)
    with pytest.raises(ValueError, match="< 4"):
        pack(mx.array([0, 4], dtype=mx.uint8), 2)
    with pytest.raises(ValueError, match="uint8 or uint32"):
        pack(c.astype(mx.int64), 2)
    with pytest.raises(ValueError, match="uint32"):
        unpack(mx.zeros((1,), dtype=mx.uint8), 2, 4)

def test_old_kernel_bodies_pruned(tmp_path, monkeypatch):
    """Writing a new body removes the bodies (and interrupted temporaries) unused for KEEP_DAYS from the kernel folder,
    keeps recent ones and anything it did not write; reusing a body refreshes its time, so a body in use is never removed"""
    import os, time
    from mlx_kvq import packing as P
    d = tmp_path / 'k'; d.mkdir()
    monkeypatch.setenv('MLX_KVQ_KERNEL_DIR', str(d))
    def aged(name, days):
        f = d / name; f.write_text('x'); t = time.time() - days * 86400; os.utime(f, (t, t)); return f
    old, old_tmp, recent, other = aged('body_old.cuh', P.KEEP_DAYS + 5), aged('body_old.cuh.7.tmp', P.KEEP_DAYS + 5), \
        aged('body_recent.cuh', P.KEEP_DAYS - 5), aged('notes.txt', 400)
    src = "out[0] = a[0];"
    short = P._included(src, ['a'])
    body = d / short.split('"')[1].split('/')[-1]
    assert body.read_text() == src and not old.exists() and not old_tmp.exists() and recent.exists() and other.exists()
    t = time.time() - (P.KEEP_DAYS + 5) * 86400; os.utime(body, (t, t))    # a body in use since long ago
    assert P._included(src, ['a']) == short and time.time() - body.stat().st_mtime < 60   # reused: its time refreshed
    P._included("out[0] = a[1];", ['a'])                                     # another new body: prunes again
    assert body.exists() and recent.exists() and len(list(d.glob('body_*.cuh'))) == 3

def test_included_kernel_body(tmp_path, monkeypatch):
    """`INCLUDE`'s short body: the source written once to a file named by its hash (whole, reused), included by absolute
    path, its first line naming exactly the `<input>_shape / _strides / _ndim` the source reads; None (the caller keeps
    the source inline) with a warning naming the fix where the directory cannot be written or its name not included"""
    from mlx_kvq import packing as P
    monkeypatch.setenv('MLX_KVQ_KERNEL_DIR', str(tmp_path / 'k'))
    src = "out[i] = a[i * a_strides[0]] + b[0] + (float)c_shape[1];"
    short = P._included(src, ['a', 'b', 'c'])
    files = list((tmp_path / 'k').iterdir())
    assert len(files) == 1 and files[0].read_text() == src and files[0].is_absolute()
    assert short.split('\n')[0].split()[1:] == ['a_strides', 'c_shape'] and f'#include "{files[0]}"' in short
    assert P._included(src, ['a', 'b', 'c']) == short and len(list((tmp_path / 'k').iterdir())) == 1   # reused, not rewritten
    files[0].write_text(src + ' // changed')   # a file that is not this body is never included
    with pytest.warns(RuntimeWarning, match='something other than the kernel body'):
        assert P._included(src, ['a', 'b', 'c']) is None
    (tmp_path / 'f').write_text('')   # a directory that cannot be made (a file is in its way)
    monkeypatch.setenv('MLX_KVQ_KERNEL_DIR', str(tmp_path / 'f' / 'k'))
    with pytest.warns(RuntimeWarning, match='MLX_KVQ_KERNEL_DIR to a writable folder'):
        assert P._included(src, ['a', 'b', 'c']) is None
    monkeypatch.setenv('MLX_KVQ_KERNEL_DIR', str(tmp_path / 'a"b'))   # a name no #include line can hold
    with pytest.warns(RuntimeWarning, match='#include cannot name'):
        assert P._included(src, ['a', 'b', 'c']) is None


def test_the_verifying_call_is_answered_by_the_agreeing_kernel():
    """A kernel that agrees with its reference answers the call that verified it (as every later call of its class): the
    first cache quantized in a process holds the kernel's codes, as later ones do; a refused kernel's call is the reference's"""
    from mlx_kvq.packing import GuardedKernel
    ok = GuardedKernel('test', lambda x: x + 1, lambda x: x, lambda x: 'class', lambda out, ref, x: None)
    assert ok(mx.array([1.0])).item() == 2.0 and ok.state['class'] is True and ok(mx.array([1.0])).item() == 2.0
    refused = GuardedKernel('test', lambda x: x + 1, lambda x: x, lambda x: 'class', lambda out, ref, x: 'disagrees')
    with pytest.warns(RuntimeWarning, match='disagrees'):
        assert refused(mx.array([1.0])).item() == 1.0
    assert refused.state['class'] is False and refused(mx.array([1.0])).item() == 1.0


def test_mlx_kvq_fused_is_read_at_every_call(monkeypatch):
    "MLX_KVQ_FUSED=0 turns the kernels off from the next call on (read from os.environ's own mapping, not a copy)"
    from mlx_kvq import packing as P
    monkeypatch.setenv("MLX_KVQ_FUSED", "0")
    assert P._fused_off() and P.kernel_backend() is None
    monkeypatch.setenv("MLX_KVQ_FUSED", "1")
    assert not P._fused_off()
    monkeypatch.delenv("MLX_KVQ_FUSED")
    assert not P._fused_off()
