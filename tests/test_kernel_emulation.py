"""The generated flash-decoding kernel (mlx_kvq.attention_kernels), compiled as C++ and run on the CPU by
tests/kernel_emulator.py (128 threads per block as fibers, real barriers and warp exchanges), against the blockwise reference.
It checks the kernel's index and bit arithmetic on a machine without a GPU; bench/check_fused_cuda.py checks the
real kernel on the GPU."""
import re, shutil, subprocess, sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).parent))

def _cxx20():
    if not shutil.which('g++'): return False
    r = subprocess.run(['g++', '-std=c++20', '-x', 'c++', '-fsyntax-only', '-'], input='#include <ucontext.h>\n#include <functional>\nint main(){}', capture_output=True, text=True)
    return r.returncode == 0

pytestmark = pytest.mark.skipif(not _cxx20(), reason='needs g++ with C++20 and <ucontext.h> to emulate the kernel')

import kernel_emulator as E
from mlx_kvq import attention_kernels as AK
from mlx_kvq import attention as A
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.codecs import AffineCodec
import mlx.core as mx
import numpy as np
from mlx_kvq.calibrated import CalibratedTurboCodec

@pytest.mark.parametrize('case', E.CASES, ids=[c[0] for c in E.CASES])
def test_emulated_kernel_matches_reference(case):
    name, kc, vc, B, Hkv, G, D, n = case
    if kc is None: kc, vc = E.calibrated_pair(D)
    for masked in (False, True):
        assert E.check(kc, vc, B, Hkv, G, D, n, masked) <= E.tolerance(kc, vc, G, D), (name, masked)

@pytest.mark.parametrize('case', [c for c in E.CASES if c[0] in ('turbo:4', 'turbo:2/5', 'affine:8,4', 'calibrated 5o/4o')], ids=lambda c: c[0])
def test_simt_kernel_on_cuda(case, monkeypatch):
    "The SIMT kernel, which CUDA runs where the tensor-core kernel does not apply (more than 8 query heads per KV head, affine bands of 3, 5, 6 or 7 slices)"
    monkeypatch.setattr(AK, 'MMA', False)
    name, kc, vc, B, Hkv, G, D, n = case
    if kc is None: kc, vc = E.calibrated_pair(D)
    assert E.check(kc, vc, B, Hkv, G, D, n, True) <= 1e-4, name

FINAL = [c for c in E.CASES if c[6] % 32 == 0 and c[0] in ('turbo:4', 'turbo:3', 'affine:8,4', 'affine:3 g64 / affine:6 g32', 'calibrated 5o/4o')] + \
        [('turbo:3 keys / calibrated values', 'mixed', None, 1, 2, 4, 128, 500),    # a 'rot' side beside a 'dense' one
         ('calibrated one-band 3 keys / 6o values', 'cal1', None, 1, 2, 4, 128, 500)]   # keys prepared in the kernel ('rot', `_query_kind`), values finished by the dense map

def _pair(kc, vc, D):
    "The codecs of a case (the calibrated ones made for its head dim)"
    if kc is None: return E.calibrated_pair(D)
    if kc == 'mixed': return E.CASES[1][1], E.calibrated_pair(D)[1]
    if kc == 'cal-affine': return E.calibrated(4, 0, D), AffineCodec(8)
    if kc == 'turbo-cal': return TurboCodec(4), E.calibrated(5, 1, D)
    if kc == 'cal1': return E.calibrated(3 if D > 64 else 2, 0, D, outliers=False), E.calibrated(6, 1, D)   # auto:B's one-band keys (tq3cs, tq2cs) beside outlier-band values
    return kc, vc

@pytest.mark.parametrize('case', FINAL, ids=[c[0] for c in FINAL])
def test_emulated_final_path_matches_reference(case):
    """Queries scaled and rotated in the kernel (or, for the calibrated codecs, mapped by their own kernel), the combine
    normalizing and transforming the output back (`fused_decode`)"""
    name, kc, vc, B, Hkv, G, D, n = case
    kc, vc = _pair(kc, vc, D)
    for masked in (False, True):
        assert E.check_final(kc, vc, B, Hkv, G, D, n, masked) <= E.final_tolerance(kc, vc, G, D), (name, masked)

@pytest.mark.parametrize('case', FINAL, ids=[c[0] for c in FINAL])
def test_folded_final_path(case, monkeypatch):
    """The decode kernel that finishes the attention itself (`FOLD`: the last block of each row merges the row's chunks),
    two calls chained on their row counters, outputs starting as garbage: the second call's answer is right only if the
    first zeroed the counters it returned. Several blocks per row (S > 1), masked and not, both kernel kinds."""
    name, kc, vc, B, Hkv, G, D, n = case
    kc, vc = _pair(kc, vc, D)
    S = -(-n // AK._chunk(n, B * Hkv, G))
    assert S > 1
    for mma, lpch_min in ((True, AK.LPCH_MIN), (True, 0), (False, AK.LPCH_MIN)):
        monkeypatch.setattr(AK, 'MMA', mma)
        monkeypatch.setattr(AK, 'LPCH_MIN', lpch_min)   # 0: each block serves several chunks, fewer blocks than chunks count on a row
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        if lpch_min == 0 and AK._per_block(kp, vp, G, 'cuda') > 1:   # (the calibrated bands' kernel serves one chunk per block)
            assert AK._grid_x(S, kp, vp, G, 'cuda', R=B * Hkv) < S
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, mma, lpch_min, masked)

def test_packed_constants(monkeypatch):
    """A folded call's constants as one input (`attention._packed`): each at a 4-float boundary (the dense finish reads
    `vmap` / `vmean` 16 bytes at a time), its values at its offset, the kernel's names for them pointers into `cst`; a
    kernel reading a constant one slot off answers wrong (the emulated folded path against its reference)"""
    import numpy as np
    pack, arr = A._packed([('a', mx.arange(3).astype(mx.float32)), ('b', np.arange(5, dtype=np.float32) + 10), ('c', np.array([7.0]))])
    assert pack == (('a', 0), ('b', 4), ('c', 12)) and arr.dtype == mx.float32 and arr.size == 16
    got = np.array(arr)
    assert got[:3].tolist() == [0, 1, 2] and got[4:9].tolist() == [10, 11, 12, 13, 14] and got[12] == 7
    assert A._packed_names(['q', 'a', 'meta', 'c', 'cnt'], pack) == ['q', 'meta', 'cnt', 'cst']
    assert A._pack_defines(pack).splitlines() == ['const float* const a = cst + 0;', 'const float* const b = cst + 4;', 'const float* const c = cst + 12;']
    kc, vc, D = TurboCodec(4), TurboCodec(4, seed=1), 64
    assert E.check_final(kc, vc, 1, 2, 4, D, 700, False, fold=True) <= E.final_tolerance(kc, vc, 4, D)
    defines = A._pack_defines
    monkeypatch.setattr(A, '_pack_defines', lambda pk: defines(tuple((nm, off + (nm == 'vsg')) for nm, off in pk)))   # the value signs read one float off
    assert E.check_final(kc, vc, 1, 2, 4, D, 700, False, fold=True) > 10 * E.final_tolerance(kc, vc, 4, D)

def test_block_merge(monkeypatch):
    """`BMERGE`: each block of the folded lean kernel carries one softmax across the chunks it serves and stores one
    partial, the fold merges one partial per block: short chunks, 2-3 chunks per block (some blocks with fewer), masked
    and not, the low halves kept or dropped: the same attention; not vacuous (the carried accumulators not rescaled when
    a later chunk raises the max: caught)"""
    monkeypatch.setattr(AK, 'BMERGE', True); monkeypatch.setattr(AK, 'LEAN', True); monkeypatch.setattr(AK, 'WSM', True)
    monkeypatch.setattr(AK, 'LPCH_MIN', 0)   # (chunks as the defaults cut them: at most 512 tokens would leave the warps' slabs no room)
    for lpch, lo, (name, kc, vc, B, Hkv, G, D, n) in ((2, True, FINAL[0]), (3, False, FINAL[2]), (2, False, FINAL[1])):
        kc, vc = _pair(kc, vc, D)
        monkeypatch.setattr(AK, 'LPCH', lpch); monkeypatch.setattr(AK, 'QLO', lo); monkeypatch.setattr(AK, 'VLO', lo)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        S = -(-n // AK._chunk(n, B * Hkv, G))
        assert AK._bmerge_ok(kp, vp, G) and AK._grid_x(S, kp, vp, G, 'cuda', R=B * Hkv) < S, name   # fewer partials than chunks
        assert 'running max and sum' in AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp)), name
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, lpch, lo, masked)
    orig = AK._warp_softmax
    monkeypatch.setattr(AK, '_warp_softmax', lambda *a, **k: orig(*a, **k).replace('acc[mt][0] *= f0; acc[mt][1] *= f1; acc[mt][2] *= f0; acc[mt][3] *= f1;', ''))
    monkeypatch.setattr(AK, 'LPCH', 2)
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2

def test_block_merge_over_one_wave(monkeypatch):
    """Long calls keep to WAVE blocks: each block then serves more chunks than LPCH (`_blocks_x`), which BMERGE's carried
    softmax must cover as it covers LPCH: a tiny WAVE makes every block of the emulated call serve 3-4 chunks"""
    monkeypatch.setattr(AK, 'LPCH_MIN', 0); monkeypatch.setattr(AK, 'LPCH', 2)
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    R, S = B * Hkv, -(-n // AK._chunk(n, B * Hkv, G))
    wide = AK._grid_x(S, kp, vp, G, 'cuda', R=R)
    monkeypatch.setattr(AK, 'WAVE', R)   # one block per row: all S chunks in one block
    assert AK._bmerge_ok(kp, vp, G) and AK._grid_x(S, kp, vp, G, 'cuda', R=R) == 1 < wide, (S, wide)
    for masked in (False, True):
        assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)

def test_blocks_per_row():
    """Chunks per block: one below LPCH_MIN rows x chunks (at most FOLD blocks a row: rows of more chunks group them),
    LPCH up to WAVE blocks, more beyond (131K: 8 rows x 128 chunks in 512 blocks of 2, 16 rows in 512 blocks of 4)"""
    assert AK._blocks_x(64, 8, AK.LPCH) == 64                       # 4K, 8 rows: 512 < LPCH_MIN
    assert AK._blocks_x(113, 8, 2) == 57                                     # 32K: LPCH = 2 within one wave
    assert AK._blocks_x(128, 8, 2) == 64 and AK._blocks_x(128, 16, 2) == 32  # 131K, one / two sequences: 512 blocks
    assert AK._blocks_x(256, 8, 2) == 64                                     # 512-token chunks: 4 per block
    assert AK._blocks_x(256, 8, 1) == 256 and AK._blocks_x(9, None, 2) == 5  # one chunk per block; no row count: LPCH
    assert AK._blocks_x(256, 1, 2) == 256 and AK._blocks_x(147, 2, 2) == 147  # one / two KV heads at 32K: within FOLD (256), a chunk a block, the call folds
    assert AK._blocks_x(512, 1, 2) == 256                                     # past FOLD: at most FOLD blocks, each merging its chunks
    assert AK._blocks_x(128, 2, 2) == 128                                    # 128 chunks: one per block still folds
    for R in (1, 2, 8, 24, 64):
        for S in (1, 7, 64, 129, 300, 4096):
            gx = AK._blocks_x(S, R, 2)
            if R * S < AK.LPCH_MIN: assert gx == S if S <= AK.FOLD else AK.FOLD // 2 <= gx <= AK.FOLD, (R, S, gx)
            else: assert gx <= -(-S // 2) and R * gx <= AK.WAVE + R, (R, S, gx)

def test_folded_path_needs_its_counters_zeroed(monkeypatch):
    "Not vacuous: a kernel that leaves its returned counters as they came (garbage) fails on the second call (the emulator's launchers chain their counters: a ring of one); the first call is right"
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    orig = AK._fold_source
    monkeypatch.setattr(AK, '_fold_source', lambda *a: orig(*a).replace('cnext[(long)r * (1 + NGM) + i] = 0;', ';'))
    assert not E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= 1e-2
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True, calls=1) <= E.final_tolerance(kc, vc, G, D)

def test_fold_counter_ring(monkeypatch):
    """Folded calls of one launcher take their row counters from a ring of `attention.RING` scratches: the first RING calls
    start from distinct zeroed arrays, call i from the scratch call i - RING returned (so RING consecutive calls share no
    buffer and a CUDA graph may overlap them), and every call's answer is the reference's; the default ring, then RING = 1
    (the chain, which the emulator's other launchers use)"""
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    seen, real = [], E.cuda_kernel
    def recording(*a, **k):
        call = real(*a, **k)
        input_names = k.get('input_names', a[1] if len(a) > 1 else None)
        if 'cnt' not in input_names: return call
        i = list(input_names).index('cnt')
        def rec(**kw):
            outs = call(**kw); seen.append((kw['inputs'][i], outs[0])); return outs
        return rec
    monkeypatch.setattr(E, 'cuda_kernel', recording)
    mx.random.seed(3)
    k, v = mx.random.normal((B, Hkv, n, D)), mx.random.normal((B, Hkv, n, D))
    q = mx.random.normal((B, Hkv * G, 1, D)).astype(mx.float16)
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    kparts, vparts = kc.encode(k), vc.encode(v)
    ref = A._final_reference(q, kp, vp, kparts, vparts, None, n, D ** -0.5).astype(mx.float32)
    assert A.RING > 1
    for ring in (A.RING, 1):   # the default, then the chain
        monkeypatch.setattr(A, 'RING', ring); seen.clear()
        with E._emulated(True, ring=None):
            _, run = A._make_final_launcher(q, kp, vp, kparts, D ** -0.5, 'cuda')
            outs = [run(q, kparts, vparts, n) for _ in range(2 * ring + 1)]
        assert len(seen) == 2 * ring + 1
        for out in outs:
            assert (mx.abs(out.astype(mx.float32) - ref).max() / mx.abs(ref).max()).item() <= E.final_tolerance(kc, vc, G, D), ring
        for i, (c, _) in enumerate(seen):
            if i < ring: assert not any(c is seen[j][0] for j in range(i)) and not mx.any(c != 0).item(), (ring, i)
            else: assert c is seen[i - ring][1], (ring, i)   # the scratch call i - RING returned, nothing nearer

