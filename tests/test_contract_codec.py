"""Stateful property test of the codec caches (CodecKVCache and its subclasses TurboQuantKVCache, KVSplitCache,
PlannedKVCache, QuantizedMLACache) against a reference fed the same tokens fake-quantized by the same codecs.

The reference is a list of the raw tokens and, per position, whether the cache keeps it exact (sink, recent
window, before quantized_kv_start) or quantized; attention is mlx-lm's over those tokens in a fresh KVCache."""
import numpy as np
import mlx.core as mx
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, invariant, initialize, precondition, run_state_machine_as_test
from mlx_lm.models.cache import KVCache, save_prompt_cache as lm_save, load_prompt_cache as lm_load

from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turboquant import TurboQuantKVCache, to_turbo_quantized
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.kvsplit import KVSplitCache
from mlx_kvq.planned import PlannedKVCache
from mlx_kvq.calibrated import HalfCodec
from mlx_kvq.mla_guard import QuantizedMLACache
from mlx_kvq.integrate import save_prompt_cache as kvq_save, load_prompt_cache as kvq_load
from contract_util import *

STEP = CodecKVCache.step

FAMILIES = {
    'turbo:3': dict(make=lambda: TurboQuantKVCache(3), dims=(32, 32)),
    'turbo:4,2 sink/window': dict(make=lambda: TurboQuantKVCache(4, 2, sink=2, window=3), dims=(32, 32)),
    'affine:8,4 (KVSplit)': dict(make=lambda: KVSplitCache(8, 4), dims=(64, 64)),
    'affine:4/turbo:3 qks': dict(make=lambda: CodecKVCache(AffineCodec(4, 32), TurboCodec(3, seed=1), sink=1, window=2,
                                                           quantized_kv_start=6), dims=(64, 64)),
    'planned turbo:4/half': dict(make=lambda: PlannedKVCache(TurboCodec(4), HalfCodec(), window=1, plan='{"p": 1}', layer=0),
                                 dims=(16, 16)),
    'mla latent affine:8': dict(make=lambda: QuantizedMLACache(8, 32), dims=(64, 16), heads=(1,)),
}


