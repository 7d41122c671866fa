"""Registers, spills and static shared memory of mlx_kvq's CUDA decode kernel, without a GPU: the generated source is
wrapped in the signature MLX's `mx.fast.cuda_kernel` gives it (inputs, `NAME_strides` where the source reads them,
outputs), compiled by NVRTC to PTX and assembled by `ptxas -v` for sm_90 (H100/H200).

    pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12   # NVIDIA's wheels, no GPU needed
    python3 bench/cuda_registers.py [--arch sm_90] [--sass] [--loops] [--set NAME=VALUE ...]
    python3 bench/cuda_registers.py --pair [--set CAL_WHT=True]   # the calibrated pair / ring kernels instead
    # --sass: + pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; --loops: the instructions of each token loop (and its spill loads / stores)
    # (a backward branch around tensor-core products: the tile loops); --set: kernel knobs, e.g. --set LEAN=False

Prints one line per configuration, e.g. `turbo:4 G4 D128 (final): 72 registers, 0 bytes spilled, 35040 bytes smem`.
Registers bound how many blocks an SM keeps resident (65,536 registers per SM, 128 threads per block)."""
import argparse, ctypes, os, re, subprocess, tempfile
import nvidia
from mlx_kvq import attention_kernels as AK, packing as _P
from mlx_kvq.attention import side_plan, _finish_kind, _query_kind, _fold_inputs, _TAIL_CONSTANTS, _pack_defines, _packed_names
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec

