"""`mlx-kvq serve` under load on a random-weight Llama-3.2-1B-shaped model (16 layers, hidden 2048, 32 query / 8 KV
heads, head dim 64, vocab 128256) with ~16K-token prompts: generated tokens/s and TTFT per scheme vs fp16, KV bytes.

    python bench/serve_gpu_llama.py OUTDIR            # GPU: mlx[cuda13] installed, the repo on PYTHONPATH

The GPU run (defaults: 8 clients x 1 request of 16,384 tokens, 32 generated, fp16 / affine:8,4 / turbo:4, float16;
no further scheme starts after 110 s, a request taking over 90 s is an error, 4 prompts prefilled together):
`SERVE_DEADLINE=110 SERVE_TIMEOUT=90 SERVE_PROMPT_CONCURRENCY=4 python bench/serve_gpu_llama.py $OUT/serve_gpu`.
(MLX's CUDA SDPA takes only one query token; a prefill chunk goes through its fallback, which holds the scores of the
whole batch: 8 prompts x 32 heads x 2,048 x 16,384 in float16 are 17 GB per layer before the softmax's copies, and the
CPU run measured a peak of about 2.4x the scores. 4 prompts at a time halve that; decoding still batches all 8.)
The same code at a tiny shape on a CPU (15 s on the 2-core development machine when it was quiet, 2026-11-24):
`SERVE_DTYPE=float32 SERVE_LAYERS=2 SERVE_HIDDEN=256 SERVE_HEADS=4 SERVE_KV_HEADS=2 SERVE_INTERMEDIATE=512 SERVE_VOCAB=1000
SERVE_PROMPT_TOKENS=1024 SERVE_MODEL_DIR=/tmp/llama_tiny python bench/serve_gpu_llama.py /tmp/serve_gpu_tiny`.

Writes into OUTDIR: serve_gpu_llama.md and .json (rewritten after every scheme, so a run stopped early keeps what it
measured), server_<scheme>.log (the server's stdout and stderr: its start line, cache report, prompt progress and any
traceback), answers_<scheme>.json (every request's status, error, tokens and times), direct.json (the in-process check).

Before any server starts, an in-process check runs one prompt, then a batch of two, of the full length through each
scheme's caches without the server (chunked prefill as the server does, then a few greedy tokens) and records an exception, non-finite
logits and peak memory per scheme, so a failure under the server can be told apart from a failure of the cache itself.

Environment (defaults in brackets): SERVE_SCHEMES ["fp16 affine:8,4 turbo:4"], SERVE_CLIENTS [8], SERVE_REQUESTS [1]
per client, SERVE_PROMPT_TOKENS [16384], SERVE_MAX_TOKENS [32], SERVE_DTYPE [float16], SERVE_TIMEOUT [300] seconds per
request, SERVE_DIRECT [1] (0 skips the in-process check), SERVE_DEADLINE [0: none] seconds after which no further
scheme starts, SERVE_PROMPT_CONCURRENCY [SERVE_CLIENTS] and SERVE_PREFILL_STEP [2048] (the server's
--prompt-concurrency and --prefill-step-size), SERVE_MODEL_DIR [/tmp/llama32_1b_random]; shape overrides for
a run on a CPU: SERVE_LAYERS [16], SERVE_HIDDEN [2048], SERVE_HEADS [32], SERVE_KV_HEADS [8], SERVE_INTERMEDIATE
[8192], SERVE_VOCAB [128256]. Prompts are random words of a word-level tokenizer (one token each), distinct per request
(no prompt-cache reuse). The default scheme for a model other than the embedded Gemma is fp16 (auto:B needs a
calibration probe of the model), so auto:5 is not in the default list.
"""
import datetime, json, os, platform, re, signal, subprocess, sys, threading, time, traceback
from pathlib import Path

import numpy as np
import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models import llama
from mlx_lm.models.cache import make_prompt_cache as lm_prompt_cache
from mlx_lm.utils import save_model, save_config

from mlx_kvq.tiny import write_word_tokenizer
from mlx_kvq.integrate import make_prompt_cache
from mlx_kvq.cli import cache_nbytes
from mlx_kvq.bench_serve import load_test, serve_load_table, get_json

