"""The calibrated codecs the GPU checks, benches and the kernel emulator draw: the kinds `auto:B` plans (per-channel means
and scales, an outlier band of dim / 8 channels at one bit more), with means drawn at sd 0.3 by default, which do not fit
standard normal data (as a calibration on other text may leave them: the case where half-precision tables round
worst). One definition for `ncu_decode.py`, `cuda_registers.py`, `check_decode_steps.py`, `half_tables_cpu.py` and
`tests/kernel_emulator.py`."""
import numpy as np
from mlx_kvq.calibrated import CalibratedTurboCodec

def calibrated(bits, seed, D, rng=None, mean_sd=0.3, outliers=True, half=True):
    """A calibrated turbo codec of `bits` bits at head dim D drawn from `rng` (default: one seeded by `seed`); `outliers=False`: one band (what `auto:B` labels tqBcs);
    `half=False`: float64 codebooks (`half_centroids=False`, a config saved before 2026-12-01: the kernels keep the tables' low parts, `VTLO`)"""
    rng = np.random.default_rng(seed) if rng is None else rng
    mean, scale = rng.normal(size=D).astype(np.float32) * mean_sd, np.exp(rng.normal(size=D) * 0.3).astype(np.float32)
    if not outliers: return CalibratedTurboCodec(bits, seed=seed, mean=mean, scale=scale, dim=D, half_centroids=half)
    return CalibratedTurboCodec(bits, seed=seed, mean=mean, scale=scale, outliers=sorted(rng.choice(D, D // 8, replace=False).tolist()), outlier_bits=min(bits + 1, 8), dim=D, half_centroids=half)

def calibrated_pair(kbits, vbits, D, mean_sd=0.3, rng=None, half=True):
    "Key and value codecs (seeds 0 and 1) drawn one after the other from one generator (default: seeded 0)"
    rng = np.random.default_rng(0) if rng is None else rng
    return calibrated(kbits, 0, D, rng, mean_sd, half=half), calibrated(vbits, 1, D, rng, mean_sd, half=half)
