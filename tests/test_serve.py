"""`mlx-kvq serve` under load on a tiny random model, loopback only, every wait bounded.

- 8 clients x 4 mixed requests (text / chat, streaming or not) with bad requests sent while the load runs: 0 errors
  in the load, every greedy answer equal to the same request alone with the same scheme, each bad request 4xx;
- a client that disconnects mid-stream: its request stops and the running caches' bytes return to the
  pre-request level;
- the official `openai` client for completions, chat and streaming;
- prompt-cache reuse with compressed caches (the cached prompt's bytes are the scheme's bytes);
- `--kv-budget`: requests beyond the budget queue, a request larger than the budget is refused;
- `--max-kv-size`: prompts longer than the window are served like the bounded cache alone;
- `python -m mlx_kvq serve` as a user runs it, and one-line errors for bad command lines."""
import json, os, signal, socket, subprocess, sys, threading, time, urllib.request, urllib.error
from pathlib import Path

import numpy as np
import pytest
import mlx_lm.server as S
from mlx_lm import generate

from mlx_kvq.cli import build_parser, write_tiny_model
from mlx_kvq.models import load
from mlx_kvq.integrate import make_prompt_cache, cache_report
from mlx_kvq.schemes import cache_scheme
from mlx_kvq.serve import KVQServer, KVNeed
from mlx_kvq.bench_serve import load_test, mixed_requests, send_request, get_json

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 256
WORDS = "the capital of france is paris germany berlin a an and city river big small old new north south east west".split()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("tiny"))
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": CONTEXT}))
    model, tok = load(str(path))
    return path, model, tok


def server(path, kv, *extra):
    return KVQServer(build_parser().parse_args(["serve", "--model", str(path), "--port", "0", "--kv", kv,
                                                "--log-level", "WARNING", *extra])).start()


def alone(model, tok, srv, body, chat, kv, **opts):
    "`mlx_lm.generate` on the request's prompt tokens with a fresh cache of the same scheme, nothing else running."
    req = S.CompletionRequest("chat" if chat else "text", body.get("prompt", ""), body.get("messages", []), None, None)
    return generate(model, tok, srv.prompt_tokens(req), max_tokens=body["max_tokens"],
                    prompt_cache=make_prompt_cache(model, kv, **opts))


def text(n, seed):
    return " ".join(np.random.default_rng(seed).choice(WORDS, n))


def raw_post(url, data: bytes, path="/v1/completions"):
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r: return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e: return e.code, json.loads(e.read())


BAD = [  # (what, body or raw bytes, path, expected status)
    ("malformed JSON", b'{"prompt": "the city", "max_tokens": ', "/v1/completions", 400),
    ("not an object", b'["the city"]', "/v1/completions", 400),
    ("unknown model", dict(model="no/such-model", prompt="the city", max_tokens=3), "/v1/completions", 404),
    ("negative max_tokens", dict(prompt="the city", max_tokens=-5), "/v1/completions", 400),
    ("huge max_tokens", dict(prompt="the city", max_tokens=10**9), "/v1/completions", 400),
    ("empty prompt", dict(prompt="", max_tokens=3), "/v1/completions", 400),
    ("no messages", dict(messages=[], max_tokens=3), "/v1/chat/completions", 400),
    ("prompt longer than the context", dict(prompt=text(CONTEXT + 40, 9), max_tokens=3), "/v1/completions", 400),
    ("scheme not allowed", dict(prompt="the city", max_tokens=3, kv="turbo:3"), "/v1/completions", 400),
    ("scheme unknown", dict(prompt="the city", max_tokens=3, kv="turbo:9"), "/v1/completions", 400),
]


def test_load_with_bad_requests(tiny):
    path, model, tok = tiny
    kv = "affine:4"
    reqs = mixed_requests(32, 12, 24, text=text(4000, 0))
    with server(path, kv) as srv:
        box = {}
        load = threading.Thread(target=lambda: box.update(res=load_test(srv.url, reqs, clients=8, timeout=120)))
        load.start()
        t0 = time.monotonic()
        while srv.budget.active == 0 and time.monotonic() - t0 < 60: time.sleep(0.005)
        bad = []
        for what, body, p, code in BAD:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            bad.append((what, *raw_post(srv.url, data, p), code))
        during = load.is_alive()                         # every bad request was answered while the load ran
        same_scheme = raw_post(srv.url, json.dumps(dict(prompt="the city", max_tokens=3, kv=kv)).encode())
        load.join(180)
        t0 = time.monotonic()
        while True:    # each handler releases its reservation just after its response's last bytes
            health = get_json(srv.url, "/health")
            if health["requests_active"] == 0 or time.monotonic() - t0 > 10: break
            time.sleep(0.05)
        refs = [alone(model, tok, srv, b, c, kv) for b, c in reqs]
    res = box["res"]
    assert during, "the load finished before the bad requests were answered: make it longer"
    for what, status, resp, code in bad:
        assert status == code and isinstance(resp.get("error"), str) and resp["error"], (what, status, resp)
    assert same_scheme[0] == 200, same_scheme                # naming the server's own scheme is allowed
    assert res["summary"]["errors"] == 0, [r["error"] for r in res["results"] if r["error"]]
    assert [r["text"] for r in res["results"]] == refs       # unchanged by the bad requests, equal to each alone
    assert res["summary"]["peak_requests_active"] > 1
    assert health["status"] == "ok" and health["requests_rejected"] == {"400": 6, "404": 1}, health
    # (malformed JSON, a non-object body and a negative max_tokens are answered by mlx-lm's own checks, not counted here)
    assert health["requests_active"] == 0 and health["kv_bytes_active"] == 0, health


