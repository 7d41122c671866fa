"""GPU load run for the lead (not run by its author: no device time was used): `mlx-kvq serve` on a random-weight
Llama-3.2-1B-shaped model (16 layers, hidden 2048, 32 query / 8 KV heads, head dim 64, vocab 128256, float16) with
~16K-token prompts, N concurrent clients; generated tokens/s and TTFT per scheme vs fp16, KV bytes.

    python bench/serve_gpu_llama.py                   # on the GPU machine (mlx[cuda13] installed, package importable)

Environment (defaults in brackets): SERVE_SCHEMES ["fp16 affine:8,4 affine:4 turbo:4 turbo:3"], SERVE_CLIENTS [8],
SERVE_REQUESTS [2] per client, SERVE_PROMPT_TOKENS [16384], SERVE_MAX_TOKENS [64], SERVE_DTYPE [float16],
SERVE_MODEL_DIR [/tmp/llama32_1b_random], SERVE_OUT [bench/serve_gpu_llama]; shape overrides for a quick check on CPU:
SERVE_LAYERS [16], SERVE_HIDDEN [2048], SERVE_HEADS [32], SERVE_KV_HEADS [8], SERVE_INTERMEDIATE [8192], SERVE_VOCAB [128256].
Prompts are random words of a word-level tokenizer (one token each), distinct per request (no prompt-cache reuse).
Writes SERVE_OUT.{md,json}.
"""
import datetime, json, os, platform, re, signal, subprocess, sys, time
from pathlib import Path

import numpy as np
import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models import llama
from mlx_lm.utils import save_model, save_config

from mlx_kvq.tiny import write_word_tokenizer
from mlx_kvq.bench_serve import load_test, serve_load_table

ROOT = Path(__file__).resolve().parents[1]
E = os.environ.get
SCHEMES = E("SERVE_SCHEMES", "fp16 affine:8,4 affine:4 turbo:4 turbo:3").split()
CLIENTS, REQUESTS = int(E("SERVE_CLIENTS", 8)), int(E("SERVE_REQUESTS", 2))
PROMPT, MAX_TOKENS, DTYPE = int(E("SERVE_PROMPT_TOKENS", 16384)), int(E("SERVE_MAX_TOKENS", 64)), E("SERVE_DTYPE", "float16")
MODEL_DIR, OUT = Path(E("SERVE_MODEL_DIR", "/tmp/llama32_1b_random")), Path(E("SERVE_OUT", ROOT / "bench" / "serve_gpu_llama"))
SHAPE = dict(num_hidden_layers=int(E("SERVE_LAYERS", 16)), hidden_size=int(E("SERVE_HIDDEN", 2048)),
             num_attention_heads=int(E("SERVE_HEADS", 32)), num_key_value_heads=int(E("SERVE_KV_HEADS", 8)),
             intermediate_size=int(E("SERVE_INTERMEDIATE", 8192)), vocab_size=int(E("SERVE_VOCAB", 128256)))


def write_model():
    "A random-weight Llama-3.2-1B-shaped mlx-lm directory with a word-level tokenizer (w0 ... wN, one token per word)."
    if (MODEL_DIR / "config.json").is_file(): return
    mx.random.seed(0)
    args = llama.ModelArgs(model_type="llama", rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                           max_position_embeddings=131072, head_dim=SHAPE["hidden_size"] // SHAPE["num_attention_heads"], **SHAPE)
    model = llama.Model(args)
    model.update(tree_map(lambda w: w.astype(getattr(mx, DTYPE)), model.parameters()))
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    save_model(str(MODEL_DIR), model)
    save_config({k: v for k, v in vars(args).items() if v is not None}, MODEL_DIR / "config.json")
    write_word_tokenizer(MODEL_DIR, ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(SHAPE["vocab_size"] - 3)])


def start_server(kv):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.Popen([sys.executable, "-m", "mlx_kvq", "serve", "--model", str(MODEL_DIR), "--kv", kv, "--dtype", DTYPE,
                          "--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING", "--decode-concurrency", str(CLIENTS),
                          "--prompt-concurrency", str(CLIENTS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    for line in p.stdout:
        m = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        if m: return p, m.group(1)
    p.kill(); raise RuntimeError(f"server for kv={kv} did not start")


def main():
    write_model()
    rng = np.random.default_rng(0)
    n_words = SHAPE["vocab_size"] - 3
    reqs = [(dict(prompt=" ".join(f"w{i}" for i in rng.integers(0, n_words, PROMPT - 1)), max_tokens=MAX_TOKENS,
                  temperature=0, stream=True), False) for _ in range(CLIENTS * REQUESTS)]
    machine = f"{platform.node()} {platform.machine()}, MLX {mx.__version__} {mx.default_device()}, {DTYPE}, {datetime.date.today()}"
    rows = []
    for kv in SCHEMES:
        p, url = start_server(kv)
        try:
            load_test(url, reqs[:1], 1, timeout=3600)                  # warm-up (kernels, first allocation)
            s = load_test(url, reqs, CLIENTS, timeout=3600)["summary"]
        finally:
            p.send_signal(signal.SIGINT)
            try: p.wait(60)
            except subprocess.TimeoutExpired: p.kill()
        rows.append({k: v for k, v in s.items() if not k.startswith("server_")})
        print(f"kv={kv}: {s['generated_tokens_per_s']:.1f} gen tok/s, errors {s['errors']}", flush=True)
    fp = next((r for r in rows if r["scheme"] == "fp16"), None)
    cmd = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("SERVE_")) + " python bench/serve_gpu_llama.py"
    md = ["# `mlx-kvq serve` under load on a GPU: random-weight Llama-3.2-1B shape", "", f"Machine: {machine}.",
          f"Command: `{cmd.strip()}`.", "", f"{CLIENTS} clients x {REQUESTS} requests, {PROMPT}-token prompts, {MAX_TOKENS} "
          "generated tokens, streaming, greedy; one warm-up request per scheme first.", "", serve_load_table(rows), "",
          "| scheme | gen tok/s vs fp16 | prompt+gen tok/s vs fp16 | peak running KV bytes vs fp16 |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        if fp: md.append(f"| {r['scheme']} | {r['generated_tokens_per_s'] / fp['generated_tokens_per_s']:.2f}x | "
                         f"{(r['prompt_tokens'] + r['generated_tokens']) / r['wall_s'] / ((fp['prompt_tokens'] + fp['generated_tokens']) / fp['wall_s']):.2f}x | "
                         f"{r['peak_kv_bytes_active'] / max(fp['peak_kv_bytes_active'], 1):.3f} |")
    OUT.with_suffix(".md").write_text("\n".join(md) + "\n")
    OUT.with_suffix(".json").write_text(json.dumps(dict(machine=machine, command=cmd, rows=rows), indent=1))
    print("\n".join(md))


if __name__ == "__main__": main()
