"""mlx_kvq: compressed key/value caches for MLX language models, as a drop-in for mlx-lm.

`import mlx_kvq` makes every mlx_kvq cache class known to mlx-lm's prompt-cache files, registers the scheme
families (`auto:B`) and installs the attention dispatch (caches that own their attention get it; all others keep
mlx-lm's function). The package is built in layers (imports only go down; `tests/test_layers.py` checks it):
math (codebook, rotation, packing) < codecs and attention (codecs, turbo_codec, calibrated, attention_kernels,
attention) < caches (contract, qcache, turboquant, kvsplit, batch, planned, mla_guard, dsv4_cache, dsv4, dsv4_model)
< schemes and policy (schemes, dispatch, integrate) < tools (models, eval, recipe, auto, pareto, tiny, distributed,
cli, bench, serve, bench_serve)."""
__version__ = "0.1.0"

import warnings as _warnings

from .codecs import Codec, Fp16Codec, AffineCodec, CachedSide, codec_attention
from .turbo_codec import TurboCodec
from .calibrated import CalibratedTurboCodec, HalfCodec
from .qcache import CodecKVCache
from .turboquant import TurboQuantKVCache, to_turbo_quantized
from .kvsplit import KVSplitCache, QuantizedRotatingKVCache, to_quantized_rotating
from .batch import BatchQuantizedKVCache, BatchQuantizedRotatingKVCache
from .planned import PlannedKVCache
from .mla_guard import QuantizedMLACache, MLACache, uses_mla
from .dsv4_cache import SparseKVCache, BatchSparseKVCache
from .schemes import KVScheme, parse_scheme, register_scheme_family, valid_schemes
from .dispatch import install, uninstall, installed
from .integrate import make_prompt_cache, cache_report, CacheReport, save_prompt_cache, load_prompt_cache
from .models import load
from . import auto, cli, bench, serve, bench_serve   # noqa: F401  (register the auto:B scheme family and the subcommands)
from . import dsv4_model   # noqa: F401  (answers mlx_lm.models.deepseek_v4 for mlx_lm.load)
from . import distributed           # noqa: F401  (reports on a split model name the rank: integrate.register_scope_hook)

try: install()
except RuntimeError as _e:  # an untested mlx-lm: make_prompt_cache / install() raise the same message
    _warnings.warn(str(_e), stacklevel=2)
