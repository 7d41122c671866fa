"""The host's Python cost of one layer's prefill work (the cache update of a chunk + the attention call), per cache
scheme and prefill route, for the GPU code path, measured on a machine without a GPU (this one: Linux x86_64, MLX CPU):
the kernels are stand-ins that return zero arrays (`host_build_mock.gpu_path`), so the numbers are Python + MLX graph
building only, per layer and chunk.

    python3 bench/host_prefill_mock.py [--rounds 5] [--calls 50] [--past 14336] [--chunk 2048]

One layer of the Llama-3.2-1B shape (32 query / 8 KV heads, head dim 64, float16 projections; the chunk's keys and
values transposed as a model hands them), the caches filled with `--past` tokens by the CPU path first. Each call
updates the cache with the chunk and attends the chunk's queries through mlx_kvq's dispatcher (mask 'causal'), then the
cache is trimmed back (nothing evaluated: the storage keeps its capacity, so the update writes slices, not the growth of
a real prefill chunk). `SCHEME/previous`: `attention.PREFILL_PAIR = False`. Rounds alternate the schemes; the table gives
the median over rounds of each round's median us per call. Absolute times are this machine's; compare side by side."""
import argparse, platform, statistics as st, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import host_build_mock as H
from mlx_lm.models.cache import KVCache
from mlx_kvq import attention as A, packing as P
from mlx_kvq.dispatch import scaled_dot_product_attention as sdpa
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.codecs import AffineCodec


def make(kind):
    if kind == 'fp16': return KVCache()
    if kind.startswith('turbo:4'): return CodecKVCache(TurboCodec(4), TurboCodec(4, seed=1))
    return CodecKVCache(AffineCodec(4), AffineCodec(4))


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--calls', type=int, default=50)
    p.add_argument('--past', type=int, default=14336)
    p.add_argument('--chunk', type=int, default=2048)
    p.add_argument('--kv', nargs='+', default=['fp16', 'turbo:4', 'turbo:4/previous', 'affine:4', 'affine:4/previous'])
    a = p.parse_args()
    h = lambda *sh: mx.random.normal(sh).astype(mx.float16)
    caches = {}
    for kind in a.kv:
        c = make(kind); c.update_and_fetch(h(1, 8, a.past, 64), h(1, 8, a.past, 64)); mx.eval(c.state); caches[kind] = c
    q, k, v = h(1, 32, a.chunk, 64), h(1, a.chunk, 8, 64).transpose(0, 2, 1, 3), h(1, a.chunk, 8, 64).transpose(0, 2, 1, 3)
    mx.eval(q, k, v)
    H.gpu_path(); P._close_in_dtype = lambda *x: None     # the stand-ins' zeros pass the prefill kernels' first-use checks too

    def one(kind):
        c = caches[kind]; A.PREFILL_PAIR = not kind.endswith('/previous')
        t = time.perf_counter()
        kk, vv = c.update_and_fetch(k, v)
        sdpa(q, kk, vv, c, scale=0.125, mask='causal')
        dt = time.perf_counter() - t
        c.trim(a.chunk)
        return dt
    for kind in a.kv:
        for _ in range(5): one(kind)
    res = {kind: [] for kind in a.kv}
    for _ in range(a.rounds):
        for kind in a.kv: res[kind].append(1e6 * st.median(one(kind) for _ in range(a.calls)))
    print(f"# host build per layer and prefill chunk (update + attention), GPU code path with stand-in kernels; past {a.past}, "
          f"chunk {a.chunk}, {a.calls} calls x {a.rounds} rounds; {platform.system()} {platform.machine()}, MLX {mx.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    H.print_table(res, "us per layer and chunk (median of rounds)", "rounds' min-max", 1)


if __name__ == '__main__': main()
