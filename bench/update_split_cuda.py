"""What a compressed cache's decode-step update costs a whole model, part by part: whole-model decode tokens/s of the
Llama-3.2-1B shape (random weights, float16, every cache layer filled to --context) with `turbo:4` caches whose update
does only some of its work (timing only: these variants store wrong codes on purpose), alternating with fp16 in
rounds on one machine:

- `full`: the update as shipped (one pair-quantize launch, four slice updates of the storages);
- `writes only`: the four slice updates of a constant token's codes (no quantize launch);
- `two writes`: the quantize launch and the slice updates of the two code-word arrays (the norms not written: what
  keys and values stored in one words array and one norms array would cost);
- `quantize only`: the quantize launch, its outputs joined to the storage by `mx.depends` (no slice update, the token
  count unchanged);
- `no update`: `update_and_fetch` returns the filled cache (as `decode_step_profile.py`'s ablation).

    python3 bench/update_split_cuda.py [--context 32768] [--rounds 2] [--steps 48]
"""
import argparse, json, platform, statistics as st, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_step_profile import filled, pipelined
from mlx_kvq.bench import shape_model
from mlx_kvq.integrate import probe_kv_shapes
from mlx_kvq.qcache import CodecKVCache

VARIANTS = ('full', 'writes only', 'two writes', 'quantize only', 'no update')


def _write(self, kp, vp, n, which):
    "Write parts `which` (indices into each side's parts) of kp / vp at the cache's next n tokens, growing the storages as `_append_quantized` does"
    prev, cap = self.n_quantized, self.keys[0].shape[-2]
    if prev + n > cap:
        grow = ((prev + n + self.step - 1) // self.step) * self.step - prev
        pad = lambda x: mx.concatenate([x[..., :prev, :], mx.zeros((*x.shape[:-2], grow, x.shape[-1]), dtype=x.dtype)], axis=-2)
        self.keys, self.values = tuple(pad(x) for x in self.keys), tuple(pad(x) for x in self.values)
    at = (slice(None), slice(None), slice(prev, prev + n))
    for parts, new in ((self.keys, kp), (self.values, vp)):
        for i in which: parts[i][at] = new[i]
    self.n_quantized = prev + n


def install(caches, fetched, variant, shapes, dtype):
    "Give every cache of `caches` the update of `variant` (an instance attribute over the class's method; 'full' removes it)"
    for i, (c, f) in enumerate(zip(caches, fetched)):
        for nm in ('update_and_fetch', '_append_quantized'): c.__dict__.pop(nm, None)
        if variant == 'no update': c.update_and_fetch = (lambda f: lambda k, v: f)(f)
        elif variant == 'writes only':
            H, dk, dv = shapes[str(i)][1][:3]
            k0, v0 = c.k_codec.encode_pair(c.v_codec, mx.ones((1, H, 1, dk), dtype), mx.ones((1, H, 1, dv), dtype))
            mx.eval(k0, v0)
            c._append_quantized = (lambda c, k0, v0: lambda keys, values: _write(c, k0, v0, keys.shape[-2], range(len(k0))))(c, k0, v0)
        elif variant == 'two writes':
            c._append_quantized = (lambda c: lambda keys, values: _write(c, *c.k_codec.encode_pair(c.v_codec, keys, values), keys.shape[-2], (0,)))(c)
        elif variant == 'quantize only':
            def q_only(keys, values, c=c):
                kp, vp = c.k_codec.encode_pair(c.v_codec, keys, values)
                c.keys = (mx.depends([c.keys[0]], [*kp, *vp])[0],) + tuple(c.keys[1:])
            c._append_quantized = q_only


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--context', type=int, nargs='+', default=[32768])
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--steps', type=int, default=48)
    ap.add_argument('--shape', default='llama-3.2-1b')
    a = ap.parse_args()
    dtype = mx.float16 if mx.default_device() == mx.gpu else mx.float32
    model = shape_model(a.shape, dtype); shapes = probe_kv_shapes(model)
    print(f"# update_split_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.node()}; MLX {mx.__version__} "
          f"{mx.default_device()}; {a.shape}, {str(dtype).split('.')[-1]}; {a.steps} pipelined steps (mlx-lm generate_step), {a.rounds} rounds", flush=True)
    for context in a.context:
        fp, fpf = filled(model, 'fp16', context, dtype, shapes)
        tq, tqf = filled(model, 'turbo:4', context, dtype, shapes)
        assert all(isinstance(c, CodecKVCache) for c in tq)
        res = {v: [] for v in ('fp16',) + VARIANTS}
        start = [(c.offset, c.n_quantized) for c in tq]
        for r in range(a.rounds):
            for c in fp: c.trim(c.offset - context)
            res['fp16'].append(pipelined(model, fp, a.steps))
            for v in VARIANTS:
                for c, (o, nq) in zip(tq, start): c.offset, c.n_quantized = o, nq   # back to the filled context (the storages past it are rewritten)
                install(tq, tqf, v, shapes, dtype)
                res[v].append(pipelined(model, tq, a.steps))
            install(tq, tqf, 'full', shapes, dtype)
            print(json.dumps(dict(context=context, round=r, tps={k: round(x[-1], 1) for k, x in res.items()})), flush=True)
        f = st.median(res['fp16'])
        print(f"\n| {context:,} tokens | tokens/s (median) | rounds | vs fp16 | step ms |\n| --- | ---: | ---: | ---: | ---: |")
        for k, x in res.items():
            m = st.median(x)
            print(f"| {k} | {m:.1f} | {' / '.join(f'{y:.1f}' for y in x)} | {m / f:.2f}x | {1e3 / m:.2f} |")
        del fp, fpf, tq, tqf; mx.clear_cache()


if __name__ == '__main__': main()
