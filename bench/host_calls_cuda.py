"""What one attention call and one cache update cost the host on the GPU machine, per scheme: the Python graph building
(`build`), MLX's submission of the built operations (`submit`: `mx.async_eval` walks the graph and launches every
kernel on the host thread) and what the GPU then still needs (`wait`), per call, with many independent calls per
evaluation, on Llama-3.2-1B's attention shape and on the embedded Gemma's (fp16 SDPA, `turbo:4`, the calibrated pair
`auto:B` plans). Plus what a custom kernel call costs to build by the size of its source (MLX regenerates a
`mx.fast.cuda_kernel`'s full source on every call) and by `mx.fast.precompiled_cuda_kernel` (compiled once; scalar
arguments passed by value).

    python3 bench/host_calls_cuda.py [--context 4096] [--calls 64]

A decode step that is bound by the host (a small model, a short context) runs at the speed of build + submit.

    python3 bench/host_calls_cuda.py --profile [--context 4096]

instead builds one attention call through mlx_kvq's dispatcher (as a model and `mlx-kvq bench` call it) 1000 times per
scheme (fp16, turbo:4, affine:4), with no evaluation between them, and gives a cProfile of the same calls by own time per
call (MLX's `cuda_kernel` call is one builtin entry: its C++ side counts there, not in mlx_kvq's functions)."""
import argparse, ctypes, ctypes.util, glob, hashlib, os, platform, sys, time, warnings
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq import attention as A, packing as P
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turboquant import TurboQuantKVCache
from mlx_lm.models.cache import KVCache
from knobs import apply_knobs; apply_knobs()   # KVQ_KNOBS="NAME=VALUE ..." (bench/knobs.py)


def per_call(f, n=400, warm=20):
    "Build-only cost: mean us per call of f() over n calls (the results kept alive, evaluated after the timing)"
    keep = [f() for _ in range(warm)]; mx.eval(keep); keep = []
    t = time.perf_counter()
    for _ in range(n): keep.append(f())
    dt = (time.perf_counter() - t) / n * 1e6
    mx.eval(keep)
    return dt


def split(make, calls):
    "(build, submit, wait) us per call for `calls` independent calls evaluated together"
    outs = [make(i) for i in range(4)]; mx.eval(outs)
    t0 = time.perf_counter(); outs = [make(i) for i in range(calls)]
    t1 = time.perf_counter(); mx.async_eval(outs)
    t2 = time.perf_counter(); mx.eval(outs)
    t3 = time.perf_counter()
    return tuple(1e6 * x / calls for x in (t1 - t0, t2 - t1, t3 - t2))


def nvrtc_ptx(name, src):
    "PTX of `src` by the machine's NVRTC (None when it cannot be found)"
    cands = [ctypes.util.find_library('nvrtc')] + sorted(glob.glob('/usr/local/cuda*/lib64/libnvrtc.so*')) + \
            sorted(glob.glob('/usr/lib/x86_64-linux-gnu/libnvrtc.so*'))
    lib = None
    for c in cands:
        if not c: continue
        try: lib = ctypes.CDLL(c); break
        except OSError: pass
    if lib is None: return None
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f'{name}.cu'.encode(), 0, None, None) == 0
    opts = [b'--gpu-architecture=compute_90', b'--std=c++17']
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    if rc:
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.value.decode()[-2000:])
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n)); ptx = ctypes.create_string_buffer(n.value); lib.nvrtcGetPTX(prog, ptx)
    return ptx.value


TINY = "const int i = threadIdx.x; if (i < 4) out[i] = a[i] + b[i];"


