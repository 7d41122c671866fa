"""Prompt-cache files written by earlier mlx_kvq load as the caches they were: nothing a user saved is reinterpreted.
`data/calibrated_8924c09.*`: two calibrated caches saved by commit 8924c09 (float64 codebooks, before `half_centroids`)
and what that code decoded from them (`data/make_calibrated_8924c09.py` made both), matched to float32 rounding."""
from pathlib import Path

import numpy as np

from mlx_kvq.integrate import load_prompt_cache
from mlx_kvq.calibrated import CalibratedTurboCodec

DATA = Path(__file__).parent / 'data'

def test_calibrated_file_from_before_half_centroids():
    caches = load_prompt_cache(DATA / 'calibrated_8924c09.safetensors')
    ref = np.load(DATA / 'calibrated_8924c09.npz')
    assert [type(c).__name__ for c in caches] == ['CodecKVCache', 'CodecKVCache'] and [c.offset for c in caches] == [41, 41]
    cal = [caches[0].k_codec, caches[0].v_codec, caches[1].k_codec]
    assert all(type(c) is CalibratedTurboCodec and c.half_centroids is False for c in cal)   # the config had no key: float64 codebooks
    close = lambda a, b: np.abs(np.array(a) - b).max() <= 1e-5   # float32 rounding: the rotations are matmuls, ~1e-6 apart between BLAS builds
    for i, c in enumerate(caches):
        k, v = c.dequantized()
        assert close(k, ref[f'keys{i}']) and close(v, ref[f'values{i}']), i
    # the same stored codes read through float16-rounded codebooks decode differently: the check above can fail
    kc = caches[0].k_codec
    half = CalibratedTurboCodec(**{**{k: v for k, v in kc.config().items() if k != 'codec'}, 'half_centroids': True})
    side = caches[0]._fetch()[0]                     # (every token quantized: no exact prefix, an empty suffix)
    assert side.head is None and side.tail.shape[-2] == 0 and side.n_quantized == 41
    assert np.abs(np.array(half.decode(side.parts)) - ref['keys0']).max() > 1e-4   # (1.2e-3 here, a hundred times the tolerance)
