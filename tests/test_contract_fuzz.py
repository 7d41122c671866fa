"""Damaged prompt-cache files (issue 14): for every mlx_kvq cache family, at least 200 variants of one saved file
(truncated at every section, flipped bytes in the header and in each array, missing and extra arrays and
metadata entries, configs of another format version / class / scheme / head dim / token count, written
consistently with fresh checksums) are loaded by mlx_kvq.integrate.load_prompt_cache and by mlx-lm's own
load_prompt_cache. Each must be refused (mlx_kvq's loader: a ValueError naming what is wrong), or load as the
same cache (same attention output and next step as the original); a consistently written file of another
valid configuration may load, and must then attend exactly to what it holds. A crash fails the run."""
import json, os, struct, tempfile
import numpy as np
import mlx.core as mx
import pytest
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.cache import load_prompt_cache as lm_load, KVCache

from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turboquant import TurboQuantKVCache
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.kvsplit import KVSplitCache, QuantizedRotatingKVCache
from mlx_kvq.batch import merge_caches
from mlx_kvq.mla_guard import QuantizedMLACache
from mlx_kvq.planned import PlannedKVCache
from mlx_kvq.calibrated import HalfCodec
from mlx_kvq.integrate import save_prompt_cache, load_prompt_cache as kvq_load
from mlx_kvq.contract import write_prompt_cache
from contract_util import *

R = lambda *s, seed=0: mx.array(np.random.default_rng(seed).standard_normal(s).astype(np.float32))


def _fed(c, n, B=1, H=2, dk=32, dv=None, seed=0):
    c.update_and_fetch(R(B, H, n, dk, seed=seed), R(B, H, n, dv or dk, seed=seed + 1))
    return c


def _batch(rotating):
    mk = (lambda: QuantizedRotatingKVCache(8, 0, TurboCodec(3), TurboCodec(3, seed=1))) if rotating else \
         (lambda: CodecKVCache(TurboCodec(3), AffineCodec(4, 32)))
    b = merge_caches([_fed(mk(), 3, seed=1), _fed(mk(), 6, seed=2)])
    b.update_and_fetch(R(2, 2, 1, 32, seed=3), R(2, 2, 1, 32, seed=4))
    return b


FAMILIES = {
    'TurboQuantKVCache sink/window': lambda: _fed(TurboQuantKVCache(3, sink=1, window=2), 7),
    'KVSplitCache': lambda: _fed(KVSplitCache(8, 4), 5, dk=64),
    'QuantizedRotatingKVCache': lambda: _fed(QuantizedRotatingKVCache(8, 2, TurboCodec(3), AffineCodec(8, 32)), 12),
    'BatchQuantizedKVCache': lambda: _batch(False),
    'BatchQuantizedRotatingKVCache': lambda: _batch(True),
    'QuantizedMLACache': lambda: _fed(QuantizedMLACache(8, 32), 5, H=1, dk=64, dv=16),
    'PlannedKVCache': lambda: _fed(PlannedKVCache(TurboCodec(4), HalfCodec(), window=1, plan='{"layers": {}}', layer=0), 4),
}


def probe(c):
    "What the cache does next: the attention output of one decode step after a fixed new token, as numpy"
    B = c.offset.shape[0] if isinstance(c.offset, mx.array) else 1
    if isinstance(c, QuantizedMLACache):
        k, v = c.update_and_fetch(R(B, 1, 1, 64, seed=7), R(B, 1, 1, 16, seed=8))
        return np.concatenate([np.array(k).ravel(), np.array(v).ravel()])
    d = c.k_codec.dim if getattr(c.k_codec, 'dim', None) else (64 if isinstance(c, KVSplitCache) else 32)
    mask = c.make_mask(1, return_array=True) if B > 1 else None
    K, V = c.update_and_fetch(R(B, 2, 1, d, seed=7), R(B, 2, 1, d, seed=8))
    return np.array(c.attend(R(B, 4, 1, d, seed=9), K, V, scale=d ** -0.5, mask=mask))


def self_consistent(c):
    "A cache that loaded attends exactly over the tokens it holds, and finitely"
    if isinstance(c, QuantizedMLACache) or isinstance(c.offset, mx.array): out = probe(c)
    else:
        d = c.k_codec.dim if getattr(c.k_codec, 'dim', None) else (64 if isinstance(c, KVSplitCache) else 32)
        K, V = c.update_and_fetch(R(1, 2, 1, d, seed=7), R(1, 2, 1, d, seed=8))
        q = R(1, 4, 1, d, seed=9)
        out = np.array(c.attend(q, K, V, scale=d ** -0.5))
        kd, vd = c.dequantized()
        close(out, reference_attention(q, kd, vd, d ** -0.5), 2e-4)
    assert np.isfinite(out).all()