ROOT = Path(__file__).resolve().parents[1]
E = os.environ.get
SCHEMES = E("SERVE_SCHEMES", "fp16 affine:8,4 turbo:4").split()
CLIENTS, REQUESTS = int(E("SERVE_CLIENTS", 8)), int(E("SERVE_REQUESTS", 1))
PROMPT, MAX_TOKENS, DTYPE = int(E("SERVE_PROMPT_TOKENS", 16384)), int(E("SERVE_MAX_TOKENS", 32)), E("SERVE_DTYPE", "float16")
TIMEOUT, DIRECT = float(E("SERVE_TIMEOUT", 300)), E("SERVE_DIRECT", "1") != "0"
DEADLINE = float(E("SERVE_DEADLINE", 0))            # seconds; 0: none. A scheme starts only before it
PREFILL_STEP = int(E("SERVE_PREFILL_STEP", 2048))   # mlx_lm.server's --prefill-step-size (its default 2048)
PROMPT_CONC = int(E("SERVE_PROMPT_CONCURRENCY", 0)) or CLIENTS   # --prompt-concurrency: prompts prefilled together
MODEL_DIR = Path(E("SERVE_MODEL_DIR", "/tmp/llama32_1b_random"))
SHAPE = dict(num_hidden_layers=int(E("SERVE_LAYERS", 16)), hidden_size=int(E("SERVE_HIDDEN", 2048)),
             num_attention_heads=int(E("SERVE_HEADS", 32)), num_key_value_heads=int(E("SERVE_KV_HEADS", 8)),
             intermediate_size=int(E("SERVE_INTERMEDIATE", 8192)), vocab_size=int(E("SERVE_VOCAB", 128256)))


def log(*a): print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def write_model():
    "A random-weight Llama-3.2-1B-shaped mlx-lm directory with a word-level tokenizer (w0 ... wN, one token per word)."
    cfg = MODEL_DIR / "config.json"
    if cfg.is_file():
        old = json.loads(cfg.read_text())
        if all(old.get(k) == v for k, v in SHAPE.items()) and old.get("kvq_dtype") == DTYPE: return
    mx.random.seed(0)
    args = llama.ModelArgs(model_type="llama", rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                           max_position_embeddings=131072, head_dim=SHAPE["hidden_size"] // SHAPE["num_attention_heads"], **SHAPE)
    model = llama.Model(args)
    model.update(tree_map(lambda w: w.astype(getattr(mx, DTYPE)), model.parameters()))
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    save_model(str(MODEL_DIR), model)
    write_word_tokenizer(MODEL_DIR, ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(SHAPE["vocab_size"] - 3)])
    save_config({**{k: v for k, v in vars(args).items() if v is not None}, "kvq_dtype": DTYPE}, cfg)


def direct_check(model, rows, kv):
    """`rows` prompts of one length without the server: chunked prefill through the scheme's caches as one batch, then
    greedy tokens; what went wrong (exception, non-finite logits), the time and the peak memory."""
    out = dict(scheme=kv, batch=len(rows), error=None, finite=None, tokens=None, seconds=None, kv_bytes=None, peak_memory=None)
    mx.reset_peak_memory(); t0 = time.perf_counter()
    try:
        caches = lm_prompt_cache(model) if kv == "fp16-mlx-lm" else make_prompt_cache(model, kv)
        x = mx.array(rows); n = x.shape[1]
        for s in range(0, n - 1, PREFILL_STEP):
            model(x[:, s:min(s + PREFILL_STEP, n - 1)], cache=caches)
            mx.eval([c.state for c in caches])
        tok, toks, finite = x[:, -1:], [], True
        for _ in range(4):
            logits = model(tok, cache=caches)[:, -1].astype(mx.float32)
            finite = finite and bool(mx.all(mx.isfinite(logits)).item())
            tok = mx.argmax(logits, axis=-1, keepdims=True); toks.append(tok[:, 0].tolist())
        out.update(finite=finite, tokens=[list(t) for t in zip(*toks)], kv_bytes=cache_nbytes(caches))
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"; out["traceback"] = traceback.format_exc()
    out["seconds"], out["peak_memory"] = time.perf_counter() - t0, mx.get_peak_memory()
    return out