def test_two_level_merge(monkeypatch):
    """The fold's merge in groups (`FGS` blocks a group, the last block of each merging the group, the last group's merger
    the row): right with groups of 1, 2 and 3 blocks (several groups, a last group short) and with one group; not vacuous:
    a group merger that skips its group's first partial, or a final merger that skips the first group, is caught"""
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    monkeypatch.setattr(AK, 'BLOCKS', 64); monkeypatch.setattr(AK, 'LPCH_MIN', 0)   # several chunks and blocks a row
    monkeypatch.setattr(AK, 'FB1', 0)   # each group's partials in one batch (the default, FB1 = 8, below)
    for fgs in (1, 2, 3, 64):
        monkeypatch.setattr(AK, 'FGS', fgs)
        assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D), fgs
    monkeypatch.setattr(AK, 'FGS', 2)
    orig = AK._fold_source
    last = f'for (int i = 0; i < {AK._final_batch()}; ++i) {{   // the batch'   # the final merger's batch of groups
    for a, b in (('for (int i = 0; i < FGS; ++i) {   // the batch', 'for (int i = 1; i < FGS; ++i) {   // the batch'),
                 (last, last.replace('i = 0', 'i = 1'))):
        monkeypatch.setattr(AK, '_fold_source', lambda *x, a=a, b=b: orig(*x).replace(a, b))
        assert a in orig(128, 'rot') and not E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= 1e-2, a
    monkeypatch.setattr(AK, '_fold_source', orig)
    monkeypatch.setattr(AK, 'FB1', 8)   # the default: a group's partials in batches of 8 (FB1), 3,000 tokens: 24 blocks a row, 2 batches in a group of 16, 3 in one of 64
    for fgs in (16, 64):
        monkeypatch.setattr(AK, 'FGS', fgs)
        assert 'for (int h = 0; h < FGS; h += 8)' in AK._fold_source(128, 'rot')
        assert E.check_final(kc, vc, B, Hkv, G, D, 3000, False, fold=True) <= E.final_tolerance(kc, vc, G, D), fgs
    carry = 'L *= cf; ax *= cf;'   # not vacuous: the earlier batches' sums not carried onto a new max are caught
    monkeypatch.setattr(AK, '_fold_source', lambda *x: orig(*x).replace(carry, 'L *= 1.0f; ax *= 1.0f;'))
    assert carry in orig(128, 'rot') and not E.check_final(kc, vc, B, Hkv, G, D, 3000, False, fold=True) <= 1e-2
    monkeypatch.setattr(AK, '_fold_source', orig)

def test_block_merge_only_for_narrow_values():
    "`BMERGE` (values carried across a block's chunks) only where the values have at most BMERGE_VNS 32-dim slices: at d256 the carried accumulators spilled in the key loop"
    for D, merges in ((64, True), (128, True), (256, False)):
        kp, vp = A.side_plan(TurboCodec(4), D), A.side_plan(TurboCodec(4, seed=1), D)
        assert AK._bmerge_ok(kp, vp, 4) == merges, D

def test_dense_finish_is_checked(monkeypatch):
    """Not vacuous: the calibrated codecs' final path is wrong, and caught, when the query kernel drops the attention
    scale, or when the combine's or the folded finish's output map skips the first row of the band space"""
    name, kc, vc, B, Hkv, G, D, n = [c for c in FINAL if c[0] == 'calibrated 5o/4o'][0]
    kc, vc = _pair(kc, vc, D)
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False) <= E.final_tolerance(kc, vc, G, D)
    orig_q = AK._qmap_source
    monkeypatch.setattr(AK, '_qmap_source', lambda *a: orig_q(*a).replace('acc * qsc[0]', 'acc'))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False) > 1e-2
    monkeypatch.setattr(AK, '_qmap_source', orig_q)
    orig_c = AK._dense_combine
    monkeypatch.setattr(AK, '_dense_combine', lambda *a: orig_c(*a).replace('int j = sl;', 'int j = sl + (sl == 0 ? NSL : 0);'))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False) > 1e-2
    monkeypatch.setattr(AK, '_dense_combine', orig_c)
    orig_f = AK._fold_source
    monkeypatch.setattr(AK, '_fold_source', lambda *a: orig_f(*a).replace('for (int jj = 0; jj < JL; ++jj)', 'for (int jj = 1; jj < JL; ++jj)'))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2

def test_one_band_calibrated_queries_in_the_kernel(monkeypatch):
    """auto:B's one-band calibrated keys (tqBcs: one Walsh-Hadamard block over the whole head dim) take their queries as
    turbo keys do, prepared in the decode kernel (`_query_kind` 'rot': the rotation's signs over the channels' scales,
    `_qsigns`), at every head dim and width auto:B plans; the kinds with an outlier band keep the query kernel. Not
    vacuous: the final path is caught when the signs leave the scales out, and the staged path when the staged tokens'
    queries take the rotation's signs alone (the key side's constants `sgk` in `qsg`'s place)"""
    for D in (64, 128, 256):
        for bits in (2, 3, 4, 5):
            assert A._query_kind(A.side_plan(E.calibrated(bits, 0, D, outliers=False), D)) == 'rot', (D, bits)
            assert A._query_kind(A.side_plan(E.calibrated(bits, 0, D), D)) == 'dense', (D, bits)
    assert A._query_kind(A.side_plan(TurboCodec(4), 128)) == 'rot' and A._query_kind(A.side_plan(AffineCodec(4), 128)) == 'plain'
    name, kc, vc, B, Hkv, G, D, n = [c for c in FINAL if c[1] == 'cal1'][0]
    kc, vc = _pair(kc, vc, D)
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D)
    monkeypatch.setattr(A, '_qsigns', A._signs)
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2
    monkeypatch.undo()
    assert E.check_staged(kc, vc, B, Hkv, G, D, 300, 4, 8) <= E.final_tolerance(kc, vc, G, D)
    wrong = _tail_mutator(monkeypatch, (32 * sum(AK._side_layout(A.side_plan(vc, D))[0]), D, D, 8, A._tail_spec(A.side_plan(kc, D)), A._tail_spec(A.side_plan(vc, D)), False, 'rot'))
    wrong('const float* const signs = qsg;', 'const float* const signs = sgk;')
    assert E.check_staged(kc, vc, B, Hkv, G, D, 300, 4, 8) > 1e-2

def test_emulator_catches_a_wrong_kernel(monkeypatch):
    "The check is not vacuous: one wrong shift in the SIMT value decode is caught"
    monkeypatch.setattr(AK, 'MMA', False)
    orig = AK._value_band
    monkeypatch.setattr(AK, '_value_band', lambda *a: orig(*a).replace('x >> (k * ', 'x >> ((k ^ 1) * '))
    name, kc, vc, B, Hkv, G, D, n = E.CASES[0]
    assert E.check(kc, vc, B, Hkv, G, D, n, False) > 1e-2

def test_emulator_reports_a_barrier_never_reached():
    """The emulator runs a block's threads as fibers: a kernel whose threads wait at a barrier the others never reach (a
    block barrier or a warp's exchange inside code some threads skip) stops with an error naming the block, instead of
    hanging the test run; the same kernel with the barrier reached by all runs, its threads' writes after the barrier seeing
    the writes before it"""
    ok = E.compile_kernel("KVQ_SHARED float s[128];\ns[KVQ_TID] = x[0] + KVQ_TID;\nKVQ_SYNC();\nout[KVQ_BX * 128 + KVQ_TID] = s[127 - KVQ_TID];", [('x', 'float')], ['out'])
    out = np.full(256, np.nan, np.float32)
    ok([np.array([2.0], np.float32)], [out], 2, 1, 128)
    assert np.array_equal(out, np.tile(2.0 + np.arange(127, -1, -1), 2).astype(np.float32))
    child = """import sys, numpy as np
sys.path.insert(0, sys.argv[1]); import kernel_emulator as E
bad = E.compile_kernel(sys.argv[2] + "\\nout[KVQ_BX * 128 + KVQ_TID] = x[0];", [('x', 'float')], ['out'])
try: bad([np.array([2.0], np.float32)], [np.zeros(256, np.float32)], 2, 1, 128)
except RuntimeError as e: print(e)
"""   # (in a child process with a time limit: a report that broke would hang there, and fail here)
    for body in ("if (KVQ_BX == 1 && KVQ_TID < 64) KVQ_SYNC();", "if (KVQ_BX == 1 && (KVQ_TID & 31) < 16) KVQ_SYNCWARP();",
                 "if (KVQ_BX == 1 && KVQ_TID == 5) return;\nKVQ_SYNC();"):
        r = subprocess.run([sys.executable, '-c', child, str(Path(__file__).parent), body], capture_output=True, text=True, timeout=120)
        assert re.search(r"in block \(1, 0\) threads wait at a barrier that the others never reach", r.stdout), (body, r.stdout, r.stderr[-2000:])

def test_emulator_poisons_shared_memory(monkeypatch):
    """A GPU block's shared memory starts with whatever its last user left, so the emulator fills every shared array
    (static, 2-D, `unsigned char`, and the dynamic one) with 0xFF bytes at each block's start (`POISON`): a kernel that
    reads a position no thread of its block wrote gets NaNs (floats) or ~0u (words), in every block, not the zeros of a
    fresh static array or the last block's values; a position written before a barrier reads back as written"""
    body = """KVQ_SHARED float s[128];
__shared__ unsigned char c[4][32];
KVQ_DYN_U32(d);
if (KVQ_TID < 64) { s[KVQ_TID] = x[0]; c[KVQ_TID >> 5][KVQ_TID & 31] = 7; d[KVQ_TID] = 3u; }
KVQ_SYNC();
out[KVQ_BX * 128 + KVQ_TID] = s[KVQ_TID] + (float)c[KVQ_TID >> 5][KVQ_TID & 31] + (float)d[KVQ_TID];"""
    head = "constexpr int KVQ_DYN_WORDS = 128;\n"
    want = lambda poison: np.tile(np.concatenate([np.full(64, 12.0), np.full(64, np.nan if poison else 0.0)]), 3).astype(np.float32)
    for poison in (True, False):
        monkeypatch.setattr(E, 'POISON', poison)
        k = E.compile_kernel(body, [('x', 'float')], ['out'], head)
        out = np.zeros(384, np.float32)
        k([np.array([2.0], np.float32)], [out], 3, 1, 128)
        assert np.array_equal(out, want(poison), equal_nan=True), (poison, out[60:70], out[-4:])

def test_emulator_catches_a_wrong_mma_kernel(monkeypatch):
    "The tensor-core kernel's check is not vacuous either: swapping two tokens' halves in the value fragments, or one pair's codes in the key fragments, is caught"
    name, kc, vc, B, Hkv, G, D, n = E.CASES[0]
    for lean, vals, keys in ((False, '_mma_values', '_mma_keys'), (True, '_lean_values', '_lean_keys')):   # both token loops
        monkeypatch.setattr(AK, 'LEAN', lean)
        orig_v, orig_k = getattr(AK, vals), getattr(AK, keys)
        assert E.check(kc, vc, B, Hkv, G, D, n, False) <= E.tolerance(kc, vc, G, D)
        wrong = lambda src: src.replace('0x7632', '0x3276').replace('{h0, h1, h2, h3}', '{h1, h0, h2, h3}')   # the permutes, or with `IL4` the interleaved pairs' fragments
        def bad_v(*a):
            src = orig_v(*a); out = wrong(src)
            assert out != src, 'the mutation must change the value loop'
            return out
        monkeypatch.setattr(AK, vals, bad_v)
        assert E.check(kc, vc, B, Hkv, G, D, n, False) > 1e-2
        monkeypatch.setattr(AK, vals, orig_v)
        for lo in ((False, True) if lean else (True,)):   # (the lean loop's low query half, `QLO`: off by default)
            monkeypatch.setattr(AK, 'QLO', lo)
            bad = (lambda *a: orig_k(*a).replace(', a, ql', ', a, qh')) if lo else \
                  (lambda *a: re.sub(r'qh(\d+)a, qh\1b', r'qh\1b, qh\1a', orig_k(*a)))   # the low parts' product on the high parts; the two halves of k swapped
            monkeypatch.setattr(AK, keys, bad)
            assert E.check(kc, vc, B, Hkv, G, D, n, False) > 1e-2, (lean, lo)
            monkeypatch.setattr(AK, keys, orig_k)

