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
