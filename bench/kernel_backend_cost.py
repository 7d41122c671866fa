"""What `packing.kernel_backend()` costs per call (a decode step asks it about twice a layer), against the version in
a baseline package (`bash bench/baseline_package.sh REV DIR`, then `--baseline DIR`), and its pieces:

    python3 bench/kernel_backend_cost.py [--baseline .kvq_base]

Microseconds per call, best of 7 repeats of 100,000 calls. On a machine whose default device is the CPU both versions
return None after reading MLX_KVQ_FUSED and the device."""
import argparse, os, platform, sys, time, timeit
from pathlib import Path
import mlx.core as mx
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq import packing as P

ap = argparse.ArgumentParser(); ap.add_argument('--baseline'); a = ap.parse_args()
us = lambda f: min(timeit.repeat(f, number=100_000, repeat=7)) * 10
print(f"# kernel_backend_cost {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()} {platform.node()}; "
      f"MLX {mx.__version__} {mx.default_device()}")
rows = [("os.environ.get('MLX_KVQ_FUSED', '1')", lambda: os.environ.get("MLX_KVQ_FUSED", "1")),
        ("mx.default_device().type != mx.DeviceType.gpu", lambda: mx.default_device().type != mx.DeviceType.gpu),
        ("packing._fused_off()", P._fused_off), ("packing.kernel_backend()", P.kernel_backend)]
if a.baseline:
    sys.path.insert(0, a.baseline)
    import mlx_kvq_base.packing as BP
    rev = (Path(a.baseline) / "mlx_kvq_base" / "REV").read_text().strip()
    rows.append((f"kernel_backend() of {rev}", BP.kernel_backend))
for nm, f in rows: print(f"| {nm} | {us(f):.2f} us |")
