"""The calibrated codecs' cache update on the GPU (the embedded Gemma's auto:B pair, one KV head, head dim 256): what one
decode step's `update_and_fetch` costs the host with the encode as separate MLX operations and traced once by
`mx.compile` (`calibrated.COMPILE_ON_GPU`), alternating, and whether the traced encode stores the same codes and norms.

    python3 bench/calibrated_update_cuda.py [--rounds 3] [--calls 64]"""
import argparse, platform, sys, time
from pathlib import Path
import numpy as np
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from host_layer_mock import calibrated
from mlx_kvq import calibrated as C
from mlx_kvq.packing import unpack_ref
from mlx_kvq.qcache import CodecKVCache


def split(make, calls):
    "(build, submit, wait) us per call for `calls` calls built in turn, evaluated together"
    t0 = time.perf_counter(); outs = [make(i) for i in range(calls)]
    t1 = time.perf_counter(); mx.async_eval(outs)
    t2 = time.perf_counter(); mx.eval(outs)
    t3 = time.perf_counter()
    return tuple(1e6 * x / calls for x in (t1 - t0, t2 - t1, t3 - t2))


def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--rounds', type=int, default=3); ap.add_argument('--calls', type=int, default=64)
    a = ap.parse_args()
    print(f"# calibrated_update_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; MLX {mx.__version__} {mx.default_device()}; {platform.node()}")
    D = 256
    kc, vc = calibrated(5, D, 0), calibrated(4, D, 1)
    bad = 0
    for T in (1, 7, 300):                     # the same parts from the traced encode as from the plain one
        x = (mx.random.normal((1, 1, T, D)) * 2).astype(mx.float16)
        for c in (kc, vc):
            plain, traced = c._encode(x), mx.compile(c._encode)(x)
            for (idx, b), w0, w1, g0, g1 in zip(c.bands(D), plain[0::2], traced[0::2], plain[1::2], traced[1::2]):
                n = D if idx is None else len(idx)
                same = (unpack_ref(w0, b, n) == unpack_ref(w1, b, n)).astype(mx.float32).mean().item()
                dg = (mx.abs(g0.astype(mx.float32) - g1.astype(mx.float32)) / mx.abs(g0.astype(mx.float32))).max().item()
                ok = same >= 0.999 and dg <= 1e-3
                bad += not ok
                print(f"encode T{T} band n{n} b{b}: codes equal {same:.5f}, norms max rel. diff {dg:.1e} {'ok' if ok else 'DIFFERENT'}")
    print("\n| round | encode | update build us | submit us | wait us |\n| --- | --- | ---: | ---: | ---: |")
    for r in range(a.rounds):
        for on in (False, True):
            C.COMPILE_ON_GPU = on
            cache = CodecKVCache(kc, vc)
            cache.update_and_fetch(mx.random.normal((1, 1, 4096, D)).astype(mx.float16), mx.random.normal((1, 1, 4096, D)).astype(mx.float16))
            mx.eval(cache.state)
            ks = [mx.random.normal((1, 1, 1, D)).astype(mx.float16) for _ in range(8)]; mx.eval(ks)
            for i in range(8): cache.update_and_fetch(ks[i], ks[i])   # warm: traces, kernels
            mx.eval(cache.state)
            b, s, w = split(lambda i: cache.update_and_fetch(ks[i % 8], ks[(i + 1) % 8])[0].storage[0], a.calls)
            print(f"| {r} | {'traced' if on else 'plain'} | {b:.1f} | {s:.1f} | {w:.1f} |", flush=True)
    print(f"# encode comparisons differing: {bad}")


if __name__ == '__main__': main()
