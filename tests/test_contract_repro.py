"""The five reproductions of issue 14, and one regression test per bug the contract's state machines and fuzz
found: each raises a clear error (naming the cache and the fix) with nothing mutated, or behaves correctly."""
import json, os
import numpy as np
import mlx.core as mx
import pytest
from mlx_lm.models.cache import (KVCache, BatchKVCache, save_prompt_cache as lm_save, load_prompt_cache as lm_load)

from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turboquant import TurboQuantKVCache
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.kvsplit import QuantizedRotatingKVCache
from mlx_kvq.batch import BatchQuantizedKVCache, merge_caches
from mlx_kvq.integrate import save_prompt_cache, load_prompt_cache
from mlx_kvq.contract import CacheContractError
from contract_util import snapshot, same, tmpfile, drop_array

R = lambda *s, seed=0: mx.array(np.random.default_rng(seed).standard_normal(s).astype(np.float32))


@pytest.fixture
def turbo5():
    "TurboQuantKVCache(4) holding 5 tokens of head dim 16 (the issue's setting)"
    c = TurboQuantKVCache(4)
    c.update_and_fetch(R(1, 2, 5, 16), R(1, 2, 5, 16, seed=1))
    return c


def refused(c, f, *words):
    before = snapshot(c)
    with pytest.raises(CacheContractError) as e: f()
    msg = str(e.value)
    for w in ('TurboQuantKVCache', *words): assert w in msg, f"{w!r} not in {msg!r}"
    assert same(before, snapshot(c)), "the cache changed"
    return msg


def test_repro_1_keys_and_values_of_different_lengths(turbo5):
    refused(turbo5, lambda: turbo5.update_and_fetch(R(1, 2, 2, 16), R(1, 2, 3, 16)), 'disagree', 'offset 5')
    assert turbo5.offset == 5


def test_repro_2_negative_trim(turbo5):
    refused(turbo5, lambda: turbo5.trim(-3), 'negative', '>= 0')
    assert turbo5.offset == 5


def test_repro_3_integer_keys(turbo5):
    refused(turbo5, lambda: turbo5.update_and_fetch(mx.zeros((1, 2, 1, 16), mx.int32), mx.zeros((1, 2, 1, 16), mx.int32)),
            'int32', 'floating')


def test_repro_4_other_head_dim(turbo5):
    msg = refused(turbo5, lambda: turbo5.update_and_fetch(R(1, 2, 1, 32), R(1, 2, 1, 32)), 'head dim 16', 'head dim 32')
    assert 'concatenate' not in msg


@pytest.mark.parametrize('drop', ['0.k0', '0.config'])
def test_repro_5_file_with_an_array_removed(turbo5, drop):
    path = tmpfile()
    save_prompt_cache(path, [turbo5])
    drop_array(path, drop)
    with pytest.raises(ValueError) as e: load_prompt_cache(path)
    assert drop in str(e.value) and 'does not know' not in str(e.value), str(e.value)
    with pytest.raises((ValueError, KeyError)) as e: lm_load(path)        # mlx-lm's own loader refuses it too
    assert drop.split('.')[1] in str(e.value)


def test_repro_5_mlx_lm_file_with_a_part_removed(turbo5):
    "A file written by mlx-lm's save_prompt_cache (no checksums): the state check names the missing part"
    path = tmpfile()
    lm_save(path, [turbo5])
    drop_array(path, '0.k0')
    for load in (lm_load, load_prompt_cache):
        with pytest.raises(ValueError, match='TurboQuantKVCache') as e: load(path)
        assert 'k0' in str(e.value) or 'key parts' in str(e.value)


# -- regressions found by the state machines and the fuzz ---------------------------------------------
def test_affine_decode_in_float32_is_exact():
    "AffineCodec.decode(float32) dequantized in float16 first (scales stored float16): off by up to ~5e-4 relative"
    c = AffineCodec(8, 64)
    x = R(1, 2, 7, 64)
    w, s, b = c.encode(x)
    exact = mx.dequantize(w, s.astype(mx.float32), b.astype(mx.float32), group_size=64, bits=8)
    assert mx.array_equal(c.decode((w, s, b), mx.float32), exact).item()


def test_affine_decode_of_no_tokens():
    "A ring trimmed to nothing could not be decoded (mx.dequantize fails on an empty array)"
    c = AffineCodec(4, 32)
    parts = tuple(p[..., :0, :] for p in c.encode(R(1, 2, 3, 64)))
    assert c.decode(parts).shape == (1, 2, 0, 64)
    q = QuantizedRotatingKVCache(9, 0, AffineCodec(4, 32), AffineCodec(4, 32))
    q.update_and_fetch(R(1, 2, 1, 64), R(1, 2, 1, 64)); q.trim(1)
    assert [x.shape for x in q.dequantized()] == [(1, 2, 0, 64)] * 2