def test_mma_variants(monkeypatch):
    "Short chunks (many blocks, a partial last chunk, tiles past the last token), 1 or 3 tiles in flight, 2 or 3 cp.async stages, vector loads, staged scalars and clamped loads, 1-4 chunks per block: the same attention from the tensor-core kernel"
    monkeypatch.setattr(AK, 'CH_MAX', 128); monkeypatch.setattr(AK, 'BLOCKS', 64); monkeypatch.setattr(AK, 'LEAN', False)
    monkeypatch.setattr(AK, 'LPCH_MIN', 0)   # every grid takes PCH chunks per block, however few rows x chunks
    for tp, nst, vec, pch, (name, kc, vc, B, Hkv, G, D, n) in ((1, 2, False, 2, E.CASES[0]), (1, 3, True, 3, E.CASES[1]), (3, 0, False, 1, E.CASES[4]), (1, 0, True, 4, E.CASES[6])):
        # tiles in flight per warp, cp.async stages, vector loads (the calibrated case: 3-word ranges, scalar loads), chunks per block
        monkeypatch.setattr(AK, 'TPK', tp); monkeypatch.setattr(AK, 'TPV', tp); monkeypatch.setattr(AK, 'NST', nst); monkeypatch.setattr(AK, 'VEC', vec)
        monkeypatch.setattr(AK, 'PCH', pch)
        if kc is None: kc, vc = E.calibrated_pair(D)
        for staged in (False, True):   # the chunk's scalars staged in shared memory + clamped loads, or neither
            monkeypatch.setattr(AK, 'SCAL', staged); monkeypatch.setattr(AK, 'CLAMP', staged)
            assert E.check(kc, vc, B, Hkv, G, D, n, True) <= E.tolerance(kc, vc, G, D), (name, tp, staged)

def test_lean_variants(monkeypatch):
    "The lean token loops: short chunks (many blocks, a partial last chunk, tiles past the last token), loads in the tile or 1-3 tiles ahead (register sets rotated or copied), 1 to 32 copies of the pair tables, 1-3 chunks per block, 1, 2 or 4 score accumulators, tiles staged through 2-4 cp.async stages or not, the low halves of queries and weights kept or dropped, every case's bands (unaligned value ranges, 5-8 bit codes, affine groups)"
    monkeypatch.setattr(AK, 'CH_MAX', 128); monkeypatch.setattr(AK, 'BLOCKS', 64); monkeypatch.setattr(AK, 'LEAN', True)
    monkeypatch.setattr(AK, 'LPCH_MIN', 0)   # every grid takes LPCH chunks per block, however few rows x chunks
    cases = [c for c in E.CASES if c[1] is not None]
    for (pf, rep, pch, kacc, stg, rot, lo), (name, kc, vc, B, Hkv, G, D, n) in zip(((0, 32, 1, 4, 0, True, True), (1, 1, 3, 1, 4, False, False), (2, 4, 1, 2, 3, False, True),
                                                                                   (3, 32, 2, 4, 2, True, False), (2, 32, 1, 2, 4, True, True), (1, 8, 1, 4, 3, False, False)), cases):
        monkeypatch.setattr(AK, 'PF', pf); monkeypatch.setattr(AK, 'REP', rep); monkeypatch.setattr(AK, 'LPCH', pch); monkeypatch.setattr(AK, 'KACC', kacc)
        monkeypatch.setattr(AK, 'STG', stg); monkeypatch.setattr(AK, 'ROT', rot)                     # register sets rotated or copied
        monkeypatch.setattr(AK, 'QLO', lo); monkeypatch.setattr(AK, 'VLO', lo)                        # low parts of queries and weights kept or dropped
        assert AK._lean_ok(A.side_plan(kc, D), A.side_plan(vc, D)) and 'lean' in AK._decode_source(A.side_plan(kc, D), A.side_plan(vc, D), G, 'cuda'), name
        assert E.check(kc, vc, B, Hkv, G, D, n, True) <= E.tolerance(kc, vc, G, D), (name, pf, rep, pch)

def test_wide_tiles_kept_in_flight(monkeypatch):
    """`PF_WORDS`: head dim 256 (16 words a thread a tile at 4 bits; the calibrated bands' funnel-shifted ranges) with
    PF = 2 tiles in flight where the default drops to one: folded, against the blockwise reference"""
    monkeypatch.setattr(AK, 'PF', 2); monkeypatch.setattr(AK, 'PF_WORDS', 64)
    for kc, vc in ((TurboCodec(4), TurboCodec(4, seed=1)), E.calibrated_pair(256)):
        kp, vp = A.side_plan(kc, 256), A.side_plan(vc, 256)
        src = AK._decode_source(kp, vp, 4, 'cuda', fold='dense' if kc.__class__ is not TurboCodec else 'rot')
        monkeypatch.setattr(AK, 'PF_WORDS', 8)
        assert src != AK._decode_source(kp, vp, 4, 'cuda', fold='dense' if kc.__class__ is not TurboCodec else 'rot')   # the knob changes these loops
        monkeypatch.setattr(AK, 'PF_WORDS', 64)
        assert E.check_final(kc, vc, 1, 1, 4, 256, 700, False, fold=True) <= E.final_tolerance(kc, vc, 4, 256), type(kc).__name__

def test_lean_loops_take_unaligned_key_ranges(monkeypatch):
    """`LEAN_ANY`: the calibrated codecs (a 5-bit outlier band of 12 or 32 channels, so a key thread's codes start
    mid-word) in the lean loops: two-launch with a mask and short chunks, and folded (at d96 with each block's chunks
    merged into one partial, BMERGE; at d256 a partial per chunk), against the blockwise reference"""
    monkeypatch.setattr(AK, 'BLOCKS', 64); monkeypatch.setattr(AK, 'LPCH_MIN', 0)   # several chunks, LPCH per block
    ch = AK.CH_MAX
    for D, G, n in ((96, 2, 300), (256, 4, 500)):
        kc, vc = E.calibrated_pair(D); kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        monkeypatch.setattr(AK, 'LEAN_ANY', False)
        assert not AK._lean_ok(kp, vp)                       # the configurations this test is about
        monkeypatch.setattr(AK, 'LEAN_ANY', True)
        merging = sum(AK._side_layout(vp)[0]) <= AK.BMERGE_VNS   # blocks merging their chunks (BMERGE) where the values have at most BMERGE_VNS slices: d96, not d256
        assert ('running max and sum' in AK._decode_source(kp, vp, G, 'cuda', fold='dense')) == merging and merging == (D == 96)
        assert E.check_final(kc, vc, 1, 2, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D), (D, 'folded')
        monkeypatch.setattr(AK, 'CH_MAX', 128)
        assert 'lean' in AK._decode_source(kp, vp, G, 'cuda')
        assert E.check(kc, vc, 1, 2, G, D, n, True) <= E.tolerance(kc, vc, G, D), (D, 'masked')
        monkeypatch.setattr(AK, 'CH_MAX', ch)

def test_half_slice_steps(monkeypatch):
    """`HSTEP`: the calibrated kinds auto:5 plans at head dim 128 (bands of 112 and 16 channels beside an outlier band)
    take 7 + 1 16-dim steps a side in the lean loops instead of 8 + 2, the 112-channel band's thread ranges starting
    mid-word (28 codes a key thread, 14 a value thread); with 8 value steps the block merges its chunks (BMERGE, which
    5 slices kept off). Folded, masked and not (4 query heads a KV head: the warps' sums in parallel slabs; 8: one warp
    after another), and two-launch with short chunks and a mask, each side alone and both,
    against the blockwise reference; a whole-slice band (turbo:4) and head dim 256's calibrated bands (224 + 32) keep
    their sources. Not vacuous: a value loop that skips the last step, keys whose threads read the old ranges, and
    partial outputs whose positions past the steps are left as the shared memory held them (the emulator fills it with
    NaNs at each block's start, `kernel_emulator.POISON`; the dense finish multiplies every position) fail"""
    D, G = 128, 4
    kc, vc = E.calibrated(3, 0, D), E.calibrated(6, 1, D)
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    src = lambda: AK._decode_source(kp, vp, G, 'cuda', fold='dense')
    assert AK.HSTEP == 'kv' and [b.n for b in kp.bands] == [16, 112]                     # the default; the bands this is about
    assert [AK._steps(b, 'k') for b in kp.bands] == [1, 7] and AK._vslices(vp) == 4
    on = src()
    monkeypatch.setattr(AK, 'HSTEP', '')
    off = src()
    assert [AK._steps(b, 'k') for b in kp.bands] == [2, 8] and not AK._bmerge_ok(kp, vp, G)
    assert on.count('KVQ_MMA(') < off.count('KVQ_MMA(') and 'running max and sum' in on and 'running max and sum' not in off
    for same in ((TurboCodec(4), TurboCodec(4, seed=1), 128), (E.calibrated(3, 0, 256), E.calibrated(6, 1, 256), 256)):
        ps = [A.side_plan(c, same[2]) for c in same[:2]]
        fold = 'rot' if type(same[0]) is TurboCodec else 'dense'
        before = AK._decode_source(*ps, G, 'cuda', fold=fold)
        monkeypatch.setattr(AK, 'HSTEP', 'kv')
        assert AK._decode_source(*ps, G, 'cuda', fold=fold) == before
        monkeypatch.setattr(AK, 'HSTEP', '')
    tol = E.final_tolerance(kc, vc, G, D)
    for sides in ('k', 'v', 'kv'):
        monkeypatch.setattr(AK, 'HSTEP', sides)
        for masked in (False, True):
            assert E.check_final(kc, vc, 1, 1, G, D, 700, masked, fold=True) <= tol, (sides, masked)
    monkeypatch.setattr(AK, 'CH_MAX', 128)
    assert E.check(kc, vc, 1, 2, G, D, 300, True) <= E.tolerance(kc, vc, G, D)
    monkeypatch.setattr(AK, 'CH_MAX', 1024)
    assert not AK._psum_ok(5, 8)   # 8 query heads a KV head: the warps add their sums into `red` one after another (its zeros too)
    assert E.check_final(kc, vc, 1, 1, 8, D, 700, True, fold=True) <= E.final_tolerance(kc, vc, 8, D)
    steps = AK._steps
    monkeypatch.setattr(AK, '_steps', lambda b, side: steps(b, side) - (side == 'v' and b.n == 112))   # the value loop one step short
    assert not E.check_final(kc, vc, 1, 1, G, D, 700, False, fold=True) <= tol
    monkeypatch.setattr(AK, '_steps', steps)
    orig = AK._lean_tile_loads   # the keys' ranges at the whole-slice starts (32 codes a thread) while the loops take 28
    monkeypatch.setattr(AK, '_lean_tile_loads', lambda side, plan, toks, start, nbits, grp, rows=None: orig(
        side, plan, toks, (lambda i, b: f"{8 * AK._nslices(b.n) * b.bits} * tig") if side == 'k' else start, nbits, grp, rows))
    assert not E.check_final(kc, vc, 1, 1, G, D, 700, False, fold=True) <= tol
    monkeypatch.setattr(AK, '_lean_tile_loads', orig)
    values = AK._lean_values   # the positions past the value steps not written 0
    zero = re.compile(r'if \((w == 0 && )?lane < \d+\) for \(int g = 0; g < G; \+\+g\) (red|sc)\[[^;]*\] = 0\.0f;')
    strip = lambda x: zero.sub('', x) if isinstance(x, str) else tuple(strip(y) for y in x)
    assert len(zero.findall(on)) == 2 and strip(on) != on   # one a value band
    monkeypatch.setattr(AK, '_lean_values', lambda *a, **k: strip(values(*a, **k)))
    assert not E.check_final(kc, vc, 1, 1, G, D, 700, False, fold=True) <= tol
    assert not E.check_final(kc, vc, 1, 1, 8, D, 700, False, fold=True) <= tol

def test_low_bit_calibrated_keys_take_tensor_cores(monkeypatch):
    """Calibrated keys of 1-3 bits (per-channel scales) take the tensor-core kernel; calibrated values of 1-3 bits do so
    only with `VTLO` (on by default: the tables' low parts kept), else they keep the SIMT one (`_mma_ok`): `auto:B` may
    plan 3-bit keys with 6-bit values at the bytes of 5 / 4 bits, and the SIMT kernel took such a pair 2.8x as long on an
    H200. The emulated tensor-core kernel stays within its tolerance of the blockwise reference for such pairs, folded,
    with codec means that do not fit the data (`calibrated`). Codecs of float64 codebooks (configs saved before
    2026-12-01): with `half_centroids` (the default since) no table has a low part, `test_exact_half_tables`"""
    calibrated = lambda bits, seed, D: E.calibrated(bits, seed, D, half=False)
    D = 128
    centred = CalibratedTurboCodec(3, seed=1, mean=np.full(D, 0.2, np.float32), dim=D, half_centroids=False)      # centred only, no scales
    assert AK.VTLO   # the default
    for vtlo in (False, True):
        monkeypatch.setattr(AK, 'VTLO', vtlo)
        for kb, vb in ((3, 6), (1, 5), (2, 8)):
            kc, vc = calibrated(kb, 0, D), calibrated(vb, 1, D)
            assert AK._mma_ok(A.side_plan(kc, D), A.side_plan(vc, D), 4), (kb, vb)
            assert AK._mma_ok(A.side_plan(vc, D), A.side_plan(kc, D), 4) == vtlo, (vb, kb)      # the same pair swapped: low-bit values
            if kb == 3 and vtlo: assert E.check_final(kc, vc, 1, 1, 4, D, 1500, True, fold=True) <= E.final_tolerance(kc, vc, 4, D)
        assert AK._mma_ok(A.side_plan(calibrated(6, 0, D), D), A.side_plan(centred, D), 4) == vtlo   # as values: the SIMT kernel without VTLO
        assert AK._mma_ok(A.side_plan(centred, D), A.side_plan(calibrated(6, 0, D), D), 4)           # as keys: the tensor cores

