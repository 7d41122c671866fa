"""The host's Python cost of building one whole-model decode step, per cache scheme, for the GPU code path, measured on a
machine without a GPU (this one: Linux x86_64, MLX CPU).

    python3 bench/host_build_mock.py [--shape llama-3.2-1b] [--context 4096] [--steps 64] [--rounds 5] [--kv fp16 turbo:4 affine:4] [--stage 0 32] [--profile 16]

Why: on the H100, a decode step of the Llama-3.2-1B shape is bound by the host (`bench/decode_step_profile.py --host`:
building the step's graph in Python plus MLX submitting its kernels takes longer than the GPU needs to run them), so
every microsecond of Python per layer counts. This script runs mlx_kvq's GPU path (`kernel_backend() == 'cuda'`, the
memoized launchers of the decode kernels and of the quantize kernels) with `mx.fast.cuda_kernel` replaced by a stand-in
whose call returns zero arrays of the kernel's output shapes, and times `model(token, cache)` + argmax graph building
only (the step is evaluated outside the timed region, so the caches advance as in a real decode). fp16 is mlx-lm's own
`KVCache` + `mx.fast.scaled_dot_product_attention`, built the same way.

What it does not see: MLX's C++ work inside a real `cuda_kernel` call (it regenerates the kernel's full source per call)
and the submit (`mx.async_eval`) cost per operation; those only the GPU shows. Ratios between schemes measured side by
side in one run are the result; absolute times are this machine's."""
import argparse, gc, platform, statistics as st, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq import packing as P, attention as A, qcache as Q, calibrated as Cal
from mlx_kvq.bench import shape_model, bench_caches, bench_calibration, _bench_scheme, _fill
from mlx_kvq.integrate import probe_kv_shapes


def _stand_in(name, input_names, output_names, source, **kw):
    "A `cuda_kernel` whose call makes zero outputs of the requested shapes (graph building only; nothing is launched)"
    def call(inputs, grid, threadgroup, output_shapes, output_dtypes, template=None, init_value=None, verbose=False, stream=None):
        return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]
    return call


def gpu_path():
    "Route mlx_kvq through its CUDA code path with the stand-in kernels; the first-use checks accept them"
    mx.fast.cuda_kernel = _stand_in
    P._GPU_API[:] = ['cuda']
    for m in (P, A, Q, Cal): m.kernel_backend = lambda: 'cuda'
    Cal._cal_agree = lambda *a: None       # the calibrated pair / ring kernels (auto:B's caches)
    Cal._cal_into_agree = lambda *a: None
    P._agree_quantize = lambda *a: None
    P._qa_agree = lambda *a: None          # the prefill append kernel's stand-in zeros
    A._agree_final = lambda *a: None
    A._agree_partial = lambda *a: None


SMALL = {   # mlx-lm ModelArgs of the small float32 models the host mocks build (hidden 256: the CPU runs their chunks quickly)
    'llama': ('llama', dict(model_type='llama', hidden_size=256, num_hidden_layers=16, intermediate_size=512, num_attention_heads=32, rms_norm_eps=1e-5,
                            tie_word_embeddings=True, num_key_value_heads=8, head_dim=64, vocab_size=1024, rope_theta=10000.0)),
    'gemma3': ('gemma3_text', dict(model_type='gemma3_text', hidden_size=256, num_hidden_layers=26, intermediate_size=512, num_attention_heads=4,
                                   num_key_value_heads=1, head_dim=256, vocab_size=1024, sliding_window=512, sliding_window_pattern=6)),
}


def small_model(layout):
    "A random-weight float32 model of `SMALL[layout]`: Llama-3.2-1B's attention layout (16 layers, 32 / 8 heads, d64) or Gemma 3's (26 layers, 4 / 1 heads, d256, sliding window 512, every sixth layer global)"
    import importlib
    modname, kw = SMALL[layout]
    mod = importlib.import_module(f'mlx_lm.models.{modname}')
    mx.random.seed(0); model = mod.Model(mod.ModelArgs(**kw)); model.set_dtype(mx.float32); mx.eval(model.parameters())
    return model


