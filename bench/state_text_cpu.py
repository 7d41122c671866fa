"""What a cache's `state` costs the host, with each codec's config text remembered (`Codec.config_json`, the default since
2026-12-02) or encoded afresh at every call (as before), on this machine.

    python3 bench/state_text_cpu.py [ROUNDS]

1. One `CodecKVCache` of a calibrated codec (64 channels, an outlier band: the kind `auto:B` plans) beside 8-bit affine
   values: us per `state` call and per config text alone, both ways (`timeit`, best of 5 x 2,000 calls).
2. A prefill chunk's host work through mlx_kvq's GPU code path with stand-in kernels (`host_build_mock.gpu_path`): a
   16-layer Llama-3.2-1B-like model of random weights (hidden 256, 32 query / 8 KV heads, head dim 64, float32), a
   1,024-token prompt in 256-token chunks, the model's graph build plus `[c.state for c in cache]` as mlx-lm's prefill
   asks it after every chunk; ms per chunk (medians over ROUNDS alternating passes, default 4, each pass's first chunk
   left out) for fp16, `auto:5` and `auto:5` encoding afresh, and each scheme's `state` calls alone.
Absolute times are this machine's; the comparisons are side by side in one run."""
import json, statistics as st, sys, time, timeit
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq import codecs as CD
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.calibrated import CalibratedTurboCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.bench import bench_caches, _bench_scheme, bench_calibration, planned_labels
from mlx_kvq.integrate import install

REMEMBERED = CD.Codec.config_json
AFRESH = lambda self: json.dumps(self.config(), sort_keys=True)


def per_call():
    rng = np.random.default_rng(0)
    k = CalibratedTurboCodec(3, seed=0, mean=rng.normal(size=64).astype(np.float32), scale=np.exp(rng.normal(size=64) * 0.3).astype(np.float32),
                             outliers=sorted(rng.choice(64, 8, replace=False).tolist()), outlier_bits=4, dim=64)
    c = CodecKVCache(k, AffineCodec(8))
    c.update_and_fetch(mx.zeros((1, 8, 16, 64)), mx.zeros((1, 8, 16, 64)))
    out = {}
    for how, f in (('remembered', REMEMBERED), ('afresh', AFRESH)):
        CD.Codec.config_json = f
        for what, fn in (('state', lambda: c.state), ('config text', lambda: CD.config_text(c.config(), k_codec=c.k_codec, v_codec=c.v_codec))):
            out[(what, how)] = 1e6 * min(timeit.repeat(fn, number=2000, repeat=5)) / 2000
    CD.Codec.config_json = REMEMBERED
    print("| per call, us | remembered | afresh |\n| --- | ---: | ---: |")
    for what in ('state', 'config text'): print(f"| {what} | {out[(what, 'remembered')]:.1f} | {out[(what, 'afresh')]:.1f} |")


def per_chunk(rounds):
    install()
    from host_build_mock import small_model
    model = small_model('llama')
    cal = {s: bench_calibration(model, [s], None, 0)[0] for s in ('fp16', 'auto:5')}
    print(f"\nauto:5 planned (this CPU): {planned_labels(bench_caches(model, _bench_scheme('auto:5'), **cal['auto:5']))}")
    import host_build_mock as H
    import mlx_kvq.packing as PKG
    H.gpu_path(); PKG._dp_agree = lambda *a: None
    T, C = 1024, 256
    prompt = mx.random.randint(0, 1000, (1, T), key=mx.random.key(3))
    def run(name):
        base = name.split('/')[0]
        CD.Codec.config_json = AFRESH if name.endswith('/afresh') else REMEMBERED
        cache = bench_caches(model, _bench_scheme(base), **cal[base])
        whole, state = [], []
        for s in range(0, T, C):
            t = time.perf_counter(); y = model(prompt[:, s:s + C], cache=cache); u = time.perf_counter()
            sts = [c.state for c in cache]; v = time.perf_counter()
            whole.append(1e3 * (v - t)); state.append(1e3 * (v - u))
            mx.eval(y, sts)
        return whole[1:], state[1:]
    names = ['fp16', 'auto:5', 'auto:5/afresh']
    for n in names: run(n)
    got = {n: ([], []) for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            w, s = run(n); got[n][0].extend(w); got[n][1].extend(s)
    CD.Codec.config_json = REMEMBERED
    print(f"\n| chunk's host work, ms (median of {len(got['fp16'][0])} chunks) | build + state | state alone |\n| --- | ---: | ---: |")
    for n in names: print(f"| {n} | {st.median(got[n][0]):.2f} | {st.median(got[n][1]):.2f} |")


if __name__ == '__main__':
    print(f"# state's host cost, this machine, MLX {mx.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    per_call()
    per_chunk(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