# -- the file, as bytes and as (arrays, metadata) -------------------------------------------------
def header(raw):
    n = struct.unpack('<Q', raw[:8])[0]
    return n, json.loads(raw[8:8 + n])


class Ghost:
    "Stands in for a cache when writing an edited state (the file records the class by name)"
    def __init__(self, name, state): self.__class__ = type(name, (Ghost,), {}); self.state = state


def states_of(path):
    "The decoded per-layer states of a file written by write_prompt_cache (strings decoded), its classes and metadata"
    arrays, meta = mx.load(path, return_metadata=True)
    user, classes, scalars = tree_unflatten(list(meta.items()))
    for pos, kind in scalars[1:]:
        a = arrays[pos]
        arrays[pos] = a.item() if kind == 'scalar' else (''.join(chr(i) for i in a.tolist()) if kind == 'string' else None)
    st = tree_unflatten(list(arrays.items()))
    return st, classes, user


def variants(path, d, semantic=True):
    "(kind, name, path of the variant file): kind 'bytes' (must be refused or equal) or 'semantic'"
    raw = open(path, 'rb').read()
    hl, hdr = header(raw)
    rng = np.random.default_rng(14)
    out = []
    def put(kind, name, data):
        p = os.path.join(d, f"v{len(out)}.safetensors")
        if isinstance(data, (bytes, bytearray)): open(p, 'wb').write(bytes(data))
        else: data(p)
        out.append((kind, name, p))
    # truncated at every section: inside the length, the header, and at the start / middle / end of each array
    base = 8 + hl
    cuts = {0, 1, 4, 7, 8, 9, 8 + hl // 4, 8 + hl // 2, 8 + hl - 1, base}
    for k, t in hdr.items():
        if k == '__metadata__': continue
        a, b = t['data_offsets']
        cuts |= {base + a, base + (a + b) // 2, base + max(a, b - 1)}
    for c in sorted(x for x in cuts if x < len(raw)): put('bytes', f'truncated at {c}', raw[:c])
    # flipped bytes in the header
    for pos in rng.choice(np.arange(8, 8 + hl), size=min(80, hl), replace=False):
        b = bytearray(raw); b[pos] ^= int(rng.integers(1, 256)); put('bytes', f'header byte {pos} flipped', b)
    # flipped bytes in each array
    for k, t in hdr.items():
        if k == '__metadata__': continue
        a, b = t['data_offsets']
        if b <= a: continue
        for pos in rng.choice(np.arange(a, b), size=min(5, b - a), replace=False):
            bb = bytearray(raw); bb[base + pos] ^= int(rng.integers(1, 256)); put('bytes', f'array {k} byte {pos} flipped', bb)
    arrays, meta = mx.load(path, return_metadata=True)
    # missing / extra arrays and metadata entries
    for k in arrays:
        put('bytes', f'array {k} missing', lambda p, k=k: mx.save_safetensors(p, {a: v for a, v in arrays.items() if a != k}, meta))
    for k in meta:
        put('bytes', f'metadata {k} missing', lambda p, k=k: mx.save_safetensors(p, arrays, {a: v for a, v in meta.items() if a != k}))
    first = next(iter(arrays.values()))
    for k in ('0.k99', '0.bogus', '1.k0', '0.v7', '0.sink_keys'):
        if k not in arrays: put('bytes', f'extra array {k}', lambda p, k=k: mx.save_safetensors(p, {**arrays, k: first}, meta))
    if not semantic: return out
    # consistently written edits (fresh checksums): configs of another version, class, scheme, head dim, counts
    states, classes, user = states_of(path)
    st0 = states[0]
    def write(edit_state=None, edit_user=None):
        def w(p):
            st = {k: v for k, v in st0.items() if k != 'crc32'}
            u = {k: v for k, v in user.items() if k != 'mlx_kvq_crc32'}
            if edit_state: st = edit_state(st)
            if edit_user: u = edit_user(u)
            write_prompt_cache(p, [Ghost(classes[0], st)], u)
        return w
    def cfg_edit(f):
        def e(st):
            cfg = json.loads(st['config']); f(cfg); return {**st, 'config': json.dumps(cfg)}
        return e
    cfg = json.loads(st0['config'])
    edits = {'format 2': lambda c: c.update(format=2), 'format -1': lambda c: c.update(format=-1),
             'format text': lambda c: c.update(format='one'), 'class KVSplitCache': lambda c: c.update(cls='KVSplitCache'),
             'class unknown': lambda c: c.update(cls='NoSuchCache'), 'no codecs': lambda c: (c.pop('k_codec', None), c.pop('v_codec', None)),
             'codec unknown': lambda c: c['k_codec'].update(codec='nope'),
             'codec bad argument': lambda c: c['k_codec'].update(colour=3)}
    for side in ('k_codec', 'v_codec'):
        cc = cfg.get(side, {})
        if 'bits' in cc:
            for b in (1, 2, 4, 5, 8, 9):
                if b != cc['bits']: edits[f'{side} bits {b}'] = lambda c, side=side, b=b: c[side].update(bits=b)
        if 'group_size' in cc: edits[f'{side} group 128'] = lambda c, side=side: c[side].update(group_size=128)
        edits[f'{side} head dim 64'] = lambda c, side=side: c[side].update(dim=64)
        edits[f'{side} head dim 16'] = lambda c, side=side: c[side].update(dim=16)
        edits[f'{side} head dim 7'] = lambda c, side=side: c[side].update(dim=7)
    for k, v in cfg.items():
        if isinstance(v, int) and not isinstance(v, bool) and k != 'format':
            for dv in (-1, 1, 7, -v - 1):
                edits[f'{k} {v}{dv:+d}'] = lambda c, k=k, v=v, dv=dv: c.update({k: v + dv})
            edits[f'{k} as text'] = lambda c, k=k: c.update({k: 'x'})
        if k not in ('format', 'cls'): edits[f'config {k} removed'] = lambda c, k=k: c.pop(k)
    for name, f in edits.items(): put('semantic', name, write(cfg_edit(f)))
    put('semantic', 'config not JSON', write(lambda st: {**st, 'config': '{"format": 1, '}))
    for k, v in st0.items():
        if not isinstance(v, mx.array) or v.ndim < 1: continue
        if v.ndim == 4 and v.shape[2] > 0:
            put('semantic', f'{k} one token short', write(lambda st, k=k: {**st, k: st[k][..., :-1, :]}))
            put('semantic', f'{k} one more head', write(lambda st, k=k: {**st, k: mx.concatenate([st[k], st[k][:, :1]], axis=1)}))
        if mx.issubdtype(v.dtype, mx.floating):
            put('semantic', f'{k} NaN', write(lambda st, k=k: {**st, k: mx.full(st[k].shape, mx.nan, st[k].dtype)}))
            put('semantic', f'{k} as int32', write(lambda st, k=k: {**st, k: st[k].astype(mx.int32)}))
        else:
            put('semantic', f'{k} as float32', write(lambda st, k=k: {**st, k: st[k].astype(mx.float32)}))
        put('semantic', f'{k} 3 dims', write(lambda st, k=k: {**st, k: st[k].reshape(st[k].shape[0] * st[k].shape[1], *st[k].shape[2:]) if st[k].ndim > 2 else st[k][None]}))
    put('semantic', 'mlx_kvq_format 2', write(edit_user=lambda u: {**u, 'mlx_kvq_format': '2'}))
    put('semantic', 'mlx_kvq_format text', write(edit_user=lambda u: {**u, 'mlx_kvq_format': 'x'}))
    put('semantic', 'mlx_kvq_scheme of another scheme', write(edit_user=lambda u: {**u, 'mlx_kvq_scheme': 'affine:2'}))
    return out


@pytest.mark.parametrize('family', list(FAMILIES))
def test_damaged_files(family):
    d = tempfile.mkdtemp(prefix='kvq_fuzz_')
    path = os.path.join(d, 'orig.safetensors')
    cache = FAMILIES[family]()
    save_prompt_cache(path, [cache])
    want = probe(kvq_load(path)[0])
    np.testing.assert_allclose(probe(lm_load(path)[0]), want, rtol=0, atol=0)
    vs = variants(path, d)
    assert len(vs) >= 200, f"only {len(vs)} variants"
    tally = dict(refused=0, same=0, consistent=0)
    for kind, name, p in vs:
        for loader in ('mlx_kvq', 'mlx_lm'):
            try:
                got = kvq_load(p) if loader == 'mlx_kvq' else lm_load(p)
            except Exception as e:
                if loader == 'mlx_kvq':
                    assert isinstance(e, ValueError) and len(str(e)) > 20, f"{name}: {type(e).__name__}: {e}"
                tally['refused'] += 1
                continue
            if loader == 'mlx_lm' and len(got) == 0:    # mlx-lm's loader zips classes with states: no class, no cache
                tally['mlx_lm_no_cache'] = tally.get('mlx_lm_no_cache', 0) + 1; continue
            assert len(got) == 1, f"{name} ({loader}): loaded {len(got)} caches"
            c = got[0]
            assert type(c).__name__ == type(cache).__name__, f"{name} ({loader}): loaded a {type(c).__name__}"
            out = None
            try: out = probe(c)
            except Exception: pass
            if out is not None and out.shape == want.shape and np.allclose(out, want, rtol=0, atol=1e-6):
                tally['same'] += 1; continue
            assert kind == 'semantic', f"{name} ({loader}): damaged file loaded and attends differently"
            self_consistent(got[0] if loader == 'mlx_kvq' else lm_load(p)[0])
            tally['consistent'] += 1
    print(family, len(vs), tally)
