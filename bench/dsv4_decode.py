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
from mlx_lm.generate import BatchGenerator
from mlx_kvq.dsv4 import ModelArgs, Attention, apply_rope, randomize
from mlx_kvq.dsv4_cache import BatchSparseKVCache
from mlx_kvq.dsv4_model import Model
from mlx_kvq.turbo_codec import TurboCodec

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
        store._reserve(n + 64, store.parts)               # room for the timed steps' entries (no regrowth while timed)
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

def round_robin(steps_of: dict, steps: int, warmup: int = 2) -> dict:
    """Time one step of every runner in turn (so that load on a shared machine falls on all of them alike), `steps`
    times after `warmup`; returns name -> (median ms, mean ms)."""
    for i in range(warmup):
        for f in steps_of.values(): mx.eval(f(i))
    ts = {k: [] for k in steps_of}
    for i in range(warmup, warmup + steps):
        for k, f in steps_of.items():
            t0 = time.perf_counter(); mx.eval(f(i)); ts[k].append(time.perf_counter() - t0)
    return {k: (statistics.median(v) * 1e3, statistics.mean(v) * 1e3) for k, v in ts.items()}

def layer_step(layer: Attention, context: int, codec, steps: int, dtype=mx.float32):
    "One decode step of `layer` after `context` tokens, as a function of the step number."
    cache = filled_cache(layer, context, codec, dtype)
    x = _normal((1, steps + 4, layer.hidden_size), dtype, 7)
    return lambda i: layer(x[:, i : i + 1], cache=cache)

def dense_step(layer: Attention, context: int, steps: int, dtype=mx.float32):
    """One decode step with the layer's projections and dense attention over all `context` latents (one shared key
    head: scores as one (H, D) x (D, context) product, sink logit as in the layer)."""
    H, D = layer.n_heads, layer.head_dim
    keys = _normal((context, D), dtype, 11)
    x = _normal((1, steps + 4, layer.hidden_size), dtype, 7)
    sink = layer.attn_sink.astype(mx.float32)[:, None]
    def step(i):
        xi, pos = x[:, i : i + 1], mx.array([context + i])
        q = layer.wq_b(layer.q_norm(layer.wq_a(xi))).reshape(1, 1, H, D)
        q = apply_rope(mx.fast.rms_norm(q, None, layer.eps), layer._inv_freq, pos)
        kv = apply_rope(layer.kv_norm(layer.wkv(xi)), layer._inv_freq, pos)         # (computed as a layer would)
        s = (q.reshape(H, D).astype(mx.float32) * layer.scale) @ keys.astype(mx.float32).T
        m = mx.maximum(s.max(-1, keepdims=True), sink)
        p = mx.exp(s - m)
        o = (p @ keys.astype(mx.float32)) / (p.sum(-1, keepdims=True) + mx.exp(sink - m))
        return layer.finish(o.reshape(1, 1, H, D).astype(dtype), pos), kv
    return step

def layer_table(contexts, sizes, steps: int, dtype=mx.float32, log=print) -> list:
    "Every (size, layer, entries, context) timing; the runners of one layer are timed in turn, in one run."
    rows = []
    for size in sizes:
        for kind in RATIOS:
            layer = make_layer(size, kind, dtype)
            runners = {}
            for entries, codec in (("exact", None), ("turbo:4", TurboCodec(4))):
                for ctx in contexts: runners[entries, ctx] = layer_step(layer, ctx, codec, steps, dtype)
            if kind == "CSA":
                for ctx in contexts: runners["dense", ctx] = dense_step(layer, ctx, steps, dtype)
            for (entries, ctx), (med, mean) in round_robin(runners, steps).items():
                rows.append(dict(size=size, layer="dense" if entries == "dense" else kind, entries="exact" if entries == "dense" else entries,
                                 context=ctx, ms=med, mean_ms=mean)); log(rows[-1])
            del layer, runners
    return rows

