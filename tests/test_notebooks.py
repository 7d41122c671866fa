"""Run every notebook in `nbs/` the way `nbdev-test` does: one pytest item per notebook.

Cells flagged with the project's `tst_flags` (`gpu`, `metal`, `slow`, `bench`, `notest`) are skipped
unless named with `--flags`, exactly as `nbdev-test --flags ...` does. Each notebook runs in its own
process so that one notebook's state (loaded models, installed patches) cannot leak into another.
"""
import os, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_"))

_RUNNER = """
import sys
from nbdev.config import get_config
from nbdev.test import test_nb
cfg = get_config()
skip = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags)
ok, secs = test_nb(sys.argv[1], skip_flags=skip, force_flags=sys.argv[2].split(),
                   basepath=str(cfg.config_path), cell_timeout=cfg.cell_timeout)
print(f"{sys.argv[1]}: {'passed' if ok else 'FAILED'} in {secs:.1f}s")
sys.exit(0 if ok else 1)
"""


@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_notebook(nb, request):
    want = request.config.getoption("--nb")
    if want and want not in nb.name:
        pytest.skip(f"--nb {want!r} does not select {nb.name}")
    flags = request.config.getoption("--flags")
    r = subprocess.run([sys.executable, "-c", _RUNNER, str(nb), flags], cwd=nb.parent,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        pytest.fail(f"notebook {nb.name} failed\n--- stdout ---\n{r.stdout[-8000:]}\n--- stderr ---\n{r.stderr[-12000:]}",
                    pytrace=False)
