"""Shared pieces of the cache-contract tests (issue 14): example budgets, snapshots, reference attention."""
import os, tempfile
import numpy as np
import mlx.core as mx
from hypothesis import settings, HealthCheck, Phase
from mlx_lm.models import base as lm_base

import mlx_kvq                                   # registers every cache class with mlx-lm
from mlx_kvq.integrate import install, save_prompt_cache as kvq_save, load_prompt_cache as kvq_load
from mlx_lm.models.cache import save_prompt_cache as lm_save, load_prompt_cache as lm_load

install()
_SDPA = getattr(lm_base, '_mlx_kvq_original_sdpa', lm_base.scaled_dot_product_attention)


def budget(config, default, slow):
    "Example count: `default` in the normal run, `slow` under `--flags slow`"
    return slow if 'slow' in (config.getoption('--flags') or '').split() else default


def machine_settings(config, default=10, slow=200, steps=25):
    return settings(max_examples=budget(config, default, slow), stateful_step_count=steps, deadline=None,
                    derandomize=True, database=None, suppress_health_check=list(HealthCheck),
                    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink))


def fake(codec, x):
    "`x` as `codec` stores it: encoded then decoded (in float32)"
    return codec.decode(tuple(codec.encode(x)), mx.float32)


def snapshot(c):
    "Every array and scalar of a cache's saved state (numpy copies), plus its offset and size"
    st = c.state
    items = st.items() if isinstance(st, dict) else enumerate(st)
    def conv(v):
        if isinstance(v, mx.array): return ('a', str(v.dtype), np.array(v.astype(mx.float32) if v.dtype == mx.bfloat16 else v))
        if isinstance(v, (list, tuple)): return tuple(conv(x) for x in v)
        return v
    off = c.offset
    return {k: conv(v) for k, v in items}, (off.tolist() if isinstance(off, mx.array) else off)


def same(a, b):
    def eq(x, y):
        if isinstance(x, tuple) and len(x) == 3 and x[:1] == ('a',):
            return isinstance(y, tuple) and x[1] == y[1] and x[2].shape == y[2].shape and np.array_equal(x[2], y[2])
        if isinstance(x, tuple): return isinstance(y, tuple) and len(x) == len(y) and all(eq(p, q) for p, q in zip(x, y))
        return x == y
    (sa, oa), (sb, ob) = a, b
    return oa == ob and sa.keys() == sb.keys() and all(eq(sa[k], sb[k]) for k in sa)


def reference_attention(queries, keys, values, scale, mask=None):
    "mlx-lm's own attention over plain arrays"
    return _SDPA(queries, keys, values, None, scale=scale, mask=mask)


def close(a, b, tol=2e-4):
    a, b = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    err = np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12) if a.size else 0.0
    assert a.shape == b.shape and err <= tol, f"attention differs from the reference: rel err {err:.2e}, shapes {a.shape} {b.shape}"


def bad_updates(B, H, dk, dv, rng):
    "(name, keys, values) calls that break the protocol for a cache holding (B, H, dk, dv)"
    f = lambda *s: mx.array(rng.standard_normal(s).astype(np.float32))
    return [('L mismatch', f(B, H, 2, dk), f(B, H, 3, dv)),
            ('int keys', mx.zeros((B, H, 1, dk), mx.int32), mx.zeros((B, H, 1, dv), mx.int32)),
            ('head dim', f(B, H, 1, dk + 16), f(B, H, 1, dv + 16)),
            ('heads', f(B, H + 1, 1, dk), f(B, H + 1, 1, dv)),
            ('batch', f(B + 1, H, 1, dk), f(B + 1, H, 1, dv)),
            ('3 dims', f(H, 1, dk), f(H, 1, dv)),
            ('not arrays', np.zeros((B, H, 1, dk), np.float32), np.zeros((B, H, 1, dv), np.float32)),
            ('no tokens', f(B, H, 0, dk), f(B, H, 0, dv))]


BAD_TRIMS = [-1, -3, 2.5, True, '1', None]


def tmpfile(name='c.safetensors'):
    d = tempfile.mkdtemp(prefix='kvq_contract_')
    return os.path.join(d, name)


def round_trip(cache, kvq):
    "`cache` saved and loaded again (mlx_kvq's files when `kvq`, else mlx-lm's); the loaded cache must equal it"
    path, before = tmpfile(), snapshot(cache)
    if kvq: kvq_save(path, [cache]); (c,) = kvq_load(path)
    else: lm_save(path, [cache]); (c,) = lm_load(path)
    assert type(c) is type(cache), f"{type(cache).__name__} came back as {type(c).__name__}"
    assert same(before, snapshot(c)), "state changed through a save/load round trip"
    return c


def drop_array(path, key):
    "Rewrite the prompt-cache file at `path` without its array `key` (metadata unchanged)"
    arrays, meta = mx.load(path, return_metadata=True)
    mx.save_safetensors(path, {k: v for k, v in arrays.items() if k != key}, meta)
