"""What one more input costs a custom-kernel call on the GPU machine's host, and the other single operations a decode
step's layer makes, per call (build = the Python call that records the operation, submit = `mx.async_eval` launching
it, wait = what the GPU still needs; many independent calls per evaluation, so the fixed cost of an evaluation is
divided out):

    python3 bench/host_inputs_cuda.py [--calls 64] [--rounds 3]

Rows: an empty `mx.fast.cuda_kernel` call with 4, 12, 24 and 32 inputs (each input its own evaluated 16-float array,
named in the source); with and without a dtype template argument; 24 inputs and 2, 4, 6 outputs; `mx.contiguous` of a contiguous array; one slice
update of a (1, 8, 32, 64) float16 stage; one slice of it (a view). Timings only."""
import argparse, hashlib, platform, statistics as st, sys, time
from pathlib import Path
import mlx.core as mx
sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_calls_cuda import split


def kernel_with(n, m=1):
    "An empty kernel of n inputs and m outputs (the first output the inputs' sum, the others one float each)"
    names = [f'a{i}' for i in range(n)]
    src = "const int i = threadIdx.x; if (i < 4) out[i] = " + " + ".join(f"{nm}[i]" for nm in names) + ";"
    src += "".join(f" if (i == 0) out{j}[0] = 0.0f;" for j in range(1, m))
    return mx.fast.cuda_kernel(name='kvq_inputs_' + hashlib.sha1(src.encode()).hexdigest()[:10], input_names=names,
                               output_names=['out'] + [f'out{j}' for j in range(1, m)], source=src)


def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--calls', type=int, default=64); ap.add_argument('--rounds', type=int, default=3)
    a = ap.parse_args()
    print(f"# host_inputs_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; MLX {mx.__version__} {mx.default_device()}; "
          f"{platform.node()}; {a.calls} calls per evaluation; median of {a.rounds} rounds (min-max)")
    arrs = [mx.arange(16, dtype=mx.float32) + i for i in range(32)]; mx.eval(arrs)
    rows = {}
    def add(nm, make):
        rows.setdefault(nm, []).append(split(make, a.calls))
    kern = {n: kernel_with(n) for n in (4, 12, 24, 32)}
    outs = {m: kernel_with(24, m) for m in (2, 4, 6)}   # outputs beyond the first: each allocated at submit
    for n, k in kern.items():   # correctness of the stand-in sum, once
        got = k(inputs=arrs[:n], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])[0]
        assert mx.allclose(got, sum(arrs[:n])[:4]).item(), n
    stage = mx.zeros((1, 8, 32, 64), mx.float16); tok = mx.ones((1, 8, 1, 64), mx.float16); q = mx.ones((1, 32, 1, 64), mx.float16)
    mx.eval(stage, tok, q)
    held = [mx.zeros((1, 8, 32, 64), mx.float16)]; mx.eval(held)
    def slice_update(i):   # in place, as a cache's update does (each call's update follows the last one)
        held[0][:, :, i % 32:i % 32 + 1] = tok; return held[0]
    for r in range(a.rounds):
        for n, k in kern.items():
            add(f"cuda_kernel, {n} inputs", lambda i, k=k, n=n: k(inputs=arrs[:n], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])[0])
            add(f"cuda_kernel, {n} inputs, template T", lambda i, k=k, n=n: k(inputs=arrs[:n], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32], template=[('T', mx.float16)])[0])
        for m, k in outs.items():
            add(f"cuda_kernel, 24 inputs, {m} outputs", lambda i, k=k, m=m: k(inputs=arrs[:24], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(4,)] + [(1,)] * (m - 1), output_dtypes=[mx.float32] * m)[0])
        add("mx.contiguous of a contiguous (1, 32, 1, 64) float16", lambda i: mx.contiguous(q))
        add("slice update of a (1, 8, 32, 64) float16 stage", slice_update)
        add("slice [:, :, :i+1] of the stage", lambda i: stage[:, :, :i % 32 + 1])
    print("\n| operation | build us/call | submit us/call | wait us/call |\n| --- | ---: | ---: | ---: |")
    for nm, xs in rows.items():
        cols = []
        for j in range(3):
            v = [x[j] for x in xs]; cols.append(f"{st.median(v):.1f} ({min(v):.1f}-{max(v):.1f})")
        print(f"| {nm} | {' | '.join(cols)} |")


if __name__ == '__main__': main()