def _batch(lengths):
    return merge_caches([CodecKVCache(TurboCodec(3), TurboCodec(3, seed=1)) if n == 0 else
                         _fed(CodecKVCache(TurboCodec(3), TurboCodec(3, seed=1)), n) for n in lengths])


def _fed(c, n):
    c.update_and_fetch(R(1, 2, n, 32, seed=n), R(1, 2, n, 32, seed=n + 1)); return c


def test_batch_trim_into_padding_is_refused():
    "trim(n) beyond the shortest row cut into its left padding: offset -1, later extract/attention broken"
    b = _batch([0, 1])
    before = snapshot(b)
    with pytest.raises(CacheContractError, match='padding'): b.trim(1)
    assert same(before, snapshot(b))
    b2 = _batch([2, 3]); assert b2.trim(2) == 2 and b2.offset.tolist() == [0, 1]


def test_empty_batch_refuses_another_batch_size():
    "An empty batch cache accepted keys of any batch size, leaving offsets for 1 row and keys for 2"
    b = _batch([0])
    before = snapshot(b)
    with pytest.raises(CacheContractError, match='batch of 1'): b.update_and_fetch(R(2, 2, 1, 32), R(2, 2, 1, 32))
    assert same(before, snapshot(b))


def test_extend_with_a_codec_that_has_not_seen_tokens():
    "A batch whose turbo codecs had no dim yet (empty, or loaded empty) could not be extended: 'different schemes'"
    empty = BatchQuantizedKVCache(TurboCodec(3), TurboCodec(3, seed=1), [0])
    full = _batch([2])
    empty.extend(full)
    assert empty.offset.tolist() == [0, 2]


def test_extract_from_an_empty_batch():
    "extract(i) of a batch holding no tokens raised TypeError ('NoneType' is not subscriptable)"
    s = _batch([0, 0]).extract(1)
    assert type(s) is CodecKVCache and s.offset == 0


def test_missing_config_is_named_not_blamed_on_an_unknown_class(turbo5):
    "With '0.config' removed, mlx_kvq's loader blamed 'a cache class mlx-lm does not know'"
    path = tmpfile()
    save_prompt_cache(path, [turbo5])
    drop_array(path, '0.config')
    with pytest.raises(ValueError, match="0.config") as e: load_prompt_cache(path)
    assert 'does not know' not in str(e.value)


def test_flipped_byte_in_codes_is_refused_by_both_loaders(turbo5):
    "A flipped byte inside the codes loaded silently (a valid code): the state's CRC-32 now names it"
    path = tmpfile()
    save_prompt_cache(path, [turbo5])
    arrays, meta = mx.load(path, return_metadata=True)
    k0 = np.array(arrays['0.k0']); k0.view(np.uint8).reshape(-1)[3] ^= 0x10
    mx.save_safetensors(path, {**arrays, '0.k0': mx.array(k0)}, meta)
    for load in (lm_load, load_prompt_cache):
        with pytest.raises(ValueError, match='checksum'): load(path)


def test_trim_of_a_wrapped_ring_is_refused():
    "mlx-lm's RotatingKVCache.trim on a wrapped ring silently rewinds over overwritten tokens"
    q = QuantizedRotatingKVCache(8, 0, TurboCodec(3), TurboCodec(3, seed=1))
    for i in range(10): q.update_and_fetch(R(1, 2, 1, 32, seed=i), R(1, 2, 1, 32, seed=i + 50))
    before = snapshot(q)
    with pytest.raises(CacheContractError, match='is_trimmable'): q.trim(2)
    assert same(before, snapshot(q))
    assert q.trim(0) == 0


def test_sparse_batch_of_a_request_without_entries():
    """A DeepSeek-V4 request shorter than `ratio` has stored no entry (its codec has no dim yet): merging it with a
    longer one was refused as 'different configurations'"""
    from mlx_kvq.dsv4_cache import SparseKVCache, BatchSparseKVCache
    short, long = SparseKVCache(6, 4, TurboCodec(4)), SparseKVCache(6, 4, TurboCodec(4))
    kv = R(1, 1, 2, 32); short.update_and_fetch(kv, kv)
    kv = R(1, 1, 9, 32, seed=1); long.update_and_fetch(kv, kv); long.entries.append(R(1, 2, 32, seed=2))
    b = BatchSparseKVCache.merge([short, long])
    assert b.offset.tolist() == [2, 9]
