"""Dense checks of mlx_kvq.eval's bookkeeping: scoring against numpy, chunk boundaries, context checks."""
import numpy as np
import mlx.core as mx
import pytest
from hypothesis import given, settings, strategies as st

from mlx_kvq.eval import score_positions, chunk_bounds, check_contexts, bits_full_layers, passkey_answer


def _lsm(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.integers(2, 40), st.floats(0.1, 8.0), st.integers(0, 2**31 - 1))
def test_score_positions_matches_numpy(L, V, scale, seed):
    rng = np.random.default_rng(seed)
    r, z = rng.normal(size=(L, V)) * scale, rng.normal(size=(L, V)) * scale
    t = rng.integers(0, V, size=L)
    kl, nll, agree = score_positions(mx.array(r), mx.array(z), mx.array(t))
    lp, lq = _lsm(r), _lsm(z)
    np.testing.assert_allclose(kl, (np.exp(lp) * (lp - lq)).sum(-1), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(nll, -lq[np.arange(L), t], atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(agree, r.argmax(-1) == z.argmax(-1))
    assert (kl > -1e-5).all()


@given(st.integers(2, 3000), st.integers(1, 600), st.lists(st.integers(2, 3000), max_size=4))
def test_chunk_bounds(n, chunk, contexts):
    b = chunk_bounds(n, chunk, contexts)
    assert b == sorted(set(b)) and b[-1] == n and b[0] > 0
    assert all(c in b for c in contexts if c <= n)
    assert all(y - x <= chunk for x, y in zip([0] + b, b))


def test_check_contexts_errors_name_the_fix():
    assert check_contexts([4096, 2048, 2048], 5000, 32768, 256, 256) == [2048, 4096]
    for args, msg in ((([6000], 5000, None, 256, 256), 'fewer than'), (([4096], 5000, 4000, 256, 256), "model's limit"),
                      (([4000], 5000, 4000, 256, 256, 8), 'decoded'), (([257], 5000, None, 256, 256), 'no position'),
                      (([300], 5000, None, 0, 0), 'chunk'), (([], 5000, None, 256, 0), 'at least one')):
        with pytest.raises(ValueError, match=msg): check_contexts(*args)


def test_bits_full_layers_counts_only_full_layers():
    # two layers of 256 values/token; the windowed one is left out of the ratio
    assert bits_full_layers([1000 * 256, 999], [True, False], [256, 256], 1000) == 8.0
    assert np.isnan(bits_full_layers([1, 1], [False, False], [256, 256], 10))
    assert passkey_answer(' 0123 then 5') == 123
