"""Verify every fused attention kernel of mlx_kvq.attention against the reference ON THE GPU, then time it side by side
with fp16 `mx.fast.scaled_dot_product_attention` (one layer), chunked prefill and whole-model decode.

Usage (GPU machine, see /work/shared/gpu/README.md):
    python3 bench/check_fused_cuda.py [--quick] [--only variants,check,layer,gemma,prefill,model] [--cases REGEX] [--out DIR]
Writes DIR/check_fused_cuda.log (DIR defaults to $OUT or .)."""
import argparse, re, math, os, platform, sys, time, warnings
from datetime import datetime, timezone

import numpy as np
import mlx.core as mx

from mlx_kvq import attention as A
from mlx_kvq.codecs import AffineCodec, CachedSide, codec_attention
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.calibrated import CalibratedTurboCodec
from mlx_kvq import packing as _P
from knobs import apply_knobs; apply_knobs()   # KVQ_KNOBS="NAME=VALUE ..." (bench/knobs.py)

ap = argparse.ArgumentParser()
ap.add_argument('--quick', action='store_true')
ap.add_argument('--only', default='variants,check,layer,gemma,prefill,model')
ap.add_argument('--out', default=os.environ.get('OUT', '.'))
ap.add_argument('--contexts', default='4096,32768,131072')
ap.add_argument('--model-contexts', default='32768,131072')
ap.add_argument('--variant-contexts', default='4096,131072')
ap.add_argument('--cases', default=None, help='check section: only the cases whose name matches this regular expression (e.g. kvq_turbo: the calibrated codecs)')
args = ap.parse_args()
only = set(args.only.split(','))
os.makedirs(args.out, exist_ok=True)
LOG = open(os.path.join(args.out, 'check_fused_cuda.log'), 'a')

def log(*a):
    s = ' '.join(str(x) for x in a)
    print(s, flush=True); LOG.write(s + '\n'); LOG.flush()

log(f"# check_fused_cuda {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}; mlx {mx.__version__}; device {mx.default_device()}; "
    f"{platform.node()}; command: {' '.join(sys.argv)}")
try: log('# gpu:', mx.device_info() if hasattr(mx, 'device_info') else mx.metal.device_info())
except Exception as e: log('# gpu info unavailable', e)
if 'attend' not in CodecKVCache.attend.__code__.co_names:   # caches not wired to mlx_kvq.attention (older checkouts)
    CodecKVCache.attend = lambda self, q, k, v, *, scale, mask=None, sinks=None: A.attend(q, k, v, scale=scale, mask=mask, sinks=sinks)
    log('# CodecKVCache.attend patched to mlx_kvq.attention.attend for this run')
backend = A.kernel_backend()
log('# kernel backend:', backend)
mx.random.seed(0)
rng = np.random.default_rng(0)

def side(codec, x, head=0, tail=0):
    L = x.shape[-2]
    mid = x[..., head:L - tail, :]
    return CachedSide(codec, x[..., :head, :] if head else None, codec.encode(mid) if mid.shape[-2] else None,
                      x[..., L - tail:, :] if tail else None)

HALF = os.environ.get('KVQ_HALF_CENTROIDS', '1') != '0'   # 0: the calibrated codecs with float64 codebooks (configs saved before 2026-12-01: tables with low parts, VTLO)

