"""Where a chunked prefill's time goes on a GPU, per cache scheme: the whole prompt chunk by chunk, and one layer's
pieces at a given past (the cache's update of a chunk, its attention, and the attention's parts).

    python3 bench/prefill_profile.py [--rounds 1] [--tokens 16384] [--chunk 2048] [--shape llama-3.2-1b] [--dtype float16] [--kv fp16 affine:4 turbo:4 turbo:4/rotated fp16] [--layer-kv fp16 cal1:2,6 cal1:4,a8] [--repeats 9] [--out DIR]

A scheme written `SCHEME/previous` (or `SCHEME/rotated`) runs with `attention.PREFILL_PAIR = False`: the route before
`decode_turbo_pair` / `decode_affine_pair` (turbo: the queries and output rotated, each side's past decoded in the rotated
space; affine: each side dequantized by MLX from slices); `SCHEME/append` with `packing.APPEND = True` (a turbo pair's
growing update quantized straight into the grown storages by `quantize_append_pair`; `SCHEME/noappend`, as every other
entry: the pair kernel and four concatenations, the default); `SCHEME/plaintext` with each codec's config encoded afresh at
every `state` (as before 2026-12-02: `Codec.config_json` remembers it); a scheme named twice (e.g. fp16 first and
last) is timed twice, the ratios against the first fp16. `KVQ_KNOBS` applies as in the other GPU benches.

1. Whole model (Llama-3.2-1B shape, random weights, float16): a warm pass, then the timed pass, each chunk evaluated
   (model + cache states) before the next; ms per chunk, so a cost that grows with the past shows as a slope, and per
   chunk the host's graph build and MLX's submission (`mx.async_eval`) of it. With `--rounds R` (R > 1): instead, the
   --kv passes (distinct schemes, the first the reference) R times in turn, the order reversed every other round, each
   scheme warmed in the first round only: tokens/s per round with the ratio to that round's first scheme, and the
   medians (one pass's ratio moved by 10% between runs of one machine: bench/h200_20261201i/).
2. One layer (8 KV / 32 query heads, head dim 64, float16), past = tokens - chunk quantized tokens, a new chunk: ms of
   `update_and_fetch` of the chunk (trimmed back after each; 'growing': the storage cut to the past first, as a prefill
   chunk finds it), its encode alone (and of transposed inputs, as a model's values come), of the attention over what it returned, and of the
   attention's parts: the past decoded (`_rotated_past` for turbo, `dequantize` otherwise), the queries' and output's
   rotations (turbo, `rotate_rows`), `mx.fast.scaled_dot_product_attention` over the decoded past. Medians of --repeats, each piece
   evaluated alone (inputs evaluated first)."""
import argparse, json, os, platform, statistics as st, sys, time
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.bench import shape_model, bench_caches, _bench_scheme, bench_calibration, planned_labels
from mlx_kvq.integrate import install
from mlx_kvq import attention as A, packing as PK, codecs as CD
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.packing import rotate_rows
from mlx_lm.models.cache import KVCache
sys.path.insert(0, str(Path(__file__).resolve().parent))
from knobs import apply_knobs
from mlx_kvq.packing import decode_turbo_pair, decode_affine_pair
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.qcache import CodecKVCache


_CONFIG_JSON = CD.Codec.config_json

def route(kv):
    "The scheme of a --kv entry; sets attention.PREFILL_PAIR, packing.APPEND and how codecs encode their configs for what follows"
    base, _, how = kv.partition('/')
    A.PREFILL_PAIR = how not in ('rotated', 'previous')
    PK.APPEND = how == 'append'
    CD.Codec.config_json = (lambda self: json.dumps(self.config(), sort_keys=True)) if how == 'plaintext' else _CONFIG_JSON
    return base


def timed(fn, repeats):
    "Median ms of fn() evaluated (after one untimed call)"
    mx.eval(fn()); mx.synchronize()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter(); mx.eval(fn()); mx.synchronize(); ts.append(1e3 * (time.perf_counter() - t))
    return st.median(ts)