def test_value_tables_low_parts(monkeypatch):
    """`VTLO`: the lean value loop adds the code tables' low parts (a third product per fragment) for calibrated values,
    whose half-precision tables otherwise cost up to 2-4e-3 over long contexts where the codec's means do not fit the data
    (as the check's random ones do): the error falls, 3-bit values may take the tensor cores, and plain turbo values
    (no means or scales) keep the kernel they had. Covers the pair-table path (3 bits), the 4-bit one and wider bands (5).
    Codecs of float64 codebooks (configs saved before 2026-12-01; exact tables: `test_exact_half_tables`)"""
    D = 128
    calibrated = lambda bits, seed: E.calibrated(bits, seed, D, half=False)
    tk, tv = A.side_plan(TurboCodec(4), D), A.side_plan(TurboCodec(4, seed=1), D)
    plain = AK._decode_source(tk, tv, 4, 'cuda', fold='rot')
    for kb, vb in ((6, 3), (5, 4)):
        kc, vc = calibrated(kb, 0), calibrated(vb, 1)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        monkeypatch.setattr(AK, 'VTLO', False)
        assert AK._mma_ok(kp, vp, 4) == (vb >= 4)
        monkeypatch.setattr(AK, '_mma_ok', lambda *a: True)      # both ways through the tensor-core kernel (its float32 partials: no output rounding)
        off = E.check(kc, vc, 1, 2, 4, D, 1500, True)
        monkeypatch.undo(); monkeypatch.setattr(AK, 'VTLO', True)
        assert AK._mma_ok(kp, vp, 4) and ('vlutl' in AK._decode_source(kp, vp, 4, 'cuda', fold='dense')) == (vb <= 4)
        on = E.check(kc, vc, 1, 2, 4, D, 1500, True)
        assert on <= 0.7 * off, (kb, vb, off, on)
        if vb == 3: assert E.check_final(kc, vc, 1, 2, 4, D, 1500, False, fold=True) <= E.final_tolerance(kc, vc, 4, D)   # folded, as CUDA launches it
    assert AK._decode_source(tk, tv, 4, 'cuda', fold='rot') == plain   # turbo values: the same kernel with VTLO on

def test_high_low_half_table(monkeypatch):
    """`HLTAB`: with `VTLO`, a value band of more than 4 bits (no pair table) reads each code's high and low float16 halves
    from one shared table (`_hl_fill`) instead of computing the low part from the float32 table per lookup: the same
    halves, so the emulated kernel's output is bit for bit the one without it, and the table is in the source only where
    such a band is (6-bit values with a 7-bit outlier band: yes; 4-bit values with a 5-bit band: yes; plain 4-bit turbo: no)
    and the kernel is compiled for at most `HLTAB_LB` blocks an SM; under `LB`'s 128 registers only where such bands hold
    half the value channels or more (the 6-bit values: yes; the 4-bit values with their narrow 5-bit band: no). On by default,
    with `HLDIR` (each fragment register one byte permute of two tokens' words, not a transpose of the tokens' channel pairs:
    the same halves, bit for bit). Codecs of float64 codebooks (tables with low parts)"""
    D = 128
    assert AK.HLTAB and 0 < AK.HLTAB_LB < AK.LB
    for kb, vb in ((3, 6), (5, 4)):
        kc, vc = E.calibrated(kb, 0, D, half=False), E.calibrated(vb, 1, D, half=False)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        assert 'vhl_s' in AK._decode_source(kp, vp, 4, 'cuda', fold='dense', lb=AK.HLTAB_LB)
        assert ('vhl_s' in AK._decode_source(kp, vp, 4, 'cuda', fold='dense', lb=AK.LB)) == (vb > 4)   # the many-blocks kernels: wide value bands only
        assert ('vhl_s' in AK._decode_source(kp, vp, 4, 'cuda', fold='dense')) == (vb > 4)             # (the default bound: LB)
        outs = []
        assert AK._lb(2 * 11) <= AK.HLTAB_LB    # the emulated calls below (2 rows, 11 chunks at most): few blocks, compiled with the table
        for on, direct in ((False, True), (True, False), (True, True)):   # (ending on the defaults; `HLDIR`: fragments permuted straight from the tokens' words)
            monkeypatch.setattr(AK, 'HLTAB', on); monkeypatch.setattr(AK, 'HLDIR', direct)
            src = AK._decode_source(kp, vp, 4, 'cuda', fold='dense', lb=AK.HLTAB_LB)
            assert ('vhl_s' in src) == on, (kb, vb, on)
            if on and direct: assert src.count('KVQ_PRMT(') < prmts, (kb, vb)   # fewer byte permutes than the transpose's
            prmts = src.count('KVQ_PRMT(')
            mx.random.seed(1)
            k, v = mx.random.normal((1, 2, 700, D)), mx.random.normal((1, 2, 700, D))
            q = mx.random.normal((1, 2, 4, 1, D)) * D ** -0.5
            mask = mx.random.uniform(shape=(1, 1, 1, 1, 700)) > 0.3
            outs.append(E.emulate(q, kp, vp, kc.encode(k), vc.encode(v), mask, 700))
        for other in outs[1:]:
            for a, b in zip(outs[0], other): assert mx.array_equal(a, b).item(), (kb, vb)
    monkeypatch.setattr(AK, 'HLTAB', True)
    tk, tv = A.side_plan(TurboCodec(4), D), A.side_plan(TurboCodec(4, seed=1), D)
    assert 'vhl_s' not in AK._decode_source(tk, tv, 4, 'cuda', fold='rot', lb=AK.HLTAB_LB)

def test_exact_half_tables(monkeypatch):
    """Calibrated codecs with `half_centroids` (the default) have code tables exact in float16 (`_Plan.half_exact`), so
    the lean value loop needs no low parts (`VTLO`): no low-part pair table ('vlutl') and no third product, the (high,
    low) word table of wide bands kept with its low halves 0 and not read, and 1-3-bit values take the tensor cores. The
    emulated kernel gives bit for bit what the VTLO kernel gives on the same tables (whose low parts are all 0), folded
    and two-launch, masked, for values of 3 (pair tables), 4, 6 (a 7-bit outlier band: the word table) bits and one 6-bit band
    at d64 (`auto:5`'s Llama-3.2-1B plan); and a codec of float64 codebooks still gets them"""
    cases = ((5, 3, 128, True), (5, 4, 128, True), (3, 6, 128, True), (2, 6, 64, False))
    for kb, vb, D, outl in cases:
        kc, vc = E.calibrated(kb, 0, D, outliers=outl), E.calibrated(vb, 1, D, outliers=outl)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        assert vp.half_exact and kp.half_exact and not AK._vtlo(vp) and AK._mma_ok(kp, vp, 4) and AK._mma_ok(vp, kp, 4)
        src = AK._decode_source(kp, vp, 4, 'cuda', fold='dense', lb=AK.HLTAB_LB)
        assert 'vlutl' not in src, (kb, vb)
        assert ('vhl_s' in src) == (max(b.bits for b in vp.bands) > 4), (kb, vb)   # a band of more than 4 bits (the outlier band's vb + 1 too)
        old = A.side_plan(E.calibrated(vb, 1, D, outliers=outl, half=False), D)
        assert not old.half_exact and AK._vtlo(old) and old.signature() != vp.signature()    # float64 tables: low parts
        mx.random.seed(2)
        n = 700
        k, v = mx.random.normal((1, 2, n, D)), mx.random.normal((1, 2, n, D))
        q = mx.random.normal((1, 2, 4, 1, D)) * D ** -0.5
        mask = mx.random.uniform(shape=(1, 1, 1, 1, n)) > 0.3
        kparts, vparts = kc.encode(k), vc.encode(v)
        outs = []
        for force in (False, True):
            if force:   # the same tables through the VTLO kernel: their low parts all 0
                monkeypatch.setattr(type(vp), 'half_exact', property(lambda self: False))
                assert AK._vtlo(vp) and 'KVQ_MMA(acc[0], al' in AK._decode_source(kp, vp, 4, 'cuda', fold='dense', lb=AK.HLTAB_LB)
            assert AK._lb(2 * 11) <= AK.HLTAB_LB
            outs.append(E.emulate(q, kp, vp, kparts, vparts, mask, n))
            monkeypatch.undo()
        for a, b in zip(*outs): assert mx.array_equal(a, b).item(), (kb, vb, D)
        assert E.check_final(kc, vc, 1, 2, 4, D, n, True, fold=True) <= E.final_tolerance(kc, vc, 4, D), (kb, vb, D)

def test_half_table_copies(monkeypatch):
    """`HLREP`: the (high, low) half table of value bands of more than 4 bits kept as `rep` copies in the dynamic shared
    memory beside the pair tables (lane l reads copy l % rep, so a warp's 32 lookups never meet in a bank), the copy's
    offset or-ed into the code's scaled byte offset; none where the pair tables have fewer than REP copies (3 / 6 bits with
    outlier bands at d128: the kernel is then the one without HLREP). The same words: the emulated kernel's output is bit for bit the one
    with a single copy, for exact tables (6-bit values one band at d64, 3 / 6 with outlier bands at d128, 5 / 4 whose
    5-bit outlier band alone takes the table) and float64 ones (their low parts read from the same words), folded; the
    emulator gives the kernel only the dynamic memory the launch asks for"""
    monkeypatch.setattr(AK, 'LB', AK.HLTAB_LB)   # compiled as few-block calls are: the half table wherever a band is wide
    for kb, vb, D, outl, half in ((2, 6, 64, False, True), (3, 6, 128, True, True), (5, 4, 128, True, True), (2, 6, 64, False, False)):
        kc, vc = E.calibrated(kb, 0, D, outliers=outl, half=half), E.calibrated(vb, 1, D, outliers=outl, half=half)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        assert AK._hl_words(vp), (kb, vb, D)
        outs = []
        for on in (False, True):
            monkeypatch.setattr(AK, 'HLREP', on)
            src = AK._decode_source(kp, vp, 4, 'cuda', fold='dense')
            rep = AK._lean_rep(kp, vp, 4); h = AK._hl_copies(kp, vp, 4, rep)
            copied = on and rep == AK.REP
            assert ('vhl_s = kvq_dyn' in src and '| hlc)' in src) == copied and ('KVQ_SHARED uint32_t vhl_s' in src) == (not copied), (kb, vb, on)
            if on and rep == AK.REP:   # its copies in the dynamic part, as many as fit beside the pair tables' copies (which keep theirs)
                assert h >= 8 and f'HLREP: {h} copies' in src and AK.dynamic_shared_bytes(src) >= dyn + 4 * AK._hl_words(vp) * h and rep == rep0, (kb, vb, h, rep)
            elif on:   # pair tables with fewer copies than REP (the block at its budget): no copies of the half table, the kernel without HLREP
                assert h == 1 and src == off, (kb, vb)
            dyn, rep0, off = AK.dynamic_shared_bytes(src), rep, src
            outs.append(E.check_final(kc, vc, 1, 2, 4, D, 700, True, fold=True))
            mx.random.seed(3)
            k, v = mx.random.normal((1, 2, 700, D)), mx.random.normal((1, 2, 700, D))
            q = mx.random.normal((1, 2, 4, 1, D)) * D ** -0.5
            mask = mx.random.uniform(shape=(1, 1, 1, 1, 700)) > 0.3
            outs.append(E.emulate(q, kp, vp, kc.encode(k), vc.encode(v), mask, 700))
        assert outs[0] == outs[2] and outs[0] <= E.final_tolerance(kc, vc, 4, D), (kb, vb, D, outs[0], outs[2])   # the final path: the same error
        for a, b in zip(outs[1], outs[3]): assert mx.array_equal(a, b).item(), (kb, vb, D, half)

def test_combine_variants(monkeypatch):
    """Both combines (one pass with an online softmax, or three passes) and 1, 2 or 8 chunks loaded at once, over chunks
    that are wholly masked (the first ones: the running max starts at -inf; one group of threads may see only such
    chunks) and chunks split over several rounds of loads: the partial path (unnormalized sums, max, sum) and the final
    path (normalized, rotated back) against the blockwise reference"""
    import mlx.core as mx
    name, kc, vc, B, Hkv, G, D, n = E.CASES[0]                       # turbo:4, 700 tokens: 11 chunks of 64
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    mx.random.seed(5)
    k, v = mx.random.normal((B, Hkv, n, D)), mx.random.normal((B, Hkv, n, D))
    kparts, vparts = kc.encode(k), vc.encode(v)
    qp = mx.random.normal((B, Hkv, G, 1, D)) * D ** -0.5
    q = mx.random.normal((B, Hkv * G, 1, D))
    keep = (mx.arange(n) >= 320) & ((mx.arange(n) < 448) | (mx.arange(n) >= 512)) & (mx.random.uniform(shape=(n,)) > 0.2)
    assert AK._chunk(n, B * Hkv, G) == 64 and keep[320:448].any().item()   # chunks 0-4 and 7 (of 64 tokens) have no token
    mask = keep.reshape(1, 1, 1, 1, n)
    full = A._full_mask(keep.reshape(1, 1, 1, n), B, Hkv, G, 1, n)
    rm, rl, ro = A._quantized_partial_mlx(qp, kp, vp, kparts, vparts, mask, n)
    ref = A._final_reference(q, kp, vp, kparts, vparts, full, n, D ** -0.5)
    monkeypatch.setattr(AK, 'QLO', True)   # scores to about float32 precision: the (max, sum) pair is compared at 1e-4 below
    for online, cu in ((False, 8), (True, 1), (True, 2), (True, 8)):
        monkeypatch.setattr(AK, 'CONLINE', online); monkeypatch.setattr(AK, 'CU', cu)
        m, l, o = E.emulate(qp, kp, vp, kparts, vparts, mask, n)
        err = (mx.abs(o / l - ro / rl).max() / mx.abs(ro / rl).max()).item()
        assert err <= E.tolerance(kc, vc, G, D), (online, cu, err)
        assert (mx.abs(m - rm).max() / mx.abs(rm).max()).item() < 1e-4, (online, cu)    # the (max, sum) pair itself, not only the ratio
        assert (mx.abs(l - rl).max() / mx.abs(rl).max()).item() < 2e-3, (online, cu)
        out = E.emulate_final(q, kp, vp, kparts, vparts, full, n, D ** -0.5)
        assert (mx.abs(out - ref).max() / mx.abs(ref).max()).item() <= E.tolerance(kc, vc, G, D), (online, cu)