def test_disconnect_frees_cache(tiny):
    path, model, tok = tiny
    with server(path, "turbo:3") as srv:
        before = get_json(srv.url, "/metrics")
        body = json.dumps(dict(prompt=text(40, 1), max_tokens=CONTEXT, temperature=0, stream=True)).encode()
        s = socket.create_connection((srv.host, srv.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while b"data: " not in got: got += s.recv(4096)      # streaming has begun
        during = get_json(srv.url, "/metrics")
        s.close()                                            # hang up mid-stream
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            after = get_json(srv.url, "/metrics")
            if after["requests_active"] == 0 and after["kv_bytes_active"] == before["kv_bytes_active"]: break
            time.sleep(0.05)
        again = send_request(srv.url, dict(prompt="the city", max_tokens=4, temperature=0))
    assert before["kv_bytes_active"] == 0 and during["kv_bytes_active"] > 0 and during["requests_active"] == 1, during
    assert after["requests_active"] == 0 and after["kv_bytes_active"] == before["kv_bytes_active"], after
    assert after["disconnects"] == 1 and after["tokens_active"] == 0, after
    assert again["status"] == 200 and again["error"] is None   # and the server goes on serving


def test_openai_client(tiny):
    openai = pytest.importorskip("openai")
    path, model, tok = tiny
    kv = "affine:8,4"
    with server(path, kv) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="not-needed", max_retries=0, timeout=60)
        p, msgs = text(12, 2), [{"role": "user", "content": text(10, 3)}]
        comp = client.completions.create(model="default_model", prompt=p, max_tokens=6, temperature=0)
        chat = client.chat.completions.create(model="default_model", messages=msgs, max_tokens=6, temperature=0)
        stream = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model="default_model", messages=msgs, max_tokens=6, temperature=0, stream=True) if ch.choices)
        cstream = "".join(ch.choices[0].text or "" for ch in client.completions.create(
            model="default_model", prompt=p, max_tokens=6, temperature=0, stream=True) if ch.choices)
        with pytest.raises(openai.BadRequestError) as bad:
            client.completions.create(model="default_model", prompt="", max_tokens=3)
        with pytest.raises(openai.NotFoundError) as unknown:
            client.chat.completions.create(model="gpt-4o", messages=msgs, max_tokens=3)
        ref_p = alone(model, tok, srv, dict(prompt=p, max_tokens=6), False, kv)
        ref_c = alone(model, tok, srv, dict(messages=msgs, max_tokens=6), True, kv)
    assert comp.choices[0].text == ref_p and cstream == ref_p
    assert chat.choices[0].message.content == ref_c and stream == ref_c
    assert comp.usage.prompt_tokens > 0 and comp.usage.completion_tokens == 6
    assert "prompt is empty" in bad.value.response.json()["error"]
    assert "not served here" in unknown.value.response.json()["error"]


def test_prefix_reuse_compressed(tiny):
    path, model, tok = tiny
    kv = "turbo:3"
    prefix = text(150, 4)
    a, b = dict(prompt=prefix + " the city", max_tokens=5), dict(prompt=prefix + " paris is a", max_tokens=5)
    with server(path, kv) as srv:
        ra = send_request(srv.url, dict(a, temperature=0))
        rb = send_request(srv.url, dict(b, temperature=0))
        m = get_json(srv.url, "/metrics")
        n_prefix = len(tok.encode(prefix))
        cached, _ = srv.prompt_cache.fetch_nearest_cache(srv.provider.model_key, tok.encode(b["prompt"]))
        report = cache_report(make_prompt_cache(model, kv), model)
        refs = [alone(model, tok, srv, x, False, kv) for x in (a, b)]
    assert [ra["text"], rb["text"]] == refs
    assert rb["cached_tokens"] >= n_prefix - 1, rb                   # the long shared prefix was reused
    assert {str(cache_scheme(c)) for c in cached} == {kv}            # cached prompts are the scheme's caches
    fp_bytes = report.bytes_per_token_before * (n_prefix + 5)        # one prompt's worth in the model's own cache
    assert 0 < m["kv_bytes_prompt_cache"] and m["kv_bytes_prompt_cache"] / m["prompt_cache_sequences"] < fp_bytes / 4, m


