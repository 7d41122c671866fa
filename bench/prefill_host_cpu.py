"""A prefill chunk's host work through mlx_kvq's GPU code path, on a machine without a GPU (this one), for a model of
Gemma 3's layout or Llama's: what the GPU's host thread does before MLX submits a chunk.

    python3 bench/prefill_host_cpu.py [--shape gemma3|llama] [--kv fp16 turbo:4 auto:5] [--rounds 5] [--layers]

The model: random weights of the named layout at a small width (Gemma 3: 26 layers, 4 query / 1 KV head, head dim 256,
sliding window 512, every sixth layer global; Llama: 16 layers, 32 / 8 heads, head dim 64; hidden 256, float32), a
2,048-token prompt in 512-token chunks. mlx_kvq takes its CUDA code path with stand-in kernels
(`host_build_mock.gpu_path`: a kernel call returns zero arrays of its output shapes). Per chunk: the model's graph build
(ms), then `[c.state for c in cache]` twice, as `bench/prefill_profile.py` asks it (mlx-lm's prefill once), and the MLX
operations the caches add to the chunk's graph (counted from `mx.export_to_dot` of each layer's update and attention
with their inputs evaluated first; on this CPU `scaled_dot_product_attention` is several operations, a stand-in
kernel two). Medians over `--rounds` alternating passes, each pass's first chunk left out. `--layers`: also each
layer's update and attention call, us (medians), by its cache and codecs.

Absolute times are this machine's; what counts is schemes (or two checkouts, run alternately) side by side. The plan of
`auto:5` here is this model's, not a real model's."""
import argparse, collections, io, re, statistics as st, sys, time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq.bench import bench_caches, _bench_scheme, bench_calibration, planned_labels, _state_arrays
from host_build_mock import SMALL, small_model
from mlx_kvq.integrate import install

def _arrays(x): return [a for _, a in tree_flatten(x) if isinstance(a, mx.array)]


def _ops(outs):
    buf = io.StringIO(); mx.export_to_dot(buf, *outs)
    return len(re.findall(r'label ="[A-Za-z_]+', buf.getvalue()))


def _kind(c):
    kc, vc = getattr(c, 'k_codec', None), getattr(c, 'v_codec', None)
    name = lambda x: type(x).__name__.replace('Codec', '').replace('CalibratedTurbo', 'Cal') + ('+o' if getattr(x, 'outliers', None) else '')
    return type(c).__name__ + ('' if kc is None else f' {name(kc)}/{name(vc)}')


class Probe:
    "Times (and on demand counts the operations of) every cache's update and attention"
    def __init__(self, caches, count):
        self.t, self.ops, self.count = collections.defaultdict(list), collections.defaultdict(list), count
        for i, c in enumerate(caches): self._wrap(c, i)

    def _wrap(self, c, i):
        u, a = c.update_and_fetch, getattr(c, 'attend', None)
        def upd(k, v):
            if self.count: mx.eval(k, v, _state_arrays(c))
            t = time.perf_counter(); r = u(k, v); self.t[(i, 'u')].append(time.perf_counter() - t)
            if self.count: self.ops[(i, 'u')].append(_ops(_arrays(r) + _state_arrays(c))); mx.eval(_arrays(r), _state_arrays(c))
            return r
        c.update_and_fetch = upd
        if a is None: return
        def att(q, k, v, **kw):
            if self.count: mx.eval(q, _arrays(k), _arrays(v), [m for m in [kw.get('mask')] if isinstance(m, mx.array)])
            t = time.perf_counter(); r = a(q, k, v, **kw); self.t[(i, 'a')].append(time.perf_counter() - t)
            if self.count: self.ops[(i, 'a')].append(_ops([r]))
            return r
        c.attend = att


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--shape', default='gemma3', choices=sorted(SMALL))
    p.add_argument('--kv', nargs='+', default=['fp16', 'turbo:4', 'auto:5'])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--layers', action='store_true')
    a = p.parse_args()
    install()
    model = small_model(a.shape)
    cal = {s: bench_calibration(model, [s], None, 0)[0] for s in a.kv}
    print(f"# prefill host work, {a.shape} layout (hidden 256), this machine, MLX {mx.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    for s in a.kv:
        lab = planned_labels(bench_caches(model, _bench_scheme(s), **cal[s]))
        if lab: print(f"{s} planned (this model): {lab}\n")
    import host_build_mock as H
    import mlx_kvq.packing as PKG
    H.gpu_path(); PKG._dp_agree = lambda *x: None
    T, C = 2048, 512
    prompt = mx.random.randint(0, 1000, (1, T), key=mx.random.key(3))

    def run(s, count=False):
        cache = bench_caches(model, _bench_scheme(s), **cal[s])
        probe = Probe(cache, count) if (count or a.layers) else None
        build, state = [], []
        for i in range(0, T, C):
            t = time.perf_counter(); y = model(prompt[:, i:i + C], cache=cache); u = time.perf_counter()
            sts = [c.state for c in cache]; sts = [c.state for c in cache]; v = time.perf_counter()
            build.append(1e3 * (u - t)); state.append(1e3 * (v - u))
            mx.eval(y, sts)
        return build[1:], state[1:], probe, cache

    got = {s: ([], []) for s in a.kv}
    layers = {}
    for s in a.kv: run(s)                              # warm: kernels' stand-ins, compiled graphs
    for r in range(a.rounds):
        for s in (a.kv if r % 2 == 0 else a.kv[::-1]):
            b, sv, probe, cache = run(s)
            got[s][0].extend(b); got[s][1].extend(sv)
            if probe: layers.setdefault(s, []).append((probe, cache))
    ops = {s: run(s, count=True)[2] for s in a.kv}
    print("| scheme | build ms | state x2 ms | build + state | vs fp16 | cache ops a chunk (update / attention) |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    f = st.median([x + y for x, y in zip(*got['fp16'])]) if 'fp16' in got else None
    for s in a.kv:
        tot = st.median([x + y for x, y in zip(*got[s])])
        pr = ops[s]
        nu = sum(v[-1] for (i, k), v in pr.ops.items() if k == 'u'); na = sum(v[-1] for (i, k), v in pr.ops.items() if k == 'a')
        print(f"| {s} | {st.median(got[s][0]):.2f} | {st.median(got[s][1]):.2f} | {tot:.2f} | {'-' if f is None else f'{tot / f:.2f}x'} | {nu} / {na} |")
    if a.layers:
        for s, runs in layers.items():
            print(f"\n{s}: us a call by layer kind (median over layers and chunks)\n\n| kind | layers | update | attention | ops (update / attention) |\n| --- | ---: | ---: | ---: | ---: |")
            kinds = collections.defaultdict(lambda: ([], [], set(), []))
            for probe, cache in runs:
                for i, c in enumerate(cache):
                    k = kinds[_kind(c)]; k[2].add(i)
                    k[0].extend(probe.t[(i, 'u')][1:]); k[1].extend(probe.t[(i, 'a')][1:])
            for name, (u, at, idx, _) in kinds.items():
                o = ops[s].ops
                ou = st.median([o[(i, 'u')][-1] for i in idx]) if all((i, 'u') in o for i in idx) else 0
                oa = st.median([o[(i, 'a')][-1] for i in idx]) if all((i, 'a') in o for i in idx) else 0
                print(f"| {name} | {len(idx)} | {1e6 * st.median(u):.0f} | {1e6 * st.median(at) if at else 0:.0f} | {ou:.0f} / {oa:.0f} |")


if __name__ == '__main__':
    main()
