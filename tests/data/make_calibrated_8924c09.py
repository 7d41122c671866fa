"""Run with the code of commit 8924c09 (before `half_centroids`) on PYTHONPATH, from a checkout of it:

    git worktree add /tmp/old 8924c09 && cd /tmp/old && PYTHONPATH=/tmp/old python3 PATH/TO/this.py tests/data/calibrated_8924c09

writes a prompt-cache file of two calibrated caches (a float64-codebook era file) and, beside it, what that code decodes
from them (`CodecKVCache.dequantized`), which `tests/test_saved_files.py` holds the current code to."""
import sys, numpy as np, mlx.core as mx
from mlx_kvq.calibrated import CalibratedTurboCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.integrate import save_prompt_cache
out = sys.argv[1]
rng = np.random.default_rng(7)
D = 64
mean, scale = (rng.normal(size=D) * 0.3).astype(np.float32), np.exp(rng.normal(size=D) * 0.3).astype(np.float32)
kc = CalibratedTurboCodec(3, seed=0, mean=mean, scale=scale, outliers=[2, 11, 30, 47], outlier_bits=4, dim=D)
vc = CalibratedTurboCodec(6, seed=1, mean=mean[::-1].copy(), scale=scale, dim=D)
caches = [CodecKVCache(kc, vc), CodecKVCache(kc, AffineCodec(8))]
mx.random.seed(7)
for i, c in enumerate(caches):
    k, v = mx.random.normal((1, 2, 40, D)), mx.random.normal((1, 2, 40, D))
    c.update_and_fetch(k, v)
    c.update_and_fetch(k[..., :1, :] * 0.5, v[..., :1, :] * 0.5)   # a decode step
    mx.eval(c.state)
save_prompt_cache(out + '.safetensors', caches, {'made_by': 'mlx_kvq 8924c09 (float64 codebooks)'})
arrs = {}
for i, c in enumerate(caches):
    k, v = c.dequantized()
    arrs[f'keys{i}'], arrs[f'values{i}'] = np.array(k), np.array(v)
np.savez_compressed(out + '.npz', **arrs)
print([type(c).__name__ for c in caches], [c.offset for c in caches], {k: a.shape for k, a in arrs.items()})