def build_ms(model, caches, steps):
    "Mean ms per step of building model(token) + argmax (evaluated after each step, outside the timing)"
    y = mx.array([[1]]); tot = 0.0
    gc.collect()
    for _ in range(steps):
        t0 = time.perf_counter()
        logits = model(y, cache=caches)
        nxt = mx.argmax(logits[:, -1, :], axis=-1, keepdims=True)
        tot += time.perf_counter() - t0
        mx.eval(nxt, [c.state for c in caches])
        y = nxt
    return 1e3 * tot / steps


def print_table(res, what, spread, digits):
    "A markdown table of res (scheme -> per-round values): the median, the rounds' min-max, the ratio to fp16's median"
    print(f"| scheme | {what} | {spread} | vs fp16 |\n| --- | ---: | ---: | ---: |")
    f = st.median(res["fp16"]) if "fp16" in res else None
    for kv, xs in res.items():
        m = st.median(xs)
        print(f"| {kv} | {m:.{digits}f} | {min(xs):.{digits}f}-{max(xs):.{digits}f} | {'-' if f is None else format(m / f, '.2f') + 'x'} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="llama-3.2-1b")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--kv", nargs="+", default=["fp16", "turbo:4", "affine:4"])
    p.add_argument("--stage", type=int, nargs="+", default=[0], help="CodecKVCache.stage values to time side by side (e.g. 0 32)")
    p.add_argument("--profile", type=int, default=0, help="then a cProfile of this many steps' build per scheme: the top functions by own time, us per layer call")
    a = p.parse_args()
    model = shape_model(a.shape, mx.float32)
    shapes = probe_kv_shapes(model)
    sets, kvs = {}, [kv if kv == 'fp16' or len(a.stage) == 1 else f"{kv} stage {s}" for kv in a.kv for s in (a.stage if kv != 'fp16' else [0])]
    for name in kvs:   # filled by the CPU path (the reference codecs), before the stand-in is installed
        kv, _, sv = name.partition(' stage ')
        caches = bench_caches(model, _bench_scheme(kv), **bench_calibration(model, [kv], None, 0)[0])   # auto:B: planned as `mlx-kvq bench` plans it
        for i, c in enumerate(caches):
            _fill(c, shapes[str(i)][1][:3], a.context, mx.float32, 7919 * i)
            if hasattr(c, 'stage'): c.stage = int(sv or a.stage[0])
        sets[name] = caches
    a.kv = kvs
    gpu_path()
    for kv in a.kv: build_ms(model, sets[kv], 4)        # first-use checks, launchers memoized
    res = {kv: [] for kv in a.kv}
    for r in range(a.rounds):
        for kv in a.kv: res[kv].append(build_ms(model, sets[kv], a.steps))
    print(f"# host build of one decode step, GPU code path with stand-in kernels: {a.shape} (random weights, float32), "
          f"{a.context} tokens, {a.steps} steps x {a.rounds} rounds; {platform.system()} {platform.machine()}, MLX {mx.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print_table(res, "build ms/step (median)", "min-max", 3)
    if a.profile:
        import cProfile, pstats
        calls = a.profile * len(sets[a.kv[0]])
        for kv in a.kv:
            pr = cProfile.Profile(); y = mx.array([[1]])
            for _ in range(a.profile):
                pr.enable(); logits = model(y, cache=sets[kv]); pr.disable(); mx.eval(logits, [c.state for c in sets[kv]])
            st_ = pstats.Stats(pr).stats
            top = sorted(((v[2], f"{Path(k[0]).name}:{k[1]}({k[2]})", v[0]) for k, v in st_.items()), reverse=True)[:8]
            print(f"\n{kv}: own time, us per layer call ({a.profile} steps, {calls} layer calls; cProfile's own overhead included)")
            for t, where, n in top: print(f"  {1e6 * t / calls:7.1f}  {where}  ({n} calls)")


if __name__ == "__main__": main()
