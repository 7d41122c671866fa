"""Decode speed and KV bytes per GPU of a Llama-3.1-8B-shaped random model split tensor-parallel over 2 processes,
caches filled to 64K tokens: fp16 (the model's own cache) vs turbo:4 vs affine:8,4 (mlx_kvq.distributed).

On the 2-GPU machine (NCCL; the staged MLX has no `mlx.launch` script, hence the -c form):

    python3 -c 'import sys; from mlx._distributed_utils.launch import main; sys.argv[0]="mlx.launch"; sys.exit(main())' \\
        --backend nccl -n 2 --python python3 bench/distributed_decode.py --out bench/distributed_decode_h200x2

With one GPU, the same with `--backend ring` (both processes share the GPU; say so when quoting the numbers).
A smoke test on a CPU: `mlx.launch --backend ring -n 2 -- python3 bench/distributed_decode.py --tiny`.

The caches are filled by `update_and_fetch` with random keys/values (N(0,1), in chunks), not by a 64K-token
prefill: decode speed depends on what the caches hold and how they attend, not on how they were filled. Then
`--decode` greedy steps of the whole model (batch 1) are timed after `--warmup` steps; every rank times the same
steps (each step has collectives), rank 0 prints and writes OUT.md / OUT.json.
"""
import argparse, json, platform, sys, time
import numpy as np
import mlx.core as mx
from mlx_lm.models import llama
import mlx_kvq
from mlx_kvq import distributed as D

LLAMA_31_8B = dict(model_type='llama', hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
                   num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5, vocab_size=128256,
                   rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False)
TINY = dict(LLAMA_31_8B, hidden_size=512, num_hidden_layers=2, intermediate_size=1024, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1024)

def fill(caches, context, dtype, chunk=4096, seed=0):
    "Every layer's cache filled to `context` tokens with N(0,1) keys and values of the layer's shape"
    key = mx.random.key(seed)
    for c in caches:
        done = 0
        while done < context:
            n = min(chunk, context - done)
            k1, k2, key = mx.random.split(key, 3)
            shape = (1, H_LOCAL, n, HEAD_DIM)
            c.update_and_fetch(mx.random.normal(shape, key=k1).astype(dtype), mx.random.normal(shape, key=k2).astype(dtype))
            mx.eval([x for x in ([c.keys] if isinstance(c.keys, mx.array) else list(c.keys or []))])
            done += n
        mx.eval(c.state)

def main():
    global H_LOCAL, HEAD_DIM
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--context', type=int, default=65536)
    p.add_argument('--decode', type=int, default=32)
    p.add_argument('--warmup', type=int, default=4)
    p.add_argument('--kv', nargs='+', default=['fp16', 'turbo:4', 'affine:8,4'])
    p.add_argument('--tiny', action='store_true', help='a 2-layer model and 1K tokens: a smoke test')
    p.add_argument('--out', default=None, help='write OUT.md and OUT.json (rank 0)')
    a = p.parse_args()
    g = mx.distributed.init()
    cfg = TINY if a.tiny else LLAMA_31_8B
    context = min(a.context, 1024) if a.tiny else a.context
    dtype = mx.float32 if mx.default_device() == mx.cpu else mx.bfloat16
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs(**cfg))
    model.set_dtype(dtype)
    D.shard(model, 'tensor', g)                     # lazy weights: only this rank's slices are materialised
    mx.eval(model.parameters())
    H_LOCAL, HEAD_DIM = cfg['num_key_value_heads'] // g.size(), cfg['head_dim']
    rows = []
    for kv in a.kv:
        mx.reset_peak_memory()
        caches, rep = D.make_prompt_cache(model, kv, return_report=True, group=g)
        fill(caches, context, dtype)
        y = mx.array([[1]])
        for _ in range(a.warmup):
            y = mx.argmax(model(y, cache=caches)[:, -1:], axis=-1); mx.eval(y)
        mx.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.decode):
            y = mx.argmax(model(y, cache=caches)[:, -1:], axis=-1); mx.eval(y)
        mx.synchronize()
        dt = time.perf_counter() - t0
        per_gpu = D.cache_nbytes(caches)
        row = dict(kv=kv, context=context, decode_tokens=a.decode, tokens_per_s=a.decode / dt,
                   kv_bytes_rank=[int(x) for x in D.all_sum(np.eye(g.size(), dtype=np.int64)[g.rank()] * per_gpu, g)],
                   kv_bytes_total=D.total_nbytes(caches, g), bytes_per_token_rank=rep.bytes_per_token_after,
                   peak_memory_gb=mx.get_peak_memory() / 1e9, report=rep.summary())
        rows.append(row)
        if g.rank() == 0: print(json.dumps({k: v for k, v in row.items() if k != 'report'}), flush=True)
        del caches; mx.clear_cache()
    if g.rank() == 0:
        head = (f"{'tiny smoke test' if a.tiny else 'Llama-3.1-8B shape'} (random weights, {dtype}), tensor parallel over "
                f"{g.size()} processes, caches filled to {context} tokens, batch 1, {a.decode} decode steps after {a.warmup}; "
                f"device {mx.default_device()}, {platform.node()}, MLX {mx.__version__}, mlx_kvq {mlx_kvq.__version__}, "
                f"{time.strftime('%Y-%m-%d', time.gmtime())}")
        md = [head, '', '| kv | decode tokens/s | KV bytes per GPU (rank 0) | KV bytes all GPUs | bytes/token per GPU | peak memory rank 0 (GB, weights included) |',
              '| --- | --- | --- | --- | --- | --- |']
        md += [f"| {r['kv']} | {r['tokens_per_s']:.2f} | {r['kv_bytes_rank'][0]:,} | {r['kv_bytes_total']:,} | "
               f"{r['bytes_per_token_rank']} | {r['peak_memory_gb']:.2f} |" for r in rows]
        print('\n'.join(md))
        if a.out:
            open(a.out + '.md', 'w').write('\n'.join(md) + '\n')
            open(a.out + '.json', 'w').write(json.dumps(dict(header=head, command=' '.join(sys.argv), rows=rows), indent=1))

if __name__ == '__main__': main()