def profile_dispatch(context, calls=1000):
    "`--profile`: us per attention call built through the dispatcher, then a cProfile of those builds by own time"
    import cProfile, pstats
    from mlx_kvq.bench import bench_caches, _bench_scheme, layer_model, _fill
    from mlx_kvq.integrate import probe_kv_shapes
    from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa
    print(f"# host build per attention call through the dispatcher; {context} tokens, {calls} calls; {platform.node()}, "
          f"MLX {mx.__version__} {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    m = layer_model(32, 8, 128); shp = probe_kv_shapes(m)['0'][1][:3]
    q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
    for kv in ('fp16', 'turbo:4', 'affine:4'):
        c = bench_caches(m, _bench_scheme(kv))[0]; k, v = _fill(c, shp, context, mx.float16, 0)
        f = lambda: sdpa(mx.stop_gradient(q), k, v, c, scale=128 ** -0.5, mask=None)
        for _ in range(5): mx.eval(f())
        print(f"{kv}: build us per call, 5 runs: {' '.join(f'{per_call(f, calls, 0):.1f}' for _ in range(5))}")
        pr = cProfile.Profile(); keep = []
        pr.enable()
        for _ in range(calls): keep.append(f())
        pr.disable(); mx.eval(keep); del keep
        top = sorted(((v[2], f"{Path(k[0]).name}:{k[1]}({k[2]})", v[0]) for k, v in pstats.Stats(pr).stats.items()), reverse=True)[:10]
        for tt, where, n in top: print(f"   {1e6 * tt / calls:7.2f} us own  {where}  ({n} calls)")


def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--context', type=int, default=4096); ap.add_argument('--calls', type=int, default=64)
    ap.add_argument('--profile', action='store_true', help="only the dispatcher's build per call and its cProfile (1000 calls per scheme)")
    a = ap.parse_args()
    if a.profile: return profile_dispatch(a.context)
    print(f"# host_calls_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; MLX {mx.__version__} {mx.default_device()}; "
          f"{platform.node()}; backend {P.kernel_backend()}; context {a.context}; {a.calls} calls per evaluation; "
          f"KVQ_KNOBS={os.environ.get('KVQ_KNOBS', '')!r}")
    B, Hq, Hkv, D, n = 1, 32, 8, 128, a.context
    dt = mx.float16
    mx.random.seed(0)
    qs = [mx.random.normal((B, Hq, 1, D)).astype(dt) for _ in range(8)]
    k, v = mx.random.normal((B, Hkv, n, D)).astype(dt), mx.random.normal((B, Hkv, n, D)).astype(dt)
    mx.eval(qs, k, v)
    print("\n| what | build us/call | submit us/call | wait us/call |\n| --- | ---: | ---: | ---: |")
    row = lambda nm, b, s, w: print(f"| {nm} | {b:.1f} | {s:.1f} | {w:.1f} |", flush=True)
    row("fp16 SDPA (one layer, 32/8 heads, d128)", *split(lambda i: mx.fast.scaled_dot_product_attention(qs[i % 8], k, v, scale=D ** -0.5), a.calls))
    caches = {'turbo:4': TurboQuantKVCache(4, 4), 'affine:4': CodecKVCache(AffineCodec(4), AffineCodec(4)),
              'affine:8,4': CodecKVCache(AffineCodec(8), AffineCodec(4))}
    sides = {}
    for nm, c in caches.items():
        sides[nm] = c.update_and_fetch(k, v); mx.eval(c.state)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter('always'); mx.eval(c.attend(qs[0], *sides[nm], scale=D ** -0.5)); mx.eval(c.attend(qs[1], *sides[nm], scale=D ** -0.5))
        if got: print(f"# {nm}: {[str(w.message)[:200] for w in got]}")
        row(f"{nm} attend (memoized launcher: decode + combine)",
            *split(lambda i, c=c, s=sides[nm]: c.attend(qs[i % 8], *s, scale=D ** -0.5), a.calls))
    # cache updates of one token (8 KV heads, d128), fp16 vs the compressed caches
    kt, vt = mx.random.normal((B, Hkv, 1, D)).astype(dt), mx.random.normal((B, Hkv, 1, D)).astype(dt); mx.eval(kt, vt)
    lm = KVCache(); lm.update_and_fetch(k, v); mx.eval(lm.state)
    print(f"| fp16 KVCache.update_and_fetch (build only) | {per_call(lambda: lm.update_and_fetch(kt, vt)[0], 200):.1f} | - | - |")
    for nm, c in caches.items():
        print(f"| {nm} update_and_fetch (build only) | {per_call(lambda c=c: c.update_and_fetch(kt, vt)[0].storage[0], 200):.1f} | - | - |", flush=True)
    # the embedded Gemma's shape (4 query / 1 KV head, d256): fp16 SDPA, turbo:4 and the calibrated pair auto:B plans
    from host_layer_mock import calibrated
    gq = [mx.random.normal((1, 4, 1, 256)).astype(dt) for _ in range(8)]
    gk, gv = mx.random.normal((1, 1, n, 256)).astype(dt), mx.random.normal((1, 1, n, 256)).astype(dt)
    g1k, g1v = mx.random.normal((1, 1, 1, 256)).astype(dt), mx.random.normal((1, 1, 1, 256)).astype(dt)
    mx.eval(gq, gk, gv, g1k, g1v)
    row("Gemma shape: fp16 SDPA (4/1 heads, d256)", *split(lambda i: mx.fast.scaled_dot_product_attention(gq[i % 8], gk, gv, scale=256 ** -0.5), a.calls))
    for nm, c in (('turbo:4', TurboQuantKVCache(4, 4)), ('auto:5-like calibrated pair', CodecKVCache(calibrated(5, 256, 0), calibrated(4, 256, 1)))):
        s_ = c.update_and_fetch(gk, gv); mx.eval(c.state)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter('always'); mx.eval(c.attend(gq[0], *s_, scale=256 ** -0.5)); mx.eval(c.attend(gq[1], *s_, scale=256 ** -0.5))
        if got: print(f"# Gemma {nm}: {[str(w.message)[:200] for w in got]}")
        row(f"Gemma shape: {nm} attend", *split(lambda i, c=c, s_=s_: c.attend(gq[i % 8], *s_, scale=256 ** -0.5), a.calls))
        for _ in range(4): c.update_and_fetch(g1k, g1v)            # traced encode, quantize launcher: made before the timing
        mx.eval(c.state)
        print(f"| Gemma shape: {nm} update_and_fetch (build only) | {per_call(lambda c=c: c.update_and_fetch(g1k, g1v)[0].storage[0], 200):.1f} | - | - |", flush=True)
    # custom kernel calls by source size, and precompiled
    x4 = mx.arange(4, dtype=mx.float32); y4 = x4 + 1; mx.eval(x4, y4)
    for pad in (0, 45000):
        src = TINY + ("\n//" + "x" * 78) * (pad // 80)
        kern = mx.fast.cuda_kernel(name='kvq_tiny_' + hashlib.sha1(src.encode()).hexdigest()[:10], input_names=['a', 'b'], output_names=['out'], source=src)
        call = lambda i: kern(inputs=[x4, y4], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])[0]
        assert mx.array_equal(call(0), x4 + y4).item()
        row(f"cuda_kernel call, {len(src):,} bytes of source", *split(call, a.calls))
    try:
        full = 'extern "C" __global__ void kvq_pre(const float* a, const float* b, float* out, int n, float s) ' \
               '{ const int i = threadIdx.x; if (i < n) out[i] = s * (a[i] + b[i]); }'
        ptx = nvrtc_ptx('kvq_pre', full)
        if ptx is None: print("# precompiled: no NVRTC library found"); return
        call = lambda i: mx.fast.precompiled_cuda_kernel(name='kvq_pre', compiled_source=ptx, inputs=[x4, y4], output_shapes=[(4,)],
                                                        output_dtypes=[mx.float32], scalars=[4, 2.0], grid=(32, 1, 1), threadgroup=(32, 1, 1))[0]
        got = call(0); ok = mx.array_equal(got, 2 * (x4 + y4)).item()
        row(f"precompiled_cuda_kernel call (PTX {len(ptx):,} bytes, scalars n and s; result right: {ok})", *split(call, a.calls))
    except Exception as e:
        print(f"# precompiled failed: {type(e).__name__}: {str(e)[:500]}")


if __name__ == '__main__': main()
