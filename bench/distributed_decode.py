"""Decode speed and KV bytes per rank of a random-weight llama (Llama-3.1-8B's shape by default) split tensor-parallel
over the processes of `mlx.launch`, every cache layer filled to --context tokens: fp16 vs turbo:4 vs affine:8,4.

Two GPUs (NCCL; the staged MLX has no `mlx.launch` script, hence the -c form):

    python3 -c 'import sys; from mlx._distributed_utils.launch import main; sys.argv[0]="mlx.launch"; sys.exit(main())' \\
        --backend nccl -n 2 --python python3 bench/distributed_decode.py --out $OUT --context 65536

One GPU, 2 processes sharing it (the ring backend: collectives over TCP on 127.0.0.1, staged through the CPU):
the same with `--backend ring`; the output says which backend ran and that the processes shared one GPU.
CPU proof (this machine): `... --backend ring -n 2 --python python3 bench/distributed_decode.py --shape tiny-llama
--context 512 --steps 8 --out /tmp/dd`.

Every rank builds the same random weights (seeded) and keeps its slice (`mlx_kvq.distributed.shard`, mlx-lm's
`shard()`), then runs `mlx_kvq.bench.decode_bench` in step with the others: its caches (this rank's KV heads) are
filled with seeded random keys/values in chunks (decode speed depends on what the caches hold, not on how they were
filled), then `--steps` greedy tokens of the whole split model are timed after `--warmup` (mlx-lm's `generate_step`;
every step has the sharded matmuls' `all_sum`s). Rank 0 writes OUT/distributed_decode.{md,json}.
"""
import argparse, json, os, platform, sys, time
from pathlib import Path
import numpy as np
import mlx.core as mx
import mlx_kvq
from mlx_kvq import distributed as D
from mlx_kvq.bench import MODEL_SHAPES, shape_args, decode_bench

def backend() -> str:
    "Which `mlx.launch` backend started this process (from the environment it sets)"
    if 'NCCL_HOST_IP' in os.environ: return 'nccl'
    if 'MLX_HOSTFILE' in os.environ: return 'ring'
    if 'MLX_JACCL_COORDINATOR' in os.environ: return 'jaccl'
    return 'none' if 'MLX_RANK' not in os.environ else 'unknown'

def per_rank(x: float, g) -> list:
    "Every rank's value of `x`, in rank order (one all_sum)"
    return [float(v) for v in D.all_sum(np.eye(g.size(), dtype=np.float64)[g.rank()] * x, g)]

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--shape', default='llama-3.1-8b', choices=sorted(k for k, v in MODEL_SHAPES.items() if 'model_type' not in v), help='random-weight model shape (default: %(default)s)')
    p.add_argument('--context', type=int, default=65536, help='tokens in every cache layer (default: %(default)s)')
    p.add_argument('--steps', type=int, default=32, help='timed greedy decode steps (default: %(default)s)')
    p.add_argument('--warmup', type=int, default=3, help='untimed steps first (default: %(default)s)')
    p.add_argument('--kv', nargs='+', default=['fp16', 'turbo:4', 'affine:8,4'])
    p.add_argument('--out', required=True, help='output directory (rank 0 writes distributed_decode.md and .json there)')
    a = p.parse_args()
    t_start = time.perf_counter()
    g = mx.distributed.init()
    out = Path(a.out)
    if g.rank() == 0: out.mkdir(parents=True, exist_ok=True)
    gpu = mx.default_device() == mx.gpu
    dtype = mx.float16 if gpu else mx.float32          # float32 on a CPU (half precision is slow there)
    check = D.all_sum(np.ones(1, np.float32), g)        # the collective works on this device before anything is built
    if int(check[0]) != g.size(): raise SystemExit(f"all_sum over {g.size()} ranks gave {check[0]}: the launch is broken")

    mx.random.seed(0)                                   # the same random weights on every rank
    mod, margs = shape_args(a.shape)
    model = mod.Model(margs)
    model.set_dtype(dtype)
    D.shard(model, 'tensor', g)                         # lazy weights: each rank evaluates only its slices
    mx.eval(model.parameters())
    t_model = time.perf_counter() - t_start

    def progress(row):
        if g.rank() == 0: print(f"rank 0: {row['scheme']} at {row['context']:,} tokens: {row['tokens_per_s']:.2f} tokens/s, "
                                f"{row['nbytes']:,} KV bytes", flush=True)
    mx.reset_peak_memory()
    rows = decode_bench(model, a.kv, (a.context,), steps=a.steps, warmup=a.warmup, dtype=dtype, progress=progress)
    for r in rows:                                      # every rank's figures, rank order (collectives: same rows everywhere)
        r['tokens_per_s_rank'] = per_rank(r['tokens_per_s'], g)
        r['kv_bytes_rank'] = [int(v) for v in per_rank(r['nbytes'], g)]
        r['kv_bytes_all_ranks'] = sum(r['kv_bytes_rank'])
    peak = per_rank(mx.get_peak_memory() / 1e9, g)
    try: visible = int(os.environ.get('CUDA_VISIBLE_DEVICES', '-1').split(',')[0])
    except ValueError: visible = -1
    devices = [int(v) for v in per_rank(visible, g)]     # the GPU each rank was given (-1: not set)
    if g.rank() != 0: return
    be = backend()
    shared = gpu and g.size() > 1 and (be == 'ring' or len(set(devices)) < g.size())
    where = (f"{g.size()} processes sharing ONE GPU ({be} backend: collectives over TCP through the CPU; the 2-GPU machine was "
             f"not used)" if shared else f"{g.size()} process(es), {be} backend, device {mx.default_device()}")
    cfg = MODEL_SHAPES[a.shape]
    head = (f"{a.shape} shape (random weights, {cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']}/"
            f"{cfg['num_key_value_heads']} heads of {cfg['head_dim']}, {str(dtype).split('.')[-1]}), tensor parallel: {where}; "
            f"every cache layer filled to {a.context:,} tokens, batch 1, {a.steps} greedy decode steps after {a.warmup}; "
            f"{platform.node()} ({platform.machine()}), MLX {mx.__version__}, mlx_kvq {mlx_kvq.__version__}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; model built in {t_model:.1f} s, whole run "
            f"{time.perf_counter() - t_start:.1f} s")
    md = ['# Distributed decode: ' + head, '',
          '| kv | decode tokens/s (rank 0) | vs fp16 | KV bytes per rank | KV bytes all ranks | bits / value |',
          '| --- | --- | --- | --- | --- | --- |']
    md += [f"| {r['scheme']} | {r['tokens_per_s']:.2f} | {'-' if r['vs_fp16'] is None else format(r['vs_fp16'], '.2f')} | "
           f"{' / '.join(f'{b:,}' for b in r['kv_bytes_rank'])} | {r['kv_bytes_all_ranks']:,} | {r['bits_per_value']:.2f} |"
           for r in rows]
    md += ['', f"peak memory per rank (GB, weights included): {' / '.join(f'{x:.2f}' for x in peak)}",
           f"decode tokens/s per rank: " + '; '.join(f"{r['scheme']}: {' / '.join(f'{x:.2f}' for x in r['tokens_per_s_rank'])}" for r in rows)]
    text = '\n'.join(md) + '\n'
    print(text, flush=True)
    (out / 'distributed_decode.md').write_text(text)
    (out / 'distributed_decode.json').write_text(json.dumps(dict(header=head, backend=be, shared_gpu=shared, ranks=g.size(),
                                                                 command=' '.join(sys.argv), peak_memory_gb_rank=peak,
                                                                 rows=rows), indent=1))

if __name__ == '__main__': main()
