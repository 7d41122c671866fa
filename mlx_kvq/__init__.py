__version__ = "0.1.0"

# `import mlx_kvq` makes every mlx_kvq cache class known to mlx-lm's prompt-cache files and installs the
# attention dispatch (caches that own their attention get it; all others keep mlx-lm's function).
import warnings as _warnings
from .integrate import (make_prompt_cache, parse_scheme, cache_report, install, uninstall, installed,
                        save_prompt_cache, load_prompt_cache)
from . import qcache, turboquant, kvsplit, batch, mla_guard, dsv4  # noqa: F401  (registration)

try: install()
except RuntimeError as _e:  # an untested mlx-lm: make_prompt_cache / install() raise the same message
    _warnings.warn(str(_e), stacklevel=2)