def calibrated(bits, dim, seed, outliers=True):
    mean = rng.normal(size=dim).astype(np.float32) * 0.3
    scale = np.exp(rng.normal(size=dim) * 0.3).astype(np.float32)
    out = sorted(rng.choice(dim, dim // 8, replace=False).tolist()) if outliers else None
    return CalibratedTurboCodec(bits, seed=seed, mean=mean, scale=scale, outliers=out, outlier_bits=min(bits + 1, 8) if out else None, dim=dim, half_centroids=HALF)

def rel(a, b): return (mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max() / mx.abs(b.astype(mx.float32)).max()).item()

# ------------------------------------------------------------------ 1. correctness on the GPU
failures = []
from mlx_kvq import attention_kernels as _AKc
for _mma in ((True, False) if 'check' in only else ()):
    _AKc.MMA = _mma; A._KERNELS.clear(); A._GUARDS.clear(); A._OK.clear()
    log(f'\n# kernels: {"tensor-core (mma) where it applies" if _mma else "SIMT only"}')
    log('\n## 1. fused decode kernel vs references (fresh random inputs, on the GPU)')
    log('case | kernel vs blockwise (fp32; half-precision model: tensor cores where they apply) | attend (fp16 inputs) vs codec_attention in float32 | guard')
    cases = []
    for kb in range(1, 9): cases.append((f'turbo:{kb},{9 - kb}', lambda D, kb=kb: (TurboCodec(kb), TurboCodec(9 - kb, seed=1))))
    for i, b in enumerate((2, 3, 4, 5, 6, 8)):
        gs = (32, 64, 128)[i % 3]
        cases.append((f'affine:{b},{b} g{gs}', lambda D, b=b, gs=gs: (AffineCodec(b, gs), AffineCodec(b, gs))))
    cases += [('affine:8,4', lambda D: (AffineCodec(8), AffineCodec(4))),
              ('kvq_turbo 5o/4o', lambda D: (calibrated(5, D, 0), calibrated(4, D, 1))),
              ('kvq_turbo 3/3 no outliers', lambda D: (calibrated(3, D, 0, False), calibrated(3, D, 1, False))),
              ('kvq_turbo 3o/6o (low-bit keys: tensor cores)', lambda D: (calibrated(3, D, 0), calibrated(6, D, 1))),
              ('kvq_turbo 1o/5o', lambda D: (calibrated(1, D, 0), calibrated(5, D, 1))),
              ('kvq_turbo 2o/8o', lambda D: (calibrated(2, D, 0), calibrated(8, D, 1))),
              ('turbo:4 / affine:4', lambda D: (TurboCodec(4), AffineCodec(4, 32))),
              ('affine:8 / turbo:3', lambda D: (AffineCodec(8, 32), TurboCodec(3, seed=1))),
              # auto:B's one-band keys (tq2cs, tq3cs) beside outlier-band values: queries prepared in the decode kernel where the band is one Walsh-Hadamard block (d64, d128; `attention._query_kind`)
              ('kvq_turbo 2/6o (one-band keys)', lambda D: (calibrated(2, D, 0, False), calibrated(6, D, 1))),
              ('kvq_turbo 3/6o (one-band keys)', lambda D: (calibrated(3, D, 0, False), calibrated(6, D, 1)))]
    shapes = [(1, 8, 4, 128, 1000), (1, 2, 1, 64, 37), (2, 2, 8, 80, 700), (1, 1, 4, 256, 3000), (1, 4, 2, 96, 513), (3, 2, 4, 128, 4100)]
    worst = 0.0
    for ci, (name, make) in enumerate(cases):
        if args.cases and not re.search(args.cases, name): continue
        picks = [ci % len(shapes)] if args.quick else [ci % len(shapes), (ci + 3) % len(shapes)]
        for si in picks:
            B, Hkv, G, D, N = shapes[si]
            if name.startswith('affine') and D % 32: continue
            try: kc, vc = make(D)
            except ValueError: continue
            if isinstance(kc, AffineCodec) and D % kc.group_size: continue
            if isinstance(vc, AffineCodec) and D % vc.group_size: continue
            k = mx.random.normal((B, Hkv, N + 9, D)).astype(mx.float16); v = mx.random.normal((B, Hkv, N + 9, D)).astype(mx.float16)
            q = mx.random.normal((B, Hkv * G, 1, D)).astype(mx.float16)
            head, tail = [(0, 9), (4, 5), (0, 0)][(ci + si) % 3]
            ks, vs = side(kc, k, head, tail), side(vc, v, head, tail)
            L = N + 9
            masks = [None]
            if B > 1:   # left padding of a batch
                pad = mx.array([i * 37 for i in range(B)])
                masks.append((mx.arange(L)[None] >= pad[:, None]).reshape(B, 1, 1, L))
            else: masks.append(mx.random.uniform(shape=(1, 1, 1, L)) > 0.2)
            for mi, mask in enumerate(masks):
                sinks = mx.random.normal((Hkv * G,)) if mi else None
                kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
                qq = (q.astype(mx.float32) * D ** -0.5).reshape(B, Hkv, G, 1, D)
                full = A._full_mask(mask, B, Hkv, G, 1, L)
                mk = None if full is None else full[..., head:head + N]
                e1 = None
                if backend and A._kernel_ok(qq, kp, vp, mk):
                    try:
                        f = A.fused_decode_partial(qq, kp, vp, ks.parts, vs.parts, mk, N, True, backend=backend)
                        r = A._quantized_partial_mlx(qq, kp, vp, ks.parts, vs.parts, mk, N)
                        e1 = rel(f[2] / f[1], r[2] / r[1])
                    except Exception as e:
                        e1 = float('nan'); log(f'   kernel failed: {type(e).__name__}: {str(e)[:2000]}')
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter('always')
                    for _ in range(2): out = A.attend(q, ks, vs, scale=D ** -0.5, mask=mask, sinks=sinks)
                ref = codec_attention(q, ks, vs, scale=D ** -0.5, mask=mask, sinks=sinks)
                # the bar is against the reference computed in float32 over the same stored values: the float16 reference
                # carries about 1.1-1.3e-3 of its own rounding (this machine's blockwise path, 2026-11-27), logged too
                e2, e2h = rel(out, codec_attention(q.astype(mx.float32), ks, vs, scale=D ** -0.5, mask=mask, sinks=sinks)), rel(out, ref)
                g = A._guard(backend).state.get(A._decode_class(qq, kp, vp, ks.parts, vs.parts, mk, N, True)) if backend else None
                gf = A._final_guard(backend).state.get(A._final_class(q, kp, vp, ks.parts, vs.parts, full, N, D ** -0.5)) if backend else None
                if gf is not None: g = (g, f'final {gf}')
                bad = (e1 is None and A._kernel_ok(qq, kp, vp, mk) and backend) or (e1 is not None and not e1 <= 2e-3) or not e2 <= 2e-3 or g is False or (isinstance(g, tuple) and (g[0] is False or g[1] == 'final False'))
                worst = max(worst, e2)
                tag = f'{name} B{B} Hkv{Hkv} G{G} D{D} N{N} seg({head},{tail}) mask{mi}'
                if bad: failures.append(tag)
                if True:
                    log(f'{tag} {"mma" if _mma and _AKc._mma_ok(kp, vp, G) else "simt"} | {e1 if e1 is None else f"{e1:.2e}"} | {e2:.2e} (vs float16 reference {e2h:.2e}) | {g} {"FAIL" if bad else ""} {[str(x.message)[:300] for x in w]}')
    for n_, bits_, why_ in _P.check_fused('cuda'):    # quantize (single and pair: keys and values of one update in one launch) / dequantize kernels
        log(f'packing kernels dim {n_} bits {bits_}: {why_ or "agree"}')
        if why_: failures.append(f'packing dim {n_} bits {bits_}: {why_}')
    log(f'cases failing: {len(failures)}; worst attend error {worst:.2e}')
    for f in failures: log('  FAIL', f)
_AKc.MMA = True; A._KERNELS.clear(); A._GUARDS.clear(); A._OK.clear()

# ------------------------------------------------------------------ timing helpers
def bench(fn, inputs, calls=8, repeats=15):
    "Median seconds per call: `calls` independent calls (rotating over `inputs`) in one mx.eval"
    for _ in range(2): mx.eval([fn(*inputs[i % len(inputs)]) for i in range(calls)])
    ts = []
    for r in range(repeats):
        t = time.perf_counter()
        mx.eval([fn(*inputs[(r * calls + i) % len(inputs)]) for i in range(calls)])
        ts.append((time.perf_counter() - t) / calls)
    return float(np.median(ts))

def copies_for(nbytes): return max(2, min(8, math.ceil(256e6 / max(nbytes, 1))))

def nb(x):
    if x is None: return 0
    if isinstance(x, (tuple, list)): return sum(nb(y) for y in x)
    return x.nbytes

SCHEMES = {'affine:8,4': lambda D: (AffineCodec(8, 64), AffineCodec(4, 64)), 'affine:4': lambda D: (AffineCodec(4, 64), AffineCodec(4, 64)),
           'turbo:4': lambda D: (TurboCodec(4), TurboCodec(4, seed=1)), 'turbo:3': lambda D: (TurboCodec(3), TurboCodec(3, seed=1))}

def layer_table(Hq, Hkv, D, contexts, schemes, title):
    log(f'\n## {title}: one layer, {Hq}/{Hkv} heads, d{D}, float16, one query token; ms per call (median), ratio = fp16 / scheme')
    log('context | fp16 SDPA | ' + ' | '.join(schemes) + ' | max error vs reference')
    for N in contexts:
        k = mx.random.normal((1, Hkv, N, D)).astype(mx.float16); v = mx.random.normal((1, Hkv, N, D)).astype(mx.float16)
        mx.eval(k, v)
        c = copies_for(2 * k.nbytes)
        base = [(mx.random.normal((1, Hq, 1, D)).astype(mx.float16), k + i * 1e-3, v) for i in range(c)]
        mx.eval(base)
        t16 = bench(lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5), base)
        del base
        row, errs = [f'{t16 * 1e3:.3f}'], []
        for name in schemes:
            kc, vc = schemes[name](D)
            ks, vs = CachedSide(kc, parts=kc.encode(k)), CachedSide(vc, parts=vc.encode(v))
            mx.eval(ks.parts, vs.parts)
            c = copies_for(nb(ks.parts) + nb(vs.parts))
            ins = []
            for i in range(c):
                kk = CachedSide(kc, parts=tuple(p + 0 for p in ks.parts)) if i else ks
                vv = CachedSide(vc, parts=tuple(p + 0 for p in vs.parts)) if i else vs
                ins.append((mx.random.normal((1, Hq, 1, D)).astype(mx.float16), kk, vv))
            mx.eval([(x[1].parts, x[2].parts) for x in ins])
            q0 = ins[0][0]
            out = A.attend(q0, ks, vs, scale=D ** -0.5); ref = codec_attention(q0, ks, vs, scale=D ** -0.5)
            errs.append(rel(out, ref))
            t = bench(lambda q, ks, vs: A.attend(q, ks, vs, scale=D ** -0.5), ins)
            row.append(f'{t * 1e3:.3f} ({t16 / t:.2f}x)')
            del ins, ks, vs
        log(f'{N:,} | ' + ' | '.join(row) + f' | {max(errs):.1e}')

contexts = [int(x) for x in args.contexts.split(',')]

from mlx_kvq import attention_kernels as _AK
AK_DEFAULT = dict(MMA=_AK.MMA, TP=_AK.TPK, NST=_AK.NST, U=_AK.U, UV=_AK.UV, CH_MAX=_AK.CH_MAX, BLOCKS=_AK.BLOCKS, LEAN=_AK.LEAN, PF=_AK.PF, REP=_AK.REP, LPCH=_AK.LPCH, KACC=_AK.KACC, STG=_AK.STG,
                  CONLINE=_AK.CONLINE, CU=_AK.CU, LPCH_MIN=_AK.LPCH_MIN, PSUM=_AK.PSUM)

def set_variant(v):
    "Kernel variant for the next calls: ('mma', TPK = TPV, CH_MAX, BLOCKS, NST) = the tensor-core kernel, ('simt', U, UV, CH_MAX, BLOCKS) = the SIMT kernel"
    from mlx_kvq import attention_kernels as AK
    AK.VEC, AK._DIAG, AK.SCAL, AK.CLAMP, AK.PCH, AK.LB = False, None, False, False, 1, 0
    AK.LEAN, AK.PF, AK.REP, AK.LPCH, AK.KACC, AK.STG = False, AK_DEFAULT['PF'], AK_DEFAULT['REP'], AK_DEFAULT['LPCH'], AK_DEFAULT['KACC'], AK_DEFAULT['STG']   # lean loops only where a variant names them
    AK.CONLINE, AK.CU, AK.LPCH_MIN, AK.PSUM = AK_DEFAULT['CONLINE'], AK_DEFAULT['CU'], AK_DEFAULT['LPCH_MIN'], AK_DEFAULT['PSUM']
    if v[0] == 'mma':
        AK.MMA, AK.TPK, AK.TPV, AK.CH_MAX, AK.BLOCKS, AK.NST = True, v[1], v[1], v[2], v[3], v[4]
    else: AK.MMA, (AK.U, AK.UV, AK.CH_MAX, AK.BLOCKS) = False, v[1:5]
    for k, x in (v[5:6] or [()])[0]: setattr(AK, k, x)
    A._KERNELS.clear(); A._GUARDS.clear(); A._OK.clear(); A._LAUNCHERS.clear()

LEANV = (('LEAN', True),)
DEFAULT_LEAN = LEANV + tuple((k, AK_DEFAULT[k]) for k in ('PF', 'STG', 'LPCH', 'KACC')) + (('LB', _AK.LB),)
OLD_COMBINE = (('CONLINE', False), ('LPCH_MIN', 0))   # the defaults before the one-pass combine and one chunk per block at short contexts (2026-11-25)
VARIANTS = [('mma', 1, 1024, 900, 0, (('LB', 0),)), ('mma', 1, 1024, 900, 0, DEFAULT_LEAN)]   # the kernel before the lean loops, the default
if os.environ.get('KVQ_VARIANTS'): VARIANTS = eval(os.environ['KVQ_VARIANTS'])
if 'variants' in only:
    log('\n## 0. kernel variants: one layer, 32/8 heads, d128, float16, one query token; ms per call (median); '
        'mma = tensor-core kernel TP/CH_MAX/BLOCKS/NST; simt = SIMT kernel U/UV/CH_MAX/BLOCKS')
    vres = {}
    vctx = [int(x) for x in args.variant_contexts.split(',')]
    for N in vctx:
        Hq, Hkv, D = 32, 8, 128
        k = mx.random.normal((1, Hkv, N, D)).astype(mx.float16); v = mx.random.normal((1, Hkv, N, D)).astype(mx.float16)
        base = [(mx.random.normal((1, Hq, 1, D)).astype(mx.float16), k + i * 1e-3, v) for i in range(copies_for(2 * k.nbytes))]
        mx.eval(base)
        t16 = bench(lambda q, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5), base)
        del base
        log(f'context {N:,}: fp16 SDPA {t16 * 1e3:.3f} ms')
        log('variant | ' + ' | '.join(SCHEMES) + ' | max error vs reference')
        ins_by = {}
        for name in SCHEMES:
            kc, vc = SCHEMES[name](D)
            ks, vs = CachedSide(kc, parts=kc.encode(k)), CachedSide(vc, parts=vc.encode(v))
            ins = [(mx.random.normal((1, Hq, 1, D)).astype(mx.float16), CachedSide(kc, parts=tuple(p + 0 for p in ks.parts)),
                    CachedSide(vc, parts=tuple(p + 0 for p in vs.parts))) for i in range(copies_for(nb(ks.parts) + nb(vs.parts)))]
            mx.eval([(x[1].parts, x[2].parts) for x in ins])
            ins_by[name] = ins
        for var in VARIANTS:
            set_variant(var)
            row, errs = [], []
            for name, ins in ins_by.items():
                q0, ks, vs = ins[0]
                diag = len(var) > 5 and ('_DIAG', 'noload') in var[5]
                call = (lambda q, ks, vs: A.fused_decode(q, A.side_plan(ks.codec, D), A.side_plan(vs.codec, D), ks.parts, vs.parts, None, N, D ** -0.5)) \
                    if diag else (lambda q, ks, vs: A.attend(q, ks, vs, scale=D ** -0.5))   # the diagnosis bypasses the first-use guard
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter('always')
                    out = call(q0, ks, vs)
                ref = codec_attention(q0, ks, vs, scale=D ** -0.5)
                e = rel(out, ref); errs.append(e)
                if not diag and (w or not e <= 2e-3): failures.append(f'variant {var} {name} N{N}: error {e:.2e} {[str(x.message)[:200] for x in w]}'); log('  FAIL', failures[-1])
                t = bench(call, ins)
                vres.setdefault((var, N), []).append(t16 / t)
                row.append(f'{t * 1e3:.3f} ({t16 / t:.2f}x)')
            log(f'{"/".join(map(str, var))} | ' + ' | '.join(row) + f' | {max(errs):.1e}')
        # where the time goes (default variant): the decode kernel alone, decode + combine, and reading the packed bytes once
        set_variant(('mma', AK_DEFAULT['TP'], AK_DEFAULT['CH_MAX'], AK_DEFAULT['BLOCKS'], AK_DEFAULT['NST'], (('LEAN', AK_DEFAULT['LEAN']),)) if AK_DEFAULT['MMA'] else ('simt', AK_DEFAULT['U'], AK_DEFAULT['UV'], AK_DEFAULT['CH_MAX'], AK_DEFAULT['BLOCKS']))
        for name, ins in ins_by.items():
            q0, ks, vs = ins[0]
            kp, vp = A.side_plan(ks.codec, D), A.side_plan(vs.codec, D)
            qk = A._query_kind(kp)
            if qk in (None, 'dense') or A._finish_kind(vp) is None or backend != 'cuda': continue   # (dense: the query kernel runs first)
            A.attend(q0, ks, vs, scale=D ** -0.5)
            t_dec = bench(lambda q, ks, vs: A._run_decode(q, kp, vp, ks.parts, vs.parts, None, N, 'cuda', qk, D ** -0.5)[:2], ins)
            t_all = bench(lambda q, ks, vs: A.fused_decode(q, kp, vp, ks.parts, vs.parts, None, N, D ** -0.5), ins)
            t_read = bench(lambda q, ks, vs: [mx.max(p.view(mx.uint32) if p.dtype == mx.uint32 else p) for p in (*ks.parts, *vs.parts)], ins)
            nbytes = nb(ins[0][1].parts) + nb(ins[0][2].parts)
            log(f'  {name} N{N:,}: decode kernel {t_dec * 1e3:.3f} ms, + combine {t_all * 1e3:.3f} ms, reading the {nbytes / 1e6:.0f} MB once '
                f'(mx.max per part) {t_read * 1e3:.3f} ms = {nbytes / t_read / 1e12:.2f} TB/s; kernel at {nbytes / t_dec / 1e12:.2f} TB/s')
        del ins_by, k, v
    ok = [var for var in VARIANTS if not (len(var) > 5 and ('_DIAG', 'noload') in var[5]) and not any(f'variant {var}' in f for f in failures)]
    if ok:
        best = max(ok, key=lambda var: float(np.mean(vres[(var, vctx[-1])])) + 0.25 * float(np.mean(vres[(var, vctx[0])])))
        log(f'# fastest: {best}; the sections below run the default kernel {DEFAULT_LEAN}')
        set_variant(('mma', 1, AK_DEFAULT['CH_MAX'], AK_DEFAULT['BLOCKS'], 0, DEFAULT_LEAN))
