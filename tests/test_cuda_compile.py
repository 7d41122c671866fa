"""The CUDA decode kernels compiled offline by NVRTC + ptxas for sm_90 (NVIDIA's pip wheels, no GPU needed:
`pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12`): every kind a decode call can
launch, with and without the folded finish. The CPU emulator (test_kernel_emulation.py) defines every prelude macro
for every kernel, so a kernel using a macro its own CUDA prelude lacks passes there and fails to compile on the GPU
(the SIMT kernel's folded variant did, on an H200, 2026-11-27). Skipped where the wheels are absent (CI installs none)."""
import os, sys
from pathlib import Path
import pytest

nvidia = pytest.importorskip('nvidia')
_ROOT = list(nvidia.__path__)[0]
if not (os.path.exists(os.path.join(_ROOT, 'cuda_nvrtc', 'lib', 'libnvrtc.so.12')) and os.path.exists(os.path.join(_ROOT, 'cuda_nvcc', 'bin', 'ptxas'))):
    pytest.skip('needs nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12', allow_module_level=True)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
import cuda_registers as CR
from mlx_kvq import attention_kernels as AK
from mlx_kvq import attention as A
from mlx_kvq.attention import side_plan, _finish_kind
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_emulator import calibrated_pair, calibrated

CASES = [('turbo:4', TurboCodec(4), TurboCodec(4, seed=1), 4, 128), ('affine:8,4', AffineCodec(8), AffineCodec(4), 4, 128),
         ('calibrated', *calibrated_pair(256), 4, 256)]   # auto:B's codecs on Gemma's shape: the 'dense' finish

