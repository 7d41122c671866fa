"""Run mlx_kvq's generated flash-decoding kernel (the CUDA/Metal source of mlx_kvq.attention_kernels) on the CPU:
the same source compiled as C++ with 128 threads per block (fibers of one OS thread, each running until it waits at a
barrier: `KVQ_SYNC`, the per-warp exchange of the shuffles and of the emulated tensor-core products), blocks one after
another. (The threads were OS threads until 2026-12-01: the same results bit for bit, and the emulation tests 2-4x
slower on 2 cores, where every barrier put 128 threads to sleep and woke them.) Threads that wait at a barrier the others
never reach stop the launch with an error naming the block (OS threads hung there). It proves the kernel's index and bit arithmetic against the blockwise
reference without a GPU (the GPU check, bench/check_fused_cuda.py, proves the real thing).

    python3 tests/kernel_emulator.py           # every configuration below; needs g++ >= 11 (C++20)
tests/test_kernel_emulation.py runs it in the test suite."""
import contextlib, ctypes, hashlib, math, os, re, shutil, subprocess, sys, tempfile
from pathlib import Path
import numpy as np
import mlx.core as mx

from mlx_kvq import attention as A
from mlx_kvq import attention_kernels as AK
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from calcodecs import calibrated, calibrated_pair as _pair   # the calibrated codecs the GPU checks draw (`calibrated` used by the tests as `E.calibrated`)

PRE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <ucontext.h>
#include <sys/mman.h>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <memory>
#include <algorithm>
using std::min; using std::max;
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct Strides { const long long* v; long long operator[](int i) const { return v[i]; } };
static int g_tid;
static int g_bx, g_by, g_nt, g_gx;
static long g_block_serial;   // blocks run so far (every launch's): a block's shared memory starts as garbage, not as the last block left it
template <class A> static void kvq_poison(A& a, long& seen) {   // the first thread of a block at a shared array's declaration fills it with 0xFF bytes (NaN floats, ~0u words): a read of what no thread of the block wrote shows
    if (seen != g_block_serial) { seen = g_block_serial; memset((void*)&a, 0xFF, sizeof(a)); } }
// A block's threads are fibers of one OS thread (ucontext): each runs until it waits at a barrier, then the next one
// runs, so a barrier costs a user-space switch per thread instead of an OS thread's sleep and wake-up.
static ucontext_t g_main_ctx, g_ctx[1024];
static bool g_done[1024];
static int g_live;
static unsigned long g_progress;   // arrivals at barriers and threads' ends: a round of every live thread without one is a deadlock
static bool g_stuck;               // the block's threads wait at a barrier that the others never reach (the launch stops, `launch` says where)
static std::function<void()> g_body;
static const size_t KVQ_STACK = 1 << 20;   // per thread, the lowest page a guard (an overflow faults, never corrupts)
static char* g_stacks;   // a launch's threads' stacks (mapped for the launch, unmapped after it: a process loads hundreds of kernels)
static void kvq_next(int me) {   // switch from thread `me` (waiting) to the next live thread; back when switched to again
    int n = me; do { n = (n + 1) % g_nt; } while (g_done[n] && n != me);
    if (n == me) return;
    g_tid = n; swapcontext(&g_ctx[me], &g_ctx[n]); g_tid = me; }
struct kvq_barrier {   // every thread of its group arrives, then all go on (a generation count; the last arrival goes on at once)
    int n, count = 0; unsigned gen = 0;
    explicit kvq_barrier(int n_) : n(n_) {}
    void arrive_and_wait() {
        const unsigned g = gen; const int me = g_tid;
        ++g_progress;
        if (++count == n) { count = 0; ++gen; return; }
        while (gen == g) {
            const unsigned long p = g_progress; kvq_next(me);   // (back after every other live thread had its turn)
            if (gen == g && g_progress == p) { g_stuck = true; setcontext(&g_main_ctx); } } } };
static kvq_barrier* g_bar;
static std::vector<std::unique_ptr<kvq_barrier>> g_wbar;
static void kvq_fiber() {   // a thread's life: the kernel, then the next live thread (or the launch, after the last)
    const int me = g_tid; g_body(); g_done[me] = true; ++g_progress;
    if (--g_live == 0) setcontext(&g_main_ctx);
    int n = me; do { n = (n + 1) % g_nt; } while (g_done[n]);
    g_tid = n; setcontext(&g_ctx[n]); }