if 'layer' in only:
    layer_table(32, 8, 128, contexts, SCHEMES, '2. decode attention')
if 'gemma' in only:
    auto = {'auto:5-like kvq_turbo 5o/4o': lambda D: (calibrated(5, D, 0), calibrated(4, D, 1)),
            'kvq_turbo 4/4 (centered, scaled)': lambda D: (calibrated(4, D, 0, False), calibrated(4, D, 1, False)),
            'turbo:4': SCHEMES['turbo:4']}
    layer_table(4, 1, 256, contexts, auto, "3. auto:5's codec kinds on the embedded Gemma's shape")

# ------------------------------------------------------------------ whole model
def llama_1b():
    from mlx_lm.models import llama
    a = llama.ModelArgs(model_type='llama', hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5, vocab_size=128256, rope_theta=500000.0,
                        tie_word_embeddings=True, max_position_embeddings=131072 + 4096)
    m = llama.Model(a); m.set_dtype(mx.float16); mx.eval(m.parameters())
    return m

def caches_for(model, kv):
    from mlx_kvq import make_prompt_cache
    return make_prompt_cache(model, kv=kv)

if 'prefill' in only or 'model' in only:
    model = llama_1b()
    from mlx_kvq.integrate import install; install()

if 'prefill' in only:
    T, chunk = (4096 if args.quick else 16384), 2048
    log(f'\n## 4. chunked prefill: random-weight Llama-3.2-1B shape (16 layers, 32/8 heads, d64, fp16), {T} tokens in chunks of {chunk}')
    log('scheme | tokens/s | ratio vs fp16 | peak memory GB')
    prompt = mx.random.randint(0, 1000, (1, T))
    base = None
    for kv in ['fp16', 'affine:8,4', 'affine:4', 'turbo:4', 'turbo:3']:
        cache = caches_for(model, kv)
        warm = caches_for(model, kv)   # warm up: one whole pass (kernels compile per shape on first use)
        for s in range(0, T, chunk): mx.eval(model(prompt[:, s:s + chunk], cache=warm))
        del warm
        mx.clear_cache(); mx.reset_peak_memory()
        t = time.perf_counter()
        for s in range(0, T, chunk):
            y = model(prompt[:, s:s + chunk], cache=cache); mx.eval(y, [c.state for c in cache])
        dt = time.perf_counter() - t
        peak = mx.get_peak_memory() / 1e9
        tps = T / dt
        base = base or tps
        log(f'{kv} | {tps:,.0f} | {tps / base:.2f} | {peak:.2f}')
        del cache; mx.clear_cache()