def whole(model, kv, T, C, warm=True):
    "ms per chunk of one timed pass of a T-token prompt in chunks of C (after a warm pass of its own unless `warm` is False), peak GB"
    name, kv = kv, route(kv)
    prompt = mx.random.randint(0, 1000, (1, T))
    calib = bench_calibration(model, [kv], None, 0)[0]   # auto:B: planned as `mlx-kvq bench` plans it (seeded random token ids)
    if warm:
        first = bench_caches(model, _bench_scheme(kv), **calib)
        for s in range(0, T, C): mx.eval(model(prompt[:, s:s + C], cache=first))
        labels = planned_labels(first)
        del first
        if labels: print(f"{name} planned: {labels}", flush=True)
    mx.clear_cache(); mx.reset_peak_memory()
    cache = bench_caches(model, _bench_scheme(kv), **calib)
    per, build, submit = [], [], []
    for s in range(0, T, C):
        t = time.perf_counter()
        y = model(prompt[:, s:s + C], cache=cache); b = time.perf_counter()
        mx.async_eval(y, [c.state for c in cache]); u = time.perf_counter()   # submit: MLX walks the graph and launches its kernels
        mx.eval(y, [c.state for c in cache]); mx.synchronize()
        per.append(1e3 * (time.perf_counter() - t)); build.append(1e3 * (b - t)); submit.append(1e3 * (u - b))
    print(f"{name}: host build ms per chunk " + " ".join(f"{x:.1f}" for x in build), flush=True)
    print(f"{name}: submit ms per chunk " + " ".join(f"{x:.1f}" for x in submit), flush=True)
    return per, mx.get_peak_memory() / 1e9


def arrays(c):
    "The arrays of a cache's state (mlx-lm's KVCache: a list; mlx_kvq's caches: a dict with a config string)"
    st_ = c.state
    return [x for x in (st_ if isinstance(st_, (list, tuple)) else st_.values()) if isinstance(x, mx.array)]


def cut(c, P):
    "A cache's storage cut to the P tokens it holds, so that its next update grows it (a prefill chunk's case)"
    if hasattr(c, 'k_codec'): c.keys, c.values = tuple(p[..., :P, :] for p in c.keys), tuple(p[..., :P, :] for p in c.values)
    else: c.keys, c.values = c.keys[..., :P, :], c.values[..., :P, :]


def layer_cache(model, kv):
    """One layer's cache: fp16 (mlx-lm's), a calibrated kind of `bench/calcodecs.py` at head dim 64 (`cal1:K,V` one band
    a side, `cal:K,V` an outlier band a side, `cal1:K,a8` one-band keys with 8-bit affine values: the kinds `auto:5`
    plans for this shape), or the first layer's cache of a bench scheme"""
    if kv == 'fp16': return KVCache()
    if kv.startswith('cal'):
        from calcodecs import calibrated
        kind, bits = kv.split(':'); kb, vb = bits.split(',')
        return CodecKVCache(calibrated(int(kb), 0, 64, outliers=kind == 'cal'),
                            AffineCodec(8) if vb == 'a8' else calibrated(int(vb), 1, 64, outliers=kind == 'cal'))
    return bench_caches(model, _bench_scheme(kv), **bench_calibration(model, [kv], None, 0)[0])[0]


