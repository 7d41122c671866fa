"""Verify mlx_kvq's fused CUDA kernels against the pure-MLX reference, and time them (GPU machine).

Run from the repo root on a CUDA machine with MLX for CUDA on PYTHONPATH:
    PYTHONUNBUFFERED=1 python3 bench/bench_kernels_cuda.py 2>&1 | tee bench/kernels_cuda.log
Sizes: MLX_KVQ_BENCH_ROWS (vectors per call, default 262144 = 8 KV heads x 32768 tokens);
MLX_KVQ_BENCH_SECTIONS (default "0123": 0 rotation, 1 agreement, 2 guard, 3 throughput).
"""
import datetime, math, os, platform, subprocess, sys, time, warnings

import numpy as np
import mlx.core as mx

from mlx_kvq.codebook import sphere_codebook
from mlx_kvq.rotation import get_rotation
from mlx_kvq import packing as P


def gpu_name():
    try: return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e: return f"unknown ({e})"


print(f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | {gpu_name()} | mlx {mx.__version__} | "
      f"python {platform.python_version()} | default device {mx.default_device()} | kernel_backend {P.kernel_backend()}")
assert P.kernel_backend() == "cuda", "this script needs MLX's CUDA backend"
SECTIONS = os.environ.get("MLX_KVQ_BENCH_SECTIONS", "0123")
rot_fail = failures = 0

# ---------------------------------------------------------------- 0. the rotation on this backend
def section0():
    global failures, rot_fail
    print("\n== 0. HadamardRotation on the GPU vs the CPU stream (forward and inverse, max abs difference)")
    rot_fail = 0
    for n in (24, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 1024, 12, 20, 28, 36, 72, 100):
        try:
            r = get_rotation(n, seed=5); x = mx.random.normal((7, n))
            with mx.stream(mx.cpu): yc = r.forward(x); xc = r.inverse(yc); mx.eval(yc, xc)
            yg = r.forward(x); xg = r.inverse(yg); mx.eval(yg, xg)
            df, di = mx.max(mx.abs(yg - yc)).item(), mx.max(mx.abs(xg - x)).item()
            ok = df < 1e-4 and di < 1e-4
            print(f"  dim {n:5d} {r.path:>14}: forward gpu-cpu {df:.1e}, inverse(forward) - x {di:.1e} {'ok' if ok else 'FAIL'}")
        except Exception as e:
            ok = False; print(f"  dim {n:5d}: FAIL {type(e).__name__}: {str(e)[:200]}")
        rot_fail += not ok
    print(f"rotation: {'all ok' if rot_fail == 0 else f'{rot_fail} FAILED'}")
    failures += rot_fail