def test_combine_catches_a_wrong_transform(monkeypatch):
    "The final path's check is not vacuous for the one-pass combine: a wrong sign in its cross-warp transform is caught"
    import mlx.core as mx
    name, kc, vc, B, Hkv, G, D, n = E.CASES[0]
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False) <= E.final_tolerance(kc, vc, G, D)
    orig = AK._combine_online
    monkeypatch.setattr(AK, '_combine_online', lambda *a: orig(*a).replace('y += (t & 1) ? -z : z;', 'y += (t & 2) ? -z : z;'))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False) > 1e-2

def test_parallel_warp_sums(monkeypatch):
    "The warps' partial outputs summed in parallel from slabs of the score buffer (PSUM), after one block softmax per chunk or each warp's own softmax (WSM), one or two chunks per block, masked: the same attention"
    monkeypatch.setattr(AK, 'LEAN', True); monkeypatch.setattr(AK, 'PSUM', True); monkeypatch.setattr(AK, 'LPCH_MIN', 0)
    for wsm, marker in ((False, 'every warp is past the value loop: the score buffer is free\n'), (True, "this warp's softmax over its own tiles")):
        monkeypatch.setattr(AK, 'WSM', wsm)
        for pch, (name, kc, vc, B, Hkv, G, D, n) in ((2, E.CASES[0]), (1, E.CASES[3]), (2, E.CASES[4]), (1, E.CASES[1])):
            monkeypatch.setattr(AK, 'LPCH', pch)
            if kc is None: kc, vc = E.calibrated_pair(D)
            vsl = AK._side_layout(A.side_plan(vc, D))[0]
            assert AK._psum_ok(sum(vsl), G) and marker in AK._decode_source(A.side_plan(kc, D), A.side_plan(vc, D), G, 'cuda'), (name, wsm)
            assert E.check(kc, vc, B, Hkv, G, D, n, True) <= E.tolerance(kc, vc, G, D), (name, pch, wsm)
    name, kc, vc, B, Hkv, G, D, n = E.CASES[0]
    orig = AK._warp_sums                   # not vacuous: one warp's slab subtracted instead of added is caught
    monkeypatch.setattr(AK, '_warp_sums', lambda *a: orig(*a).replace(' + sc[3 * G', ' - sc[3 * G'))
    assert E.check(kc, vc, B, Hkv, G, D, n, True) > 1e-2
    monkeypatch.setattr(AK, '_warp_sums', lambda *a: orig(*a).replace('wf[e & 1] * acc[', 'acc['))   # the warps' own maxima not reconciled: caught
    assert E.check(kc, vc, B, Hkv, G, D, n, True) > 1e-2

def test_variants(monkeypatch):
    "Two tokens per thread (U=2) and short chunks (many blocks, partial last chunk) compute the same attention (SIMT kernel)"
    monkeypatch.setattr(AK, 'MMA', False)
    monkeypatch.setattr(AK, 'U', 2); monkeypatch.setattr(AK, 'CH_MAX', 128); monkeypatch.setattr(AK, 'BLOCKS', 64)
    for name, kc, vc, B, Hkv, G, D, n in (E.CASES[0], E.CASES[4]):
        assert E.check(kc, vc, B, Hkv, G, D, n, True) <= 1e-4, name

@pytest.mark.parametrize('case', [c for c in E.CASES if c[0] in ('turbo:4', 'turbo:8/7', 'affine:3 g64 / affine:6 g32')], ids=lambda c: c[0])
def test_metal_layout(case):
    "The Metal source (value partials summed by warp shuffles first, for 32 KB of threadgroup memory) computes the same"
    name, kc, vc, B, Hkv, G, D, n = case
    assert E.check(kc, vc, B, Hkv, G, D, n, True, backend='metal') <= 1e-4, name

@pytest.mark.parametrize('scheme,dtype', [('turbo:4', 'float32'), ('turbo:4', 'float16'), ('affine:8,4', 'float16'), ('turbo:3', 'bfloat16'),
                                          ('calibrated', 'float16'), ('calibrated one-band keys', 'float16')])
def test_decode_steps_through_the_launchers(scheme, dtype, monkeypatch):
    """A cache's decode steps exactly as a GPU runs them, with `mx.fast.cuda_kernel` standing in for the emulator: the
    quantize kernel (turbo: model dtype in, float16 norms out) and the decode + combine kernels launched by the memoized
    launcher that decode steps take once the first one was verified. Each step's output matches the reference attention
    over the same stored codes, the stored codes match the reference quantizer, and the launcher served the later steps."""
    import warnings
    import mlx.core as mx
    import numpy as np
    from mlx_kvq import attention as A, packing as P
    from mlx_kvq.codecs import AffineCodec, codec_attention
    from mlx_kvq.qcache import CodecKVCache
    from mlx_kvq.turboquant import TurboQuantKVCache
    launched = []
    def recording(name, *a, **kw):
        k = E.cuda_kernel(name, *a, **kw)
        return lambda **call: launched.append(name) or k(**call)
    monkeypatch.setattr(mx.fast, 'cuda_kernel', recording, raising=False)
    for mod in (A, P): monkeypatch.setattr(mod, 'kernel_backend', lambda: 'cuda')
    for nm in ('_KERNELS', '_GUARDS', '_LAUNCHERS', '_OK'): monkeypatch.setattr(A, nm, {})
    for nm in ('_KERNELS', '_GUARDS', '_QREADY', '_QLAUNCH', '_PGUARDS', '_PREADY', '_QPLAUNCH'): monkeypatch.setattr(P, nm, {})
    served = []
    E.TINY_INPUTS.clear()
    orig_fast = A._fast_final
    monkeypatch.setattr(A, '_fast_final', lambda *a: served.append(orig_fast(*a)) or served[-1])
    dt = getattr(mx, dtype)
    B, Hkv, G, D, n0, steps = 1, 2, 4, 128, 200, 3
    if scheme == 'calibrated': cache = CodecKVCache(*E.calibrated_pair(D))   # auto:B's codecs: the final path's 'dense' finish
    elif scheme == 'calibrated one-band keys': cache = CodecKVCache(E.calibrated(3, 0, D, outliers=False), E.calibrated(6, 1, D))   # auto:B's tq3cs keys
    else: cache = TurboQuantKVCache(int(scheme[-1]), int(scheme[-1])) if scheme.startswith('turbo') else CodecKVCache(AffineCodec(8), AffineCodec(4))
    mx.random.seed(3)
    ks, vs = mx.random.normal((B, Hkv, n0 + steps, D)).astype(dt), mx.random.normal((B, Hkv, n0 + steps, D)).astype(dt)
    with warnings.catch_warnings():
        warnings.simplefilter('error')          # a fused kernel refused by its first-use check warns: fail here instead
        cache.update_and_fetch(ks[:, :, :n0], vs[:, :, :n0])
        for t in range(n0, n0 + steps):
            k, v = cache.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
            q = mx.random.normal((B, Hkv * G, 1, D)).astype(dt)
            out = cache.attend(q, k, v, scale=D ** -0.5)
            ref = codec_attention(q.astype(mx.float32), k, v, scale=D ** -0.5)
            assert out.dtype == dt and out.shape == ref.shape
            err = (mx.abs(out.astype(mx.float32) - ref).max() / mx.abs(ref).max()).item()
            assert err <= (1e-3 if dt == mx.float32 else 2e-3 + (2 ** -8 if dt == mx.bfloat16 else 0.0)), (scheme, dtype, t, err)   # bfloat16: the output's rounding
    assert served and all(s is not None for s in served[1:]) and sum(s is not None for s in served) == steps - 1
    assert not E.TINY_INPUTS, E.TINY_INPUTS   # no kernel input in MLX's small-block pool (`packing.device_constant`)
    if scheme == 'calibrated':   # the queries prepared by their own kernel (dense map), the output finished by the decode kernel (dense map)
        assert A._finish_kind(A.side_plan(cache.k_codec, D)) == 'dense' and any(nm.startswith('mlx_kvq_qmap') for nm in launched), set(launched)
    if scheme == 'calibrated one-band keys':   # the queries prepared in the decode kernel (`_query_kind`): no query kernel launched
        assert A._query_kind(A.side_plan(cache.k_codec, D)) == 'rot' and not any(nm.startswith('mlx_kvq_qmap') for nm in launched), set(launched)
    # calls of a few chunks (`AK.FOLD`): the decode kernel finished the attention itself, no combine kernel was launched
    assert AK.FOLD and not any(nm.startswith('mlx_kvq_decode_combine') for nm in launched), set(launched)
    # the same launcher with a mask (rotating caches pass one): the fused final path against its blockwise reference
    kp, vp = A.side_plan(cache.k_codec, D), A.side_plan(cache.v_codec, D)
    n = k.n_quantized
    full = A._full_mask(mx.random.uniform(shape=(B, 1, 1, n)) > 0.3, B, Hkv, G, 1, n)
    out = A.fused_decode(q, kp, vp, k.parts, v.parts, full, n, D ** -0.5)
    ref = A._final_reference(q, kp, vp, k.parts, v.parts, full, n, D ** -0.5)
    assert A._agree_final(out, ref) is None, A._agree_final(out, ref)
    if scheme.startswith('turbo'):               # codes written by the emulated quantize kernel = the reference quantizer's
        # keys and values of every update in one launch (the pair kernel), never one launch per side
        assert 'mlx_kvq_quantize_pack_pair' in launched and 'mlx_kvq_quantize_pack' not in launched, set(launched)
        for side, x, parts in ((cache.k_codec, ks, cache.keys), (cache.v_codec, vs, cache.values)):
            ref_w, ref_n = P.quantize_pack_ref(x, side.rotation, side.codebook)
            w, nrm = parts[0][..., :n0 + steps, :], parts[1][..., :n0 + steps, :]
            assert nrm.dtype == mx.float16 and mx.array_equal(nrm, ref_n).item()
            b = side.bits
            same = (P.unpack_ref(w, b, D) == P.unpack_ref(ref_w, b, D)).astype(mx.float32).mean().item()
            assert same > 0.999, same


@pytest.mark.parametrize('dtype', ['float16', 'float32'])
def test_pair_quantize_kernel(dtype, monkeypatch):
    """Keys and values of one update quantized in one launch (`packing.quantize_pack_pair`, CUDA): the emulated pair
    kernel writes the reference quantizer's codes and norms for both sides (rows of each side spread over blocks that
    straddle the side boundary: 3 x 5 rows per side, 4 warps per block); a pair kernel that gives the values the keys'
    signs is refused by its first-use check, with one warning, and the reference answers."""
    import warnings
    import mlx.core as mx
    from mlx_kvq import packing as P
    from mlx_kvq.codebook import sphere_codebook
    from mlx_kvq.rotation import get_rotation
    monkeypatch.setattr(mx.fast, 'cuda_kernel', E.cuda_kernel, raising=False)
    monkeypatch.setattr(P, 'kernel_backend', lambda: 'cuda')
    dt = getattr(mx, dtype)
    mx.random.seed(5)
    xk, xv = mx.random.normal((3, 5, 1, 128)).astype(dt), (3 * mx.random.normal((3, 5, 1, 128))).astype(dt)
    rk, rv, cb = get_rotation(128, 0), get_rotation(128, 1), sphere_codebook(128, 4)
    for src, ok in ((P._Q_PAIR_CUDA, True), (P._Q_PAIR_CUDA.replace('sv ? sgv : sgk', 'sv ? sgk : sgv'), False)):
        for nm in ('_KERNELS', '_PGUARDS', '_PREADY', '_QPLAUNCH'): monkeypatch.setattr(P, nm, {})
        monkeypatch.setattr(P, '_Q_PAIR_CUDA', src)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter('always')
            (wk, nk), (wv, nv) = P.quantize_pack_pair(xk, rk, cb, xv, rv, cb)
        assert (len(got) == 0) == ok, [str(w.message) for w in got]
        for w, nm, x, r in ((wk, nk, xk, rk), (wv, nv, xv, rv)):
            rw, rn = P.quantize_pack_ref(x, r, cb)
            assert mx.array_equal(nm, rn).item() and (P.unpack_ref(w, 4, 128) == P.unpack_ref(rw, 4, 128)).astype(mx.float32).mean().item() > 0.999
        if ok:   # verified: later calls launch the pair kernel directly
            assert P._PREADY and P.quantize_pack_pair(xk, rk, cb, xv, rv, cb)[1][1].shape == (3, 5, 1, 1)
        else:
            assert 'pair kernel' in str(got[0].message)

