"""Offline look at the decode kernel's machine code (no GPU needed): the CUDA source `attention_kernels` generates for a
configuration, wrapped as `mx.fast.cuda_kernel` wraps it (inputs as pointers, `*_strides` as by-value arrays of 10
int64), compiled for sm_90 with nvcc from PyPI's `nvidia-cuda-nvcc` wheels, then `cuobjdump -sass`: registers, shared
memory, SASS instructions in all and per opcode, and the instructions of the two token loops.

    python bench/sass_decode.py turbo:4 turbo:3 affine:4 affine:8,4 [--G 4] [--D 128] [--set NAME=VALUE ...] [--dump DIR]

Needs `nvcc`, `cuobjdump` and `nvdisasm` on PATH (pip wheels: nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt,
nvidia-cuda-runtime, nvidia-cuda-cccl, nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm). Static counts, not timings: an
instruction in a loop counts once.
"""
import argparse, collections, os, re, subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx.core as mx
from mlx_kvq import attention as A, attention_kernels as AK
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec

def plans(scheme, D):
    kind, bits = scheme.split(':'); kb, vb = (int(x) for x in (bits.split(',') * 2)[:2])
    mk = (lambda b: TurboCodec(b)) if kind == 'turbo' else (lambda b: AffineCodec(b))
    return A.side_plan(mk(kb), D), A.side_plan(mk(vb), D)

def wrap(src, names, header=''):
    args = []
    for n in names:
        ty = 'uint32_t' if re.fullmatch(r'[kv]w\d', n) else 'int32_t' if n == 'meta' else '__half' if n in ('q', ) or re.fullmatch(r'[kv][gz]\d', n) else 'float'
        args.append(f'const {ty}* {n}')
        if f'{n}_strides' in src: args.append(f'const __grid_constant__ kvq_strides {n}_strides')
    args += ['float* o', 'float* ml']
    return ('#include <cuda_fp16.h>\n#include <cstdint>\nstruct kvq_strides { long long v[10]; __device__ long long operator[](int i) const { return v[i]; } };\n'
            + header + f'extern "C" __global__ void kvq_decode({", ".join(args)}) {{\n{src}\n}}\n')

def analyse(cubin):
    sass = subprocess.run(['cuobjdump', '-sass', cubin], capture_output=True, text=True, check=True).stdout
    res = subprocess.run(['cuobjdump', '-res-usage', cubin], capture_output=True, text=True, check=True).stdout
    ins = [m.group(1) for m in re.finditer(r'/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)', sass)]
    return sass, res, ins

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('schemes', nargs='+'); ap.add_argument('--G', type=int, default=4); ap.add_argument('--D', type=int, default=128)
    ap.add_argument('--set', action='append', default=[]); ap.add_argument('--dump'); ap.add_argument('--top', type=int, default=14)
    a = ap.parse_args()
    for s in a.set:
        k, v = s.split('='); setattr(AK, k, eval(v))
    for scheme in a.schemes:
        kp, vp = plans(scheme, a.D)
        qprep, half = A._finish_kind(kp), True
        src = AK._decode_source(kp, vp, a.G, 'cuda', qprep, half)
        names = ['q'] + [f'kw{i}' for i in range(len(kp.bands))] + [f'kg{i}' for i in range(len(kp.bands))] + (['kz0'] if kp.kind == 'affine' else []) \
            + [f'vw{i}' for i in range(len(vp.bands))] + [f'vg{i}' for i in range(len(vp.bands))] + (['vz0'] if vp.kind == 'affine' else []) \
            + ['ktab', 'vtab', 'mask', 'meta'] + (['qsc', 'qsg'] if qprep else [])
        with tempfile.TemporaryDirectory() as d:
            cu = Path(a.dump or d) / f"{scheme.replace(':', '_').replace(',', '-')}.cu"; cu.parent.mkdir(parents=True, exist_ok=True)
            cu.write_text(wrap(src, names, AK._kernel_header('cuda')))
            cub = cu.with_suffix('.cubin')
            r = subprocess.run(['nvcc', '-arch=sm_90', '-cubin', '-O3', '-o', str(cub), str(cu)], capture_output=True, text=True)
            if r.returncode: print(r.stderr[-3000:]); continue
            sass, res, ins = analyse(str(cub))
            if a.dump: cu.with_suffix('.sass').write_text(sass)
        reg = re.search(r'REG:(\d+)', res).group(1); sh = re.search(r'SHARED:(\d+)', res).group(1)
        c = collections.Counter(i.split('.')[0] for i in ins)
        print(f"{scheme} G={a.G} D={a.D} mma={AK._uses_mma(kp, vp, a.G, 'cuda', half)}: {reg} registers, {sh} B shared, {len(ins)} SASS instructions")
        print('   ', ', '.join(f'{k} {v}' for k, v in c.most_common(a.top)))

if __name__ == '__main__': main()
