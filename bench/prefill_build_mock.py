"""The host's graph build of a prefill chunk through mlx_kvq's GPU code path, per scheme, on a machine without a GPU
(`host_build_mock.gpu_path`: the CUDA kernels replaced by stand-ins that return zeros of their output shapes, so only
the Python and MLX graph building is timed; each chunk evaluated outside the timing).

    python3 bench/prefill_build_mock.py [ROUNDS]

A Llama-3.2-1B-like model of random weights (16 layers, 32 query / 8 KV heads, head dim 64, hidden 256 so that the CPU
runs its chunks quickly), float32; `auto:5` planned on the real path first. ROUNDS (default 6) alternate fp16 and
`auto:5` passes of a 1,024-token prompt in 256-token chunks (the order reversed every other round); the medians of the
build ms per chunk (each pass's first chunk left out) and auto:5's excess over fp16. Ratios and differences measured
side by side in one run are the result; absolute times are this machine's (2026-12-02, this CPU, 8 rounds: the excess went
3.35 -> 2.33 ms with `CachedSide.shape` reading the storage unsliced and full storages grown without a slice)."""
import sys, time, statistics as st
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx.core as mx
from mlx_kvq.bench import bench_caches, _bench_scheme, bench_calibration
from mlx_kvq.integrate import install
install()
from host_build_mock import small_model
model = small_model('llama')
schemes = ['fp16', 'auto:5']
cal = {s: bench_calibration(model, [s], None, 0)[0] for s in schemes}
for s in schemes: bench_caches(model, _bench_scheme(s), **cal[s])
import host_build_mock as H
import mlx_kvq.packing as PKG
H.gpu_path(); PKG._dp_agree = lambda *a: None
T, C = 1024, 256
prompt = mx.random.randint(0, 1000, (1, T), key=mx.random.key(3))
def run(scheme):
    cache = bench_caches(model, _bench_scheme(scheme), **cal[scheme])
    bs = []
    for s in range(0, T, C):
        t = time.perf_counter(); y = model(prompt[:, s:s + C], cache=cache); bs.append(1e3 * (time.perf_counter() - t))
        mx.eval(y, [c.state for c in cache])
    return bs[1:]
for s in schemes: run(s)
got = {s: [] for s in schemes}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
    for s in (schemes if r % 2 == 0 else schemes[::-1]): got[s] += run(s)
m = {s: st.median(v) for s, v in got.items()}
print('build ms per chunk (median of %d): ' % len(got['fp16']) + ', '.join(f'{s} {m[s]:.2f}' for s in schemes) + f'; auto:5 - fp16 {m["auto:5"] - m["fp16"]:.2f} ms')