def test_budget_queues(tiny):
    path, model, tok = tiny
    kv = "affine:4"
    reqs = mixed_requests(6, 12, 30, text=text(2000, 5), kinds=("text",))
    caches = make_prompt_cache(model, kv)
    need = KVNeed(caches, cache_report(caches, model))
    unit = need(max(len(tok.encode(b["prompt"])) for b, _ in reqs) + 30)   # every request reserves this (one 256-token step)
    budget = int(2.5 * unit)                                                # room for two requests at a time
    with server(path, kv, "--kv-budget", str(budget)) as srv:
        res = load_test(srv.url, reqs, clients=6, timeout=120)
        m = get_json(srv.url, "/metrics")
        refs = [alone(model, tok, srv, b, c, kv) for b, c in reqs]
    assert res["summary"]["errors"] == 0 and [r["text"] for r in res["results"]] == refs
    assert m["kv_budget"] == budget and m["peak_requests_active"] == 2 and m["peak_requests_queued"] >= 1, m
    assert m["kv_bytes_held"] <= budget and m["requests_admitted"] == 6, m
    with server(path, kv, "--kv-budget", str(int(1.5 * unit))) as srv:     # one step fits, two never will
        too_big = send_request(srv.url, dict(prompt=text(60, 7), max_tokens=CONTEXT, temperature=0))
        fits = send_request(srv.url, dict(prompt="the city", max_tokens=4, temperature=0))
    assert too_big["status"] == 400 and "kv-budget" in too_big["error"], too_big
    assert fits["status"] == 200, fits


def test_max_kv_size_long_prompts(tiny):
    """Prompts longer than the window, three at once, each answer equal to the same request served alone (the
    batched rotating cache keeps no sink tokens, as mlx-lm's BatchRotatingKVCache, so alone means through the server)"""
    path, model, tok = tiny
    kv = "affine:8"
    reqs = [(dict(prompt=text(60, 6 + i), max_tokens=8, temperature=0), False) for i in range(3)]
    with server(path, kv, "--max-kv-size", "32") as srv:
        res = load_test(srv.url, reqs, clients=3, timeout=120)
        m = get_json(srv.url, "/metrics")
    with server(path, kv, "--max-kv-size", "32", "--prompt-cache-size", "0") as srv:
        refs = [send_request(srv.url, b)["text"] for b, _ in reqs]
    assert res["summary"]["errors"] == 0 and [r["text"] for r in res["results"]] == refs
    assert all(r["prompt_tokens"] > 32 for r in res["results"])      # every prompt is longer than the window
    assert m["peak_requests_active"] > 1, m


def _env():
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_serve_subprocess(tiny):
    path, model, tok = tiny
    kv = "affine:4"
    proc = subprocess.Popen([sys.executable, "-m", "mlx_kvq", "serve", "--model", str(path), "--kv", kv,
                             "--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        first = proc.stdout.readline()                      # "mlx-kvq serve: ... at http://127.0.0.1:PORT (...)"
        url = first.split(" at ")[1].split()[0]
        assert get_json(url, "/health")["status"] == "ok"
        r = send_request(url, dict(prompt="the capital of france is", max_tokens=5, temperature=0))
    finally:
        proc.send_signal(signal.SIGINT)
        try: proc.communicate(timeout=30)
        except subprocess.TimeoutExpired: proc.kill(); proc.communicate()
    assert f"with kv={kv} at http://127.0.0.1:" in first and "(batched: yes" in first, first
    assert r["text"] == generate(model, tok, "the capital of france is", max_tokens=5, prompt_cache=make_prompt_cache(model, kv))


def test_serve_bad_input_one_line(tiny, capsys):
    "Bad command lines: one line on stderr, exit status 2, nothing served (in process; one real process for a model-level error)."
    from mlx_kvq.cli import main
    path, _, _ = tiny
    for argv in (["--kv", "turbo:9"], ["--port", "99999"], ["--kv-budget", "lots"],
                 ["--model", str(path), "--kv", "affine:4", "--kv-group-size", "48"],
                 ["--model", str(path), "--kv", "affine:4", "--kv-group-size", "128"]):   # larger than the head dim
        assert main(["serve", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
    r = subprocess.run([sys.executable, "-m", "mlx_kvq", "serve", "--model", str(path), "--kv", "affine:4", "--kv-group-size", "48"],
                       capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