def batch_table(lengths=(300, 700, 1100, 1500), new_tokens: int = 48, log=print) -> dict:
    """BatchGenerator over requests of different lengths: median decode step (a `next_generated` call where every request
    gets a token) with all of them, against each alone (the same generator with one request), the generators stepped
    in turn; the tokens of the batch against each request alone."""
    args = ModelArgs(vocab_size=256, hidden_size=512, moe_intermediate_size=256, num_hidden_layers=3, num_attention_heads=8,
                     head_dim=128, qk_rope_head_dim=32, q_lora_rank=256, o_groups=4, o_lora_rank=128, compress_ratios=[4, 128, 0],
                     index_n_heads=4, index_head_dim=64, index_topk=64, n_routed_experts=8, num_experts_per_tok=2,
                     num_hash_layers=0, num_nextn_predict_layers=0)
    model = randomize(Model(args), seed=0); mx.eval(model.parameters())
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, args.vocab_size, n).tolist() for n in lengths]
    def start(ps):
        gen = BatchGenerator(model, max_tokens=new_tokens, prefill_batch_size=len(ps), completion_batch_size=len(ps), prefill_step_size=512)
        uids = gen.insert(ps, [new_tokens] * len(ps))
        return dict(gen=gen, uids=uids, got={u: [] for u in uids}, steps=[])
    def step(g) -> bool:
        t0 = time.perf_counter(); responses = g["gen"].next_generated(); dt = time.perf_counter() - t0
        if not responses: return False
        decoding = all(len(v) >= 1 for v in g["got"].values()) and len(responses) == len(g["uids"])
        if decoding and all(r.finish_reason is None for r in responses): g["steps"].append(dt)
        for r in responses: g["got"][r.uid].append(r.token)
        return True
    caches = []                                                      # attention alone: the model's 3 layers, batch vs alone
    for p_ in prompts:
        c = model.make_cache(); mx.eval(model(mx.array([p_]), cache=c)); caches.append(c)
    batch = [BatchSparseKVCache.merge([c[i] for c in caches]) for i in range(len(model.layers))]
    h = _normal((len(prompts), new_tokens + 4, args.hidden_size), mx.float32, 13)
    def attn(cs, rows):
        return lambda i: [l.attn(h[rows, i : i + 1], cache=c) for l, c in zip(model.layers, cs)]
    attn_ms = round_robin({"batch": attn(batch, slice(None)), **{f"alone{j}": attn(caches[j], slice(j, j + 1)) for j in range(len(prompts))}}, new_tokens)
    gens = [start(prompts)] + [start([p]) for p in prompts]       # the batch and each request alone, stepped in turn
    live = list(gens)
    while live: live = [g for g in live if step(g)]
    for g in gens: g["gen"].close()
    med = [statistics.median(g["steps"]) * 1e3 for g in gens]
    mean = [statistics.mean(g["steps"]) * 1e3 for g in gens]
    toks = [gens[0]["got"][u] for u in gens[0]["uids"]]
    res = dict(lengths=list(lengths), new_tokens=new_tokens, batched_ms=med[0], alone_ms=med[1:],
               equal=[t == g["got"][g["uids"][0]] for t, g in zip(toks, gens[1:])], timed_steps=len(gens[0]["steps"]),
               batched_mean_ms=mean[0], alone_mean_ms=mean[1:])
    res["ratio_to_mean_alone"] = res["batched_ms"] / statistics.mean(res["alone_ms"])
    res["mean_ratio"] = res["batched_mean_ms"] / statistics.mean(res["alone_mean_ms"])
    res["attention_batched_ms"] = attn_ms["batch"][0]
    res["attention_alone_ms"] = [attn_ms[f"alone{j}"][0] for j in range(len(prompts))]
    res["attention_ratio"] = res["attention_batched_ms"] / statistics.mean(res["attention_alone_ms"])
    log(res)
    return res

def machine() -> str:
    dev = mx.default_device()
    return f"{platform.system()} {platform.machine()} {os.cpu_count()}-core host, MLX {mx.__version__} {dev}"

def markdown(rows: list, batch: dict | None, meta: dict) -> str:
    ctxs = sorted({r["context"] for r in rows})
    out = [f"# DeepSeek-V4 decode time against context", "",
           f"Machine: {meta['machine']}; dtype {meta['dtype']}; date {meta['date']}; command `{meta['command']}`.",
           f"One decode step of one attention layer, ms: median of {meta['steps']} steps (mean in the JSON), every configuration of a",
           "layer timed in turn, step by step; the last column is the largest context over the smallest. A CSA layer closes an",
           "entry every 4th step. Dense: the same projections, attention over every latent (one shared key head, BLAS products).", "",
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
                f"({batch['ratio_to_mean_alone']:.2f}x the mean alone; medians of {batch['timed_steps']} timed steps, whose means give "
                f"{batch['mean_ratio']:.2f}x); tokens equal to each request alone: {batch['equal']}.",
                f"The model's three attention layers alone (one decode step, same caches): batched {batch['attention_batched_ms']:.2f} ms, "
                f"alone {', '.join(f'{a:.2f}' for a in batch['attention_alone_ms'])} ms ({batch['attention_ratio']:.2f}x the mean alone)."]
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