# ---------------------------------------------------------------- 1. agreement with the reference
def section1():
    global failures, rot_fail
    print("\n== 1. fused vs reference, fresh random inputs (rows = 3*5*37 = 555, not a multiple of the 4 vectors per block)")
    print(f"{'dim':>5} {'bits':>4} {'dtype':>8} {'path':>14} {'rot-in-kernel':>13} {'codes!=ref':>10} {'(ties)':>6} {'norm rel.err':>12} "
          f"{'deq max|d|':>10} {'guard':>8}")
    bad = 0
    configs = [(128, b) for b in range(1, 9)] + [(n, b) for n in (64, 80, 96, 112, 256, 512, 1024, 72, 32) for b in (2, 3, 4, 8)]
    for i, (n, bits) in enumerate(configs):
        mx.random.seed(1000 + i)
        rot, cb = get_rotation(n, seed=i), sphere_codebook(n, bits)
        x = mx.random.normal((3, 5, 37, n)) * mx.exp(mx.random.normal((3, 5, 37, 1)))
        x[..., : max(1, n // 32)] *= 8.0                                    # a few outlier channels
        x = x.astype((mx.float32, mx.float16, mx.bfloat16)[i % 3])          # the kernel reads the model's dtype
        fw, fn = P.fused_quantize_pack(x, rot, cb, backend="cuda")
        rw, rn = P.quantize_pack_ref(x, rot, cb)
        mx.eval(fw, fn, rw, rn)
        diff = int(mx.sum(P.unpack_ref(fw, bits, n) != P.unpack_ref(rw, bits, n)).item())
        why = P._agree_quantize((fw, fn), (rw, rn), x, rot, cb)
        ties = "yes" if (diff and why is None) else "-"
        nerr = float(mx.max(mx.abs(fn.astype(mx.float32) - rn.astype(mx.float32)) / rn.astype(mx.float32)).item())
        fd = P.fused_dequantize_unpack(rw, rn, cb, n, backend="cuda"); rd = P.dequantize_unpack_ref(rw, rn, cb, n)
        dmax = float(mx.max(mx.abs(fd - rd)).item())
        # the public dispatch: first call verifies (guard), no warning may be raised
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pw, pn = P.quantize_pack(x, rot, cb); pd = P.dequantize_unpack(pw, pn, cb, n); mx.eval(pw, pn, pd)
        gq = P._guard("q", "cuda").state.get(P._q_class(x, rot, cb)); gd = P._guard("d", "cuda").state.get(P._d_class(pw, pn, cb, n))
        ok = why is None and dmax == 0.0 and gq is True and gd is True and not caught
        bad += not ok
        rot_in = rot.path == "hadamard" and rot.m == 1 and n >= 32
        print(f"{n:5d} {bits:4d} {str(x.dtype).split('.')[-1]:>8} {rot.path:>14} {str(rot_in):>13} {diff:10d} {ties:>6} {nerr:12.2e} {dmax:10.2e} "
              f"{'ok' if ok else 'FAIL':>8}" + (f"  {why} {[str(c.message) for c in caught]}" if not ok else ""))
    failures += bad
    print(f"agreement: {len(configs) - bad}/{len(configs)} configurations agree")


# ---------------------------------------------------------------- 2. the guard refuses a broken CUDA kernel
def section2():
    global failures, rot_fail
    print("\n== 2. guard on the GPU: a CUDA kernel that does not compile, and one that writes wrong words")
    broken_src = P._Q_CUDA.replace("if (lane == 0) norms[row] = __float2half_rn(nrm);", "if (lane == 0) norms[row] = __float2half_rn(nrm)  // missing ;")
    assert broken_src != P._Q_CUDA
    broken = mx.fast.cuda_kernel(name="mlx_kvq_broken", input_names=["x", "signs", "bnd", "meta"], output_names=["words", "norms"], source=broken_src)
    wrong_src = P._Q_CUDA.replace("word |= (sh >= 0) ? (c << sh) : (c >> (-sh));", "word |= (sh >= 0) ? (c << sh) : 0u;")
    wrong = mx.fast.cuda_kernel(name="mlx_kvq_wrong", input_names=["x", "signs", "bnd", "meta"], output_names=["words", "norms"], source=wrong_src)
    for label, k in (("does not compile", broken), ("drops straddling bits", wrong)):
        def fused(x, rot, cb, k=k):
            saved = P._KERNELS.get(("cuda", "q")); P._KERNELS[("cuda", "q")] = k
            try: return P.fused_quantize_pack(x, rot, cb, backend="cuda")
            finally: P._KERNELS[("cuda", "q")] = saved
        g = P.GuardedKernel(f"test ({label})", fused, P.quantize_pack_ref, P._q_class, P._agree_quantize)
        x = mx.random.normal((2, 8, 33, 128)); rot, cb = get_rotation(128), sphere_codebook(128, 3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs = [g(x, rot, cb) for _ in range(3)]
        ref = P.quantize_pack_ref(x, rot, cb)
        same = all(mx.array_equal(o[0], ref[0]).item() and mx.array_equal(o[1], ref[1]).item() for o in outs)
        print(f"{label:22s}: warnings {len(caught)}, state {list(g.state.values())}, reference returned {same}: "
              f"{str(caught[0].message)[:160] if caught else ''}")
        failures += not (len(caught) == 1 and same and list(g.state.values()) == [False])


# ---------------------------------------------------------------- 3. throughput
def section3():
    global failures, rot_fail
    ROWS = int(os.environ.get("MLX_KVQ_BENCH_ROWS", 262144))
    K, REPS = 4, 25
    print(f"\n== 3. throughput: {ROWS} vectors per call, {K} independent calls per mx.eval on {K} different inputs, "
          f"median of {REPS}; bytes = each input read once + each output written once")


    def bench(fn, inputs):
        for _ in range(3): mx.eval([fn(*a) for a in inputs])
        ts = []
        for _ in range(REPS):
            t = time.perf_counter(); mx.eval([fn(*a) for a in inputs]); mx.synchronize(); ts.append((time.perf_counter() - t) / len(inputs))
        return float(np.median(ts)), float(np.percentile(ts, 10)), float(np.percentile(ts, 90))


    print(f"{'dim':>4} {'bits':>4} {'op':>18} {'impl':>9} {'ms/call':>8} {'p10-p90':>13} {'GB/s':>7} {'Gvec/s':>7} {'vs ref':>7}")
    for n, bits in ((128, 3), (128, 4), (112, 3), (256, 4)):
        rot, cb = get_rotation(n), sphere_codebook(n, bits); W = P.packed_words(n, bits)
        xs = [mx.random.normal((ROWS, n)) for _ in range(K)]; mx.eval(xs)
        enc = [P.quantize_pack_ref(x, rot, cb) for x in xs]; mx.eval(enc)
        qbytes = ROWS * (n * 4 + W * 4 + 2); dbytes = ROWS * (W * 4 + 2 + n * 4)
        rows = {}
        for op, impl, fn, args, nbytes in (
                ("quantize_pack", "fused", lambda x: P.fused_quantize_pack(x, rot, cb, backend="cuda"), [(x,) for x in xs], qbytes),
                ("quantize_pack", "reference", lambda x: P.quantize_pack_ref(x, rot, cb), [(x,) for x in xs], qbytes),
                ("dequantize_unpack", "fused", lambda w, s: P.fused_dequantize_unpack(w, s, cb, n, backend="cuda"), enc, dbytes),
                ("dequantize_unpack", "reference", lambda w, s: P.dequantize_unpack_ref(w, s, cb, n), enc, dbytes),
                ("(rotation only)", "mlx", lambda x: rot.forward(x), [(x,) for x in xs], ROWS * n * 8),
                ("(fp32 copy)", "mlx", lambda x: x + 0, [(x,) for x in xs], ROWS * n * 8)):
            med, p10, p90 = bench(fn, args)
            rows[op, impl] = med
            ratio = f"{med / rows[op, 'fused']:6.1f}x" if impl == "reference" else ""
            print(f"{n:4d} {bits:4d} {op:>18} {impl:>9} {med * 1e3:8.3f} {p10 * 1e3:6.3f}-{p90 * 1e3:6.3f} "
                  f"{nbytes / med / 1e9:7.1f} {ROWS / med / 1e9:7.3f} {ratio:>7}")
        del xs, enc

for k in SECTIONS:
    globals()[f"section{k}"]()
print("\n('vs ref' on a reference row: reference time / fused time)")
print(f"RESULT: {'ALL CHECKS PASSED' if failures == 0 else f'{failures} CHECKS FAILED'}")
sys.exit(1 if failures else 0)
