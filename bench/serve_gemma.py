"""`mlx-kvq serve` under load on the embedded Gemma 3 270M: fp16 (the model's own caches) vs affine:8,4 vs the
default scheme (auto:5), then the admission figure (how many concurrent 4K-token requests fit one --kv-budget).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python bench/serve_gemma.py

Sizes come from the environment (defaults: the issue's run): SERVE_CLIENTS=8, SERVE_REQUESTS=10 (per client),
SERVE_PROMPT_TOKENS=1500, SERVE_MAX_TOKENS=16, SERVE_SCHEMES="fp16 affine:8,4 auto:5", SERVE_BUDGET=1GB,
SERVE_ADMIT_TOKENS=4096, SERVE_ADMIT_RUN=1 (0: the admission figure from the accounting only), SERVE_NOTE (a paragraph
appended as "Size of this run"). `python bench/serve_gemma.py admission` keeps the load figures of the last full run
(bench/serve_gemma.json) and redoes only the admission part. Each scheme gets a fresh `python -m mlx_kvq serve` subprocess on 127.0.0.1 (port 0), driven
by `mlx_kvq.bench_serve.load_test` (the same code as `mlx-kvq bench-serve`). Writes bench/serve_gemma.{md,json} (SERVE_OUT),
the servers' output in SERVE_LOG_DIR (/tmp/serve_gemma_logs).
"""
import datetime, json, os, platform, re, signal, subprocess, sys, threading, time
from pathlib import Path

import mlx.core as mx
from mlx_kvq.models import load
from mlx_kvq.integrate import make_prompt_cache, cache_report, probe_kv_shapes
from mlx_kvq.cli import cache_nbytes
from mlx_kvq.serve import KVNeed, parse_bytes, _leaf_paths
from mlx_kvq.bench_serve import load_test, mixed_requests, serve_load_table, get_json, send_request

ROOT = Path(__file__).resolve().parents[1]
E = os.environ.get
CLIENTS, REQUESTS = int(E("SERVE_CLIENTS", 8)), int(E("SERVE_REQUESTS", 10))
PROMPT, MAX_TOKENS = int(E("SERVE_PROMPT_TOKENS", 1500)), int(E("SERVE_MAX_TOKENS", 16))
SCHEMES = E("SERVE_SCHEMES", "fp16 affine:8,4 auto:5").split()
BUDGET, ADMIT = parse_bytes(E("SERVE_BUDGET", "1GB")), int(E("SERVE_ADMIT_TOKENS", 4096))
OUT = Path(E("SERVE_OUT", ROOT / "bench" / "serve_gemma"))


LOGS = Path(E("SERVE_LOG_DIR", "/tmp/serve_gemma_logs"))


def start_server(kv, extra=()):
    "`python -m mlx_kvq serve` with stdout and stderr in SERVE_LOG_DIR/server_<scheme>.log; (process, url) once it listens."
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"server_{re.sub(r'[^A-Za-z0-9]+', '_', kv)}.log"
    p = subprocess.Popen([sys.executable, "-u", "-m", "mlx_kvq", "serve", "--kv", kv, "--host", "127.0.0.1", "--port", "0",
                          "--log-level", "WARNING", *extra], stdout=open(log_path, "w"), stderr=subprocess.STDOUT, text=True, env=env)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 900:
        m = re.search(r"at (http://127\.0\.0\.1:\d+)", log_path.read_text())
        if m: return p, m.group(1)
        if p.poll() is not None: break
        time.sleep(0.5)
    p.kill(); p.wait()
    raise RuntimeError(f"server for kv={kv} did not start; its log {log_path}:\n{log_path.read_text()[-3000:]}")


def stop_server(p):
    p.send_signal(signal.SIGINT)
    try: p.wait(60)
    except subprocess.TimeoutExpired: p.kill(); p.wait()


