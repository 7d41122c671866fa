"""Whether NVIDIA's NVRTC and ptxas wheels are installed (`pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12
nvidia-cuda-runtime-cu12`, no GPU needed): the tests that compile mlx_kvq's CUDA kernels offline skip without them (CI
installs none)."""
import os


def ptxas_available() -> bool:
    try:
        import nvidia
        root = list(nvidia.__path__)[0]
        return os.path.exists(os.path.join(root, 'cuda_nvrtc', 'lib', 'libnvrtc.so.12')) and os.path.exists(os.path.join(root, 'cuda_nvcc', 'bin', 'ptxas'))
    except ImportError: return False
