"""Decode time against context for one DeepSeek-V4 attention layer, and batched decode through mlx-lm's BatchGenerator.

One CSA layer (ratio 4, Lightning Indexer top-k) and one HCA layer (ratio 128) at two sizes (`small`: 8 heads x 128,
indexer 8 x 64; `flash`: DeepSeek-V4-Flash, 64 heads x 512, indexer 64 x 128; both top-k 512, window 128), with the
compressed entries exact or stored as TurboQuant 4-bit codes (`turbo:4`), against dense attention (the same layer's
projections, MLX's fused attention over all `context` latents). The cache of each context is filled directly with
random state of the right shapes (what a prefill of `context` tokens leaves: window ring, entries, index keys,
compressor states), so long contexts need no prefill; then `steps` decode steps are timed one by one (median).

    python bench/dsv4_decode.py                                  # 4K / 16K / 64K, small and flash, + BatchGenerator
    python bench/dsv4_decode.py --contexts 4096,65536,262144     # on a GPU
    python bench/dsv4_decode.py --sizes small --steps 8 --no-batch --out /tmp/x

Device-agnostic: it runs on MLX's default device (`mx.default_device()`), CPU here, the GPU where MLX has one.
Writes OUT.md and OUT.json (machine, date, command, every timing).
"""
from __future__ import annotations
import argparse, datetime, json, os, platform, statistics, sys, time

import mlx.core as mx
import numpy as np
from mlx_kvq.dsv4 import ModelArgs, Attention, apply_rope, randomize
from mlx_kvq.dsv4_model import Model
from mlx_kvq.turboquant import TurboCodec

SIZES = {
    "small": dict(hidden_size=1024, num_attention_heads=8, head_dim=128, qk_rope_head_dim=64, q_lora_rank=512,
                  o_groups=4, o_lora_rank=256, index_n_heads=8, index_head_dim=64),
    "flash": dict(hidden_size=4096, num_attention_heads=64, head_dim=512, qk_rope_head_dim=64, q_lora_rank=1024,
                  o_groups=8, o_lora_rank=1024, index_n_heads=64, index_head_dim=128),
}
RATIOS = {"CSA": 4, "HCA": 128}

def layer_args(size: str) -> ModelArgs:
    return ModelArgs(vocab_size=256, moe_intermediate_size=64, num_hidden_layers=3, compress_ratios=[4, 128, 0],
                     sliding_window=128, index_topk=512, n_routed_experts=4, num_experts_per_tok=2,
                     num_hash_layers=0, num_nextn_predict_layers=0, **SIZES[size])

def make_layer(size: str, kind: str, dtype=mx.float32) -> Attention:
    args = layer_args(size)
    layer = randomize(Attention(args, args.compress_ratios.index(RATIOS[kind])), seed=0)
    if dtype != mx.float32:
        layer.set_dtype(dtype); layer.attn_sink = layer.attn_sink.astype(mx.float32)
    mx.eval(layer.parameters())
    return layer

def _normal(shape, dtype, key):
    return mx.random.normal(shape, key=mx.random.key(key)).astype(dtype)