def filled_nbytes(model, kv, n, shapes):
    "nbytes of the scheme's caches after n tokens of random keys/values (no model forward: only the bytes matter)."
    caches = make_prompt_cache(model, kv)
    for path, c in _leaf_paths(caches):
        shp = shapes.get(path, (None, None))[1]
        if shp is None: continue
        H, dk, dv, _ = shp
        for s in range(0, n, 2048):           # the server's prefill chunks (--prefill-step-size 2048)
            m = min(2048, n - s)
            c.update_and_fetch(mx.random.normal((1, H, m, dk)), mx.random.normal((1, H, m, dv)))
            mx.eval([a for a in (getattr(c, "state", None) or []) if isinstance(a, mx.array)])
    return cache_nbytes(caches)


def admission_run(kv, admitted, tok):
    """Start `mlx-kvq serve --kv-budget BUDGET`, send `admitted + 3` concurrent ADMIT-token requests at once, and read from
    /metrics how many the server runs and how many it queues once all have arrived; then stop the server (the requests
    are not waited for: only the admission is checked)."""
    n = admitted + 3
    reqs = mixed_requests(n, ADMIT, MAX_TOKENS, tokenizer=tok, kinds=("text",), seed=1)
    p, url = start_server(kv, ("--kv-budget", str(BUDGET)))
    done = []                                  # answers that came back before the server was stopped (errors included)
    try:
        for body, _ in reqs:
            threading.Thread(target=lambda b: done.append(send_request(url, b, timeout=900)), args=(body,), daemon=True).start()
        t0, m = time.monotonic(), {}
        while time.monotonic() - t0 < 600:
            m = get_json(url, "/metrics", timeout=60)
            if m["requests_active"] + m["requests_queued"] + sum(m["requests_rejected"].values()) + len(done) >= n: break
            time.sleep(0.5)
        errors = [r["error"] for r in list(done) if r["error"]]
        return dict(sent=n, active=m.get("requests_active"), queued=m.get("requests_queued"), rejected=m.get("requests_rejected"),
                    reserved=m.get("kv_bytes_reserved"), answered=len(done), client_errors=len(errors),
                    first_error=str(errors[0]) if errors else None, seconds=time.monotonic() - t0)
    finally:
        p.kill(); p.wait()


