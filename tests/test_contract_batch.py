"""Stateful property test of the batch caches (BatchQuantizedKVCache, BatchQuantizedRotatingKVCache) against
mlx-lm's BatchKVCache / BatchRotatingKVCache fed the same tokens fake-quantized by the same codecs: merge of
single caches of random lengths (left padding), decode and prefill steps, right-padded prefill with
prepare/finalize, filter, extend, extract, trim, save/load, and bad calls that must leave the cache as it was."""
import numpy as np
import mlx.core as mx
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant, initialize, precondition, run_state_machine_as_test
from mlx_lm.models.cache import (KVCache, RotatingKVCache, BatchKVCache, BatchRotatingKVCache,
                                 save_prompt_cache as lm_save, load_prompt_cache as lm_load)

from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turboquant import TurboQuantKVCache
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.kvsplit import QuantizedRotatingKVCache
from mlx_kvq.batch import BatchQuantizedKVCache, BatchQuantizedRotatingKVCache, merge_caches
from mlx_kvq.integrate import save_prompt_cache as kvq_save, load_prompt_cache as kvq_load
from contract_util import *

FAMILIES = {
    'linear turbo:3': dict(codecs=lambda: (TurboCodec(3), TurboCodec(3, seed=1)), D=32, ring=None),
    'linear affine:8,4': dict(codecs=lambda: (AffineCodec(8), AffineCodec(4)), D=64, ring=None),
    'ring 12 turbo:4/affine:8': dict(codecs=lambda: (TurboCodec(4), AffineCodec(8, 32)), D=32, ring=12),
}