def filled_cache(layer: Attention, context: int, codec=None, dtype=mx.float32, block: int = 8192):
    "A cache holding the state a prefill of `context` tokens leaves (random values of the right shapes)."
    c = layer.make_cache(codec=codec)
    D, W, r = layer.head_dim, layer.window, layer.ratio
    c.offsets = np.array([context], np.int64)
    c.ring = _normal((1, W, D), dtype, 1)
    def fill(store, n, dim, key):
        for a in range(0, n, block):
            b = min(n, a + block)
            store.write(_normal((1, b - a, dim), dtype, key + a), a, b)
            mx.eval(*store.parts)
    if r:
        fill(c.entries, context // r, D, 100)
        S, width = (2 * r, 2 * D) if r == 4 else (r, D)
        c.pools["attn"] = (_normal((1, S, width), mx.float32, 2), _normal((1, S, width), mx.float32, 3))
        if r == 4:
            d = layer.indexer.head_dim
            fill(c.index_entries, context // 4, d, 10 ** 7)
            c.pools["index"] = (_normal((1, 8, 2 * d), mx.float32, 4), _normal((1, 8, 2 * d), mx.float32, 5))
    mx.eval(c.ring, *[a for p in c.pools.values() if p for a in p])
    return c

def _median_ms(step, steps: int, warmup: int = 2) -> float:
    for i in range(warmup): mx.eval(step(i))
    ts = []
    for i in range(warmup, warmup + steps):
        t0 = time.perf_counter(); mx.eval(step(i)); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3

def time_layer(layer: Attention, context: int, codec, steps: int, dtype=mx.float32) -> float:
    "Median ms of one decode step of `layer` after `context` tokens."
    cache = filled_cache(layer, context, codec, dtype)
    x = _normal((1, steps + 2, layer.hidden_size), dtype, 7)
    return _median_ms(lambda i: layer(x[:, i : i + 1], cache=cache), steps)

def time_dense(layer: Attention, context: int, steps: int, dtype=mx.float32) -> float:
    "Median ms of one decode step with the layer's projections and dense attention over all `context` latents."
    H, D = layer.n_heads, layer.head_dim
    keys = _normal((1, 1, context, D), dtype, 11)
    x = _normal((1, steps + 2, layer.hidden_size), dtype, 7)
    def step(i):
        xi, pos = x[:, i : i + 1], mx.array([context + i])
        q = layer.wq_b(layer.q_norm(layer.wq_a(xi))).reshape(1, 1, H, D)
        q = apply_rope(mx.fast.rms_norm(q, None, layer.eps), layer._inv_freq, pos)
        kv = apply_rope(layer.kv_norm(layer.wkv(xi)), layer._inv_freq, pos)         # (computed as a layer would)
        o = mx.fast.scaled_dot_product_attention(q.transpose(0, 2, 1, 3), keys, keys, scale=layer.scale,
                                                 sinks=layer.attn_sink.astype(q.dtype))
        return layer.finish(o.transpose(0, 2, 1, 3), pos), kv
    return _median_ms(step, steps)

def layer_table(contexts, sizes, steps: int, dtype=mx.float32, log=print) -> list:
    "Every (size, layer, entries, context) timing, side by side in one run."
    rows = []
    for size in sizes:
        for kind in RATIOS:
            layer = make_layer(size, kind, dtype)
            for entries, codec in (("exact", None), ("turbo:4", TurboCodec(4))):
                for ctx in contexts:
                    ms = time_layer(layer, ctx, codec, steps, dtype)
                    rows.append(dict(size=size, layer=kind, entries=entries, context=ctx, ms=ms)); log(rows[-1])
            if kind == "CSA":
                for ctx in contexts:
                    ms = time_dense(layer, ctx, steps, dtype)
                    rows.append(dict(size=size, layer="dense", entries="exact", context=ctx, ms=ms)); log(rows[-1])
            del layer
    return rows

def batch_table(lengths=(300, 700, 1100, 1500), new_tokens: int = 16, log=print) -> dict:
    """BatchGenerator over requests of different lengths: median decode step with all of them, against each alone
    (the same generator with one request); tokens of the batch against each request alone."""
    from mlx_lm.generate import BatchGenerator
    args = ModelArgs(vocab_size=256, hidden_size=512, moe_intermediate_size=256, num_hidden_layers=3, num_attention_heads=8,
                     head_dim=128, qk_rope_head_dim=32, q_lora_rank=256, o_groups=4, o_lora_rank=128, compress_ratios=[4, 128, 0],
                     index_n_heads=4, index_head_dim=64, index_topk=64, n_routed_experts=8, num_experts_per_tok=2,
                     num_hash_layers=0, num_nextn_predict_layers=0)
    model = randomize(Model(args), seed=0); mx.eval(model.parameters())
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, args.vocab_size, n).tolist() for n in lengths]
    def run(ps):
        gen = BatchGenerator(model, max_tokens=new_tokens, prefill_batch_size=len(ps), completion_batch_size=len(ps), prefill_step_size=512)
        uids = gen.insert(ps, [new_tokens] * len(ps))
        got, steps, t = {u: [] for u in uids}, [], time.perf_counter()
        while responses := gen.next_generated():
            now = time.perf_counter()
            if all(len(v) >= 2 for v in got.values()) and len(responses) == len(ps): steps.append(now - t)
            for r in responses: got[r.uid].append(r.token)
            t = time.perf_counter()
        gen.close()
        return [got[u] for u in uids], statistics.median(steps) * 1e3
    toks, batched = run(prompts)
    alone = [run([p]) for p in prompts]
    res = dict(lengths=list(lengths), new_tokens=new_tokens, batched_ms=batched, alone_ms=[a[1] for a in alone],
               equal=[t == a[0][0] for t, a in zip(toks, alone)])
    res["ratio_to_mean_alone"] = batched / statistics.mean(res["alone_ms"])
    log(res)
    return res