static void kvq_stacks(int NTH, bool map) {   // map (with guard pages) or unmap the NTH threads' stacks
    if (!map) { munmap(g_stacks, (size_t)NTH * KVQ_STACK); g_stacks = nullptr; return; }
    g_stacks = (char*)mmap(nullptr, (size_t)NTH * KVQ_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_stacks == (char*)MAP_FAILED) { fprintf(stderr, "kernel emulator: no memory for the threads' stacks\n"); abort(); }
    for (int t = 0; t < NTH; ++t)
        if (mprotect(g_stacks + (size_t)t * KVQ_STACK, 4096, PROT_NONE)) { fprintf(stderr, "kernel emulator: no guard page\n"); abort(); } }
static void kvq_run_block(int NTH) {   // the block's NTH threads from the kernel's start to its end
    for (int t = 0; t < NTH; ++t) {
        getcontext(&g_ctx[t]); g_ctx[t].uc_stack.ss_sp = g_stacks + (size_t)t * KVQ_STACK; g_ctx[t].uc_stack.ss_size = KVQ_STACK;
        g_ctx[t].uc_link = &g_main_ctx; makecontext(&g_ctx[t], kvq_fiber, 0); g_done[t] = false; }
    g_live = NTH; g_tid = 0; swapcontext(&g_main_ctx, &g_ctx[0]); }
static float g_slot[1024];
static float kvq_shfl(float v, int o) {
    g_slot[g_tid] = v; g_wbar[g_tid >> 5]->arrive_and_wait();
    float r = g_slot[g_tid ^ o]; g_wbar[g_tid >> 5]->arrive_and_wait(); return r; }
typedef float T;
typedef _Float16 kvq_half;
static uint32_t kvq_h2(float lo, float hi) {
    kvq_half a = (kvq_half)lo, b = (kvq_half)hi; uint16_t x, y; __builtin_memcpy(&x, &a, 2); __builtin_memcpy(&y, &b, 2);
    return (uint32_t)x | ((uint32_t)y << 16); }
static float kvq_hf(uint32_t r, int k) { uint16_t x = (uint16_t)(r >> (16 * k)); kvq_half a; __builtin_memcpy(&a, &x, 2); return (float)a; }
static uint32_t kvq_hfma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t out = 0;
    for (int k = 0; k < 2; ++k) {
        kvq_half v = (kvq_half)((double)kvq_hf(a, k) * (double)kvq_hf(b, k) + (double)kvq_hf(c, k));
        uint16_t x; __builtin_memcpy(&x, &v, 2); out |= (uint32_t)x << (16 * k);
    }
    return out; }
static uint32_t kvq_prmt(uint32_t x, uint32_t y, uint32_t s) {
    const uint64_t v = ((uint64_t)y << 32) | x; uint32_t out = 0;
    for (int i = 0; i < 4; ++i) out |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return out; }
static uint32_t g_ma[1024][4], g_mb[1024][2];
template <class D, class P> static void kvq_warp_mma(D* d, const uint32_t* a, uint32_t b0, uint32_t b1, int K, P prod) {
    // mma.sync m16n8kK row.col over the 32 lanes of the calling thread's warp (PTX fragment layouts): K / 8 elements a
    // register (K = 16: halves, 32: bytes), registers a2 / a3 / b1 the k-rows from K / 2; prod(x, y, i) the product of element i of registers x, y
    const int t = g_tid, lane = t & 31, base = t - lane, epr = K / 8, half = K / 2;
    for (int k = 0; k < 4; ++k) g_ma[t][k] = a[k];
    g_mb[t][0] = b0; g_mb[t][1] = b1;
    g_wbar[t >> 5]->arrive_and_wait();
    const int gid = lane >> 2, tig = lane & 3;
    D out[4];
    for (int e = 0; e < 4; ++e) {
        const int row = gid + 8 * (e >> 1), col = 2 * tig + (e & 1);
        double acc = d[e];   // (exact for the integer products' sums, below 2^53)
        for (int k = 0; k < K; ++k) {
            const int al = base + (row & 7) * 4 + (k % half) / epr, areg = (row >= 8 ? 1 : 0) + (k >= half ? 2 : 0);
            const int bl = base + col * 4 + (k % half) / epr, breg = k >= half ? 1 : 0;
            acc += prod(g_ma[al][areg], g_mb[bl][breg], k % epr);
        }
        out[e] = (D)acc;
    }
    g_wbar[t >> 5]->arrive_and_wait();
    for (int e = 0; e < 4; ++e) d[e] = out[e]; }