def layer(model, kv, P, C, repeats):
    kv = route(kv)
    c = layer_cache(model, kv)
    mx.random.seed(1)
    for s in range(0, P, 4096):
        n = min(4096, P - s)
        c.update_and_fetch(mx.random.normal((1, 8, n, 64)).astype(mx.float16), mx.random.normal((1, 8, n, 64)).astype(mx.float16))
        mx.eval(arrays(c))
    k, v = (mx.random.normal((1, 8, C, 64)).astype(mx.float16) for _ in range(2))
    q = mx.random.normal((1, 32, C, 64)).astype(mx.float16); mx.eval(k, v, q)
    scale = 0.125
    res = {}
    def upd():
        ks, vs = c.update_and_fetch(k, v)
        out = arrays(c)
        mx.eval(out); c.trim(C)
        return out[:1]
    res['update'] = timed(upd, repeats)
    if kv != 'fp16':
        def grows():   # as a prefill chunk: the storage holds exactly the past, so the update grows it
            cut(c, P)
            return upd()
        res['update, growing'] = timed(grows, repeats)
        res['encode'] = timed(lambda: c.k_codec.encode_pair(c.v_codec, k, v), repeats)
        kt, vt = (mx.random.normal((1, C, 8, 64)).astype(mx.float16).transpose(0, 2, 1, 3) for _ in range(2))
        mx.eval(kt, vt)
        res['encode, transposed inputs'] = timed(lambda: c.k_codec.encode_pair(c.v_codec, kt, vt), repeats)
        def enc_cat():
            kp, vp = c.k_codec.encode_pair(c.v_codec, k, v)
            return [mx.concatenate([p[..., :P, :], x], axis=-2) for p, x in zip(c.keys + c.values, kp + vp)]
        res['encode + concatenate storage'] = timed(enc_cat, repeats)
    ks, vs = c.update_and_fetch(k, v)
    mx.eval(arrays(c))
    if kv == 'fp16':
        res['attend'] = timed(lambda: mx.fast.scaled_dot_product_attention(q, ks, vs, scale=scale, mask='causal'), repeats)
        return res
    res['attend'] = timed(lambda: c.attend(q, ks, vs, scale=scale, mask='causal'), repeats)
    if A._pair_prefill(q, ks, vs, scale, 'causal', None) is not None:
        res['attend, pair route'] = timed(lambda: A._pair_prefill(q, ks, vs, scale, 'causal', None), repeats)
        kt, vt = A._pair_side(ks.codec, 64), A._pair_side(vs.codec, 64)
        if kt is not None and vt is not None and (kt[2] is not None or kt[3] is not None):   # a calibrated pair: one launch, its scales and mean undone in it
            res['past, both sides (decode_turbo_pair, calibrated)'] = timed(lambda: decode_turbo_pair((*ks.storage, *kt), (*vs.storage, *vt), ks.n_quantized, mx.float16), repeats)
    if type(ks.codec) is TurboCodec and type(vs.codec) is TurboCodec:
        pair = lambda: decode_turbo_pair((*ks.storage, ks.codec.rotation, ks.codec.codebook), (*vs.storage, vs.codec.rotation, vs.codec.codebook), ks.n_quantized, mx.float16)
        res['past, both sides (decode_turbo_pair)'] = timed(pair, repeats)
    if type(ks.codec) is AffineCodec and type(vs.codec) is AffineCodec:
        pair = lambda: decode_affine_pair((*ks.storage, ks.codec.bits, ks.codec.group_size), (*vs.storage, vs.codec.bits, vs.codec.group_size), ks.n_quantized, mx.float16)
        res['past, both sides (decode_affine_pair)'] = timed(pair, repeats)
    if type(ks.codec) is TurboCodec:
        res['past keys'] = timed(lambda: A._rotated_past(ks, mx.float16), repeats)
        res['past values'] = timed(lambda: A._rotated_past(vs, mx.float16), repeats)
        res['rotate q'] = timed(lambda: rotate_rows(q, ks.codec.rotation), repeats)
        kd, vd = A._rotated_past(ks, mx.float16), A._rotated_past(vs, mx.float16)
    else:
        res['past keys'] = timed(lambda: ks.dequantize(mx.float16), repeats)
        res['past values'] = timed(lambda: vs.dequantize(mx.float16), repeats)
        kd, vd = ks.dequantize(mx.float16), vs.dequantize(mx.float16)
    mx.eval(kd, vd)
    res['sdpa over decoded'] = timed(lambda: mx.fast.scaled_dot_product_attention(q, kd, vd, scale=scale, mask='causal'), repeats)
    if type(vs.codec) is TurboCodec:
        o = mx.fast.scaled_dot_product_attention(q, kd, vd, scale=scale, mask='causal'); mx.eval(o)
        res['rotate out'] = timed(lambda: rotate_rows(o, vs.codec.rotation, inverse=True), repeats)
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--tokens', type=int, default=16384)
    p.add_argument('--chunk', type=int, default=2048)
    p.add_argument('--kv', nargs='+', default=['fp16', 'affine:4', 'turbo:4'])
    p.add_argument('--repeats', type=int, default=9)
    p.add_argument('--skip-whole', action='store_true')
    p.add_argument('--rounds', type=int, default=1, help='R > 1: every --kv pass (distinct schemes, the first the reference) timed R times in alternating order, tokens/s per round and the median ratio to the first')
    p.add_argument('--skip-layer', action='store_true', help='the whole model only')
    p.add_argument('--out')
    p.add_argument('--layer-kv', nargs='+', default=None, help='the one-layer pass\'s caches, if not --kv\'s: also the calibrated kinds cal1:K,V, cal:K,V, cal1:K,a8 (`layer_cache`)')
    p.add_argument('--shape', default='llama-3.2-1b', help='the whole model pass: a named shape of random weights (the layer pass keeps Llama-3.2-1B\'s attention shape)')
    p.add_argument('--dtype', default='float16', choices=['float16', 'float32'])
    a = p.parse_args()
    if a.rounds < 1: p.error(f"--rounds must be 1 or more, got {a.rounds}")
    if a.rounds > 1 and len(set(a.kv)) != len(a.kv): p.error(f"--rounds times each --kv scheme once a round: name each once (got {' '.join(a.kv)})")
    knobs = apply_knobs()
    install()
    model = shape_model(a.shape, getattr(mx, a.dtype))
    head = (f"# prefill profile: {a.shape} shape (random weights, {a.dtype}), {a.tokens} tokens in chunks of {a.chunk}; "
            f"{platform.system()} {platform.machine()}, MLX {mx.__version__}, {mx.default_device()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}" + (f"; knobs {' '.join(knobs)}" if knobs else ""))
    lines, rec = [head], {}
    if a.rounds > 1:
        lines.append(f"\n## Whole model, {a.rounds} rounds of every --kv pass (order reversed every other round; each scheme warmed once, in round 1)\n")
        lines.append("| round | " + " | ".join(a.kv) + " |"); lines.append("| --- |" + " ---: |" * len(a.kv))
        tps, peaks = {kv: [] for kv in a.kv}, {kv: [] for kv in a.kv}
        for r in range(a.rounds):
            got = {}
            for kv in (a.kv if r % 2 == 0 else a.kv[::-1]):
                per, peak = whole(model, kv, a.tokens, a.chunk, warm=r == 0)
                got[kv] = a.tokens / sum(per) * 1e3; tps[kv].append(got[kv]); peaks[kv].append(peak)
            lines.append(f"| {r + 1} | " + " | ".join(f"{got[kv]:,.0f} ({got[kv] / got[a.kv[0]]:.2f}x)" for kv in a.kv) + " |"); print(lines[-1], flush=True)
        lines.append("| median | " + " | ".join(f"{st.median(tps[kv]):,.0f} ({st.median(x / y for x, y in zip(tps[kv], tps[a.kv[0]])):.2f}x)" for kv in a.kv) + " |")
        lines.append("| peak GB (largest) | " + " | ".join(f"{max(peaks[kv]):.2f}" for kv in a.kv) + " |")
        print(*lines[-2:], sep="\n", flush=True)
        rec['rounds'] = dict(tokens_per_s=tps, peak_gb=peaks)
        a.skip_whole = True
    if not a.skip_whole:
        lines.append("\n## Whole model, ms per chunk (timed pass after a warm one)\n")
        lines.append("| scheme | " + " | ".join(f"chunk {i}" for i in range(a.tokens // a.chunk)) + " | total ms | tokens/s | vs fp16 | peak GB |")
        lines.append("| --- |" + " ---: |" * (a.tokens // a.chunk + 4))
        base = None
        for i, kv in enumerate(a.kv):
            per, peak = whole(model, kv, a.tokens, a.chunk)
            tot = sum(per); tps = a.tokens / tot * 1e3; base = base or tps
            rec[f'whole {kv}' + (f' #{i}' if a.kv.index(kv) != i else '')] = dict(per_chunk_ms=per, peak_gb=peak, tps=tps)
            lines.append(f"| {kv} | " + " | ".join(f"{x:.1f}" for x in per) + f" | {tot:.1f} | {tps:,.0f} | {tps / base:.2f}x | {peak:.2f} |")
            print(lines[-1], flush=True)
    P = a.tokens - a.chunk
    rows = {}
    for kv in ([] if a.skip_layer else a.layer_kv or a.kv):
        if kv not in rows: rows[kv] = layer(model, kv, P, a.chunk, a.repeats)
    if rows:
        lines.append(f"\n## One layer, past {P} tokens + a chunk of {a.chunk}: ms (median of {a.repeats})\n")
        a.kv = list(rows)
        names = list(dict.fromkeys(n for r in rows.values() for n in r))
        lines.append("| piece | " + " | ".join(a.kv) + " |"); lines.append("| --- |" + " ---: |" * len(a.kv))
        for n in names: lines.append(f"| {n} | " + " | ".join('-' if n not in rows[kv] else f"{rows[kv][n]:.3f}" for kv in a.kv) + " |")
        rec['layer'] = rows
    text = "\n".join(lines)
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        Path(a.out, 'prefill_profile.md').write_text(text + "\n")
        Path(a.out, 'prefill_profile.json').write_text(json.dumps(rec, indent=1))


if __name__ == '__main__': main()
