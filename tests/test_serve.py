"""`mlx-kvq serve` as a user runs it: `python -m mlx_kvq serve` in a subprocess on 127.0.0.1, a tiny random model,
two concurrent greedy /v1/completions, answers equal to `mlx_lm.generate` with the same scheme's cache alone.
Loopback only, a bounded number of requests, every wait bounded; the server is stopped at the end."""
import json, os, signal, socket, subprocess, sys, time, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["the capital of france is", "the old city of berlin is a big city and the capital of"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as r: return json.loads(r.read())


def _post(url, body, timeout=60):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r: return json.loads(r.read())


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from mlx_kvq.cli import write_tiny_model
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("kv", ["affine:4", "turbo:3"])
def test_serve_subprocess(tiny_dir, kv):
    from mlx_lm import generate
    from mlx_kvq.models import load
    from mlx_kvq.integrate import make_prompt_cache
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "mlx_kvq", "serve", "--model", str(tiny_dir), "--kv", kv,
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:                                   # wait (at most 120 s) until it answers /health
            assert proc.poll() is None, proc.communicate(timeout=10)
            try:
                assert _get(url + "/health", timeout=5)["status"] == "ok"
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() - t0 < 120, "the server did not come up"
                time.sleep(0.2)
        with ThreadPoolExecutor(2) as ex:
            res = list(ex.map(lambda p: _post(url, dict(prompt=p, max_tokens=5, temperature=0)), PROMPTS))
    finally:
        proc.send_signal(signal.SIGINT)
        try: out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill(); out, err = proc.communicate()
    assert f"with kv={kv} at http://127.0.0.1:{port} (batched: yes)" in out, (out, err)
    model, tok = load(str(tiny_dir))
    alone = [generate(model, tok, p, max_tokens=5, prompt_cache=make_prompt_cache(model, kv)) for p in PROMPTS]
    assert [r["choices"][0]["text"] for r in res] == alone


def test_serve_bad_input_one_line(tiny_dir):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for argv in (["--kv", "turbo:9"], ["--port", "99999"], ["--model", str(tiny_dir), "--kv", "affine:4", "--kv-group-size", "48"]):
        r = subprocess.run([sys.executable, "-m", "mlx_kvq", "serve", *argv], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 2, (argv, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (argv, r.stderr)