def start_server(kv, log_path):
    "`python -m mlx_kvq serve` with its stdout and stderr in `log_path`; returns (process, url) once it listens."
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    f = open(log_path, "w")
    p = subprocess.Popen([sys.executable, "-u", "-m", "mlx_kvq", "serve", "--model", str(MODEL_DIR), "--kv", kv, "--dtype", DTYPE,
                          "--host", "127.0.0.1", "--port", "0", "--log-level", "INFO", "--decode-concurrency", str(CLIENTS),
                          "--prompt-concurrency", str(PROMPT_CONC), "--prefill-step-size", str(PREFILL_STEP)], stdout=f, stderr=subprocess.STDOUT, text=True, env=env)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 600:
        m = re.search(r"at (http://127\.0\.0\.1:\d+)", log_path.read_text())
        if m: return p, m.group(1)
        if p.poll() is not None: break
        time.sleep(0.2)
    p.kill(); p.wait()
    raise RuntimeError(f"server for kv={kv} did not start (exit {p.returncode}); its log:\n{tail(log_path)}")


def stop_server(p):
    if p.poll() is not None: return p.returncode
    p.send_signal(signal.SIGINT)
    try: p.wait(60)
    except subprocess.TimeoutExpired: p.kill(); p.wait()
    return None


def tail(path, n=40):
    lines = Path(path).read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


def machine():
    dev = mx.default_device()
    try: name = mx.device_info().get("device_name", "")
    except Exception: name = ""
    return f"{platform.node()} {platform.machine()}, MLX {mx.__version__} {dev} {name}".strip() + f", {DTYPE}, {datetime.date.today()}"


def main(out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    write_model()
    log(f"model dir {MODEL_DIR} ready ({time.perf_counter() - t_start:.1f} s)")
    rng = np.random.default_rng(0)
    n_words = SHAPE["vocab_size"] - 3
    prompts = [" ".join(f"w{i}" for i in rng.integers(0, n_words, PROMPT - 1)) for _ in range(CLIENTS * REQUESTS + 1)]
    reqs = [(dict(prompt=p, max_tokens=MAX_TOKENS, temperature=0, stream=True), False) for p in prompts[1:]]
    warm = [(dict(prompt=prompts[0], max_tokens=MAX_TOKENS, temperature=0, stream=True), False)]
    cmd = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("SERVE_")) + f" python bench/serve_gpu_llama.py {out_dir}"
    direct = []
    if DIRECT:
        from mlx_kvq.models import load
        model, tok = load(str(MODEL_DIR), dtype=getattr(mx, DTYPE))
        ids = [tok.encode(p) for p in prompts[:2]]
        log(f"in-process check: {len(ids[0])}-token prompts, {model.layers[0].self_attn.n_heads} heads, {DTYPE}")
        for kv in ["fp16-mlx-lm", *SCHEMES]:
            for rows in (ids[:1], ids[:2]):
                d = direct_check(model, rows, kv); direct.append(d)
                log(f"  direct kv={kv} batch {len(rows)}: {'ERROR ' + d['error'] if d['error'] else 'ok'}, finite logits {d['finite']}, "
                    f"tokens {d['tokens']}, {d['seconds']:.1f} s, KV {d['kv_bytes']}, peak memory {d['peak_memory'] / 1e9:.2f} GB")
                mx.clear_cache()
        del model; mx.clear_cache()
        (out_dir / "direct.json").write_text(json.dumps(direct, indent=1))
    rows, notes = [], []
    for kv in SCHEMES:
        if DEADLINE and time.perf_counter() - t_start > DEADLINE:
            log(f"kv={kv}: skipped (SERVE_DEADLINE {DEADLINE:.0f} s passed)"); notes.append(f"kv={kv}: not run (SERVE_DEADLINE passed)"); continue
        name = re.sub(r"[^A-Za-z0-9]+", "_", kv)
        log_path = out_dir / f"server_{name}.log"
        t0 = time.perf_counter()
        try: p, url = start_server(kv, log_path)
        except RuntimeError as e:
            log(str(e)); notes.append(f"kv={kv}: the server did not start (see server_{name}.log)"); continue
        log(f"kv={kv}: server at {url} after {time.perf_counter() - t0:.1f} s")
        try:
            w = load_test(url, warm, 1, timeout=TIMEOUT)                # warm-up (kernels, first allocation)
            wr = w["results"][0]
            log(f"kv={kv}: warm-up {wr['seconds']:.1f} s, status {wr['status']}, {wr['completion_tokens']} tokens, error {wr['error']}")
            res = load_test(url, reqs, CLIENTS, timeout=TIMEOUT)
            s = res["summary"]
            try: health = get_json(url, "/health", timeout=10)
            except Exception as e: health = {"status": f"no answer ({type(e).__name__}: {e})"}
        finally:
            rc = stop_server(p)
        (out_dir / f"answers_{name}.json").write_text(json.dumps(dict(warm_up=wr, results=res["results"]), indent=1))
        row = {k: v for k, v in s.items() if not k.startswith("server_")}
        row.update(health=health.get("status"), server_exit=rc, warm_up_error=wr["error"])
        rows.append(row)
        log(f"kv={kv}: {s['generated_tokens_per_s']:.1f} gen tok/s, {s['prompt_tokens'] / s['wall_s']:.0f} prompt tok/s, "
            f"TTFT p50 {s['ttft_p50_s']}, errors {s['errors']}, server health {row['health']}, "
            f"{'server died with exit ' + str(rc) if rc is not None else 'server alive'}, {time.perf_counter() - t0:.1f} s in all")
        bad = [r for r in [wr, *res["results"]] if r["error"]]
        if bad:
            log(f"kv={kv}: {len(bad)} failed; first error: {bad[0]['error']!r}")
            log(f"kv={kv}: last lines of server_{name}.log:\n{tail(log_path)}")
            notes.append(f"kv={kv}: {len(bad)} requests failed (warm-up included); first error: `{str(bad[0]['error'])[:300]}`")
        write_report(out_dir, rows, direct, notes, cmd, time.perf_counter() - t_start)
    write_report(out_dir, rows, direct, notes, cmd, time.perf_counter() - t_start)
    log(f"done in {time.perf_counter() - t_start:.1f} s; wrote {out_dir}")


