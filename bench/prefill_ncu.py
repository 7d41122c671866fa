"""Every GPU kernel of one prefill chunk's layer work, with its duration under Nsight Compute: the cache update of a
2048-token chunk that grows the storage (as a prefill chunk does) and the attention of the chunk's queries over the
past, per scheme. What the isolated timings of `prefill_profile.py` cannot separate (each carries an evaluation's fixed
cost): the GPU time of each launch, and how many launches a chunk's layer makes.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 bench/prefill_ncu.py SCHEME[/previous] > F.csv
    python3 bench/prefill_ncu.py --parse F.csv [G.csv ...]

One layer of the Llama-3.2-1B shape (32 query / 8 KV heads, head dim 64, float16), past 14,336 tokens, chunk 2,048.
Three warm iterations, then a marker kernel, then the measured iteration; `--parse` lists the kernels after the last
marker. `SCHEME/previous` (or `/rotated`): `attention.PREFILL_PAIR = False` (the route before the pair kernels);
`SCHEME/append`: `packing.APPEND = True` (a growing turbo update by `quantize_append_pair`; otherwise the pair kernel and
concatenations)."""
import csv, sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
P_, C_ = 14336, 2048


def parse(files):
    for f in files:
        rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
        if not rows: print(f"{f}: no kernels"); continue
        h = rows[0]; ki, vi, ui = h.index('Kernel Name'), h.index('Metric Value'), h.index('Metric Unit')
        ks = [(r[ki], float(r[vi].replace(',', '')) * {'ns': 1e-3, 'nsecond': 1e-3, 'us': 1.0, 'usecond': 1.0, 'ms': 1e3, 'msecond': 1e3}.get(r[ui], 1.0)) for r in rows[1:]]
        last = max((i for i, (n, _) in enumerate(ks) if 'mlx_kvq_marker' in n), default=None)
        if last is None: print(f"{f}: no marker"); continue
        body = ks[last + 1:]
        print(f"## {Path(f).stem}: {len(body)} kernels, {sum(d for _, d in body):.1f} us")
        for n, d in body: print(f"  {d:9.1f} us  {n[:110]}")


def main(kv):
    from mlx_lm.models.cache import KVCache
    from mlx_kvq.bench import shape_model, bench_caches, _bench_scheme
    from mlx_kvq import attention as A, packing as PK
    from mlx_kvq.integrate import install
    base, _, how = kv.partition('/')
    A.PREFILL_PAIR = how not in ('rotated', 'previous')
    PK.APPEND = how == 'append'
    install()
    model = shape_model('llama-3.2-1b', mx.float16)
    c = KVCache() if base == 'fp16' else bench_caches(model, _bench_scheme(base))[0]
    mx.random.seed(1)
    for s in range(0, P_, 4096):
        n = min(4096, P_ - s)
        c.update_and_fetch(mx.random.normal((1, 8, n, 64)).astype(mx.float16), mx.random.normal((1, 8, n, 64)).astype(mx.float16))
        mx.eval(c.state)
    # the chunk's keys and values as a model hands them: (B, L, H, D) projections transposed to (B, H, L, D)
    k, v = (mx.random.normal((1, C_, 8, 64)).astype(mx.float16).transpose(0, 2, 1, 3) for _ in range(2))
    q = mx.random.normal((1, 32, C_, 64)).astype(mx.float16); mx.eval(k, v, q)
    marker = mx.fast.cuda_kernel(name="mlx_kvq_marker", input_names=["x"], output_names=["y"], source="y[0] = x[0];")

    def chunk():
        if base == 'fp16': c.keys, c.values = c.keys[..., :P_, :], c.values[..., :P_, :]
        else: c.keys, c.values = tuple(p[..., :P_, :] for p in c.keys), tuple(p[..., :P_, :] for p in c.values)
        mx.eval(c.keys, c.values)
        ks, vs = c.update_and_fetch(k, v)
        if base == 'fp16': out = mx.fast.scaled_dot_product_attention(q, ks, vs, scale=0.125, mask='causal')
        else: out = c.attend(q, ks, vs, scale=0.125, mask='causal')
        mx.eval(out, c.state); c.trim(C_)

    for _ in range(3): chunk()
    mx.eval(marker(inputs=[mx.ones((4,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])[0])
    chunk(); mx.synchronize()
    print(f"done {kv}", file=sys.stderr)


if __name__ == '__main__':
    if sys.argv[1] == '--parse': parse(sys.argv[2:])
    else: main(sys.argv[1])