def test_included_bodies_emulated(monkeypatch, tmp_path):
    """The emulated launches take the bodies as `packing.INCLUDE` gives them to MLX (a line naming the strides, then the
    `#include` of the written body): right answers, bodies written; without the strides line the kernel cannot build"""
    from mlx_kvq import packing as P
    monkeypatch.setenv('MLX_KVQ_KERNEL_DIR', str(tmp_path))
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    assert P.INCLUDE and E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D)
    assert any(p.suffix == '.cuh' for p in tmp_path.iterdir())
    orig = P._included
    monkeypatch.setattr(P, '_included', lambda *a: orig(*a).split('\n', 1)[1])
    with pytest.raises(RuntimeError, match='strides'):
        E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True)


STAGED = [('turbo:4', TurboCodec(4), TurboCodec(4, seed=1), 1, 2, 4, 128, 300, 8),
          ('turbo:3/4 d64 G8 B2', TurboCodec(3), TurboCodec(4, seed=1), 2, 2, 8, 64, 300, 8),   # key and value widths apart
          ('turbo:4 d256', TurboCodec(4), TurboCodec(4, seed=1), 1, 1, 4, 256, 200, 8),             # the embedded Gemma's head dim
          ('turbo:2 G16 d64', TurboCodec(2), TurboCodec(2, seed=1), 1, 1, 16, 64, 300, 4),          # 16 query heads (SIMT kernel): the smallest score buffer
          ('affine:8,4', AffineCodec(8), AffineCodec(4), 1, 2, 4, 128, 300, 8),                      # affine sides: quantized as mx.quantize does
          ('affine:4 g32 d64 G8 B2', AffineCodec(4, 32), AffineCodec(4, 32), 2, 2, 8, 64, 300, 8),
          ('affine:3 g128 / turbo:4 d256', AffineCodec(3, 128), TurboCodec(4, seed=1), 1, 1, 4, 256, 200, 8),   # one side of each kind
          ('calibrated 4o/4o d64', None, None, 1, 2, 4, 64, 300, 8),                                          # calibrated sides (auto:B's): the pair kernel's arithmetic
          ('calibrated 4o/4o d256', None, None, 1, 1, 4, 256, 200, 4),                                        # Gemma's global layers (a stage of 4 fits since 2026-12-02)
          ('calibrated 4o keys / affine:8 d128 G8 B2', 'cal-affine', None, 2, 1, 8, 128, 300, 8),             # a calibrated side beside an affine one (auto:B on Llama shapes)
          ('turbo:4 keys / calibrated 5o values', 'turbo-cal', None, 1, 2, 4, 128, 300, 8),
          ('calibrated one-band 2 keys / 6o values d64', 'cal1', None, 1, 2, 4, 64, 300, 8)]                # keys prepared in the kernel (`_query_kind`), the staged ones' queries too

@pytest.mark.parametrize('case', STAGED, ids=[c[0] for c in STAGED])
def test_staged_tokens_merged_by_the_fold(case):
    """The folded decode kernel that also quantizes and attends a cache's staged tokens (`CodecKVCache.stage`): one
    staged token, a full stage, and none (the tail kernel with meta T = 0), against the blockwise reference over the
    same quantized and staged tokens (quantized by their codecs); and, in float32, against the same kernel over the
    staged tokens quantized into the storage: the same answer up to float32 rounding, so the kernel's codes and norms
    are those the quantize kernels store"""
    name, kc, vc, B, Hkv, G, D, n, cap = case
    kc, vc = _pair(kc, vc, D)
    for T in (1, cap, 0):
        err = E.check_staged(kc, vc, B, Hkv, G, D, n, T, cap)
        assert err is not None and err <= E.final_tolerance(kc, vc, G, D), (name, T, err)
    err = E.check_staged(kc, vc, B, Hkv, G, D, n, cap // 2 + 1, cap, dtype=mx.float32, stored=True)
    assert err is not None and err <= 2e-6, (name, err)
    for T in (1, cap):   # the writing call: the step's token attended as the T-th and written into the buffers it returns
        err = E.check_staged(kc, vc, B, Hkv, G, D, n, T, cap, write=True)
        assert err is not None and err <= E.final_tolerance(kc, vc, G, D), (name, 'write', T, err)

def _tail_mutator(monkeypatch, *calls):
    "wrong(old, new): `_tail_source` with one line changed from now on; the line must be in its source for one of `calls`' arguments (a mutation that misses fails here)"
    orig = AK._tail_source
    base = ''.join(orig(*c) for c in calls)
    def wrong(old, new):
        assert old in base, old
        monkeypatch.setattr(AK, '_tail_source', lambda *a: orig(*a).replace(old, new))
    return wrong

def test_staged_merge_catches_a_wrong_kernel(monkeypatch):
    """The staged checks fail when the kernel drops the staged tokens' sums from the merge, weighs every staged token by
    the first one's codes, or keeps the staged norms in float32 (the storage holds them in float16: only the check
    against the stored tokens sees that); and, for the writing call, when it writes another head's token into the
    buffers, or quantizes the staged keys from the buffers it was given (without the step's token)"""
    _, kc, vc, B, Hkv, G, D, n, cap = STAGED[0]
    wrong = _tail_mutator(monkeypatch, (128, 128, 128, 8, 4, 4), (128, 128, 128, 8, 4, 4, True))
    stored, write = dict(dtype=mx.float32, stored=True), dict(write=True)
    for old, new, T, kw, bound in [('tm[2 * g + 1] = b * inv;', 'tm[2 * g + 1] = 0.0f;', 4, {}, 1e-2), ('cev[tvc[t * TV + e]]', 'cev[tvc[e]]', 4, {}, 1e-2),
                                   ('__half2float(__float2half_rn(nrm))', 'nrm', 5, stored, 2e-5),
                                   # the writing call: the step's token read from another head's row (the buffers returned wrong: an infinite
                                   # error), or quantized from the buffers given (without it)
                                   ('const long nko = wb * nk_strides[0] + wh * nk_strides[1]', 'const long nko = wb * nk_strides[0]', 4, write, 1e30),
                                   ('const T* const xr = so + ', 'const T* const xr = ts + ', 4, write, 1e-2)]:
        wrong(old, new)
        assert E.check_staged(kc, vc, B, Hkv, G, D, n, T, 8, **kw) > bound, old

def test_calibrated_staged_merge_catches_a_wrong_kernel(monkeypatch):
    """The staged checks of calibrated sides fail when the kernel's staged key scores leave out their bands' gammas,
    stores a band's codes over another's, keeps the staged gammas in float32 (the pair kernel stores them in float16:
    only the check against the stored tokens sees that), or weighs a staged value's second band by the first band's gamma"""
    kc, vc = E.calibrated_pair(64)
    B, Hkv, G, D, n = 1, 2, 4, 64, 300
    wrong = _tail_mutator(monkeypatch, (96, D, D, 8, A._tail_spec(A.side_plan(kc, D)), A._tail_spec(A.side_plan(vc, D))))
    stored = dict(dtype=mx.float32, stored=True)
    assert E.check_staged(kc, vc, B, Hkv, G, D, n, 5, 8, **stored) <= 2e-6
    for old, new, T, kw, bound in [('s += sb * tn[t * KN + 0];', 's += sb;', 4, {}, 1e-2),
                                   ('(tkc + t * TD)[8 + r] = (unsigned char)code;', '(tkc + t * TD)[r] = (unsigned char)code;', 4, {}, 1e-2),
                                   ('(tn + t * KN)[0] = __half2float(__float2half_rn(', '(tn + t * KN)[0] = ((', 5, stored, 2e-6),
                                   ('tn[TC * KN + t * VN + 1]', 'tn[TC * KN + t * VN + 0]', 4, {}, 1e-2)]:
        wrong(old, new)
        assert E.check_staged(kc, vc, B, Hkv, G, D, n, T, 8, **kw) > bound, old

@pytest.mark.parametrize('scheme', ['turbo:4', 'affine:4', 'calibrated 3o/6o'])
def test_staged_decode_steps(scheme, monkeypatch):
    """A staging cache's decode steps as a GPU runs them (`CodecKVCache.stage` = 3, turbo:4 / affine:4 / calibrated, float16) beside a cache
    that quantizes every step's token: the first step quantizes (no decode call verified yet, `stage_capacity` 0), then
    each token goes to the staging buffers and a full stage is quantized by one pair launch at the next step; every
    step after the second (which verifies the staged kernel) is served by the memoized launcher's folded kernel with the
    staged tokens; each output matches
    the other cache's within float32 rounding of a float16 output, and both caches hold the same codes throughout"""
    import warnings
    from mlx_kvq import packing as P, qcache as Q
    from mlx_kvq.turboquant import TurboQuantKVCache
    launched = []
    def recording(name, *a, **kw):
        k = E.cuda_kernel(name, *a, **kw)
        return lambda **call: launched.append(name) or k(**call)
    monkeypatch.setattr(mx.fast, 'cuda_kernel', recording, raising=False)
    for mod in (A, P, Q): monkeypatch.setattr(mod, 'kernel_backend', lambda: 'cuda')
    for nm in ('_KERNELS', '_GUARDS', '_LAUNCHERS', '_OK', '_STAGE_CAPS'): monkeypatch.setattr(A, nm, {})
    for nm in ('_KERNELS', '_GUARDS', '_QREADY', '_QLAUNCH', '_PGUARDS', '_PREADY', '_QPLAUNCH'): monkeypatch.setattr(P, nm, {})
    served, by_runner = [], []
    orig_fast, orig_runner = A._fast_final, Q.staged_runner
    monkeypatch.setattr(A, '_fast_final', lambda *a: served.append(orig_fast(*a)) or served[-1])
    def runner(*a):   # the stage's later steps: the launcher's run, held by the cache (`CodecKVCache.attend`)
        r = orig_runner(*a)
        return None if r is None else tuple((lambda *b, f=f: by_runner.append((i, f(*b))) or by_runner[-1][1]) for i, f in enumerate(r))
    monkeypatch.setattr(Q, 'staged_runner', runner)
    B, Hkv, G, D, n0, steps = 1, 2, 4, 128, 200, 6
    cache = (TurboQuantKVCache(4, 4) if scheme == 'turbo:4' else Q.CodecKVCache(AffineCodec(4), AffineCodec(4)) if scheme == 'affine:4'
             else Q.CodecKVCache(E.calibrated(3, 0, D), E.calibrated(6, 1, D))); cache.stage = 3
    plain = Q.CodecKVCache(cache.k_codec, cache.v_codec); plain.stage = 0
    mx.random.seed(5)
    ks, vs = mx.random.normal((B, Hkv, n0 + steps, D)).astype(mx.float16), mx.random.normal((B, Hkv, n0 + steps, D)).astype(mx.float16)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for c in (cache, plain): c.update_and_fetch(ks[:, :, :n0], vs[:, :, :n0])
        for t in range(n0, n0 + steps):
            q = mx.random.normal((B, Hkv * G, 1, D)).astype(mx.float16)
            k, v = cache.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
            T = 0 if t == n0 else (t - n0 - 1) % 3 + 1
            assert cache.n_quantized == t + 1 - T, t
            out = cache.attend(q, k, v, scale=D ** -0.5)
            assert T == 0 or k.staged is not None and k.staged.shape[-2] == 3 and k.tail.shape[-2] == T, t   # (read after the step's kernel ran)
            n_served, n_runner = len(served), len(by_runner)
            pk, pv = plain.update_and_fetch(ks[:, :, t:t + 1], vs[:, :, t:t + 1])
            ref = plain.attend(q, pk, pv, scale=D ** -0.5)
            err = (mx.abs(out.astype(mx.float32) - ref.astype(mx.float32)).max() / mx.abs(ref.astype(mx.float32)).max()).item()
            assert out.dtype == mx.float16 and err <= 2e-3, (t, err)
            assert all(mx.array_equal(x, y).item() for x, y in zip(cache.dequantized(), plain.dequantized())), t
            del served[n_served:], by_runner[n_runner:]    # (the other cache's calls)
    assert A.stage_capacity(cache.k_codec, cache.v_codec) == (16 if scheme.startswith('calibrated') else 32)   # (the calibrated quantization's scratch: 16 at d128, 4 query heads)
    # the first step verified the kernel and registered the launcher (no launcher to ask yet), the second the staged kernel
    # (the launcher declined: None); the rest by the launcher: a stage's first step looked up (`_fast_final`), its
    # other two by the run the cache holds for the stage
    assert served[0] is None and len(served) == 2 and all(s is not None for s in served[1:]), served
    # ... by its write (the kernel writes the step's token: `CodecKVCache._defer`), never by its read
    assert [i for i, _ in by_runner] == [1] * 3 and all(r is not None for _, r in by_runner), by_runner
    assert not any(nm.startswith('mlx_kvq_decode_combine') for nm in launched), set(launched)

def test_scalars_prefetched_raw(monkeypatch):
    """`RAWSC`: the lean loops' per-token scalars (turbo norms, affine scales and biases) prefetched as stored and
    converted where their tile is computed, with the loads k tiles ahead (PF = 2, register sets rotated or copied) or
    in the tile (PF = 0); and converted where loaded (RAWSC off): the same attention. The source says which it is.
    `VPRO` on and off (a chunk's first value tiles loaded before the warp's softmax, or after it) and `DYNLUT` (32 copies
    of the pair tables and the score buffer in dynamic shared memory, the emulated block given exactly the bytes the
    source names, which must hold them) on and off: the same too."""
    for name, kc, vc, B, Hkv, G, D, n in (FINAL[0], FINAL[2]):
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        entries = sum(1 << 2 * b.bits for p in ((kp,) if kc.bits == vc.bits else (kp, vp)) for b in p.bands if b.bits <= 4)   # pair-table entries (one table where both sides share it)
        for raw, pf, rot, vpro, dyn in ((True, 2, True, True, True), (True, 2, False, True, True), (True, 0, True, True, False),
                                        (False, 2, True, False, False), (True, 2, True, False, True)):
            for k, v in dict(RAWSC=raw, PF=pf, ROT=rot, VPRO=vpro, DYNLUT=dyn).items(): monkeypatch.setattr(AK, k, v)
            src = AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
            assert ('(float)KVQ_LDGS' in src) == (not raw) and ('decltype(KVQ_LDGS(' in src) == raw, (name, raw, pf, rot)
            if pf: assert (src.index('y00p0[') < src.index("this warp's softmax")) == vpro, (name, vpro)   # the first value tile's words
            if dyn: assert 'lane & 31' in src and AK.dynamic_shared_bytes(src) >= 4 * (32 * entries + AK._chmax(G) * G), name
            else: assert AK.dynamic_shared_bytes(src) == 0, name
            assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, raw, pf, rot, vpro, dyn)
    for k, v in dict(RAWSC=True, PF=2, ROT=True, VPRO=True, DYNLUT=True).items(): monkeypatch.setattr(AK, k, v)
    orig = AK._lean_loop   # not vacuous: a stage converting the norm of another register set (loaded for another tile) is caught
    monkeypatch.setattr(AK, '_lean_loop', lambda *a, **k: orig(*a, **k).replace("= (float)ga0p0;", "= (float)ga0p1;") if not k.get('split') else orig(*a, **k))
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2