def write_report(out_dir, rows, direct, notes, cmd, seconds):
    fp = next((r for r in rows if r["scheme"] == "fp16" and not r["errors"] and r["generated_tokens"]), None)
    md = ["# `mlx-kvq serve` under load: random-weight Llama-3.2-1B shape", "", f"Machine: {machine()}.",
          f"Command: `{cmd.strip()}` ({seconds:.0f} s in all, model creation included).", "",
          f"{CLIENTS} clients x {REQUESTS} requests, {PROMPT}-token prompts, {MAX_TOKENS} generated tokens, streaming, greedy; "
          f"server flags --decode-concurrency {CLIENTS} --prompt-concurrency {PROMPT_CONC} --prefill-step-size {PREFILL_STEP}; "
          "one warm-up request per scheme first. Shape: " + ", ".join(f"{k} {v}" for k, v in SHAPE.items()) + ".", "",
          serve_load_table(rows), "",
          "| scheme | gen tok/s vs fp16 | prompt+gen tok/s vs fp16 | peak running KV bytes vs fp16 | server after the load |",
          "| --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        rel = lambda a, b: f"{a / b:.2f}x" if fp and b else "-"
        md.append(f"| {r['scheme']} | {rel(r['generated_tokens_per_s'], fp and fp['generated_tokens_per_s'])} | "
                  f"{rel((r['prompt_tokens'] + r['generated_tokens']) / r['wall_s'], fp and (fp['prompt_tokens'] + fp['generated_tokens']) / fp['wall_s'])} | "
                  f"{rel(r['peak_kv_bytes_active'] or 0, fp and fp['peak_kv_bytes_active'])} | "
                  f"{r['health']}{'' if r['server_exit'] is None else ', exited ' + str(r['server_exit'])} |")
    if direct:
        md += ["", "In-process check (batches of 1 and 2 prompts of the full length, no server; fp16-mlx-lm is mlx-lm's own cache):", "",
               "| scheme | batch | error | finite logits | greedy tokens | seconds | KV bytes | peak memory GB |",
               "| --- | ---: | --- | --- | --- | ---: | ---: | ---: |"]
        for d in direct:
            md.append(f"| {d['scheme']} | {d['batch']} | {(d['error'] or '')[:200]} | {d['finite']} | {d['tokens']} | {d['seconds']:.1f} | "
                      f"{d['kv_bytes'] if d['kv_bytes'] is not None else '-'} | {d['peak_memory'] / 1e9:.2f} |")
    if notes: md += ["", "Failures:", ""] + [f"- {n}" for n in notes]
    (out_dir / "serve_gpu_llama.md").write_text("\n".join(md) + "\n")
    (out_dir / "serve_gpu_llama.json").write_text(json.dumps(dict(machine=machine(), command=cmd, seconds=seconds, shape=SHAPE,
                                                                  rows=rows, direct=direct, notes=notes), indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2: sys.exit("usage: python bench/serve_gpu_llama.py OUTDIR")
    main(Path(sys.argv[1]))
