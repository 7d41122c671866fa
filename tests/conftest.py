"""pytest options shared by the notebook runner and the dense-mechanism tests."""
import pytest


def pytest_addoption(parser):
    parser.addoption("--flags", default="",
                     help='space-separated notebook cell flags to run as well, e.g. --flags "slow bench"')
    parser.addoption("--nb", default="",
                     help="only run notebooks whose file name contains this text")


def pytest_configure(config):
    "CUDA kernel bodies that `packing.INCLUDE` writes (the emulated kernels): a temporary folder, not the user's cache"
    import os, tempfile
    os.environ.setdefault("MLX_KVQ_KERNEL_DIR", tempfile.mkdtemp(prefix="mlx_kvq_kernels_"))


@pytest.fixture
def emulated_packing(monkeypatch):
    """mlx_kvq.packing's CUDA code path with MLX's `cuda_kernel` replaced by the CPU emulator (tests/kernel_emulator.py),
    its kernels, guards and kept launches fresh (nothing verified yet), mlx_kvq.calibrated's pair and ring kernels' too;
    the append kernel (off by default) on"""
    import sys
    from pathlib import Path
    import mlx.core as mx
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import kernel_emulator as E
    from mlx_kvq import packing as P
    monkeypatch.setattr(mx.fast, 'cuda_kernel', E.cuda_kernel, raising=False)
    monkeypatch.setattr(P, 'kernel_backend', lambda: 'cuda')
    monkeypatch.setattr(P, 'INCLUDE', False)
    for name in ('_PKERNELS', '_RGUARDS', '_DTGUARDS', '_DPK', '_DPGUARDS', '_APK', '_APGUARDS', '_READY', '_QAK', '_QAGUARDS',
                 '_QAREADY', '_QIGUARDS', '_QIREADY', '_RING_META', '_PGUARDS', '_PREADY', '_KERNELS', '_QPLAUNCH',
                 '_AIK', '_AIGUARDS', '_AIREADY'):
        monkeypatch.setattr(P, name, {})
    from mlx_kvq import calibrated as Cal
    monkeypatch.setattr(Cal, 'kernel_backend', lambda: 'cuda')
    for name in ('_CALK', '_CALGUARD', '_CALREADY', '_CALMETA', '_CALLAUNCH', '_CALIGUARD'):
        monkeypatch.setattr(Cal, name, {})
    monkeypatch.setattr(P, 'APPEND', True)
