"""What building one decode step's operations costs the host, per operation kind, and whether `mx.compile` can replay a
cache update (quantize kernels + dynamic slice updates) instead of Python building it (GPU machine).

    python3 bench/host_costs_cuda.py
Graph building only is timed (nothing evaluated inside the timed loop); results are checked after.
"""
import time, sys
from pathlib import Path
import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import packing as P
from mlx_kvq.turbo_codec import TurboCodec


def per_call(f, n=2000):
    for _ in range(50): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return 1e6 * (time.perf_counter() - t) / n


def main():
    print(f"MLX {mx.__version__} {mx.default_device()} backend {P.kernel_backend()}")
    kc, vc = TurboCodec(4), TurboCodec(4, seed=1); kc.check_dim(64); vc.check_dim(64)
    x = mx.random.normal((1, 8, 1, 64)).astype(mx.float16); mx.eval(x)
    P.quantize_pack(x, kc.rotation, kc.codebook)        # verify once, memoize
    cap, W = 1024, 8
    kw, kn = mx.zeros((1, 8, cap, W), mx.uint32), mx.zeros((1, 8, cap, 1), mx.float16)
    vw, vn = mx.zeros((1, 8, cap, W), mx.uint32), mx.zeros((1, 8, cap, 1), mx.float16)
    mx.eval(kw, kn, vw, vn)
    rows = []
    rows.append(("x + 1", per_call(lambda: x + 1)))
    rows.append(("mx.array of 8 ints", per_call(lambda: mx.array((1, 2, 3, 4, 5, 6, 7, 8), dtype=mx.int32))))
    rows.append(("reshape", per_call(lambda: x.reshape(8, 64))))
    rows.append(("quantize kernel call (fused_quantize_pack)", per_call(lambda: P.fused_quantize_pack(x, kc.rotation, kc.codebook))))
    rows.append(("quantize_pack (memoized dispatch)", per_call(lambda: P.quantize_pack(x, kc.rotation, kc.codebook))))
    def upd():
        kw[..., 5:6, :] = x.astype(mx.uint32)[..., :8]
    rows.append(("p[..., i:i+1, :] = u", per_call(upd, 500)))
    pos = mx.array([5])
    rows.append(("mx.slice_update(p, u, array idx)", per_call(lambda: mx.slice_update(kw, x.astype(mx.uint32)[..., :8], pos, axes=(2,)), 500)))

    def step(k, v, kw, kn, vw, vn, pos):
        a, b = P.fused_quantize_pack(k, kc.rotation, kc.codebook), P.fused_quantize_pack(v, vc.rotation, vc.codebook)
        return (mx.slice_update(kw, a[0], pos, axes=(2,)), mx.slice_update(kn, a[1], pos, axes=(2,)),
                mx.slice_update(vw, b[0], pos, axes=(2,)), mx.slice_update(vn, b[1], pos, axes=(2,)))
    rows.append(("update step, Python (2 quantize + 4 slice_update)", per_call(lambda: step(x, x, kw, kn, vw, vn, pos), 500)))
    try:
        cstep = mx.compile(step)
        out = cstep(x, x, kw, kn, vw, vn, pos); mx.eval(out)
        ref = step(x, x, kw, kn, vw, vn, pos); mx.eval(ref)
        same = all(mx.array_equal(a, b).item() for a, b in zip(out, ref))
        p2 = mx.array([7]); out2 = cstep(x, x, kw, kn, vw, vn, p2); ref2 = step(x, x, kw, kn, vw, vn, p2)
        same2 = all(mx.array_equal(a, b).item() for a, b in zip(out2, ref2))
        rows.append((f"update step, mx.compile replay (same as Python: {same}, at another index: {same2})",
                     per_call(lambda: cstep(x, x, kw, kn, vw, vn, pos), 500)))
    except Exception as e:
        rows.append((f"mx.compile of the update step failed: {type(e).__name__}: {str(e)[:200]}", float('nan')))
    for nm, us in rows: print(f"{us:8.1f} us  {nm}")


if __name__ == "__main__": main()
