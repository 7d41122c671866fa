"""One rank of the mlx_kvq.distributed proof (nbs/13_distributed.ipynb), started by `mlx.launch`:
`mlx.launch --backend ring -n 2 -- python3 tests/dist_worker.py FAMILY HOW OUTDIR`.
Shards a tiny random model (`tiny` below: the same weights on every rank, seed 0), and for every scheme builds
the caches, decodes greedily, saves its prompt cache and writes what it holds to OUTDIR/rank<r>.json."""
import json, sys
from pathlib import Path
import numpy as np
import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.generate import generate_step, generation_stream
from mlx_kvq import distributed as D

SCHEMES = ('fp16', 'affine:8,4', 'turbo:4', 'auto:4')
PROMPT = [(7 * i + 3) % 61 + 1 for i in range(40)]
CALIB = [(13 * i + 5) % 61 + 1 for i in range(320)]

def tiny(family, n_kv=2, n_heads=4, seed=0):
    "A tiny random float32 model (head dim 64, 4 layers), weights scaled x2 so that greedy text varies"
    import importlib
    mod = importlib.import_module(f'mlx_lm.models.{family}')
    args = dict(model_type=family, hidden_size=64 * n_heads, num_hidden_layers=4, intermediate_size=256,
                num_attention_heads=n_heads, num_key_value_heads=n_kv, rms_norm_eps=1e-5, vocab_size=64,
                head_dim=64, tie_word_embeddings=False, rope_theta=10000.0, max_position_embeddings=4096)
    fields = set(mod.ModelArgs.__dataclass_fields__)
    mx.random.seed(seed)
    model = mod.Model(mod.ModelArgs(**{k: v for k, v in args.items() if k in fields}))
    model.update(tree_map(lambda w: w * 2.0, model.parameters()))
    model.set_dtype(mx.float32); mx.eval(model.parameters())
    return model

def greedy(model, caches, n=8):
    toks, lps = [], []
    # the generator runs to its end: a step left in flight on mlx-lm's generation stream would pair its
    # collectives with the next ones of another rank
    for t, lp in generate_step(mx.array(PROMPT), model, prompt_cache=caches, max_tokens=n):
        toks.append(int(t)); lps.append(np.array(lp).tolist())
    mx.synchronize(generation_stream)
    return toks, lps

def main(family, how, out):
    out = Path(out); g = mx.distributed.init()
    model = D.shard(tiny(family), how, g)
    lay = D.layout_of(model)
    res = dict(rank=g.rank(), size=g.size(), layout=str(lay), layers=lay.layers, runs={})
    for kv in SCHEMES:
        caches, rep = D.make_prompt_cache(model, kv, return_report=True, calib_tokens=CALIB, group=g)
        toks, lps = greedy(model, caches)
        whole = D.whole_report(rep, model, g)
        f = D.save_prompt_cache(out / f"{kv.replace(':', '_').replace(',', '_')}.safetensors", caches, model)
        back = D.load_prompt_cache(out / f.name.replace(f".rank{lay.rank}-of-{lay.world_size}", ''), model)
        res['runs'][kv] = dict(tokens=toks, logprobs=lps, nbytes=D.cache_nbytes(caches), total=D.total_nbytes(caches, g),
                               layer_nbytes=[int(c.nbytes) for c in caches], offsets=[int(c.offset) for c in caches],
                               kv_heads=[int(c.keys.shape[1] if isinstance(c.keys, mx.array) else c.keys[0].shape[1]) for c in caches],
                               report=str(rep), bytes_after=rep.bytes_per_token_after, whole=str(whole),
                               whole_after=whole.bytes_per_token_after, whole_layers=len(whole.layers),
                               file=str(f), reloaded=[int(c.offset) for c in back])
        if kv.startswith('auto'): res['plan'] = D.sharded_plan(model, 4.0, group=g).to_json()
    try: D.shard(tiny(family, n_kv=3, n_heads=6), 'tensor', g)     # 3 KV heads over 2 ranks
    except ValueError as e: res['err_heads'] = str(e)
    try: D.make_prompt_cache(model, 'turbo:4' if g.rank() == 0 else 'affine:8,4', group=g)
    except ValueError as e: res['err_mismatch'] = str(e)
    (out / f"rank{g.rank()}.json").write_text(json.dumps(res))
    print(f"rank {g.rank()}: {lay}: done", flush=True)

if __name__ == '__main__': main(*sys.argv[1:4])