def machine() -> str:
    dev = mx.default_device()
    return f"{platform.system()} {platform.machine()} {os.cpu_count()}-core host, MLX {mx.__version__} {dev}"

def markdown(rows: list, batch: dict | None, meta: dict) -> str:
    ctxs = sorted({r["context"] for r in rows})
    out = [f"# DeepSeek-V4 decode time against context", "",
           f"Machine: {meta['machine']}; dtype {meta['dtype']}; date {meta['date']}; command `{meta['command']}`.",
           "One decode step of one attention layer (median of the timed steps), ms; the last column is the largest",
           "context over the smallest. Dense: the same projections with MLX's fused attention over every latent.", "",
           "| size | layer | entries | " + " | ".join(f"{c // 1024}K" for c in ctxs) + f" | {ctxs[-1] // 1024}K / {ctxs[0] // 1024}K |",
           "|" + "---|" * (4 + len(ctxs))]
    keys = []
    for r in rows:
        k = (r["size"], r["layer"], r["entries"])
        if k not in keys: keys.append(k)
    for k in keys:
        ms = {r["context"]: r["ms"] for r in rows if (r["size"], r["layer"], r["entries"]) == k}
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{ms[c]:.2f}" for c in ctxs) + f" | {ms[ctxs[-1]] / ms[ctxs[0]]:.2f}x |")
    if batch:
        out += ["", f"BatchGenerator, {len(batch['lengths'])} requests of {batch['lengths']} tokens, {batch['new_tokens']} new tokens each "
                "(random mid-size model: hidden 512, 8 heads x 128, one CSA / HCA / window layer):",
                f"median decode step {batch['batched_ms']:.2f} ms batched; alone {', '.join(f'{a:.2f}' for a in batch['alone_ms'])} ms "
                f"({batch['ratio_to_mean_alone']:.2f}x the mean alone); tokens equal to each request alone: {batch['equal']}"]
    return "\n".join(out) + "\n"

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--contexts", default=os.environ.get("DSV4_BENCH_CONTEXTS", "4096,16384,65536"))
    p.add_argument("--sizes", default="small,flash")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--no-batch", action="store_true")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "dsv4_decode"))
    a = p.parse_args(argv)
    contexts = [int(c) for c in a.contexts.split(",")]
    dtype = getattr(mx, a.dtype)
    meta = dict(machine=machine(), dtype=a.dtype, date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                command="python " + " ".join([os.path.relpath(__file__)] + (argv if argv is not None else sys.argv[1:])),
                steps=a.steps)
    rows = layer_table(contexts, a.sizes.split(","), a.steps, dtype)
    batch = None if a.no_batch else batch_table()
    with open(a.out + ".json", "w") as f: json.dump(dict(meta=meta, layers=rows, batch=batch), f, indent=1)
    md = markdown(rows, batch, meta)
    with open(a.out + ".md", "w") as f: f.write(md)
    print(md)
    return rows, batch

if __name__ == "__main__":
    main()