@pytest.mark.parametrize('case', CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize('mma', [True, False], ids=['tensor-core', 'simt'])
@pytest.mark.parametrize('fold', [False, True], ids=['two-launch', 'folded'])
def test_decode_kernel_compiles(case, mma, fold, monkeypatch):
    monkeypatch.setattr(AK, 'MMA', mma)
    _, kc, vc, G, D = case
    (regs, spill, smem), fin = CR.compile_decode(side_plan(kc, D), side_plan(vc, D), G, fold)
    assert (fin is not None) == fold
    assert 0 < regs <= 255 and 0 < smem <= AK._SHARED_LIMIT['cuda']

def test_unmasked_call_compiles():
    """A decode call without a mask passes an int32 placeholder as its mask (`attention._mask_input`), so the kernel's
    `mask` is an int32 pointer there: the folded tensor-core kernel compiles with it (a score store that read the mask
    through a float pointer first failed to compile so on an H200, 2026-11-30, while the float-mask compiles here passed)"""
    _, kc, vc, G, D = CASES[0]
    (regs, spill, smem), fin = CR.compile_decode(side_plan(kc, D), side_plan(vc, D), G, True, mask='int32_t')
    assert fin == 'rot' and 0 < regs <= 255

@pytest.mark.parametrize('bits,D', [(8, 128), (4, 128), (4, 64)])
def test_integer_key_products_compile(bits, D, monkeypatch):
    """`AINT8`: the folded kernel with affine keys on the integer tensor cores (`mma` m16n8k32, unsigned codes times signed
    query bytes) compiles for sm_90, and its SASS holds the integer products (`IMMA`) in the key loop (needs
    nvidia-cuda-cuobjdump for the SASS; the compile alone otherwise)"""
    monkeypatch.setattr(AK, 'AINT8', True)
    kp, vp = side_plan(AffineCodec(bits), D), side_plan(AffineCodec(4), D)
    assert AK._aint8(kp, 4)
    try: got = CR.compile_decode(kp, vp, 4, True, sass=True)
    except FileNotFoundError: got = CR.compile_decode(kp, vp, 4, True)
    (regs, spill, smem, *sass), fin = got
    assert fin == 'plain' and 0 < regs <= 255
    if sass:   # the innermost loop with integer products is the key loop: no half-precision products in it
        key_loop = next(c for _, _, c in CR.loops(sass[1]) if c['IMMA'])
        assert sass[0]['IMMA'] > 0 and key_loop['HMMA'] == 0 and key_loop['HFMA2'] == 0, key_loop

@pytest.mark.parametrize('kbits', [8, 4])
def test_value_scales_in_the_weights_compile(kbits, monkeypatch):
    """`VSCB`: the folded kernel with affine values as subnormal halves and their scales in the weights compiles for
    sm_90, and its value loop has no fused multiply-adds of halves (`HFMA2`) left (needs nvidia-cuda-cuobjdump for the
    SASS; the compile alone otherwise), where without it the loop has them"""
    kp, vp = side_plan(AffineCodec(kbits), 128), side_plan(AffineCodec(4), 128)
    def value_loop():
        try: got = CR.compile_decode(kp, vp, 4, True, sass=True, mask='int32_t')
        except FileNotFoundError: got = CR.compile_decode(kp, vp, 4, True, mask='int32_t')
        (regs, spill, smem, *sass), fin = got
        assert fin == 'plain' and 0 < regs <= 255
        return CR.loops(sass[1])[1][2] if sass else None
    monkeypatch.setattr(AK, 'VSCB', False)
    before = value_loop()
    monkeypatch.setattr(AK, 'VSCB', True)
    assert AK._vscb(vp, 4) == (16, True)
    after = value_loop()
    if after is not None: assert before['HFMA2'] > 0 and after['HFMA2'] == 0 and after['HMMA'] > before['HMMA'], (before, after)

def test_unmasked_kernel_holds_no_mask_code(monkeypatch):
    """`MASKC`: compiled for an unmasked call (the int32 placeholder), the folded turbo:4 kernel's loops read no mask and
    branch around no mask read (SASS, sm_90: fewer global loads, no `BSSY`), and for a masked call (float32) its SASS
    is the one without `MASKC` (needs nvidia-cuda-cuobjdump)"""
    _, kc, vc, G, D = CASES[0]
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    try: CR.compile_decode(kp, vp, G, True, sass=True)
    except FileNotFoundError: pytest.skip('needs nvidia-cuda-cuobjdump')
    loops = lambda mask: [c for _, _, c in CR.loops(CR.compile_decode(kp, vp, G, True, sass=True, mask=mask)[0][4])[:2]]
    ops = lambda mask: CR.compile_decode(kp, vp, G, True, sass=True, mask=mask)[0][3]
    monkeypatch.setattr(AK, 'MASKC', False)   # (on by default since 2026-11-30)
    before, before_f = loops('int32_t'), ops('float')
    monkeypatch.setattr(AK, 'MASKC', True)
    after = loops('int32_t')
    assert sum(c['LDG'] for c in after) < sum(c['LDG'] for c in before) and sum(c['BSSY'] for c in after) < sum(c['BSSY'] for c in before), (before, after)
    assert sum(c['BSSY'] for c in after) <= 1 and ops('float') == before_f

STAGED = [('turbo:4 d128', TurboCodec(4), TurboCodec(4, seed=1), 4, 128, 32), ('turbo:3/4 d64 G8', TurboCodec(3), TurboCodec(4, seed=1), 8, 64, 32),
          ('turbo:4 d256', TurboCodec(4), TurboCodec(4, seed=1), 4, 256, 8), ('affine:8,4 d128', AffineCodec(8), AffineCodec(4), 4, 128, 32),
          ('affine:4 g32 d256', AffineCodec(4, 32), AffineCodec(4, 32), 4, 256, 8), ('turbo:4 / affine:4 d64', TurboCodec(4), AffineCodec(4), 4, 64, 32),
          ('turbo:3/4 d128 G8', TurboCodec(3), TurboCodec(4, seed=1), 8, 128, 16), ('affine:4 d128 G8', AffineCodec(4), AffineCodec(4), 8, 128, 16),
          ('calibrated 4o/4o d64', *calibrated_pair(64), 4, 64, 32), ('calibrated 4o/4o d128', *calibrated_pair(128), 4, 128, 16),   # the 'dense' finish, the pair kernel's quantization
          ('calibrated 4o/4o d256', *calibrated_pair(256), 4, 256, 4),   # Gemma's global layers
          ('calibrated 3o keys / affine:8 d64', calibrated(3, 0, 64), AffineCodec(8), 4, 64, 32), ('turbo:4 keys / calibrated 5o d128', TurboCodec(4), calibrated(5, 1, 128), 4, 128, 16)]

@pytest.mark.parametrize('case', STAGED, ids=[c[0] for c in STAGED])
@pytest.mark.parametrize('mma', [True, False], ids=['tensor-core', 'simt'])
def test_staged_kernel_compiles(case, mma, monkeypatch):
    """The folded kernel that also quantizes and merges a cache's staged tokens (`CodecKVCache.stage`; `_tail_source`:
    turbo sides with the 'rot' finish, affine ones with the 'plain' finish, calibrated ones with the 'dense' finish), half-precision staging buffers as a float16 model's cache holds them, each stage
    capacity `attention.stage_capacity` gives these shapes; and its writing variant (the step's own token in)"""
    monkeypatch.setattr(AK, 'MMA', mma)
    _, kc, vc, G, D, cap = case
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    ks, vs = A._tail_spec(kp), A._tail_spec(vp)
    VDP = 32 * sum(AK._side_layout(vp)[0])
    assert AK._fold_ok(AK.FOLD, G, VDP, (D, cap, ks, vs)) and (cap == 32 or not AK._fold_ok(AK.FOLD, G, VDP, (D, 2 * cap, ks, vs)))   # (32: the most a cache stages)
    for write in (False, True):   # (write: the step's token taken by its strides, the staging buffers written: `CodecKVCache._defer`)
        (regs, spill, smem), fin = CR.compile_decode(kp, vp, G, True, tail=(D, cap, ks, vs, write))
        assert fin == A._finish_kind(vp) and 0 < regs <= 255 and 0 < smem <= AK._SHARED_LIMIT['cuda']

def test_staged_tokens_need_the_rot_finish():
    "Only the 'rot' finish merges staged tokens (the decode kernel quantizes turbo codes only): another is refused"
    with pytest.raises(ValueError, match="'rot' finish"):
        AK._decode_source(side_plan(AffineCodec(8), 128), side_plan(AffineCodec(4), 128), 4, 'cuda', 'plain', fold='plain', tail=(128, 32, 8, 4))

@pytest.mark.parametrize('case', CASES, ids=[c[0] for c in CASES])   # the calibrated bands with `LEAN_ANY` (their 5-bit key ranges funnel-shifted)
def test_block_merge_kernel_compiles(case, monkeypatch):
    "The folded lean kernel that merges each block's chunks into one partial (`BMERGE`, on by default since 2026-11-27 evening)"
    monkeypatch.setattr(AK, 'BMERGE', True); monkeypatch.setattr(AK, 'LEAN_ANY', True); monkeypatch.setattr(AK, 'BMERGE_VNS', 8)   # (d256 too: the variant compiles where it is turned on)
    _, kc, vc, G, D = case
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    assert AK._bmerge_ok(kp, vp, G) and 'running max and sum' in AK._decode_source(kp, vp, G, 'cuda', _finish_kind(kp), fold=_finish_kind(vp))   # the merging kernel is what compiles
    (regs, spill, smem), fin = CR.compile_decode(kp, vp, G, True)
    assert fin is not None and 0 < regs <= 255 and 0 < smem <= AK._SHARED_LIMIT['cuda']

def test_a_missing_macro_fails_to_compile(monkeypatch):
    "Not vacuous: the folded SIMT kernel without its own `KVQ_GX` definition (`_scratch_source`'s; the H200's failure) does not compile"
    monkeypatch.setattr(AK, 'MMA', False)
    orig = AK._scratch_source
    monkeypatch.setattr(AK, '_scratch_source', lambda *a: orig(*a).replace('#define KVQ_GX ((int)gridDim.x)', ''))
    _, kc, vc, G, D = CASES[0]
    with pytest.raises(RuntimeError, match='KVQ_GX'):
        CR.compile_decode(side_plan(kc, D), side_plan(vc, D), G, True)

@pytest.mark.parametrize('finish', [None, 'plain', 'rot', 'dense', 'dense288'])
def test_combine_kernel_compiles(finish):
    "Every finish; 'dense' per VDP (256: one band; 288: Gemma's two bands padded, 3 thread groups)"
    dense = finish.startswith('dense') if finish else False
    regs, spill, smem = CR.compile_combine('dense' if dense else finish, 256 if dense else None,
                                           VDP=(288 if finish == 'dense288' else 256) if dense else None)
    assert 0 < regs <= 255 and spill == 0 and 0 < smem <= 48 * 1024

def test_dense_combine_needs_its_width():
    with pytest.raises(ValueError, match='per VDP'): AK._combine_source('cuda', 'dense', 256)

def test_query_kernel_compiles():
    "The query kernel of 'dense' plans (Gemma's head dim, two bands padded to 288 prepared coordinates)"
    regs, spill, smem = CR.compile_qmap(256, 288)
    assert 0 < regs <= 255 and spill == 0 and 0 < smem <= 48 * 1024

def test_included_body_compiles_the_same(tmp_path, monkeypatch):
    """`packing.INCLUDE`: the body MLX is given is one `#include` of a file written once (its first line naming the strides
    the body reads, for MLX's signature); NVRTC compiles it to the same kernel: registers, spills, shared bytes"""
    from mlx_kvq import packing as P
    monkeypatch.setenv('MLX_KVQ_KERNEL_DIR', str(tmp_path))
    _, kc, vc, G, D = CASES[0]
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    inline, fin = CR.compile_decode(kp, vp, G, True)
    assert CR.compile_decode(kp, vp, G, True, include=True) == (inline, fin) and len(list(tmp_path.iterdir())) == 1
    orig = P._included   # not vacuous: without the line naming the strides, MLX's signature would lack them
    monkeypatch.setattr(P, '_included', lambda *a: orig(*a).split('\n', 1)[1])
    with pytest.raises(RuntimeError, match='strides'):
        CR.compile_decode(kp, vp, G, True, include=True)

@pytest.mark.parametrize('case', CASES + [('turbo:4 d256', TurboCodec(4), TurboCodec(4, seed=1), 4, 256), ('turbo:4,2 G8 d64', TurboCodec(4), TurboCodec(2, seed=1), 8, 64),
                                 ('turbo:4 G3 d128', TurboCodec(4), TurboCodec(4, seed=1), 3, 128), ('turbo:4,2 G3 d256', TurboCodec(4), TurboCodec(2, seed=1), 3, 256)],   # turbo:4,2 G3 d256: 47,104 dynamic bytes beside 3.4 KB static, so the request is rounded past 48,000 (`_dyn_request`)
                         ids=lambda c: c[0])
@pytest.mark.parametrize('fold', [False, True], ids=['two-launch', 'folded'])
def test_dynamic_shared_memory_launches(case, fold):
    """`DYNLUT`: the static shared memory ptxas reports plus the dynamic bytes the source asks for stay within
    DYN_BUDGET (4 blocks an H100 / H200 SM), and a block over 48 KB asks for more than 48,000 dynamic bytes: below that
    MLX leaves the kernel's dynamic limit at its default and the launch fails (seen on an H200, 2026-11-28)"""
    _, kc, vc, G, D = case
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    qprep = _finish_kind(kp)
    src = AK._decode_source(kp, vp, G, 'cuda', None if qprep == 'dense' else qprep, fold=_finish_kind(vp) if fold else None)
    dyn = AK.dynamic_shared_bytes(src)
    (regs, spill, smem), _ = CR.compile_decode(kp, vp, G, fold)
    assert (dyn > 0) == (AK._uses_mma(kp, vp, G, 'cuda') and AK.LEAN and AK._lean_ok(kp, vp)), case[0]
    assert smem + dyn <= AK.DYN_BUDGET and (smem + dyn <= 48 * 1024 or dyn > 48000), (case[0], smem, dyn)

@pytest.mark.parametrize('case', [(3, 6, 256, 4), (5, 4, 128, 4), (2, 8, 128, 4), (3, 6, 256, 1), (3, 7, 128, 1), (3, 8, 64, 1)],
                         ids=lambda c: f"cal {c[0]}/{c[1]} d{c[2]} G{c[3]}")
def test_high_low_table_shared_memory(monkeypatch, case):
    """`HLTAB`'s static table of (high, low) halves counts in the block's shared memory: the dynamic request's rule of
    `test_dynamic_shared_memory_launches` holds with it on, for calibrated value bands of 5-9 bits (folded, compiled for
    `HLTAB_LB` blocks an SM, and for `LB` where the wide bands are the values' main band); the one-head cases are where that table can be what rounds the request
    past 48,000 bytes (`_dyn_request`; 3/8 at d64 fails without it)"""
    from kernel_emulator import calibrated
    kb, vb, D, G = case
    monkeypatch.setattr(AK, 'HLTAB', True)
    kp, vp = side_plan(calibrated(kb, 0, D), D), side_plan(calibrated(vb, 1, D), D)
    for lb in (AK.HLTAB_LB, AK.LB) if vb > 4 else (AK.HLTAB_LB,):   # wide value bands: with the table under LB's bound too
        src = AK._decode_source(kp, vp, G, 'cuda', None, fold=_finish_kind(vp), lb=lb)
        assert 'vhl_s' in src, (case, lb)
        dyn = AK.dynamic_shared_bytes(src)
        (regs, spill, smem), _ = CR.compile_decode(kp, vp, G, True, lb=lb)
        assert dyn > 0 and smem + dyn <= AK.DYN_BUDGET and (smem + dyn <= 48 * 1024 or dyn > 48000), (case, lb, smem, dyn)

def test_folded_d256_kernel_does_not_spill():
    "The folded turbo:4 kernel of Gemma's head shape (4 query heads, d256) spills at most a few bytes: with `BMERGE` there (before `BMERGE_VNS`) it spilled 352, in its key loop"
    kp, vp = side_plan(TurboCodec(4), 256), side_plan(TurboCodec(4, seed=1), 256)
    (regs, spill, smem), fin = CR.compile_decode(kp, vp, 4, True)
    assert fin == 'rot' and spill <= 64, spill

def test_d256_value_pack_in_few_block_kernels(monkeypatch):
    "`VPACK_LB`: VPACK at head dim 256 in a kernel compiled for 2 blocks an SM (Gemma's one-KV-head calls) spills nothing"
    monkeypatch.setattr(AK, 'VPACK_LB', 2)
    kp, vp = side_plan(TurboCodec(4), 256), side_plan(TurboCodec(4, seed=1), 256)
    assert 'bp0' in AK._decode_source(kp, vp, 4, 'cuda', 'rot', fold='rot', lb=2) and 'bp0' not in AK._decode_source(kp, vp, 4, 'cuda', 'rot', fold='rot')
    (regs, spill, smem), fin = CR.compile_decode(kp, vp, 4, True, lb=2)
    assert fin == 'rot' and spill == 0, spill

def test_parked_accumulators_shared_memory(monkeypatch):
    """`PARK`'s buffer (the carried value accumulators of every thread, first in the dynamic shared memory, so that the
    static part stays small) counts in the block's shared memory: the folded
    d128 kernels that carry accumulators (BMERGE) stay within DYN_BUDGET and the dynamic request's rule of
    `test_dynamic_shared_memory_launches` with it on (turbo:4's pair tables then 16 copies where 32 fit without). And it
    is what it is for: compiled for 5 blocks an SM (96 registers, one tile of loads in flight), the turbo:4 kernel's
    score loop has fewer spill loads with the accumulators parked than without (0 against 5 with this NVRTC / ptxas,
    `bench/h200_20261130j/README.md`)"""
    monkeypatch.setattr(AK, 'PARK', True)
    for name, kc, vc, G, D in [c for c in CASES if c[0] in ('turbo:4', 'affine:8,4')]:
        kp, vp = side_plan(kc, D), side_plan(vc, D)
        assert AK._bmerge_ok(kp, vp, G), name
        src = AK._decode_source(kp, vp, G, 'cuda', _finish_kind(kp), fold=_finish_kind(vp))
        assert 'PARK: back' in src, name
        dyn = AK.dynamic_shared_bytes(src)
        (regs, spill, smem), _ = CR.compile_decode(kp, vp, G, True)
        assert dyn >= 4 * (AK.NT * AK._park_floats(vp, G, True) + AK._chmax(G) * G) and smem + dyn <= AK.DYN_BUDGET and (smem + dyn <= 48 * 1024 or dyn > 48000), (name, smem, dyn)
    _, kc, vc, G, D = CASES[0]
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    assert AK._lean_rep(kp, vp, G, park=AK._park_floats(vp, G, True)) == 16 and AK._lean_rep(kp, vp, G) == 32
    for k, v in dict(LB=5, PF=1, CH_MAX=800, WAVE=660).items(): monkeypatch.setattr(AK, k, v)
    ldl = {}
    for park in (True, False):
        monkeypatch.setattr(AK, 'PARK', park)
        got, _ = CR.compile_decode(kp, vp, G, True, sass=True)
        score = [c for a, n, c in CR.loops(got[4]) if c['STS']]
        assert got[0] <= 96 and score, (park, got[:3])
        ldl[park] = score[0]['LDL']
    assert ldl[True] < ldl[False], ldl

def test_shared_budget_follows_launch_bounds(monkeypatch):
    """A kernel compiled for more resident blocks an SM than DYN_BUDGET allows (`LB` = 5 / 6) takes fewer pair-table
    copies so that its block's shared memory, static and dynamic, still fits that many blocks (`_dyn_budget`), with the
    accumulators parked (`PARK`) too; at 4 and 2 blocks the budget is DYN_BUDGET, as the default kernels were timed with"""
    _, kc, vc, G, D = CASES[0]
    kp, vp = side_plan(kc, D), side_plan(vc, D)
    for park in (False, True):
        monkeypatch.setattr(AK, 'PARK', park)
        reps = {}
        for lb in (2, 4, 5, 6):
            src = AK._decode_source(kp, vp, G, 'cuda', _finish_kind(kp), fold=_finish_kind(vp), lb=lb)
            (regs, spill, smem), _ = CR.compile_decode(kp, vp, G, True, lb=lb)
            total = smem + AK.dynamic_shared_bytes(src)
            assert total <= min(AK.DYN_BUDGET, AK.SM_SHARED // lb - 1024), (park, lb, total)
            AK._GEN.lb = lb
            try: reps[lb] = AK._lean_rep(kp, vp, G, park=AK._park_floats(vp, G, True))
            finally: del AK._GEN.lb
        assert reps[2] == reps[4] and reps[5] < reps[4], (park, reps)
