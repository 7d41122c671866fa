"""Affine blocks on the CPU: `quantized_matmul` (reads the codes in place) vs decoding the block once and the BLAS matmul,
by the number of query tokens, and a one-layer prefill with the embedded Gemma's attention shape (4 query / 1 KV head,
head dim 256) per scheme. Justifies `attention._QMM_ROWS` (quantized_matmul up to 8 query rows per KV head).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python bench/affine_prefill_cpu.py > bench/affine_prefill_cpu.md
"""
import datetime, os, platform, time
import mlx.core as mx
import mlx_kvq.attention as A
from mlx_kvq.tiny import tiny_model
from mlx_kvq.integrate import make_prompt_cache

L = int(os.environ.get("PREFILL_TOKENS", 1500))
model = tiny_model("llama", max_params=10**9, num_hidden_layers=1, hidden_size=1024, num_attention_heads=4,
                   num_key_value_heads=1, head_dim=256, intermediate_size=512, vocab_size=100)
print(f"# Affine attention on the CPU: quantized_matmul vs decode + BLAS\n\nMachine: {platform.system()} {platform.machine()}, "
      f"{os.cpu_count()} cores (shared with other jobs), MLX {mx.__version__} CPU"
      f"{' + OpenBLAS' if 'openblas' in os.environ.get('LD_PRELOAD', '') else ''}, float32, {datetime.date.today()}. "
      "Command: `python bench/affine_prefill_cpu.py`. One llama layer with Gemma 3 270M's attention shape "
      "(4 query heads, 1 KV head, head dim 256), median of 5 (query-token table) or best of 2 (prefill).\n")

def med(f, n=5):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2]

x = mx.random.randint(0, 100, (2, L))
cache = make_prompt_cache(model, "affine:8,4"); mx.eval(model(x, cache=cache))
print(f"## Attention of Lq new tokens over {L} cached affine:8,4 tokens, batch 2 (ms for the whole layer)\n")
print("| query tokens Lq | rows per KV head (4 Lq) | quantized_matmul | decode + matmul | chosen by `_QMM_ROWS` |\n| ---: | ---: | ---: | ---: | --- |")
on_gpu, qmm_rows = A._on_gpu, A._QMM_ROWS
for lq in (1, 2, 4, 8, 16, 32):
    res = {}
    for tag, f in (("qmm", lambda: False), ("deq", lambda: True)):   # _on_gpu() True: the decode path
        A._on_gpu, A._QMM_ROWS = f, 10**9
        def step():
            mx.eval(model(x[:, :lq], cache=cache))
            for c in cache: c.trim(lq)
        res[tag] = med(step)
    A._on_gpu, A._QMM_ROWS = on_gpu, qmm_rows
    print(f"| {lq} | {4 * lq} | {res['qmm'] * 1e3:.1f} | {res['deq'] * 1e3:.1f} | {'quantized_matmul' if 4 * lq <= A._QMM_ROWS else 'decode + matmul'} |")

print(f"\n## Prefill of {L} tokens through the layer (s)\n\n| scheme | batch 1 | batch 2 |\n| --- | ---: | ---: |")
for kv in ("fp16", "affine:8,4", "affine:8,4 quantized_matmul always", "affine:8", "turbo:4"):
    row = []
    A._QMM_ROWS = 10**9 if kv.endswith("always") else qmm_rows   # the rule before _QMM_ROWS: every row count by quantized_matmul
    for B in (1, 2):
        xb = x[:B]
        def pre(): mx.eval(model(xb, cache=make_prompt_cache(model, kv.split()[0])))
        row.append(min(med(pre, 1) for _ in range(2)))
    print(f"| {kv} | {row[0]:.2f} | {row[1]:.2f} |")
A._QMM_ROWS = qmm_rows
print("\n(fp16 is the model's own cache, which holds float32 here.)")