def test_interleaved_value_pairs(monkeypatch):
    """`IL4`: the lean value loop's 4-bit turbo bands interleave each token pair's codes once per tile, so that every
    pair-table lookup is a tensor-core fragment register (no byte permutes of looked-up pairs): on and off the same
    attention (turbo:4, and the calibrated pair whose 4-bit bands sit beside 5-bit outlier bands), and the source says
    which it is. Not vacuous: an interleave that pairs a token with itself is caught."""
    for name, kc, vc, B, Hkv, G, D, n in [c for c in FINAL if c[0] in ('turbo:4', 'calibrated 5o/4o')]:
        kc, vc = _pair(kc, vc, D)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        for il in (True, False):
            monkeypatch.setattr(AK, 'IL4', il)
            src = AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
            assert ('uint32_t ie0[' in src) == (il and AK._lean_ok(kp, vp)), (name, il)   # the lean loops only (the calibrated pair's unaligned outlier bands take the earlier loops)
            assert AK._lean_ok(kp, vp) or name != 'turbo:4'
            assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, il)
    monkeypatch.setattr(AK, 'LEAN_ANY', True)   # the calibrated pair in the lean loops too: 4-bit bands beside 5-bit outlier bands
    name, kc, vc, B, Hkv, G, D, n = next(c for c in FINAL if c[0] == 'calibrated 5o/4o')
    kc, vc = _pair(kc, vc, D); kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    for il in (True, False):
        monkeypatch.setattr(AK, 'IL4', il)
        assert ('uint32_t ie0[' in AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))) == il, (name, il)
        assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, il)
    monkeypatch.setattr(AK, 'LEAN_ANY', False); monkeypatch.setattr(AK, 'IL4', True)
    orig = AK._lean_values
    def wrong(*a, **k):
        out = orig(*a, **k)
        f = lambda s: s.replace("| ((y1", "| ((y0")
        return tuple(f(x) for x in out) if isinstance(out, tuple) else f(out)
    monkeypatch.setattr(AK, '_lean_values', wrong)
    name, kc, vc, B, Hkv, G, D, n = FINAL[0]
    assert "| ((y0" in AK._decode_source(A.side_plan(kc, D), A.side_plan(vc, D), G, 'cuda', 'rot', fold='rot')
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2

def test_affine_codes_by_the_magic_number(monkeypatch):
    """`AMAGIC`: the lean loops make 4- and 8-bit affine codes halves by or-ing them into 1024.0's mantissa (no pair-table
    lookups, no integer conversions, their tables not filled), and the dequantized halves are the table's bit for bit:
    where only the values are affine (`auto:B`'s calibrated keys beside 8-bit affine values) the emulated kernel's
    output is the same array with it on and off. Not vacuous: with it off the source has no magic at all"""
    monkeypatch.setattr(AK, 'VSCB', False)   # the magic-number value loop (VSCB takes these values' codes as subnormal halves instead)
    kc, vc, D, G, n = E.calibrated_pair(64)[0], AffineCodec(8), 64, 4, 300
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    mx.random.seed(3)
    q = mx.random.normal((1, 2, G, 1, D)) * D ** -0.5
    kparts, vparts = kc.encode(mx.random.normal((1, 2, n, D))), vc.encode(mx.random.normal((1, 2, n, D)))
    mask = mx.random.uniform(shape=(1, 1, 1, 1, n)) > 0.3
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(AK, 'AMAGIC', on)
        src = AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
        assert ('0x64646464u' in src) == on
        outs[on] = E.emulate(q, kp, vp, kparts, vparts, mask, n)
    assert all(mx.array_equal(a, b) for a, b in zip(outs[True], outs[False]))
    monkeypatch.setattr(AK, 'AMAGIC', True)
    a4 = A.side_plan(AffineCodec(4), 128)
    src = AK._decode_source(a4, a4, 4, 'cuda', half=True)
    assert 'KVQ_MAGIC(r_, ' in src and 'klut[0 + i] = x' not in src   # 4-bit: one LOP3 a register, the shared pair table left unfilled
    monkeypatch.setattr(AK, 'AMAGIC', False)
    src = AK._decode_source(a4, a4, 4, 'cuda', half=True)
    assert 'KVQ_MAGIC(r_, ' not in src and 'klut[0 + i] = x' in src

def test_weights_high_and_low_parts_in_one_product(monkeypatch):
    """`VPACK`: with at most 4 query heads per KV head the value loop's B operand carries the weights' high parts in
    columns 0-3 and their low parts in columns 4-7, one tensor-core product per fragment instead of two. On the emulator
    the same attention as the reference for turbo, affine (magic-number) and calibrated values (the tables' low parts,
    two products instead of three), folded with each block's chunks merged (`BMERGE`, the carried accumulators rescaled
    per column's head) and not, masked and not, 2 and 4 query heads; 8 query heads keep two products. Not vacuous: the
    low parts' columns added from the wrong lanes, or rescaled with another head's factor, are caught"""
    monkeypatch.setattr(AK, 'VPACK', True); monkeypatch.setattr(AK, 'VSCB', False)   # affine values here by the magic number and VPACK's packed weights (VSCB: scaled weights, `test_affine_value_scales_in_the_weights`)
    cases = [c for c in E.CASES if c[0] in ('turbo:4', 'affine:8,4', 'affine:4 g32 / affine:4, 2 heads', 'calibrated 5o/4o')]
    for name, kc, vc, B, Hkv, G, D, n in cases:
        kc, vc = _pair(kc, vc, D)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        if not AK._lean_ok(kp, vp): monkeypatch.setattr(AK, 'LEAN_ANY', True)
        src = AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
        assert 'const uint32_t bp0 = gid < 4 ? bh0 : bl0' in src and ', a, bl0, bl1)' not in src, name
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
        monkeypatch.setattr(AK, 'LEAN_ANY', AK.LEAN_ANY)
    monkeypatch.setattr(AK, 'LPCH_MIN', 0); monkeypatch.setattr(AK, 'LPCH', 3)   # each block carries its softmax over 2-3 chunks
    name, kc, vc, B, Hkv, G, D, n = E.CASES[0]
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    assert AK._bmerge_ok(kp, vp, G) and "(2 * tig & 3)" in AK._decode_source(kp, vp, G, 'cuda', 'rot', fold='rot')
    for masked in (False, True):
        assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
    a8, t256 = A.side_plan(AffineCodec(4), 64), A.side_plan(TurboCodec(4), 256)
    assert 'bp0' not in AK._decode_source(a8, a8, 8, 'cuda', half=True) and 'bp0' in AK._decode_source(a8, a8, 4, 'cuda', half=True)
    assert 'bp0' not in AK._decode_source(t256, t256, 4, 'cuda', 'rot', fold='rot')   # (head dim 256: not where it spilled)
    monkeypatch.setattr(AK, 'VPACK_LB', AK.LB)   # ... unless asked for kernels of few blocks an SM (here: the emulator's, compiled for LB)
    assert 'bp0' in AK._decode_source(t256, t256, 4, 'cuda', 'rot', fold='rot')
    k256, v256 = TurboCodec(4), TurboCodec(4, seed=1)
    for masked in (False, True):   # head dim 256: values of 8 slices, each chunk's columns summed by shuffles (no BMERGE there)
        assert E.check_final(k256, v256, 1, 1, 4, 256, 600, masked, fold=True) <= E.final_tolerance(k256, v256, 4, 256), masked
    monkeypatch.setattr(AK, 'VPACK_LB', 0)
    orig_v, orig_w = AK._lean_values, AK._warp_softmax
    def wrong(*a, **k):
        out = orig_v(*a, **k)
        f = lambda s: s.replace("KVQ_SHFL(acc[m_][e], 2)", "KVQ_SHFL(acc[m_][e], 1)")
        return tuple(f(x) for x in out) if isinstance(out, tuple) else f(out)
    monkeypatch.setattr(AK, '_lean_values', wrong)
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2
    monkeypatch.setattr(AK, '_lean_values', orig_v)
    # the low parts are below float16's output precision here: made equal to the high parts (every weight counted twice,
    # the same wrong output with and without VPACK), a low column rescaled with another head's factor shows
    split = AK._split
    monkeypatch.setattr(AK, '_split', lambda x0, x1, hi, lo: split(x0, x1, hi, None) + (f" uint32_t {lo} = {hi};" if lo else ""))
    mx.random.seed(0)
    q = mx.random.normal((B, Hkv * G, 1, D)).astype(mx.float16)
    kparts, vparts = kc.encode(mx.random.normal((B, Hkv, n, D))), vc.encode(mx.random.normal((B, Hkv, n, D)))
    def out(vpack, join=orig_w):
        monkeypatch.setattr(AK, 'VPACK', vpack); monkeypatch.setattr(AK, '_warp_softmax', join)
        return E.emulate_fold(q, kp, vp, kparts, vparts, None, n, D ** -0.5).astype(mx.float32)
    two = out(False)
    rel = lambda a: (mx.abs(a - two).max() / mx.abs(two).max()).item()
    assert rel(out(True)) <= 2e-3
    assert rel(out(True, lambda *a, **k: orig_w(*a, **k).replace("(2 * tig & 3)", "2 * tig"))) > 1e-2

def test_affine_keys_on_integer_tensor_cores(monkeypatch):
    """`AINT8` (on by default since it was timed on an H200, 2026-11-30): 4- and 8-bit affine keys as unsigned bytes times the query as two
    signed bytes of a 16-bit fixed point on the integer tensor cores, the group scales and biases applied after the
    exact int32 sums: on the emulator the same attention as the reference for two group slots (d128, group 64; 8-bit
    keys), one slot (d64; 4-bit keys), 2 query heads, folded with each block's chunks merged, masked and not; where it
    does not apply (group 32 at d128, 8 query heads) the source keeps the half-precision products. Not vacuous: the two
    slots not summed, or the query split into bytes without rounding its high byte, are caught"""
    monkeypatch.setattr(AK, 'AINT8', True)
    cases = [c for c in E.CASES if c[0] in ('affine:8,4', 'affine:4 / affine:8 g32')] + [('affine:4, 2 heads', AffineCodec(4), AffineCodec(4), 1, 2, 2, 128, 300)]
    for name, kc, vc, B, Hkv, G, D, n in cases:
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        assert AK._aint8(kp, G) and 'KVQ_IMMA(ih, a, qb[0], qb[1])' in AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp)), name
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
    g32, a64 = A.side_plan(AffineCodec(4, 32), 128), A.side_plan(AffineCodec(4), 64)
    assert AK._aint8(g32, 4) is None and AK._aint8(a64, 8) is None and AK._aint8(a64, 4) == (16, 1)
    monkeypatch.setattr(AK, 'LPCH_MIN', 0); monkeypatch.setattr(AK, 'LPCH', 3)   # each block carries its softmax over 2-3 chunks
    name, kc, vc, B, Hkv, G, D, n = cases[0]
    for masked in (False, True):
        assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
    band, prep = AK._aint8_band, AK._aint8_prep
    monkeypatch.setattr(AK, '_aint8_band', lambda *a: band(*a).replace("p + KVQ_SHFL(p, 2)", "p"))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2
    monkeypatch.setattr(AK, '_aint8_band', band)
    monkeypatch.setattr(AK, '_aint8_prep', lambda *a: prep(*a).replace("hi = (x + 128) >> 8", "hi = x >> 8"))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2