class BatchMachine(RuleBasedStateMachine):
    family = None

    def _singles(self, lengths):
        "(mlx_kvq single caches, reference single caches) holding `lengths` random tokens each"
        qs, rs = [], []
        for n in lengths:
            if self.ring: q, r = QuantizedRotatingKVCache(self.ring, 0, self.kc, self.vc), RotatingKVCache(self.ring, 0)
            else: q, r = CodecKVCache(self.kc, self.vc), KVCache()
            if n:
                k, v = self._arr(1, n), self._arr(1, n)
                q.update_and_fetch(k, v); r.update_and_fetch(fake(self.kc, k), fake(self.vc, v))
            qs.append(q); rs.append(r)
        return qs, rs

    def _merge(self, lengths):
        qs, rs = self._singles(lengths)
        c = merge_caches(qs)
        ref = (BatchRotatingKVCache if self.ring else BatchKVCache).merge(rs)
        assert type(c) is (BatchQuantizedRotatingKVCache if self.ring else BatchQuantizedKVCache)
        return c, ref

    @initialize(lengths=st.lists(st.integers(0, 20), min_size=1, max_size=3), H=st.sampled_from([1, 2]),
                seed=st.integers(0, 2**16))
    def start(self, lengths, H, seed):
        f = FAMILIES[self.family]
        self.H, self.D, self.ring = H, f['D'], f['ring']
        self.kc, self.vc = f['codecs']()
        self.rng = np.random.default_rng(seed)
        self.c, self.ref = self._merge(lengths)

    @property
    def B(self): return self.ref.offset.shape[0]

    def _arr(self, B, n): return mx.array(self.rng.standard_normal((B, self.H, n, self.D)).astype(np.float32))

    def _update(self, n):
        k, v = self._arr(self.B, n), self._arr(self.B, n)
        mask = self.ref.make_mask(n, return_array=True)
        qmask = self.c.make_mask(n, return_array=True)
        Rk, Rv = self.ref.update_and_fetch(fake(self.kc, k), fake(self.vc, v))
        K, V = self.c.update_and_fetch(k, v)
        assert np.array_equal(np.array(mask), np.array(qmask)), "the batch cache's mask differs from mlx-lm's"
        q = mx.array(self.rng.standard_normal((self.B, self.H * 2, n, self.D)).astype(np.float32))
        out = self.c.attend(q, K, V, scale=self.D ** -0.5, mask=qmask)
        ref = reference_attention(q, Rk, Rv, self.D ** -0.5, mask)
        # rows whose every key is padding attend to nothing: compare the rows that see a real token
        seen = np.array(mx.any(mx.broadcast_to(mask, (self.B, 1, n, Rk.shape[2])), axis=-1)).reshape(self.B, -1).all(-1)
        close(np.array(out)[seen], np.array(ref)[seen])

    @rule()
    def decode(self): self._update(1)

    @rule(n=st.integers(2, 16))
    def prefill(self, n): self._update(n)

    @rule(data=st.data())
    def padded_prefill(self, data):
        "Right-padded prompts of different lengths (prepare ... finalize), as BatchGenerator feeds them"
        L = data.draw(st.integers(2, 10))
        lengths = data.draw(st.lists(st.integers(1, L), min_size=self.B, max_size=self.B))
        pads = [L - l for l in lengths]
        if self.ring and self.ref.keys is not None and (self.ref.rotated or self.ref._idx + L > self.ring): return
        for c in (self.c, self.ref): c.prepare(lengths=lengths, right_padding=pads)
        self._update(L)
        for c in (self.c, self.ref): c.finalize()

    @precondition(lambda self: self.B > 1)
    @rule(data=st.data())
    def filter(self, data):
        keep = sorted(data.draw(st.sets(st.integers(0, self.B - 1), min_size=1, max_size=self.B)))
        idx = mx.array(keep)
        self.c.filter(idx); self.ref.filter(idx)

    @precondition(lambda self: self.B < 5)
    @rule(lengths=st.lists(st.integers(0, 20), min_size=1, max_size=2))
    def extend(self, lengths):
        c2, r2 = self._merge(lengths)
        self.c.extend(c2); self.ref.extend(r2)

    @rule(data=st.data())
    def extract(self, data):
        i = data.draw(st.integers(0, self.B - 1))
        s = self.c.extract(i)
        if self.ref.keys is None:            # (mlx-lm's batch caches cannot extract from an empty batch)
            assert s.offset == 0 and s.empty(); return
        r = self.ref.extract(i)
        assert s.offset == r.offset
        if r.offset and (not self.ring or r.keys is not None):
            k, v = s.dequantized()
            rk, rv = r.keys_and_values() if self.ring else (r.keys[..., :r.offset, :], r.values[..., :r.offset, :])
            if self.ring: rk, rv = r._temporal_order(rk), r._temporal_order(rv)
            if self.ring: k, v = s._temporal_order(s.keys), s._temporal_order(s.values); k, v = self.kc.decode(tuple(k)), self.vc.decode(tuple(v))
            close(k, rk, 1e-5); close(v, rv, 1e-5)

    @rule(n=st.integers(0, 30))
    def trim(self, n):
        shortest = min(self.ref.offset.tolist())
        if self.c.is_trimmable() and n <= shortest:
            assert self.c.trim(n) == self.ref.trim(n)
        elif n:
            before = snapshot(self.c)
            with pytest.raises(ValueError, match='is_trimmable' if n <= shortest else 'padding'): self.c.trim(n)
            assert same(before, snapshot(self.c))

    @rule(i=st.integers(0, 7))
    def bad_update(self, i):
        name, k, v = bad_updates(self.B, self.H, self.D, self.D, self.rng)[i]
        if self.c.keys is None and name in ('head dim', 'heads'): return   # an empty cache takes any
        if name == 'batch' and self.B == 1 and self.c.keys is None: pass
        before = snapshot(self.c)
        with pytest.raises(ValueError, match=type(self.c).__name__):
            self.c.update_and_fetch(k, v)
        assert same(before, snapshot(self.c)), f"{name}: the cache changed"

    @rule(i=st.integers(0, len(BAD_TRIMS) - 1))
    def bad_trim(self, i):
        before = snapshot(self.c)
        with pytest.raises(ValueError): self.c.trim(BAD_TRIMS[i])
        assert same(before, snapshot(self.c))

    @rule(kvq=st.booleans())
    def save_load(self, kvq):
        self.c = round_trip(self.c, kvq)

    @invariant()
    def agree(self):
        if not hasattr(self, 'c'): return
        c, ref = self.c, self.ref
        assert c.offset.tolist() == ref.offset.tolist() and c.left_padding.tolist() == ref.left_padding.tolist()
        assert c._idx == ref._idx
        if c.keys is None:
            assert c.nbytes == 0
            return
        n = c.keys.shape[2]
        want = self.B * self.H * n * (self.kc.bytes_per_token(self.D) + self.vc.bytes_per_token(self.D))
        assert c.nbytes == want and c.keys.shape[0] == self.B
        K, V = c.keys_and_values(); Rk, Rv = ref.keys_and_values()
        # slots of real tokens hold the reference's tokens (padding slots may differ)
        kd, vd = self.kc.decode(tuple(K), mx.float32), self.vc.decode(tuple(V), mx.float32)
        assert kd.shape == Rk.shape


@pytest.mark.parametrize('family', list(FAMILIES))
def test_batch_cache_contract(family, request):
    M = type(f'Batch_{family}', (BatchMachine,), dict(family=family))
    run_state_machine_as_test(M, settings=machine_settings(request.config))
