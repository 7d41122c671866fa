"""Stateful property test of the DeepSeek-V4 caches (SparseKVCache, BatchSparseKVCache) against a reference
list of what they were fed: the window ring holds the last min(offset, window) latents exactly, the compressed
entries are the appended rows fake-quantized by the entry codec; save/load round trips, conversion to a codec,
merge/extract/filter/extend of batches, and bad calls that must leave the cache as it was."""
import numpy as np
import mlx.core as mx
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant, initialize, precondition, run_state_machine_as_test
from mlx_lm.models.cache import save_prompt_cache as lm_save, load_prompt_cache as lm_load

from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.dsv4_cache import SparseKVCache, BatchSparseKVCache, EntryStore
from mlx_kvq.integrate import save_prompt_cache as kvq_save, load_prompt_cache as kvq_load
from contract_util import *

D = 32
CODECS = {'exact': lambda: None, 'turbo:4': lambda: TurboCodec(4), 'affine:8': lambda: AffineCodec(8, 32)}


def entries_nbytes(store, B):
    if store.parts is None: return 0
    cap = store.parts[0].shape[-2]
    per = D * 4 if store.codec is None else store.codec.bytes_per_token(D)
    return B * cap * per


class SparseMachine(RuleBasedStateMachine):
    codec = None

    @initialize(window=st.integers(1, 12), ratio=st.sampled_from([0, 4]), seed=st.integers(0, 2**16))
    def start(self, window, ratio, seed):
        self.rng = np.random.default_rng(seed)
        self.c = SparseKVCache(window, ratio, CODECS[self.codec]())
        self.rows, self.entries = [], []          # every latent fed, every compressed row appended (fake-quantized)

    def _arr(self, *s): return mx.array(self.rng.standard_normal(s).astype(np.float32))

    @rule(n=st.integers(1, 20))
    def update(self, n):
        kv = self._arr(1, 1, n, D)
        k, v = self.c.update_and_fetch(kv, kv)
        self.rows += [kv[0, 0, i] for i in range(n)]
        # the rows the new queries can see: the newest ones, oldest first (at most window - 1 + n)
        assert 0 < k.shape[2] <= min(len(self.rows), self.c.window - 1 + n)
        assert np.array_equal(np.array(k[0, 0]), np.array(mx.stack(self.rows[-k.shape[2]:])))

    @precondition(lambda self: self.c.ratio and len(self.entries) < len(self.rows) // self.c.ratio)
    @rule()
    def append(self):
        "A compressed entry closed by the model's compressor (one per `ratio` tokens; only those are visible)"
        rows = self._arr(1, 1, D)
        self.c.entries.append(rows)
        codec = self.c.entries.codec
        got = rows if codec is None else codec.decode(tuple(codec.encode(rows[:, None])), mx.float32)[:, 0]
        self.entries += [got[0, i] for i in range(1)]

    @rule(i=st.integers(0, 7))
    def bad_update(self, i):
        name, k, v = bad_updates(1, 1, D, D, self.rng)[i]
        if self.c.ring is None and name in ('head dim', 'heads', 'batch'): return
        before = snapshot(self.c)
        with pytest.raises(ValueError, match='SparseKVCache'): self.c.update_and_fetch(k, v)
        assert same(before, snapshot(self.c)), f"{name}: the cache changed"

    @rule(i=st.integers(0, len(BAD_TRIMS) - 1))
    def bad_trim(self, i):
        before = snapshot(self.c)
        with pytest.raises(ValueError, match='SparseKVCache'): self.c.trim(BAD_TRIMS[i])
        assert same(before, snapshot(self.c))

    @rule(n=st.integers(0, 5))
    def trim(self, n):
        assert self.c.trim(n) == 0          # nothing can be given back honestly (documented)

    @rule(kvq=st.booleans())
    def save_load(self, kvq):
        self.c = round_trip(self.c, kvq)

    @precondition(lambda self: self.c.ratio and self.codec != 'exact')
    @rule()
    def to_exact_and_back(self):
        "to_codec(None) keeps the rows as they read; to_codec(codec) of those rows re-encodes them (idempotent)"
        codec = self.c.entries.codec
        ex = self.c.to_codec(None)
        back = ex.to_codec(codec)
        if self.entries:
            close(back.compressed[:, :len(self.entries)], mx.stack(self.entries)[None], 1e-5)
        self.c = back

    @invariant()
    def agree(self):
        if not hasattr(self, 'c'): return
        c = self.c
        assert c.offset == len(self.rows)
        if self.rows:
            w = c.window_rows()
            assert np.array_equal(np.array(w[0]), np.array(mx.stack(self.rows[-min(len(self.rows), c.window):])))
        if self.entries:
            close(c.compressed[0, :len(self.entries)], mx.stack(self.entries), 1e-5)
        ring = 0 if c.ring is None else c.ring.nbytes
        assert ring == (0 if c.ring is None else c.window * D * 4)
        assert c.nbytes == ring + entries_nbytes(c.entries, 1) + entries_nbytes(c.index_entries, 1)


@pytest.mark.parametrize('codec', list(CODECS))
def test_sparse_cache_contract(codec, request):
    M = type(f'Sparse_{codec}', (SparseMachine,), dict(codec=codec))
    run_state_machine_as_test(M, settings=machine_settings(request.config))


def _sparse(n, seed, window=6):
    c = SparseKVCache(window, 4, TurboCodec(4))
    r = np.random.default_rng(seed)
    if n:
        kv = mx.array(r.standard_normal((1, 1, n, D)).astype(np.float32)); c.update_and_fetch(kv, kv)
        if n >= 4: c.entries.append(mx.array(r.standard_normal((1, n // 4, D)).astype(np.float32)))
    return c


@pytest.mark.parametrize('seed', range(4))
def test_batch_sparse_merge_extract_filter_extend(seed):
    r = np.random.default_rng(seed)
    lengths = [int(x) for x in r.integers(1, 15, size=3)]
    singles = [_sparse(n, seed * 10 + i) for i, n in enumerate(lengths)]
    b = BatchSparseKVCache.merge(singles)
    for i, s in enumerate(singles):
        e = b.extract(i)
        assert e.offset == s.offset and np.array_equal(np.array(e.window_rows()), np.array(s.window_rows()))
    b.filter([2, 0]); assert b.offset.tolist() == [lengths[2], lengths[0]]
    b.extend(BatchSparseKVCache.merge([_sparse(3, 99)]))
    assert b.offset.tolist() == [lengths[2], lengths[0], 3]
    before = snapshot(b)
    with pytest.raises(ValueError, match='BatchSparseKVCache'): b.trim(-1)
    assert same(before, snapshot(b))
    path = tmpfile()
    kvq_save(path, [b]); (c,) = kvq_load(path)
    assert c.offset.tolist() == b.offset.tolist() and same(snapshot(c), snapshot(b))