ROOT = list(nvidia.__path__)[0]
HEADER = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef unsigned int uint32_t; typedef int int32_t; typedef unsigned long long uint64_t;
struct Strides { long long v[10]; __device__ long long operator[](int i) const { return v[i]; } };
"""

def wrap(name, src, inputs, outputs):
    "The kernel as MLX builds it: a __global__ function whose parameters are the inputs (+ strides) and the outputs"
    ps = []
    for n, t in inputs:
        ps.append(f"    const {t}* {n}")
        if n + '_strides' in src: ps.append(f"    const __grid_constant__ Strides {n}_strides")
    ps += [f"    {t}* {n}" for n, t in outputs]
    return HEADER + f"namespace mlx {{ namespace core {{ namespace cu {{\n__global__ void {name}(\n" + ',\n'.join(ps) + ") {\n" + src + "\n}\n}}}\n"

def compile_ptxas(name, source, arch, sass=False):
    "(registers, spilled bytes, smem bytes) from NVRTC + ptxas -v (+ a Counter of the SASS opcodes when `sass`: cuobjdump from the nvidia-cuda-cuobjdump wheel)"
    lib = ctypes.CDLL(os.path.join(ROOT, 'cuda_nvrtc', 'lib', 'libnvrtc.so.12'))
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f'{name}.cu'.encode(), 0, None, None) == 0
    opts = [f'--gpu-architecture=compute_{arch[3:]}', '--std=c++17', f'-I{os.path.join(ROOT, "cuda_runtime", "include")}', '-default-device']
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts]))
    n = ctypes.c_size_t()
    if rc:
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.value.decode()[-3000:])
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n)); ptx = ctypes.create_string_buffer(n.value); lib.nvrtcGetPTX(prog, ptx)
    d = tempfile.mkdtemp()
    with open(f'{d}/k.ptx', 'wb') as f: f.write(ptx.value)
    ptxas = os.path.join(ROOT, 'cuda_nvcc', 'bin', 'ptxas')
    if not os.access(ptxas, os.X_OK): os.chmod(ptxas, 0o755)
    out = subprocess.run([ptxas, '-v', f'-arch={arch}', f'{d}/k.ptx', '-o', f'{d}/k.cubin'], capture_output=True, text=True)
    if out.returncode: raise RuntimeError(out.stderr[-3000:])
    log = out.stderr + out.stdout
    get = lambda pat: int((re.findall(pat, log) or [0])[0])
    res = get(r'Used (\d+) registers'), get(r'(\d+) bytes spill stores'), get(r'(\d+) bytes smem')
    if not sass: return res
    import glob, collections
    tool = (glob.glob(os.path.join(ROOT, '*', 'bin', 'cuobjdump')) + glob.glob(os.path.join(ROOT, 'cu*', 'bin', 'cuobjdump')) + ['cuobjdump'])[0]
    if tool != 'cuobjdump' and not os.access(tool, os.X_OK): os.chmod(tool, 0o755)
    env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get('PATH', ''))   # cuobjdump runs nvdisasm (nvidia-cuda-nvdisasm wheel)
    dump = subprocess.run([tool, '-sass', f'{d}/k.cubin'], capture_output=True, text=True, env=env).stdout
    ops = collections.Counter(m.split('.')[0] for m in re.findall(r'/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)', dump))
    return res + (ops, dump)

def loops(dump):
    "(first address, instructions, Counter of opcodes) of every loop of the SASS `dump` whose body holds tensor-core products (HMMA, or IMMA: `AINT8`), innermost first"
    import collections
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r'/\*([0-9a-f]{4,})\*/\s+(.*?);', dump)]
    op = lambda t: re.sub(r'^@!?U?P\w+\s+', '', t).split()[0].split('.')[0]
    out = []
    for a, t in ins:
        m = re.search(r'BRA\s+0x([0-9a-f]+)', t)
        if m and int(m.group(1), 16) < a:
            body = [x for x in ins if int(m.group(1), 16) <= x[0] <= a]
            c = collections.Counter(op(x[1]) for x in body)
            if c["HMMA"] or c["IMMA"]: out.append((int(m.group(1), 16), len(body), c))
    return sorted(out, key=lambda x: x[1])

def decode_inputs(kplan, vplan, qprep, mask='float'):
    ins = [('q', '__half' if qprep else 'float')] + [(f'kw{i}', 'uint32_t') for i in range(len(kplan.bands))] + \
          [(f'kg{i}', '__half') for i in range(len(kplan.bands))] + ([('kz0', '__half')] if kplan.kind == 'affine' else [])
    ins += [(f'vw{i}', 'uint32_t') for i in range(len(vplan.bands))] + [(f'vg{i}', '__half') for i in range(len(vplan.bands))] + \
           ([('vz0', '__half')] if vplan.kind == 'affine' else [])
    return ins + [('ktab', 'float'), ('vtab', 'float'), ('mask', mask), ('meta', 'int32_t')] + ([('qsc', 'float'), ('qsg', 'float')] if qprep else [])

def compile_decode(kplan, vplan, G, fold=False, arch='sm_90', sass=False, include=False, tail=None, lb=None, mask='float'):
    """`compile_ptxas` of the decode kernel for one configuration as the final path launches it (`fold`: the variant that
    finishes the attention itself; `include`: the body given as `packing.INCLUDE` gives it, one `#include` of a file;
    `tail` = (key dim, stage capacity, key bits, value bits[, write]) with `fold`: the variant that quantizes and merges a cache's staged tokens,
    with `write` the one that also takes the step's token and writes the staging buffers; `lb`: its launch bounds'
    resident blocks, default `LB`, as `attention._get_kernel` compiles a call's kernel; `mask`: the mask input's type, float for
    a masked call, 'int32_t' for a call without a mask: `attention._mask_input`'s placeholder)"""
    qprep = _query_kind(kplan)
    if qprep == 'dense': qprep = None      # prepared by the query kernel (`compile_qmap`): the decode kernel reads float32 queries
    fin = _finish_kind(vplan) if fold else None
    src = AK._decode_source(kplan, vplan, G, 'cuda', qprep, fold=fin, tail=tail if fin else None, lb=lb)
    ins, outs = decode_inputs(kplan, vplan, qprep, mask), [('o', 'float'), ('ml', 'float')]
    if fin: ins, outs = ins + [('cnt', 'float')] + [(n, 'float') for n in _fold_inputs(fin)], [('scr', 'float'), ('out', '__half')]
    if fin and tail: ins = ins + [('ts', '__half')] + [(nm, 'float') for nm in _TAIL_CONSTANTS]
    if fin and tail and len(tail) > 4 and tail[4]: ins, outs = ins + [('nk', '__half'), ('nv', '__half')], outs + [('so', '__half')]
    if fin:   # the folded kernels' constants as the launcher packs them (`attention._packed`), offsets 4 floats apart here
        consts = ['ktab', 'vtab'] + (['qsc', 'qsg'] if qprep else []) + _fold_inputs(fin) + (_TAIL_CONSTANTS if tail else [])
        pack = tuple((nm, 4 * i) for i, nm in enumerate(consts))
        kept = _packed_names([n for n, _ in ins], pack)
        src, ins = _pack_defines(pack) + src, [x for x in ins if x[0] in kept] + [('cst', 'float')]
    if include: src = _P._included(src, [n for n, _ in ins])
    if fin: src = 'using T = __half;\n' + src   # as MLX declares them: the template's `using T` first in the body
    return compile_ptxas('k', AK._kernel_header('cuda', lb) + wrap('k', src, ins, outs), arch, sass), fin

def compile_qmap(D, KDP, arch='sm_90'):
    "`compile_ptxas` of the query kernel of 'dense' plans (half-precision queries in)"
    return compile_ptxas('q', wrap('q', AK._qmap_source('cuda', D, KDP), [('q', '__half'), ('qmap', 'float'), ('qsc', 'float')], [('qp', 'float')]), arch)

def compile_combine(finish, Dv=None, arch='sm_90', VDP=None):
    "`compile_ptxas` of the combine kernel with a finish ('plain' / 'rot' / 'dense' with Dv and VDP; None: the partial combine)"
    src = ('using T = __half;\n' if finish else '') + AK._combine_source('cuda', finish, Dv, VDP)
    ins = [('o', 'float'), ('ml', 'float'), ('meta', 'int32_t')] + [(n, 'float') for n in _fold_inputs(finish)]
    return compile_ptxas('c', wrap('c', src, ins, [('out', '__half' if finish else 'float'), ('mlo', 'float')]), arch)

CONFIGS = [('turbo:4', TurboCodec(4), TurboCodec(4, seed=1), 4, 128), ('turbo:3', TurboCodec(3), TurboCodec(3, seed=1), 4, 128),
           ('affine:8,4', AffineCodec(8), AffineCodec(4), 4, 128), ('affine:4', AffineCodec(4), AffineCodec(4), 4, 128),
           ('turbo:4', TurboCodec(4), TurboCodec(4, seed=1), 4, 256), ('turbo:4', TurboCodec(4), TurboCodec(4, seed=1), 8, 64)]

CAL_PAIRS = {'llama 2/6 d64': ([(64, 2, False)], [(64, 6, False)]), 'outliers 3+4 / 5 d128': ([(112, 3, True), (16, 4, True)], [(128, 5, False)])}

def compile_cal_pair(kb, vb, into=False, arch='sm_90'):
    """(registers, spilled bytes, {name, ins, outs, src}) of the calibrated pair kernel (the ring kernel with `into`) for
    key / value bands kb / vb ([(n, bits, has_idx)]), float16 inputs, as the knobs stand (`CAL_BSEARCH`, `CAL_WHT`)"""
    from mlx_kvq import calibrated as Cal
    got, keep = {}, (Cal.make_kernel, Cal._CALK)
    Cal.make_kernel, Cal._CALK = (lambda backend, name, ins, outs, src, **kw: got.update(name=name, ins=ins, outs=outs, src=src) or object()), {}
    try: Cal._cal_kernel(sum(n for n, _, _ in kb), kb, sum(n for n, _, _ in vb), vb, into)
    finally: Cal.make_kernel, Cal._CALK = keep
    ins = [('xk', '__half'), ('xv', '__half'), ('ck', 'float'), ('cv', 'float'), ('meta', 'int32_t')]
    ins += [(n, 'uint32_t' if n[0] == 'q' else '__half') for n in got['ins'][5:]]
    outs = [(n, 'uint32_t' if n[0] == 'o' else '__half') for n in got['outs']]
    regs, spill, _ = compile_ptxas('cal', wrap('cal', "using T = __half;\nconstexpr int WARPS = 4;\n" + got['src'], ins, outs), arch)
    return regs, spill, got

if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--arch', default='sm_90')
    ap.add_argument('--sass', action='store_true', help='also count the SASS instructions by opcode (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)')
    ap.add_argument('--loops', action='store_true', help='with --sass: the instructions of each tensor-core token loop')
    ap.add_argument('--set', action='append', default=[], help='a knob of attention_kernels, attention, packing or calibrated, NAME=VALUE (e.g. LEAN=False, CAL_QROT=False)')
    ap.add_argument('--fold', action='store_true', help='the kernels that finish the attention themselves (`FOLD`), as the final path launches them on CUDA')
    ap.add_argument('--cal', action='store_true', help="also the calibrated codec kinds `auto:5` plans (`cal:5,4` of bench/ncu_decode.py: 5 / 4 bits, an outlier band of dim / 8 channels at one bit more) at d128 and d256")
    def kv_bits(t):
        k, _, v = t.partition(',')
        if not (k.isdigit() and v.isdigit() and 1 <= int(k) <= 8 and 1 <= int(v) <= 8):
            raise argparse.ArgumentTypeError(f"{t!r}: give key and value bits 1-8 as K,V (e.g. 3,6)")
        return t
    ap.add_argument('--cal-bits', nargs='+', type=kv_bits, default=['5,4'], metavar='K,V', help="with --cal: the key and value bits of the calibrated kinds (e.g. 5,4 3,6: `auto:5` plans either, at the same bytes)")
    ap.add_argument('--cal-dims', nargs='+', type=int, default=[128, 256], metavar='D', help="with --cal: the head dims (default 128 256; 64: Llama-3.2-1B's)")
    ap.add_argument('--one-band', action='store_true', help="with --cal: one band a side, no outlier band (what `auto:B` labels tqBcs: its plan for Llama-3.2-1B's layers); labels cal1:K,V")
    ap.add_argument('--float64-centroids', action='store_true', help="with --cal: codecs with the float64 codebooks of configs saved before 2026-12-01 (half_centroids=False: tables with low parts, VTLO)")
    ap.add_argument('--pair', action='store_true', help="instead: the calibrated pair and ring kernels of `CAL_PAIRS` (e.g. --set CAL_WHT=True)")
    ap.add_argument('--only', default=None, help='only the configurations whose label contains this text')
    ap.add_argument('--unmasked', action='store_true', help="the kernels of calls without a mask (an int32 placeholder as the mask input, `attention._mask_input`: every decode step's); default: a masked call's (float32)")
    ap.add_argument('--lb', type=int, default=None, help='the resident blocks an SM the kernels are compiled for (default LB; LB_FEW = 2: one-KV-head calls)')
    args = ap.parse_args()
    from knobs import apply_knobs
    apply_knobs(args.set)   # knobs of attention_kernels, attention, packing or calibrated; an unknown name stops the run
    if args.pair:
        for label, (kb, vb) in CAL_PAIRS.items():
            for into in (False, True):
                regs, spill, got = compile_cal_pair(kb, vb, into, args.arch)
                print(f"{got['name']} {label}: {regs} registers, {spill} bytes spilled ({args.arch})")
        raise SystemExit(0)
    configs = list(CONFIGS)
    if args.cal:
        import numpy as np
        from calcodecs import calibrated
        rng = np.random.default_rng(0)   # one generator for every configuration, drawn in this order
        cal = lambda bits, seed, D: calibrated(bits, seed, D, rng, outliers=not args.one_band, half=not args.float64_centroids)
        configs += [(f'cal{"1" if args.one_band else ""}:{kv}', cal(int(kv.split(',')[0]), 0, D), cal(int(kv.split(',')[1]), 1, D), 4, D) for kv in args.cal_bits for D in args.cal_dims]
    if args.only: configs = [c for c in configs if args.only in f'{c[0]} D{c[4]}']
    if not configs: ap.error(f"--only {args.only!r} matches no configuration (labels like 'turbo:4 D128', 'cal:5,4 D256' with --cal)")
    for label, kc, vc, G, D in configs:
        kp, vp = side_plan(kc, D), side_plan(vc, D)
        qprep = _query_kind(kp)
        got, fin = compile_decode(kp, vp, G, args.fold, args.arch, args.sass or args.loops, lb=args.lb, mask='int32_t' if args.unmasked else 'float')
        regs, spill, smem = got[:3]
        print(f"{label} G{G} D{D} ({'final' if qprep else 'partial'}{', folded' if fin else ''}): {regs} registers, {spill} bytes spilled, {smem} bytes smem "
              f"({'tensor-core' if AK.MMA and AK._mma_ok(kp, vp, G) else 'SIMT'} kernel; {args.arch})")
        if args.sass or args.loops: print(f"    SASS: {sum(got[3].values())} instructions; " + ', '.join(f'{k} {v}' for k, v in got[3].most_common(14)))
        if args.loops:
            for a, n, c in loops(got[4])[:2]: print(f"    loop at {a:#x} ({'scores: stores them' if c['STS'] else 'values'}): {n} instructions; " + ', '.join(f'{k} {v}' for k, v in c.most_common(10))
                                                    + f"; spill loads / stores (LDL / STL) {c['LDL']} / {c['STL']}")