def main(mode=""):
    model, tok = load(None)
    reqs = mixed_requests(CLIENTS * REQUESTS, PROMPT, MAX_TOKENS, tokenizer=tok)
    machine = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores (shared with other jobs), MLX {mx.__version__} "
               f"CPU{' + OpenBLAS' if 'openblas' in os.environ.get('LD_PRELOAD', '') else ''}, float32, "
               f"{datetime.date.today().isoformat()}")
    print(machine, flush=True)
    cmd = (f"SERVE_CLIENTS={CLIENTS} SERVE_REQUESTS={REQUESTS} SERVE_PROMPT_TOKENS={PROMPT} SERVE_MAX_TOKENS={MAX_TOKENS} "
           f"SERVE_BUDGET={E('SERVE_BUDGET', '1GB')} python bench/serve_gemma.py")
    if mode == "admission":                   # keep the load figures of the last full run, redo the admission part
        old = json.loads(OUT.with_suffix(".json").read_text())
        machine, cmd, rows, answers = old["machine"], old["command"], old["rows"], old["answers"]
        reqs = reqs[:len(next(iter(answers.values())))] if answers else reqs
    else:
        rows, answers = [], {}
        for kv in SCHEMES:
            p, url = start_server(kv)
            try:
                t0 = time.time()
                res = load_test(url, reqs, CLIENTS, timeout=3600)
                s = res["summary"]
                print(f"kv={kv}: {s['requests']} requests in {time.time() - t0:.0f} s, errors {s['errors']}", flush=True)
                bad = [r for r in res["results"] if r["error"]]
                if bad: print(f"kv={kv}: first error: {bad[0]['error']!r} (server log in {LOGS})", flush=True)
                rows.append({k: v for k, v in s.items() if not k.startswith("server_")} | {"server_after": s["server_after"]})
                answers[kv] = [r["text"] for r in res["results"]]
                OUT.with_suffix(".partial.json").write_text(json.dumps(dict(machine=machine, rows=rows, answers=answers), indent=1))
            finally: stop_server(p)
    # admission: how many concurrent ADMIT-token requests fit BUDGET per scheme
    shapes = probe_kv_shapes(model)
    admit = []
    for kv in SCHEMES:
        caches = make_prompt_cache(model, kv)
        need = KVNeed(caches, cache_report(caches, model), chunk=2048)(ADMIT + MAX_TOKENS)
        measured = filled_nbytes(model, kv, ADMIT, shapes)
        a = dict(scheme=kv, tokens=ADMIT, reserved_per_request=need, measured_nbytes=measured, budget=BUDGET, admitted=BUDGET // need)
        if E("SERVE_ADMIT_RUN", "1") != "0":
            a["run"] = admission_run(kv, a["admitted"], tok)
            print(f"kv={kv}: admission run {a['run']}", flush=True)
        admit.append(a)
    fp = next((a for a in admit if a["scheme"] == "fp16"), None)
    same = {kv: sum(a == b for a, b in zip(answers[kv], answers.get("fp16", []))) for kv in answers}
    md = [f"# `mlx-kvq serve` under load: embedded Gemma 3 270M", "", f"Machine: {machine}.", f"Command: `{cmd}`.", "",
          f"{CLIENTS} concurrent clients x {REQUESTS} requests each, ~{PROMPT}-token prompts (distinct pydoc slices), "
          f"{MAX_TOKENS} tokens generated, greedy, cycling text / text-stream / chat / chat-stream; one `mlx-kvq serve` "
          "process per scheme. TTFT of a non-streaming request is its whole latency; s/token is over the streamed ones.", "",
          serve_load_table(rows), "",
          "Answers identical to fp16's (greedy, same request): " + ", ".join(f"{k} {v}/{len(reqs)}" for k, v in same.items()), "",
          f"## Admission: concurrent {ADMIT}-token requests (+{MAX_TOKENS} generated) within --kv-budget {BUDGET:,} bytes", "",
          "Reserved per request is what the server's budget charges (the scheme's per-layer bytes per token x tokens, "
          "sliding layers bounded by their 512-token window plus one 2048-token prefill chunk, rounded up to the 256-token step); "
          f"measured is the caches' nbytes after {ADMIT} tokens of random keys/values fed in 2048-token chunks as the server's prefill does. "
          f"The run: `mlx-kvq serve --kv-budget {BUDGET:,}` receives admitted + 3 concurrent {ADMIT}-token requests at once; "
          "/metrics then shows how many it runs and how many wait (read once all have arrived; the server is stopped there).", "",
          "| scheme | reserved per request | measured nbytes | admitted within budget | vs fp16 | run: sent / running / queued | run: bytes reserved |",
          "| --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    for a in admit:
        r = a.get("run") or {}
        md.append(f"| {a['scheme']} | {a['reserved_per_request']:,} | {a['measured_nbytes']:,} | {a['admitted']} | "
                  f"{(a['admitted'] / fp['admitted']) if fp and fp['admitted'] else float('nan'):.2f}x | "
                  f"{r.get('sent', '-')} / {r.get('active', '-')} / {r.get('queued', '-')}"
                  f"{'' if not r.get('client_errors') else ' (' + str(r['client_errors']) + ' client errors)'} | {r.get('reserved') or 0:,} |")
    if E("SERVE_NOTE"): md += ["", "## Size of this run", "", E("SERVE_NOTE")]
    OUT.with_suffix(".md").write_text("\n".join(md) + "\n")
    OUT.with_suffix(".json").write_text(json.dumps(dict(machine=machine, command=cmd, rows=rows, admission=admit,
                                                        answers=answers, same_as_fp16=same), indent=1))
    OUT.with_suffix(".partial.json").unlink(missing_ok=True)
    print("\n".join(md))


if __name__ == "__main__": main(*sys.argv[1:2])
