"""A cache's saved config is the same text whether its codecs' parts are encoded afresh or remembered (`Codec.config_json`,
`codecs.config_text`): a prefill asks every layer's `state` at every chunk, and a calibrated codec's means and scales
made that about half the host work of the default `auto:5`'s prefill chunk (bench/state_text_cpu.md)."""
import json

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import RotatingKVCache

from mlx_kvq.codecs import AffineCodec, Fp16Codec, config_text
from mlx_kvq.calibrated import CalibratedTurboCodec
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.kvsplit import rotating_twin
from mlx_kvq.batch import BatchQuantizedKVCache


def _cal(bits, seed, D=64):
    rng = np.random.default_rng(seed)
    return CalibratedTurboCodec(bits, seed=seed, mean=rng.normal(size=D).astype(np.float32), scale=np.exp(rng.normal(size=D) * 0.3).astype(np.float32),
                                outliers=sorted(rng.choice(D, 8, replace=False).tolist()), outlier_bits=bits + 1, dim=D)


def _x(n, seed, B=1):
    return mx.random.normal((B, 2, n, 64), key=mx.random.key(seed))


def _same(c):
    st = c.state
    assert st['config'] == json.dumps(c.config(), sort_keys=True)   # byte for byte what the plain encoding writes
    return st['config']


def test_each_cache_kind_saves_the_plain_text():
    c = CodecKVCache(_cal(3, 0), AffineCodec(8))
    for i in range(3):
        c.update_and_fetch(_x(5, i), _x(5, 10 + i))
        assert json.loads(_same(c))['offset'] == 5 * (i + 1)           # the scalars are the cache's now, not remembered
    r = rotating_twin(RotatingKVCache(max_size=16), TurboCodec(3), _cal(4, 1), quantized_kv_start=8)   # exact until 8: `then` holds the codecs
    assert r._then is not None
    r.update_and_fetch(_x(4, 3), _x(4, 4))
    assert json.loads(_same(r))['then'][1]['codec'] == _cal(4, 1).config()['codec']
    b = BatchQuantizedKVCache(_cal(2, 2), TurboCodec(4), left_padding=[1, 0])
    b.update_and_fetch(_x(3, 5, B=2), _x(3, 6, B=2))
    _same(b)


def test_the_remembered_text_follows_the_config():
    f = Fp16Codec()
    before = f.config_json()
    f.encode(mx.zeros((1, 1, 1, 4), mx.float16))        # the codec learns its item size: its config changes
    assert f.config_json() == json.dumps(f.config(), sort_keys=True) != before
    k = _cal(3, 7)
    first = k.config_json()
    assert k.config_json() is first                       # an unchanged config: the remembered text, not encoded again
    k.mean[0] += 1.0                                      # a list changed in place: the remembered copy is not that list
    assert k.config_json() == json.dumps(k.config(), sort_keys=True) != first
    assert hash(k) == hash(json.dumps(k.config(), sort_keys=True))


def test_config_text_places_each_codec_by_name():
    k, v = _cal(3, 0), AffineCodec(4, 32)
    cfg = dict(cls='X', k_codec=k.config(), v_codec=v.config(), then=[v.config(), k.config()], other=None, n=3)
    assert config_text(cfg, k_codec=k, v_codec=v, then=[v, k]) == json.dumps(cfg, sort_keys=True)
    cfg['then'] = None
    assert config_text(cfg, k_codec=k, v_codec=v, then=None) == json.dumps(cfg, sort_keys=True)
    assert config_text(dict(a=1)) == json.dumps(dict(a=1))


def test_config_text_is_json_dumps_for_every_kind_of_entry():
    k = _cal(3, 4)
    cfg = dict(cls='X', k_codec=k.config(), a=1, b=True, c=None, d=2.5, e='q"uote\\', f=[1, [2, 3]], g=dict(z=1, y=[None]), h=-7)
    for change in (dict(), dict(a=True), dict(b=1), dict(a=1.0), dict(d=float('nan')), dict(h=2 ** 70), dict(a=1)):
        cfg.update(change)
        assert config_text(cfg, k_codec=k) == json.dumps(cfg, sort_keys=True), change
    cfg['f'][1].append(4)                                  # a list changed in place is not taken for the last text's
    assert config_text(cfg, k_codec=k) == json.dumps(cfg, sort_keys=True)
    assert config_text(dict()) == '{}' and config_text(dict(k_codec=None), k_codec=None) == '{"k_codec": null}'