if 'model' in only:
    log('\n## 5. whole-model greedy decode: random-weight Llama-3.2-1B shape, caches filled with N random tokens, tokens/s')
    log('context | ' + ' | '.join(['fp16', 'affine:8,4', 'affine:4', 'turbo:4', 'turbo:3']))
    for N in [int(x) for x in args.model_contexts.split(',')]:
        row, base = [], None
        for kv in ['fp16', 'affine:8,4', 'affine:4', 'turbo:4', 'turbo:3']:
            cache = caches_for(model, kv)
            step = 8192
            for s in range(0, N, step):
                n = min(step, N - s)
                for c in cache:
                    c.update_and_fetch(mx.random.normal((1, 8, n, 64)).astype(mx.float16), mx.random.normal((1, 8, n, 64)).astype(mx.float16))
                mx.eval([c.state for c in cache])
            tok = mx.array([[1]])
            for _ in range(3):
                tok = mx.argmax(model(tok, cache=cache)[:, -1:], -1); mx.eval(tok)
            steps = 16 if args.quick else 32
            t = time.perf_counter()
            for _ in range(steps):
                tok = mx.argmax(model(tok, cache=cache)[:, -1:], -1); mx.eval(tok)
            tps = steps / (time.perf_counter() - t)
            base = base or tps
            row.append(f'{tps:.1f} ({tps / base:.2f}x)')
            del cache; mx.clear_cache()
        log(f'{N:,} | ' + ' | '.join(row))
log('# done')
