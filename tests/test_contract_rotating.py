"""Stateful property test of the bounded quantized cache (QuantizedRotatingKVCache) against mlx-lm's
RotatingKVCache fed the same tokens fake-quantized by the same codecs (the ring logic is mlx-lm's, so the two
buffers hold the same tokens in the same slots)."""
import numpy as np
import mlx.core as mx
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant, initialize, precondition, run_state_machine_as_test
from mlx_lm.models.cache import RotatingKVCache, save_prompt_cache as lm_save, load_prompt_cache as lm_load

from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.kvsplit import QuantizedRotatingKVCache, to_quantized_rotating
from mlx_kvq.integrate import save_prompt_cache as kvq_save, load_prompt_cache as kvq_load
from contract_util import *

FAMILIES = {
    'turbo:3 ring 16 keep 2': dict(codecs=lambda: (TurboCodec(3), TurboCodec(3, seed=1)), size=16, keep=2, D=32),
    'affine:8,4 ring 24': dict(codecs=lambda: (AffineCodec(8), AffineCodec(4)), size=24, keep=0, D=64),
    'turbo:4/affine:4 ring 9 keep 4': dict(codecs=lambda: (TurboCodec(4), AffineCodec(4, 32)), size=9, keep=4, D=32),
}


class RingMachine(RuleBasedStateMachine):
    family = None

    @initialize(B=st.sampled_from([1, 2]), H=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
    def start(self, B, H, seed):
        f = FAMILIES[self.family]
        self.B, self.H, self.D = B, H, f['D']
        self.kc, self.vc = f['codecs']()
        self.c = QuantizedRotatingKVCache(f['size'], f['keep'], self.kc, self.vc)
        self.ref = RotatingKVCache(f['size'], f['keep'])      # fed fake-quantized tokens
        self.raw = RotatingKVCache(f['size'], f['keep'])      # fed the raw tokens (for conversions)
        self.rng = np.random.default_rng(seed)

    def _arr(self, n): return mx.array(self.rng.standard_normal((self.B, self.H, n, self.D)).astype(np.float32))

    def _check(self, fetched, n, mask):
        K, V = fetched
        # the fetched buffers decode to exactly what the reference returned (same slots)
        Rk, Rv = self._ref_fetched
        dk = self.c.k_codec.decode(tuple(K), mx.float32); dv = self.c.v_codec.decode(tuple(V), mx.float32)
        close(dk, Rk, 1e-5); close(dv, Rv, 1e-5)
        q = mx.array(self.rng.standard_normal((self.B, self.H * 2, n, self.D)).astype(np.float32))
        close(self.c.attend(q, K, V, scale=self.D ** -0.5, mask=mask), reference_attention(q, Rk, Rv, self.D ** -0.5, mask))

    def _update(self, n):
        k, v = self._arr(n), self._arr(n)
        mask = self.ref.make_mask(n, return_array=True) if n > 1 else None   # (before the update, as a model does)
        self._ref_fetched = self.ref.update_and_fetch(fake(self.kc, k), fake(self.vc, v))
        self.raw.update_and_fetch(k, v)
        fetched = self.c.update_and_fetch(k, v)
        self._check(fetched, n, mask)

    @rule(n=st.integers(2, 30))
    def prefill(self, n): self._update(n)

    @rule()
    def decode(self): self._update(1)

    @rule(n=st.integers(0, 40))
    def trim(self, n):
        if self.c.is_trimmable():
            assert self.ref.is_trimmable()
            m = self.c.trim(n)
            assert m == self.ref.trim(n) == self.raw.trim(n) == min(n, self.ref.offset + m)
        elif n > 0:
            before = snapshot(self.c)
            with pytest.raises(ValueError, match='is_trimmable'):
                self.c.trim(n)
            assert same(before, snapshot(self.c))

    @rule(i=st.integers(0, 7))
    def bad_update(self, i):
        name, k, v = bad_updates(self.B, self.H, self.D, self.D, self.rng)[i]
        if self.c.keys is None and name in ('head dim', 'heads', 'batch'): return
        before = snapshot(self.c)
        with pytest.raises(ValueError, match='QuantizedRotatingKVCache'):
            self.c.update_and_fetch(k, v)
        assert same(before, snapshot(self.c)), f"{name}: the cache changed"

    @rule(i=st.integers(0, len(BAD_TRIMS) - 1))
    def bad_trim(self, i):
        before = snapshot(self.c)
        with pytest.raises(ValueError):
            self.c.trim(BAD_TRIMS[i])
        assert same(before, snapshot(self.c))

    @rule(kvq=st.booleans())
    def save_load(self, kvq):
        "Round trip of the cache and the references in one file"
        path = tmpfile()
        before = snapshot(self.c)
        if kvq: kvq_save(path, [self.c, self.ref, self.raw]); c, ref, raw = kvq_load(path)
        else: lm_save(path, [self.c, self.ref, self.raw]); c, ref, raw = lm_load(path)
        assert type(c) is QuantizedRotatingKVCache and same(before, snapshot(c))
        self.c, self.ref, self.raw = c, ref, raw

    @precondition(lambda self: self.raw.keys is not None)
    @rule()
    def convert(self):
        "to_quantized_rotating of the raw ring: the same tokens, quantized, in the same slots"
        self.c = to_quantized_rotating(self.raw, self.kc, self.vc)
        assert to_quantized_rotating(self.c) is self.c

    @invariant()
    def agree(self):
        if not hasattr(self, 'c'): return
        c, ref = self.c, self.ref
        assert c.offset == ref.offset and c._idx == ref._idx and c.size() == ref.size()
        if c.keys is None:
            assert c.nbytes == 0
            return
        n = c.keys.shape[2]
        want = self.B * self.H * n * (self.kc.bytes_per_token(self.D) + self.vc.bytes_per_token(self.D))
        assert c.nbytes == want, f"nbytes {c.nbytes} != {want}"
        # buffer order and contents equal to the reference's (decoded)
        K, V = c.keys_and_values(); Rk, Rv = ref.keys_and_values()
        close(self.kc.decode(tuple(K), mx.float32), Rk, 1e-5); close(self.vc.decode(tuple(V), mx.float32), Rv, 1e-5)
        assert n <= max(c.max_size, c.offset), "the ring grew past its bound"


@pytest.mark.parametrize('family', list(FAMILIES))
def test_rotating_cache_contract(family, request):
    M = type(f'Ring_{family}', (RingMachine,), dict(family=family))
    run_state_machine_as_test(M, settings=machine_settings(request.config))
