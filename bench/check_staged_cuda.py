"""Staged decode tokens (`CodecKVCache.stage`) on the GPU, step by step: the folded kernel that merges the staged tokens
(`attention_kernels._tail_source`) against references computed on the CPU stream in float32, and its two halves apart:
the same launcher without the staged tokens (quantized part alone) and with T = 0 in its meta (the tail kernel's
quantized part), so that an error can be placed.

    python3 bench/check_staged_cuda.py [--out DIR]
"""
import argparse, json, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import AffineCodec, codec_attention
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turboquant import TurboQuantKVCache
sys.path.append(str(Path(__file__).resolve().parents[1] / 'tests'))
from kernel_emulator import calibrated_pair
from knobs import apply_knobs; apply_knobs()


def rel(a, b):
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    return (mx.abs(a - b).max() / mx.abs(b).max()).item()


def case(name, make, B, Hkv, G, D, n0, dtype, stage=3, steps=5):
    mx.random.seed(0)
    c = make(D); c.stage = stage
    ks, vs = mx.random.normal((B, Hkv, n0 + steps, D)).astype(dtype), mx.random.normal((B, Hkv, n0 + steps, D)).astype(dtype)
    c.update_and_fetch(ks[:, :, :n0], vs[:, :, :n0])
    rows = []
    for t in range(n0, n0 + steps):
        k, v = c.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
        q = mx.random.normal((B, Hkv * G, 1, D)).astype(dtype)
        kp, vp = A.side_plan(c.k_codec, D), A.side_plan(c.v_codec, D)
        n, tail = k.n_quantized, A._staged_tail(k, v)
        _, run = A._final_launcher(q, kp, vp, k.storage, D ** -0.5, 'cuda')
        out = run(q, k.storage, v.storage, n, None, tail)                     # quantized + staged, one kernel
        outq = run(q, k.storage, v.storage, n)                                # quantized alone
        out0 = run(q, k.storage, v.storage, n, None, (tail[0], tail[1], 0))   # the tail kernel with no staged token
        with mx.stream(mx.cpu):
            ref = codec_attention(q.astype(mx.float32), k, v, scale=D ** -0.5)
            refq = A._final_reference(q.astype(mx.float32), kp, vp, k.parts, v.parts, None, n, D ** -0.5)
            reft = A._final_reference(q.astype(mx.float32), kp, vp, k.parts, v.parts, None, n, D ** -0.5, tail)
        gpu_ref = A._final_reference(q, kp, vp, k.parts, v.parts, None, n, D ** -0.5, tail)
        r = dict(case=name, dtype=str(dtype).split('.')[-1], G=G, D=D, step=t, T=tail[2], n=n,
                 staged_vs_codec_attention=None if out is None else rel(out, ref), staged_vs_blockwise=None if out is None else rel(out, reft),
                 quantized_alone=rel(outq, refq), tail_kernel_T0=None if out0 is None else rel(out0, refq),
                 gpu_reference_vs_cpu=rel(gpu_ref, reft))
        print(json.dumps(r), flush=True); rows.append(r)
    return rows


def main():
    p = argparse.ArgumentParser(); p.add_argument("--out", default=None); a = p.parse_args()
    print(f"check_staged_cuda: MLX {mx.__version__}, {mx.default_device()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    for dt in (mx.float32, mx.float16):
        rows += case('turbo:4', lambda D: TurboQuantKVCache(4, 4), 1, 4, 8, 128, 5000, dt)
        rows += case('affine:4', lambda D: CodecKVCache(AffineCodec(4), AffineCodec(4)), 1, 8, 4, 64, 3000, dt)
        rows += case('calibrated', lambda D: CodecKVCache(*calibrated_pair(D)), 1, 4, 8, 128, 5000, dt)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True); (Path(a.out) / "check_staged_cuda.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__": main()
