"""Dense randomized checks of the TurboQuant cache (the notebook 03_turboquant has the derivation and examples)."""
import mlx.core as mx
import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck

from mlx_kvq.turboquant import TurboCodec, TurboQuantKVCache, to_turbo_quantized
from mlx_kvq.packing import packed_words
from mlx_lm.models.cache import KVCache

DIMS = (32, 48, 64, 80, 96, 128)


def rel_err(a, b):
    return (mx.linalg.norm((a - b).flatten()) / mx.linalg.norm(b.flatten())).item()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(D=st.sampled_from(DIMS), Hkv=st.integers(1, 3), G=st.integers(1, 3), k_bits=st.integers(1, 8),
       v_bits=st.integers(1, 8), chunks=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       sink=st.integers(0, 4), window=st.integers(0, 6), start=st.integers(0, 30), seed=st.integers(0, 2**16),
       sinks=st.booleans())
def test_attention_equals_dense_over_dequantized(D, Hkv, G, k_bits, v_bits, chunks, sink, window, start, seed, sinks):
    mx.random.seed(seed)
    c = TurboQuantKVCache(k_bits, v_bits, sink=sink, window=window, quantized_kv_start=start)
    for n in chunks:
        k, v = mx.random.normal((1, Hkv, n, D)), mx.random.normal((1, Hkv, n, D))
        q = mx.random.normal((1, Hkv * G, n, D))
        mask = c.make_mask(n, return_array=True)
        K, V = c.update_and_fetch(k, v)
        s = mx.random.normal((Hkv * G,)) if sinks else None
        got = c.attend(q, K, V, scale=D ** -0.5, mask=mask, sinks=s)
        kd, vd = c.dequantized()
        ref = mx.fast.scaled_dot_product_attention(q, kd, vd, scale=D ** -0.5, mask=mask, sinks=s)
        assert rel_err(got, ref) < 1e-4
    assert c.offset == sum(chunks)
    # every byte is accounted for: quantized capacity at the codec formula plus the exact tokens
    kd, vd = c.dequantized()
    assert kd.shape == (1, Hkv, sum(chunks), D)


@settings(max_examples=20, deadline=None)
@given(D=st.sampled_from(DIMS), k_bits=st.integers(1, 8), v_bits=st.integers(1, 8), steps=st.integers(1, 3),
       H=st.integers(1, 3))
def test_nbytes_is_the_storage_formula(D, k_bits, v_bits, steps, H):
    c = TurboQuantKVCache(k_bits, v_bits)
    n = 256 * steps
    x = mx.zeros((1, H, n, D))
    c.update_and_fetch(x, x)
    per_token = (4 * packed_words(D, k_bits) + 2) + (4 * packed_words(D, v_bits) + 2)
    assert c.bytes_per_token(D) == per_token
    assert c.nbytes == per_token * n * H


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 60), cut=st.integers(0, 70), D=st.sampled_from(DIMS), seed=st.integers(0, 2**16),
       sink=st.integers(0, 3))
def test_trim_then_refeed_is_bit_exact(n, cut, D, seed, sink):
    mx.random.seed(seed)
    k, v = mx.random.normal((1, 2, n, D)), mx.random.normal((1, 2, n, D))
    a = TurboQuantKVCache(3, 2, sink=sink)
    a.update_and_fetch(k, v)
    b = TurboQuantKVCache(3, 2, sink=sink)
    b.update_and_fetch(k, v)
    m = b.trim(cut)
    assert m == min(cut, n) and b.offset == n - m
    if m:
        b.update_and_fetch(k[..., n - m:, :], v[..., n - m:, :])
    for (x1, x2) in zip(a.dequantized(), b.dequantized()):
        assert mx.array_equal(x1, x2).item()


@settings(max_examples=15, deadline=None)
@given(n=st.integers(0, 50), D=st.sampled_from(DIMS), bits=st.integers(1, 8))
def test_conversion_keeps_tokens_and_input(n, D, bits):
    mx.random.seed(n)
    kv = KVCache()
    if n:
        kv.update_and_fetch(mx.random.normal((1, 2, n, D)), mx.random.normal((1, 2, n, D)))
    before = None if kv.keys is None else np.array(kv.keys)
    t = to_turbo_quantized(kv, bits)
    assert t.offset == n
    if n:
        assert np.array_equal(np.array(kv.keys), before)
        codec = TurboCodec(bits, seed=0)
        ref = codec.decode(codec.encode(kv.keys[..., :n, :]))
        assert mx.array_equal(t.dequantized()[0], ref).item()