static void kvq_mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {   // m16n8k16 f32.f16.f16.f32
    kvq_warp_mma(d, a, b0, b1, 16, [](uint32_t x, uint32_t y, int i) { return (double)kvq_hf(x, i) * (double)kvq_hf(y, i); }); }
static void kvq_imma(int* d, const uint32_t* a, uint32_t b0, uint32_t b1) {   // m16n8k32 s32.u8.s8.s32: A unsigned bytes, B signed bytes, exact int32 sums
    kvq_warp_mma(d, a, b0, b1, 32, [](uint32_t x, uint32_t y, int i) { return (double)(uint8_t)(x >> (8 * i)) * (double)(int8_t)(uint8_t)(y >> (8 * i)); }); }
"""
MACROS = r"""
#define KVQ_SHFL(v, o) kvq_shfl((v), (o))
#define KVQ_SYNC() g_bar->arrive_and_wait()
#define KVQ_SHARED static
#define KVQ_DEV
#define KVQ_ALIGN16 __attribute__((aligned(16)))
#define KVQ_TID g_tid
#define KVQ_BX g_bx
#define KVQ_BY g_by
#define KVQ_GX g_gx
#define KVQ_NTHREADS g_nt
#define KVQ_EXP(x) expf(x)
#define KVQ_MAX(a, b) fmaxf((a), (b))
#define KVQ_QROUND(x) rintf(x)   /* the codes a cache here stores are MLX's CPU mx.quantize's: ties to even (CUDA's: away from zero) */
#define KVQ_NEG_INF (-INFINITY)
#define KVQ_U64 unsigned long long
#define KVQ_MMA(d, a, b0, b1) kvq_mma((d), (a), (b0), (b1))
#define KVQ_IMMA(d, a, b0, b1) kvq_imma((d), (a), (b0), (b1))
#define KVQ_H2(r, lo, hi) ((r) = kvq_h2((lo), (hi)))
#define KVQ_H2F(flo, fhi, r) do { (flo) = kvq_hf((r), 0); (fhi) = kvq_hf((r), 1); } while (0)
#define KVQ_HFMA2(r, a, b, c) ((r) = kvq_hfma2((a), (b), (c)))
#define KVQ_PRMT(a, b, s) kvq_prmt((a), (b), (s))
#define KVQ_MAGIC(r, x, m) ((r) = ((x) & (m)) | 0x64006400u)
#define KVQ_CP4(dst, src) (*(dst) = *(src))
#define KVQ_CP16(dst, src) __builtin_memcpy((dst), (src), 16)
#define KVQ_CP_COMMIT() ((void)0)
#define KVQ_CP_WAIT(n) ((void)0)
#define KVQ_SYNCWARP() g_wbar[g_tid >> 5]->arrive_and_wait()
#define KVQ_SPTR char*
#define KVQ_SADDR(p) ((char*)(p))
#define KVQ_LDS32(x, a) ((x) = *(const uint32_t*)(a))
#define KVQ_LDG1(x, p) ((x) = *(p))
#define KVQ_DYN_U32(nm) static uint32_t nm[KVQ_DYN_WORDS]; static long kvq_seen_##nm = -1; if (POISON) kvq_poison(nm, kvq_seen_##nm)   /* the launch's dynamic shared memory (shared_memory bytes), garbage at each block's start */
#define KVQ_LDGS(p) ([](const auto* q_) { return *q_; }(p))   /* a value, as __ldg returns (C++20: usable in decltype) */
#define KVQ_OPAQUE(p) ((void)0)
#define KVQ_LDG2(x, y, p) do { (x) = (p)[0]; (y) = (p)[1]; } while (0)
#define KVQ_LDG4(x, y, z, w, p) do { (x) = (p)[0]; (y) = (p)[1]; (z) = (p)[2]; (w) = (p)[3]; } while (0)
"""
_LIBS = {}
_BUILT = os.environ.get('KVQ_EMULATOR_CACHE') or os.path.join(tempfile.gettempdir(), f'mlx_kvq_emulator_{os.getuid()}')

def _built(key, code, flags):
    """The path of the shared library of `code` (its hash `key`, flags included), compiled once per machine into
    `_BUILT` ($KVQ_EMULATOR_CACHE, else a folder under the temp dir): the test workers and later runs load a kernel
    another compiled instead of compiling it again. Written whole or not at all (compiled beside it, then renamed)"""
    path = os.path.join(_BUILT, key + '.so')
    if os.path.exists(path): return path
    os.makedirs(_BUILT, exist_ok=True)
    d = tempfile.mkdtemp(dir=_BUILT)
    try:
        with open(f'{d}/k.cpp', 'w') as f: f.write(code)
        r = subprocess.run(['g++', *flags, f'{d}/k.cpp', '-o', f'{d}/k.so'], capture_output=True, text=True)
        if r.returncode: raise RuntimeError(r.stderr[-4000:])
        os.replace(f'{d}/k.so', path)
    finally: shutil.rmtree(d, ignore_errors=True)
    return path

def _expand_includes(src):
    "`packing.INCLUDE`'s short bodies: each `#include` of a written body replaced by the file's text (what NVRTC reads)"
    def body(line):
        m = re.fullmatch(r'#include "(.+\.cuh)"', line.strip())
        if m is None: return line
        with open(m.group(1)) as f: return f.read()
    return '\n'.join(body(l) for l in src.split('\n'))

def _strip(src):
    "The kernel body without the backend prelude (its #defines)"
    return '\n'.join(l for l in _expand_includes(src).split('\n') if not l.startswith('#define'))

CUDA_NAMES = r"""
struct kvq_dim3 { int x, y, z; };
#define threadIdx (kvq_dim3{g_tid, 0, 0})
#define blockIdx (kvq_dim3{g_bx, g_by, 0})
#define blockDim (kvq_dim3{g_nt, 1, 1})
#define __shared__ static
#define __syncwarp() g_wbar[g_tid >> 5]->arrive_and_wait()
#define __shfl_xor_sync(m, v, o) kvq_shfl((v), (o))
#define __float2half_rn(x) ((float)(kvq_half)(x))
#define __half2float(x) ((float)(x))
#define __fmul_rn(a, b) ((float)(a) * (float)(b))
#define __fadd_rn(a, b) ((float)(a) + (float)(b))
#define __fdiv_rn(a, b) ((float)(a) / (float)(b))
#define __fsub_rn(a, b) ((float)(a) - (float)(b))
#define __fsqrt_rn(a) sqrtf((float)(a))
#define __fmaf_rn(a, b, c) fmaf((float)(a), (float)(b), (float)(c))
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)
#define __ldcg(p) (*(p))
static int kvq_atomic_add(int* p, int v) { const int o = *p; *p = o + v; return o; }   // blocks run one after another here
#define atomicAdd(p, v) kvq_atomic_add((p), (v))
"""

POISON = True   # every shared array filled with 0xFF bytes at each block's start (a GPU's shared memory holds whatever the last user left: a kernel must write what it reads); False: as the last block left it (zeros for the first)
_SHARED_DECL = re.compile(r'^(\s*(?:KVQ_SHARED|__shared__)\s+(?:KVQ_ALIGN16\s+)?(?:unsigned\s+)?[\w:]+\s+(\w+)(?:\[[^\]]*\])+;)', re.M)

def _poisoned(src):
    "The body with each static shared array's declaration followed by its poisoning (`kvq_poison`, once per block: `POISON`)"
    return _SHARED_DECL.sub(lambda m: f"{m.group(1)} static long kvq_seen_{m.group(2)} = -1; if (POISON) kvq_poison({m.group(2)}, kvq_seen_{m.group(2)});", src)

def compile_kernel(source, ins, outs, head=""):
    """A CPU build of a kernel body: `ins` are (name, C type) in MLX's order (a `NAME_strides` argument follows an input
    whose strides the source reads), `outs` the output names (float) or (name, C type). `head` goes at the top of the
    body (template constants). Returns launch(arrays..., outputs..., gx, gy, nthreads)."""
    src, seen = f"constexpr bool POISON = {'true' if POISON else 'false'};\n" + head + _poisoned(_strip(source)), head + source   # `seen`: what MLX searches for `NAME_strides` (an INCLUDE body's first line names them)
    outs = [(o, 'float') if isinstance(o, str) else o for o in outs]
    params, args, cparams = [], [], []
    for n, ty in ins:
        params.append(f'const {ty}* {n}'); cparams.append(f'const {ty}* {n}'); args.append(n)
        if n + '_strides' in seen:
            params.append(f'Strides {n}_strides'); cparams.append(f'const long long* {n}_st'); args.append(f'Strides{{{n}_st}}')
    params += [f'{ty}* {n}' for n, ty in outs]; cparams += [f'{ty}* {n}' for n, ty in outs]; args += [n for n, _ in outs]
    code = PRE + CUDA_NAMES + "static void kernel(" + ', '.join(params) + ") {\n" + MACROS + src + "\n}\n"
    code += 'extern "C" int launch(' + ', '.join(cparams + ['int GX', 'int GY', 'int NTH']) + ") {   // 0, or 1 + the block where the threads deadlocked\n"
    code += """    kvq_barrier bar(NTH); g_bar = &bar; g_nt = NTH; g_gx = GX;
    g_wbar.clear(); for (int w = 0; w < NTH / 32; ++w) g_wbar.emplace_back(new kvq_barrier(32));
    g_body = [=]() { kernel(""" + ', '.join(args) + """); };
    kvq_stacks(NTH, true); g_stuck = false;
    for (int by = 0; by < GY && !g_stuck; ++by) for (int bx = 0; bx < GX && !g_stuck; ++bx) { g_bx = bx; g_by = by; ++g_block_serial; kvq_run_block(NTH); }
    kvq_stacks(NTH, false); g_body = nullptr;
    return g_stuck ? 1 + g_bx + GX * g_by : 0;
}
"""
    flags = ['-std=c++20', '-O0', '-shared', '-fPIC', '-w']
    key = hashlib.sha1((' '.join(flags) + '\n' + code).encode()).hexdigest()[:24]
    if key not in _LIBS:
        _LIBS[key] = ctypes.CDLL(_built(key, code, flags))
    lib = _LIBS[key]
    def launch(arrays, outputs, gx, gy, nthreads):
        cargs, keep = [], []
        for (n, ty), a in zip(ins, arrays):
            a = np.ascontiguousarray(a); keep.append(a); cargs.append(a.ctypes.data_as(ctypes.c_void_p))
            if n + '_strides' in seen:
                st = np.array([x // a.itemsize for x in a.strides], np.int64); keep.append(st); cargs.append(st.ctypes.data_as(ctypes.c_void_p))
        for o in outputs: cargs.append(o.ctypes.data_as(ctypes.c_void_p))
        stuck = lib.launch(*cargs, ctypes.c_int(gx), ctypes.c_int(gy), ctypes.c_int(nthreads))
        if stuck: raise RuntimeError(f"kernel emulator: in block ({(stuck - 1) % gx}, {(stuck - 1) // gx}) threads wait at a barrier that the others "
                                     "never reach (a barrier in code some threads skip, or threads that returned before it)")
    return launch

_CTYPES = {'uint32': 'uint32_t', 'int32': 'int32_t', 'float32': 'float', 'float16': 'float', 'bfloat16': 'float'}
_NPTYPES = {'uint32_t': np.uint32, 'int32_t': np.int32, 'float': np.float32}

def _ctype(dtype): return _CTYPES[str(dtype).split('.')[-1]]

TINY_INPUTS = []   # (kernel, input, bytes) of every input of at most 8 bytes the stand-in was given: on CUDA, MLX's managed small-block pool

def cuda_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True, shared_memory=0):
    """Stand-in for `mx.fast.cuda_kernel` that runs the kernel here, eagerly: inputs as numpy (half precision read as
    float32, which the emulated kernels compute in anyway), template constants as MLX writes them (`constexpr` lines),
    half-precision outputs rounded from float32 as the device's conversion rounds. Lets the host code that launches the
    kernels (argument order, grids, shapes, strides) run unchanged on a machine without a GPU."""
    def call(*, inputs, grid, threadgroup, output_shapes, output_dtypes, template=(), init_value=None, verbose=False, stream=None):
        TINY_INPUTS.extend((name, n, x.nbytes) for n, x in zip(input_names, inputs) if x.nbytes <= 8)
        arrs = [np.array(x.astype(mx.float32) if x.dtype in (mx.float16, mx.bfloat16) else x) for x in inputs]
        if ensure_row_contiguous: arrs = [np.ascontiguousarray(a) for a in arrs]
        head = ''.join(f"constexpr bool {k} = {'true' if v else 'false'};\n" if isinstance(v, bool) else
                       f"constexpr int {k} = {v};\n" if isinstance(v, int) else f"using {k} = {_ctype(v)};\n" for k, v in template)
        ins = [(n, _ctype(x.dtype)) for n, x in zip(input_names, inputs)]
        outs = [(n, _ctype(d)) for n, d in zip(output_names, output_dtypes)]
        head += f"constexpr int KVQ_DYN_WORDS = {max(1, shared_memory // 4)};\n"   # the dynamic shared memory the kernel was made with, and no more
        launch = compile_kernel(header + source, ins, outs, head)
        # outputs start as garbage, as MLX's (uninitialized) do: a kernel must write whatever it returns
        res = [np.full(sh, np.nan if t == 'float' else 0x5A5A5A5A, _NPTYPES[t]) for sh, (_, t) in zip(output_shapes, outs)]
        launch(arrs, res, -(-grid[0] // threadgroup[0]), grid[1], threadgroup[0])
        return [mx.array(r).astype(d) for r, d in zip(res, output_dtypes)]
    return call

@contextlib.contextmanager
def _emulated(fold=True, ring=1):
    """MLX's custom kernel makers replaced by the emulator (`cuda_kernel`), with a fresh kernel cache (a source patched by a
    test is built anew); `fold=False`: `AK.FOLD` = 0; `ring`: `attention.RING` while it lasts (default 1: a launcher's
    second call starts from the counters its first returned, so every two-call check covers the counters' reset;
    `test_fold_counter_ring` checks the default ring; None: as it is)"""
    saved = (getattr(mx.fast, 'cuda_kernel', None), getattr(mx.fast, 'metal_kernel', None), A._KERNELS, AK.FOLD, A.RING)
    mx.fast.cuda_kernel = mx.fast.metal_kernel = cuda_kernel
    A._KERNELS = {}
    if not fold: AK.FOLD = 0
    if ring is not None: A.RING = ring
    try: yield
    finally:
        for nm, f in (('cuda_kernel', saved[0]), ('metal_kernel', saved[1])):
            if f is None: delattr(mx.fast, nm)
            else: setattr(mx.fast, nm, f)
        A._KERNELS, AK.FOLD, A.RING = saved[2:]

def emulate(q, kplan, vplan, kparts, vparts, mask, n, backend='cuda'):
    """(m, l, o) of the decode + combine kernels for prepared queries q (B, Hkv, G, 1, D), as `fused_decode_partial`
    returns them (launched by it, the kernels emulated; the tensor-core kernel where it applies, as for a half-precision model)"""
    with _emulated():
        return A.fused_decode_partial(q, kplan, vplan, kparts, vparts, mask, n, half=True, backend=backend)

def _launch_final(queries, kplan, vplan, kparts, vparts, mask, n, scale, calls, fold):
    """The final path exactly as `fused_decode` launches it (`attention._make_final_launcher`: the query kernel of dense
    plans, the decode kernel, the combine kernel or the decode kernel's own finish), every kernel emulated; `calls` calls
    of one launcher, the last one's output"""
    with _emulated(fold):
        _, run = A._make_final_launcher(queries, kplan, vplan, kparts, scale, 'cuda')
        for _ in range(calls): out = run(queries, kparts, vparts, n, mask)
        return out

def emulate_final(queries, kplan, vplan, kparts, vparts, mask, n, scale):
    "The fused final path (`fused_decode`) with the combine kernel: raw queries prepared in the kernels, the combine normalizing and transforming back"
    return _launch_final(queries, kplan, vplan, kparts, vparts, mask, n, scale, 1, False)

def emulate_fold(queries, kplan, vplan, kparts, vparts, mask, n, scale, calls=2):
    "The final path in one launch (`attention_kernels.FOLD`): the decode kernel finishing the attention, `calls` calls chained on their row counters (`_emulated`'s ring of one)"
    S = -(-n // AK._chunk(n, kparts[0].shape[0] * kparts[0].shape[1], queries.shape[1] // kparts[0].shape[1]))
    assert AK.FOLD and AK._fold_ok(S, queries.shape[1] // kparts[0].shape[1], 32 * sum(AK._side_layout(vplan)[0])), 'a call the fold takes'   # (BMERGE: fewer partials than S)
    return _launch_final(queries, kplan, vplan, kparts, vparts, mask, n, scale, calls, True)

def tolerance(kc, vc, G, D, backend='cuda'):
    "Largest relative error accepted: the tensor-core kernel rounds codes' values, queries' and weights' low parts to float16 (~3e-4 seen), the SIMT kernel is float32"
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    return 1e-3 if backend == 'cuda' and AK.MMA and AK._mma_ok(kp, vp, G) else 1e-4

def final_tolerance(kc, vc, G, D):
    "`tolerance` plus, where the queries are float16 (`check_final`), the rounding of both outputs to float16 (one unit in the last place, 2**-10)"
    return tolerance(kc, vc, G, D) + (2 ** -10 if AK.MMA else 0.0)

def check_final(kc, vc, B, Hkv, G, D, n, masked, seed=0, fold=False, calls=2):
    """Max error of the emulated final path vs the blockwise reference (`_final_reference`), relative to the output's
    scale. The queries are float16 where the tensor-core kernel may serve (`AK.MMA`: a half-precision model's call), else float32"""
    mx.random.seed(seed)
    k, v = mx.random.normal((B, Hkv, n, D)), mx.random.normal((B, Hkv, n, D))
    q = mx.random.normal((B, Hkv * G, 1, D)).astype(mx.float16 if AK.MMA else mx.float32)
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    assert A._finish_kind(kp) and A._finish_kind(vp), 'the final path takes turbo and affine codecs'
    kparts, vparts = kc.encode(k), vc.encode(v)
    full = None if not masked else A._full_mask((mx.random.uniform(shape=(B, 1, 1, n)) > 0.3), B, Hkv, G, 1, n)
    out = emulate_fold(q, kp, vp, kparts, vparts, full, n, D ** -0.5, calls) if fold else emulate_final(q, kp, vp, kparts, vparts, full, n, D ** -0.5)
    ref = A._final_reference(q, kp, vp, kparts, vparts, full, n, D ** -0.5)
    assert out.dtype == ref.dtype == q.dtype and out.shape == ref.shape, (out.dtype, ref.dtype, out.shape, ref.shape)
    return (mx.abs(out.astype(mx.float32) - ref.astype(mx.float32)).max() / mx.abs(ref.astype(mx.float32)).max()).item()

def check(kc, vc, B, Hkv, G, D, n, masked, seed=0, backend='cuda'):
    "Max error of the emulated kernel's attention output vs the blockwise reference, relative to the output's scale"
    mx.random.seed(seed)
    k, v = mx.random.normal((B, Hkv, n, D)), mx.random.normal((B, Hkv, n, D))
    q = mx.random.normal((B, Hkv, G, 1, D)) * D ** -0.5
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    kparts, vparts = kc.encode(k), vc.encode(v)
    mask = (mx.random.uniform(shape=(B, 1, 1, 1, n)) > 0.3) if masked else None
    m, l, o = emulate(q, kp, vp, kparts, vparts, mask, n, backend=backend)
    rm, rl, ro = A._quantized_partial_mlx(q, kp, vp, kparts, vparts, mask, n)
    y, ry = o / l, ro / rl
    return (mx.abs(y - ry).max() / mx.abs(ry).max()).item()

CASES = [('turbo:4', TurboCodec(4), TurboCodec(4, seed=1), 1, 2, 4, 128, 700),
         ('turbo:3', TurboCodec(3), TurboCodec(3, seed=1), 2, 1, 4, 128, 300),
         ('turbo:2/5', TurboCodec(2), TurboCodec(5, seed=1), 1, 1, 2, 64, 257),
         ('turbo:8/7', TurboCodec(8), TurboCodec(7, seed=1), 1, 1, 4, 96, 130),
         ('affine:8,4', AffineCodec(8), AffineCodec(4), 1, 2, 4, 128, 700),
         ('affine:3 g64 / affine:6 g32', AffineCodec(3, 64), AffineCodec(6, 32), 1, 1, 8, 256, 200),
         ('affine:4 / affine:8 g32', AffineCodec(4), AffineCodec(8, 32), 1, 1, 4, 64, 300),
         ('affine:4 g32 / affine:4, 2 heads', AffineCodec(4, 32), AffineCodec(4), 1, 1, 2, 128, 300),
         ('calibrated 5o/4o', None, None, 1, 2, 2, 96, 300)]

def calibrated_pair(D):
    "Two calibrated turbo codecs of 4 bits (centered, scaled, an outlier band of 5 bits) from one generator: the codec kinds of auto:B (`bench/calcodecs.py`)"
    return _pair(4, 4, D)

if __name__ == '__main__':
    worst = 0
    for name, kc, vc, B, Hkv, G, D, n in CASES:
        if kc is None: kc, vc = calibrated_pair(D)
        for masked in (False, True):
            e = check(kc, vc, B, Hkv, G, D, n, masked) / tolerance(kc, vc, G, D)
            worst = max(worst, e)
            print(f"{name:28s} B{B} Hkv{Hkv} G{G} D{D} N{n} mask{int(masked)}: max rel. error / tolerance {e:.2f}", flush=True)
            if A._finish_kind(A.side_plan(kc, D)) and A._finish_kind(A.side_plan(vc, D)):
                e = check_final(kc, vc, B, Hkv, G, D, n, masked) / final_tolerance(kc, vc, G, D); worst = max(worst, e)
                print(f"{name + ' (final path)':28s} B{B} Hkv{Hkv} G{G} D{D} N{n} mask{int(masked)}: max rel. error / tolerance {e:.2f}", flush=True)
    print(f"worst error / tolerance {worst:.2f}")
    sys.exit(0 if worst <= 1 else 1)

def check_staged(kc, vc, B, Hkv, G, D, n, T, cap, seed=0, dtype=mx.float16, stored=False, write=False):
    """Max error of the folded decode kernel that also quantizes and merges T staged tokens of staging buffers of `cap`
    tokens (`attention_kernels._tail_source`; launched as a decode step of a staging cache launches it) vs the blockwise
    reference with the staged tokens quantized by their codecs (`_final_reference(..., tail)`), relative to the output's
    scale. `stored`: against the same launcher's kernel over the T tokens quantized into the storage instead (what the
    cache attends once the stage is stored: equal up to float32 rounding where the kernel's codes are the quantize
    kernel's). The staged keys are scaled up so that they carry much of the weight. None where the launcher does not
    fold the call. `write`: the T-th staged token is the step's own (`nk`, `nv`, not in the buffer: the launcher's
    writing call, `_tail_source`'s WRITE), and the buffer the kernel returns must be the given one with it written
    (else the error is infinite)."""
    mx.random.seed(seed)
    k, v = mx.random.normal((B, Hkv, n, D)), mx.random.normal((B, Hkv, n, D))
    q = mx.random.normal((B, Hkv * G, 1, D)).astype(dtype)
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    tk, tv = (mx.random.normal((B, Hkv, cap, D)) * 1.5).astype(dtype), mx.random.normal((B, Hkv, cap, D)).astype(dtype)
    both = lambda a, b: mx.concatenate([a, b], axis=-1)   # the cache's one staging buffer: each token's key, then its value
    tail = (tk, tv, T, kc, vc, both(tk, tv))
    kparts, vparts = kc.encode(k), vc.encode(v)
    if write:   # the step's key and value (the tail's T-th token) as a model makes them: (B, 1, H, D) transposed
        nk, nv = ((mx.random.normal((B, 1, Hkv, D)) * s).astype(dtype).transpose(0, 2, 1, 3) for s in (1.5, 1.0))
        put = lambda x, y: mx.concatenate([x[:, :, :T - 1], y, x[:, :, T:]], axis=2)
        tail = (put(tk, nk), put(tv, nv), T, kc, vc)
        tail += (both(*tail[:2]),)
    with _emulated(True):
        _, run = A._make_final_launcher(q, kp, vp, kparts, D ** -0.5, 'cuda')
        if write:
            got = run.staged(q, kparts, vparts, n, both(tk, tv), T, kc, vc, nk, nv)
            if got is None: return None
            out = got[0]
            if not (got[1].dtype == tail[5].dtype and mx.array_equal(got[1], tail[5]).item()): return float('inf')
            tk, tv = tail[:2]
        else:
            out = run(q, kparts, vparts, n, None, tail)
        if out is None: return None
        if stored:
            cat = lambda a, b: tuple(mx.concatenate([x, y], axis=-2) for x, y in zip(a, b))
            ks, vs = cat(kparts, kc.encode(tk[:, :, :T])), cat(vparts, vc.encode(tv[:, :, :T]))
            ref = run(q, ks, vs, n + T)
    if not stored: ref = A._final_reference(q, kp, vp, kparts, vparts, None, n, D ** -0.5, tail)
    assert out.dtype == ref.dtype == q.dtype and out.shape == ref.shape, (out.dtype, ref.dtype, out.shape, ref.shape)
    return (mx.abs(out.astype(mx.float32) - ref.astype(mx.float32)).max() / mx.abs(ref.astype(mx.float32)).max()).item()