def test_affine_value_scales_in_the_weights(monkeypatch):
    """`VSCB` (off by default until timed on a GPU): affine values of 4 / 8 bits as subnormal halves c 2^-24 (a mask or a
    byte permute, no fused multiply-adds), each token's group scale in the weights (B columns: group slot, head), the
    biases by one product a tile, the codes' sums x 2^24 plus the biases at the end, rows of group slot 1 moved from
    columns 4-7 by one shuffle. On the emulator the same attention as the reference for two group slots (d128 g64; d64
    g32 with 8-bit values; 2 query heads) and one (d64 g64), folded, masked and not; unfolded; a block carrying its
    softmax over 2-3 chunks. Not vacuous: the slot shuffle, the biases, the 2^24 or the biases' rescale across chunks
    left out are each caught; where it does not apply (group 32 at d128, 8 query heads) the source has no biases' product"""
    monkeypatch.setattr(AK, 'VSCB', True)
    cases = [c for c in E.CASES if c[0] in ('affine:8,4', 'affine:4 / affine:8 g32', 'affine:4 g32 / affine:4, 2 heads')] + [('affine:4 d64 g64', AffineCodec(4), AffineCodec(4), 1, 1, 4, 64, 300)]
    slots = []
    for name, kc, vc, B, Hkv, G, D, n in cases:
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        slots.append(AK._vscb(vp, G)[1])
        assert 'KVQ_MMA(zacc, az, bz0, bz1)' in AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp)), name
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
    assert slots == [True, True, True, False], slots
    g32, a128 = A.side_plan(AffineCodec(4, 32), 128), A.side_plan(AffineCodec(4), 128)
    assert AK._vscb(g32, 4) is None and AK._vscb(a128, 8) is None and AK._vscb(a128, 4) == (16, True)
    name, kc, vc, B, Hkv, G, D, n = cases[0]
    for masked in (False, True):
        assert E.check(kc, vc, B, Hkv, G, D, n, masked) <= E.tolerance(kc, vc, G, D), masked
    monkeypatch.setattr(AK, 'LPCH_MIN', 0); monkeypatch.setattr(AK, 'LPCH', 3)   # each block carries its softmax over 2-3 chunks
    for masked in (False, True):
        assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), masked
    ws, lv = AK._warp_softmax, AK._lean_values
    monkeypatch.setattr(AK, '_warp_softmax', lambda *a, **k: ws(*a, **k).replace(' zacc[0] *= f0;', ''))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2
    monkeypatch.setattr(AK, '_warp_softmax', ws)
    for old, new in (("v_ = gid >= 4 ? o_ : v_;", ""), ("+ zacc[e]", ""), ("16777216.0f * ", "")):
        def wrong(*a, old=old, new=new, **k):
            out = lv(*a, **k); f = lambda s: s.replace(old, new)
            return tuple(f(x) for x in out) if isinstance(out, tuple) else f(out)
        monkeypatch.setattr(AK, '_lean_values', wrong)
        assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) > 1e-2, old
    monkeypatch.setattr(AK, '_lean_values', lv)

def test_parked_accumulators(monkeypatch):
    """`PARK` (off: 5 blocks an SM with it timed slower than 4 without, H200, `bench/h200_20261201a/lbpark/`): a block carrying its softmax over 2-3 chunks (BMERGE) parks its value
    accumulators in shared memory through each chunk's key loop and loads them back before the softmax rescales them:
    the same attention as the reference for a turbo pair, affine 8/4 bits (VSCB: the biases' accumulator parked too) and
    a calibrated pair, masked and not; the parked floats in static shared memory too (DYNLUT off). Not vacuous: a park that skips its stores (the loads then give what an earlier
    chunk left, or nothing) and one that leaves VSCB's biases out are caught"""
    monkeypatch.setattr(AK, 'PARK', True); monkeypatch.setattr(AK, 'LPCH_MIN', 0)
    cases = [c for c in FINAL if c[0] in ('turbo:4', 'affine:8,4', 'calibrated 5o/4o')]
    assert len(cases) == 3
    for lpch, (name, kc, vc, B, Hkv, G, D, n) in zip((2, 3, 2), cases):
        kc, vc = _pair(kc, vc, D)
        monkeypatch.setattr(AK, 'LPCH', lpch)
        kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
        src = AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
        pk = AK._park_floats(vp, G, True)
        assert AK._bmerge_ok(kp, vp, G) and f'reinterpret_cast<float*>(kvq_dyn)[{AK.NT} + tid]' in src and 'PARK: back' in src, name   # first in the dynamic shared memory (DYNLUT)
        assert pk == 4 * AK._vsteps(vp) + 4 * bool(AK._vscb(vp, G)), name   # 4 floats a 16-dim step (`HSTEP`)
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
    monkeypatch.setattr(AK, 'DYNLUT', False)   # the tables and the parked floats in static shared memory
    name, kc, vc, B, Hkv, G, D, n = cases[0]
    assert f'KVQ_SHARED float park[{AK._park_floats(A.side_plan(vc, D), G, True) * AK.NT}];' in AK._decode_source(A.side_plan(kc, D), A.side_plan(vc, D), G, 'cuda', A._finish_kind(A.side_plan(kc, D)), fold=A._finish_kind(A.side_plan(vc, D)))
    assert E.check_final(kc, vc, B, Hkv, G, D, n, True, fold=True) <= E.final_tolerance(kc, vc, G, D)
    monkeypatch.setattr(AK, 'DYNLUT', True)
    orig = AK._park
    name, kc, vc, B, Hkv, G, D, n = cases[1]   # affine:8,4: accumulators and the biases' one
    monkeypatch.setattr(AK, 'LPCH', 3)
    for wrong in (lambda MT, z, store, base: '' if store else orig(MT, z, store, base),
                  lambda MT, z, store, base: re.sub(r'\S+\[\d+ \+ tid\] = zacc\[\d\];', '', orig(MT, z, store, base)) if store else orig(MT, z, store, base)):
        monkeypatch.setattr(AK, '_park', wrong)
        assert wrong(2, True, True, 'p') != orig(2, True, True, 'p')   # (the mutation applies)
        assert not E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= 1e-2
    monkeypatch.setattr(AK, '_park', orig)
    monkeypatch.setattr(AK, 'PARK', False)
    assert 'PARK' not in AK._decode_source(*[A.side_plan(c, D) for c in (kc, vc)], G, 'cuda', A._finish_kind(A.side_plan(kc, D)), fold=A._finish_kind(A.side_plan(vc, D)))

def test_mask_known_at_compile_time(monkeypatch):
    """`MASKC` (on by default since it was timed on an H200, 2026-11-30): the tensor-core kernels take whether a call has a mask from the
    mask input's type (an int32 placeholder without one, float32 with one), so an unmasked call's kernel holds no mask
    code: on the emulator, which declares each input by its dtype as MLX does, the same attention as the reference for
    masked and unmasked calls of turbo and affine codes, folded and not. Not vacuous: a kernel that takes every call as
    unmasked is caught on the masked ones"""
    monkeypatch.setattr(AK, 'MASKC', True)
    cases = [c for c in E.CASES if c[0] in ('turbo:4', 'affine:8,4')]
    for name, kc, vc, B, Hkv, G, D, n in cases:
        assert '(decltype(+*mask))0.5f' in AK._decode_source(A.side_plan(kc, D), A.side_plan(vc, D), G, 'cuda', A._finish_kind(A.side_plan(kc, D)), fold=A._finish_kind(A.side_plan(vc, D)))
        for masked in (False, True):
            assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, masked)
            assert E.check(kc, vc, B, Hkv, G, D, n, masked) <= E.tolerance(kc, vc, G, D), (name, masked)
    head = AK._mma_head
    monkeypatch.setattr(AK, '_mma_head', lambda *a, **k: head(*a, **k).replace("(decltype(+*mask))0.5f != 0.0f", "false"))
    name, kc, vc, B, Hkv, G, D, n = cases[0]
    assert E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= E.final_tolerance(kc, vc, G, D)
    assert E.check_final(kc, vc, B, Hkv, G, D, n, True, fold=True) > 1e-2

def test_float4_softmax(monkeypatch):
    """`SCV4` (on): where G is a multiple of 4 and the score buffer 16-byte aligned, the lean kernels' warp softmax reads
    a token's scores and writes its weights four heads a float4. The same attention as the reference for 4 query heads a
    KV head (turbo:4, affine:8,4) and 8 (turbo:4: two float4 a token), the softmax carried across a block's chunks (BMERGE)
    and not, masked and not; kernels of 2 heads a KV head keep the 4-byte accesses, and `_sc4` refuses a dynamic buffer
    at a word offset not a multiple of 4 (16 bytes). Not vacuous: a weight written to the wrong head's lane of the float4, or the weights not
    written back, is caught. FEXP's `__expf` (the CUDA macro; the emulator's exp is the C library's) is checked on a GPU
    (`bench/check_fused_cuda.py`); here only that the macro follows the knob."""
    monkeypatch.setattr(AK, 'LPCH_MIN', 0)
    vec = 'reinterpret_cast<const float4*>(sc + t * G + g)'
    assert AK._sc4(4, None) and AK._sc4(8, 4096) and not AK._sc4(4, 4098) and not AK._sc4(2, None) and not AK._sc4(6, None)
    cases = [c for c in FINAL if c[0] in ('turbo:4', 'affine:8,4')] + [('turbo:4, 8 heads', TurboCodec(4), TurboCodec(4, seed=1), 1, 1, 8, 128, 300)]
    assert [c[5] for c in cases] == [4, 4, 8]
    for bmerge in (True, False):
        monkeypatch.setattr(AK, 'BMERGE', bmerge)
        for name, kc, vc, B, Hkv, G, D, n in cases:
            kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
            src = AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
            assert AK._wsm_ok(sum(AK._side_layout(vp)[0]), G) and src.count(vec) == 2 and ('running max and sum' in src) == AK._bmerge_ok(kp, vp, G), (name, bmerge)
            for masked in (False, True):
                assert E.check_final(kc, vc, B, Hkv, G, D, n, masked, fold=True) <= E.final_tolerance(kc, vc, G, D), (name, bmerge, masked)
    monkeypatch.setattr(AK, 'BMERGE', True)
    two = [c for c in E.CASES if c[0] == 'affine:4 g32 / affine:4, 2 heads'][0]
    assert vec not in AK._decode_source(A.side_plan(two[1], 128), A.side_plan(two[2], 128), 2, 'cuda', 'plain', fold='plain')
    name, kc, vc, B, Hkv, G, D, n = cases[0]
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    monkeypatch.setattr(AK, 'SCV4', False)
    assert vec not in AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))
    monkeypatch.setattr(AK, 'SCV4', True)
    orig = AK._softmax_pass
    for wrong in (lambda w, v4: orig(w, v4).replace('l[g + 3] += s4.w;', 'l[g + 3] += s4.w; s4.w = s4.z;'),
                  lambda w, v4: orig(w, v4).replace(' *reinterpret_cast<float4*>(sc + t * G + g) = s4;', '')):
        monkeypatch.setattr(AK, '_softmax_pass', wrong)
        assert wrong('cm', True) != orig('cm', True)   # (the mutation applies)
        assert not E.check_final(kc, vc, B, Hkv, G, D, n, False, fold=True) <= 1e-2
    monkeypatch.setattr(AK, '_softmax_pass', orig)
    head = lambda: AK._prelude('cuda')
    dec = lambda: AK._decode_source(kp, vp, G, 'cuda', A._finish_kind(kp), fold=A._finish_kind(vp))   # the decode kernel takes its macros from `_prelude`
    assert '#define KVQ_EXP(x) __expf(x)' in head() and '#define KVQ_EXP(x) __expf(x)' in dec()
    monkeypatch.setattr(AK, 'FEXP', False)
    assert '#define KVQ_EXP(x) expf(x)' in head() and '__expf' not in head() and '__expf' not in dec()


BUTTERFLY = [c for c in STAGED if c[1] == 'cal1'] + [('calibrated one-band 3 / one-band 5 d128 G8 B2', 'cal1both', None, 2, 1, 8, 128, 300, 8)]

@pytest.mark.parametrize('wht', [True, False], ids=['butterflies', 'dense'])
@pytest.mark.parametrize('case', BUTTERFLY, ids=[c[0] for c in BUTTERFLY])
def test_staged_calibrated_tokens_by_each_rotation(monkeypatch, case, wht):
    """With `calibrated.CAL_WHT` (the default: a band whose rotation is one Walsh-Hadamard block rotated by in-warp
    butterflies) and without it (the dense product), the decode kernel's staged calibrated tokens, quantized by the pair
    kernel's text, still attend as the reference's within the final tolerance, and as the same kernel over those tokens
    stored by the (emulated) pair kernel up to float32 rounding: the staged codes are the stored ones"""
    from mlx_kvq import calibrated as Cal
    monkeypatch.setattr(Cal, 'CAL_WHT', wht)
    monkeypatch.setattr(A, '_KERNELS', {})          # kernels built under the knob
    made = []
    orig = Cal._cal_rotate_code
    monkeypatch.setattr(Cal, '_cal_rotate_code', lambda n, *a: made.append(Cal._cal_wht(n)) or orig(n, *a))
    name, kc, vc, B, Hkv, G, D, n, cap = case
    kc, vc = (E.calibrated(3, 0, D, outliers=False), E.calibrated(5, 1, D, outliers=False)) if kc == 'cal1both' else _pair(kc, vc, D)
    for T in (1, cap):
        err = E.check_staged(kc, vc, B, Hkv, G, D, n, T, cap)
        assert err is not None and err <= E.final_tolerance(kc, vc, G, D), (name, T, err)
    assert made and any(made) == wht                # the staged tokens' text took the butterflies, or none
    err = E.check_staged(kc, vc, B, Hkv, G, D, n, cap // 2 + 1, cap, dtype=mx.float32, stored=True)
    assert err is not None and err <= 2e-6, (name, err)
