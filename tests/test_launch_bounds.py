"""The CUDA decode kernels' launch bounds follow each call's blocks (`attention_kernels._lb`): a call of few blocks (one
KV head at any length: Gemma 3 270M / 1B) runs a variant compiled for LB_FEW resident blocks per SM (registers up to
255, no spills), every other call the LB variant. Checked through the launcher exactly as decode steps use it, with a
stand-in for `mx.fast.cuda_kernel` that records what each launch was built with (nothing runs: no GPU here)."""
import re, sys
from pathlib import Path
import mlx.core as mx
import pytest
from mlx_kvq import attention as A, attention_kernels as AK
from mlx_kvq.turbo_codec import TurboCodec

sys.path.insert(0, str(Path(__file__).parent))
from kernel_emulator import calibrated_pair   # the codec kinds of auto:B (nothing here is emulated)


def test_lb_rule():
    "LB_FEW up to WAVE x LB_FEW / LB blocks (264 with the defaults), LB beyond; either knob at 0, or LB_FEW >= LB: LB"
    assert (AK.LB, AK.LB_FEW, AK.WAVE) == (4, 2, 528)
    assert AK._lb(1) == AK._lb(256) == AK._lb(264) == 2 and AK._lb(265) == AK._lb(512) == 4
    for lb, few, want in ((0, 2, 0), (4, 0, 4), (2, 2, 2), (4, 8, 4)):
        saved = AK.LB, AK.LB_FEW
        AK.LB, AK.LB_FEW = lb, few
        try: assert AK._lb(100) == want, (lb, few)
        finally: AK.LB, AK.LB_FEW = saved
    assert '__launch_bounds__(128, 2)' in AK._kernel_header('cuda', 2) and '__launch_bounds__(128, 4)' in AK._kernel_header('cuda')
    assert AK._kernel_header('metal', 2) == '' and AK._kernel_header('cuda', 0) == ''


def _parts(codec, B, H, n, D):
    "Storage parts of n tokens shaped as `codec` stores them (zeros: nothing is evaluated)"
    one = codec.encode(mx.zeros((B, H, 1, D), mx.float16))
    return tuple(mx.zeros(p.shape[:2] + (n,) + p.shape[3:], p.dtype) for p in one)


@pytest.mark.parametrize('kind', ['turbo', 'calibrated'])
def test_launcher_builds_each_call_for_its_blocks(monkeypatch, kind):
    launched = []
    def stand_in(name, input_names, output_names, source, header="", ensure_row_contiguous=True, shared_memory=0):
        def call(*, inputs, grid, threadgroup, output_shapes, output_dtypes, template=(), **kw):
            launched.append((name, header, grid[0] // threadgroup[0] * grid[1]))
            return [mx.zeros(s, d) for s, d in zip(output_shapes, output_dtypes)]
        return call
    monkeypatch.setattr(mx.fast, 'cuda_kernel', stand_in, raising=False)
    monkeypatch.setattr(A, '_KERNELS', {})
    D, seen = 256, set()
    kc, vc = (TurboCodec(4), TurboCodec(4, seed=1)) if kind == 'turbo' else calibrated_pair(D)
    kp, vp = A.side_plan(kc, D), A.side_plan(vc, D)
    for fold, Hkv, n in ((AK.FOLD, 1, 131072), (AK.FOLD, 1, 4096), (AK.FOLD, 8, 131072), (AK.FOLD, 8, 32768), (AK.FOLD, 2, 32768),
                         (0, 1, 4096), (0, 8, 131072)):   # FOLD = 0: the decode kernel that leaves the finish to the combine kernel
        monkeypatch.setattr(AK, 'FOLD', fold)
        q = mx.zeros((1, 4 * Hkv, 1, D), mx.float16)
        kparts, vparts = _parts(kc, 1, Hkv, n, D), _parts(vc, 1, Hkv, n, D)
        _, run = A._make_final_launcher(q, kp, vp, kparts, D ** -0.5, 'cuda')
        del launched[:]
        run(q, kparts, vparts, n)
        decode = [x for x in launched if x[0].startswith('mlx_kvq_decode_') and not x[0].startswith('mlx_kvq_decode_combine')]
        assert len(decode) == 1, launched
        _, header, blocks = decode[0]
        lb = int(re.search(r'__launch_bounds__\(128, (\d+)\)', header).group(1))
        assert lb == (2 if blocks <= 264 else 4), (Hkv, n, blocks, lb)
        seen.add(lb)
        assert any(x[0].startswith('mlx_kvq_decode_combine') for x in launched) == (fold == 0), [x[0] for x in launched]
        if kind == 'turbo' and fold:   # a staging cache's step: the folded kernel that quantizes and merges the staged tokens, the same rule
            del launched[:]
            assert run.staged(q, kparts, vparts, n, mx.zeros((1, Hkv, 8, 2 * D), mx.float16), 3, kc, vc) is not None   # (8: the stage capacity at d256)
            (_, header2, blocks2), = [x for x in launched if x[0].startswith('mlx_kvq_decode_') and not x[0].startswith('mlx_kvq_decode_combine')]
            assert blocks2 == blocks and f'__launch_bounds__(128, {lb})' in header2, (Hkv, n, blocks2, header2)
    assert seen == {2, 4}   # both variants were asked for