class CodecMachine(RuleBasedStateMachine):
    family = None

    @initialize(B=st.sampled_from([1, 2]), H=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
    def start(self, B, H, seed):
        fam = FAMILIES[self.family]
        self.B, self.H = B, fam.get('heads', (H,))[0]
        self.dk, self.dv = fam['dims']
        self.c = fam['make']()
        self.rng = np.random.default_rng(seed)
        self.raw_k, self.raw_v, self.quant = [], [], []      # per position
        self.cap = 0                                        # capacity of the quantized parts (tokens)
        self.last_fetch = None

    # -- the model of what the cache keeps exact -------------------------------------------------
    def _arr(self, n, d): return mx.array(self.rng.standard_normal((self.B, self.H, n, d)).astype(np.float32))

    def _model_update(self, n):
        c = self.c
        off = len(self.quant)
        n_sink = sum(1 for i in range(min(off, c.sink)))
        self.quant += [False] * n
        off += n
        tail = [i for i in range(len(self.quant)) if i >= c.sink and not self.quant[i]]
        if off > c.quantized_kv_start and len(tail) > c.window:
            m = len(tail) - c.window
            nq = sum(self.quant)
            for i in tail[:m]: self.quant[i] = True
            if nq + m > self.cap: self.cap = -(-(nq + m) // STEP) * STEP

    def _reference(self):
        c = self.c
        ks, vs = [], []
        for i, q in enumerate(self.quant):
            k, v = self.raw_k[i], self.raw_v[i]
            ks.append(fake(c.k_codec, k) if q else k); vs.append(fake(c.v_codec, v) if q else v)
        return mx.concatenate(ks, axis=2), mx.concatenate(vs, axis=2)

    def _check_attention(self, fetched, n_new):
        if not self.quant: return
        rk, rv = self._reference()
        ref = KVCache(); rk, rv = ref.update_and_fetch(rk, rv)
        q = mx.array(self.rng.standard_normal((self.B, self.H * 2, n_new, self.dk)).astype(np.float32))
        scale = self.dk ** -0.5
        mask = 'causal' if n_new > 1 else None
        if isinstance(self.c, QuantizedMLACache):     # plain arrays out: compare them with the reference directly
            k, v = (x.dequantize(mx.float32) if hasattr(x, 'dequantize') else x for x in fetched)
            close(k, rk, 1e-5); close(v, rv, 1e-6)
            return
        out = self.c.attend(q, *fetched, scale=scale, mask=mask)
        close(out, reference_attention(q, rk, rv, scale, mask))

    # -- rules -----------------------------------------------------------------------------------
    @rule(n=st.integers(1, 40))
    def prefill(self, n): self._update(n)

    @rule()
    def decode(self): self._update(1)

    def _update(self, n):
        k, v = self._arr(n, self.dk), self._arr(n, self.dv)
        fetched = self.c.update_and_fetch(k, v)
        for i in range(n): self.raw_k.append(k[:, :, i:i + 1]); self.raw_v.append(v[:, :, i:i + 1])
        self._model_update(n)
        self._check_attention(fetched, n)

    @rule(n=st.integers(0, 50))
    def trim(self, n):
        got = self.c.trim(n)
        m = min(n, len(self.quant))
        assert got == m
        if m:
            del self.raw_k[-m:], self.raw_v[-m:], self.quant[-m:]

    @rule(i=st.integers(0, 7))
    def bad_update(self, i):
        before = snapshot(self.c)
        name, k, v = bad_updates(self.B, self.H, self.dk, self.dv, self.rng)[i]
        if name == 'head dim' and not self.quant: return   # an empty cache takes any dim its codecs take
        if name in ('heads', 'batch') and not self.quant and self.c.keys is None: return
        with pytest.raises(ValueError, match=type(self.c).__name__):
            self.c.update_and_fetch(k, v)
        assert same(before, snapshot(self.c)), f"{name}: the cache changed"

    @rule(i=st.integers(0, len(BAD_TRIMS) - 1))
    def bad_trim(self, i):
        before = snapshot(self.c)
        with pytest.raises(ValueError, match=type(self.c).__name__):
            self.c.trim(BAD_TRIMS[i])
        assert same(before, snapshot(self.c))

    @rule(kvq=st.booleans())
    def save_load(self, kvq):
        self.c = round_trip(self.c, kvq)
        self.cap = sum(self.quant)
        if self.quant:
            self._check_attention(self.c._fetch(), 1)

    @precondition(lambda self: type(self.c) is TurboQuantKVCache and self.c.sink == self.c.window == 0 and self.quant)
    @rule()
    def convert(self):
        "to_turbo_quantized of a plain KVCache holding the raw tokens: every token quantized"
        kv = KVCache(); kv.update_and_fetch(mx.concatenate(self.raw_k, axis=2), mx.concatenate(self.raw_v, axis=2))
        self.c = to_turbo_quantized(kv, self.c.k_bits, self.c.v_bits)
        self.quant = [True] * len(self.quant)
        self.cap = -(-len(self.quant) // STEP) * STEP
        self._check_attention(self.c._fetch(), 1)

    # -- invariants ------------------------------------------------------------------------------
    @invariant()
    def offset_and_bytes(self):
        if not hasattr(self, 'c'): return
        c = self.c
        n = len(self.quant)
        assert c.offset == n and c.size() == n and c.empty() == (n == 0)
        exact = n - sum(self.quant)
        item = 4
        want = self.B * self.H * (exact * (self.dk + self.dv) * item +
                                  self.cap * (c.k_codec.bytes_per_token(self.dk) + c.v_codec.bytes_per_token(self.dv)))
        assert c.nbytes == want, f"nbytes {c.nbytes} != {want} by formula"
        stt = c.state
        assert sum(1 for k in stt if k[:1] == 'k' and k[1:].isdigit()) == (len(c.k_codec.encode(mx.zeros((1, 1, 1, self.dk)))) if any(self.quant) else 0)


@pytest.mark.parametrize('family', list(FAMILIES))
def test_codec_cache_contract(family, request):
    M = type(f'Machine_{family}', (CodecMachine,), dict(family=family))
    run_state_machine_as_test(M, settings=machine_settings(request.config))


def test_the_usual_update_takes_the_short_check():
    """`contract._update_fits` (the few comparisons a decode step's update passes, instead of every check): it accepts a
    well-formed token for the cache, and turns away each malformed one, which then meets `check_update`'s full checks"""
    from mlx_kvq import contract as C
    c = TurboQuantKVCache(4)
    c.update_and_fetch(mx.zeros((2, 3, 5, 32)), mx.zeros((2, 3, 5, 32)))
    k = v = mx.zeros((2, 3, 1, 32))
    assert C._update_fits(c, k, v)
    for bad_k, bad_v in ((mx.zeros((2, 3, 1, 16)), v), (mx.zeros((1, 3, 1, 32)), mx.zeros((1, 3, 1, 32))), (k, mx.zeros((2, 3, 2, 32))),
                         (mx.zeros((2, 3, 1, 32), dtype=mx.int32), v), (mx.zeros((2, 2, 1, 32)), mx.zeros((2, 2, 1, 32))), (k[0], v[0])):
        assert not C._update_fits(c, bad_k, bad_v)
        with pytest.raises(Exception):
            C.check_update(c, bad_k, bad_v)
    assert not C._update_fits(TurboQuantKVCache(4), k, v)     # a cache that holds nothing yet: the full check learns its dims
