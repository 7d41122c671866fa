"""Damaged prompt-cache files of the DeepSeek-V4 cache (SparseKVCache, whose state is mlx-lm's list form): the
byte-level variants of tests/test_contract_fuzz.py plus consistently written edits of its entries (format,
offset, window, ratio, codecs, ring shape, NaN). mlx_kvq's loader must refuse each or load the same cache (or,
for a consistent edit, a cache that attends finitely over what it holds). mlx-lm's loader has no checksum for a
list state: a flipped byte inside an array's data loads as a different value there (counted, not refused);
everything else it must refuse or load as the same cache."""
import json, os, tempfile
import numpy as np
import mlx.core as mx
import pytest
from mlx_lm.models.cache import load_prompt_cache as lm_load

from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.dsv4_cache import SparseKVCache
from mlx_kvq.integrate import save_prompt_cache, load_prompt_cache as kvq_load
from mlx_kvq.contract import write_prompt_cache
from test_contract_fuzz import variants, states_of, Ghost, R

D = 32


def make(ratio):
    c = SparseKVCache(6, ratio, TurboCodec(4) if ratio else None)
    kv = R(1, 1, 9, D, seed=1); c.update_and_fetch(kv, kv)
    if ratio: c.entries.append(R(1, 2, D, seed=2))
    return c


def probe(c):
    kv = R(1, 1, 1, D, seed=7)
    k, v = c.update_and_fetch(kv, kv)
    parts = [np.array(k).ravel()]
    if c.compressed is not None: parts.append(np.array(c.compressed).ravel())
    return np.concatenate(parts)


def sparse_edits(path, d, start):
    states, classes, user = states_of(path)
    st = list(states[0]); u = {k: v for k, v in user.items() if k != 'mlx_kvq_crc32'}
    out = []
    def put(name, f):
        p = os.path.join(d, f"s{start + len(out)}.safetensors")
        new = f(list(st))
        write_prompt_cache(p, [Ghost(classes[0], tuple(new))], u)
        out.append(('semantic', name, p))
    def at(i, v): return lambda s: s[:i] + [v] + s[i + 1:]
    for i, nm in ((7, 'offset'), (8, 'window'), (9, 'ratio')):
        for v in (-1, 0, 1, 2, 3, 5, 100, 'x'):
            put(f'{nm} {v}', at(i, v))
    for v in (4, 99, 0, 'x'): put(f'format {v}', at(12, v))
    for v in ('{"codec": "nope"}', '{"codec": "turbo", "bits": 9}', 'not json', ''): put(f'entry codec {v!r}', at(10, v))
    ring = st[0]
    put('ring NaN', at(0, mx.full(ring.shape, mx.nan, ring.dtype)))
    put('ring one row short', at(0, ring[:, :-1]))
    put('ring 2-d', at(0, ring[0]))
    put('ring int32', at(0, ring.astype(mx.int32)))
    put('ring None', at(0, None))
    if st[1] is not None:
        put('entries None', at(1, None))
        put('entries one part', at(1, st[1][:1]))
        put('entries batch 2', at(1, [mx.concatenate([p, p]) for p in st[1]]))
        put('entries NaN norms', at(1, [st[1][0], mx.full(st[1][1].shape, mx.nan, st[1][1].dtype)]))
    put('one entry fewer', lambda s: s[:-1])
    put('one entry more', lambda s: s + [1])
    return out


@pytest.mark.parametrize('ratio', [0, 4])
def test_damaged_sparse_files(ratio):
    d = tempfile.mkdtemp(prefix='kvq_fuzz_sparse_')
    path = os.path.join(d, 'orig.safetensors')
    save_prompt_cache(path, [make(ratio)])
    want = probe(kvq_load(path)[0])
    assert np.array_equal(probe(lm_load(path)[0]), want)
    vs = variants(path, d, semantic=False)
    vs += sparse_edits(path, d, len(vs))
    assert len(vs) >= 200, len(vs)
    tally = {}
    for kind, name, p in vs:
        for loader in ('mlx_kvq', 'mlx_lm'):
            try: got = kvq_load(p) if loader == 'mlx_kvq' else lm_load(p)
            except Exception as e:
                if loader == 'mlx_kvq': assert isinstance(e, ValueError) and len(str(e)) > 20, f"{name}: {type(e).__name__}: {e}"
                tally['refused'] = tally.get('refused', 0) + 1; continue
            if loader == 'mlx_lm' and len(got) == 0: tally['mlx_lm_no_cache'] = tally.get('mlx_lm_no_cache', 0) + 1; continue
            assert len(got) == 1 and type(got[0]) is SparseKVCache, f"{name} ({loader})"
            out = None
            try: out = probe(got[0])
            except Exception: pass
            if out is not None and out.shape == want.shape and np.array_equal(out, want):
                tally['same'] = tally.get('same', 0) + 1; continue
            if loader == 'mlx_lm' and 'byte' in name and 'array' in name:
                tally['mlx_lm_flip_undetected'] = tally.get('mlx_lm_flip_undetected', 0) + 1; continue
            assert kind == 'semantic', f"{name} ({loader}): damaged file loaded and behaves differently"
            assert out is not None and np.isfinite(out).all(), f"{name} ({loader}): loaded but cannot decode finitely"
            tally['consistent'] = tally.get('consistent', 0) + 1
    print('SparseKVCache ratio', ratio, len(vs), tally)
