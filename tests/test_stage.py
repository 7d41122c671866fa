"""Staged decode tokens (`CodecKVCache.stage`): what the cache holds while decode steps stage their tokens, on this
machine (MLX CPU) with the cache told that the kernels are CUDA's and that the folded decode kernel takes a stage of
32 for turbo codecs (staging only happens there); the kernels that quantize and attend the staged tokens are checked in
test_kernel_emulation.py (`test_staged_*`). Staged tokens are quantized tokens: a staging cache holds, attends and saves
exactly what a cache that quantizes every token holds."""
import sys
from pathlib import Path
import mlx.core as mx
import pytest
from mlx_lm.models.cache import save_prompt_cache, load_prompt_cache

from mlx_kvq import qcache as Q, attention as A
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turboquant import TurboQuantKVCache
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.mla_guard import QuantizedMLACache
from mlx_kvq.calibrated import CalibratedTurboCodec
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'bench'))
from calcodecs import calibrated   # auto:B's kinds of calibrated codecs, as the GPU checks draw them

B, H, D = 1, 2, 64


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.setattr(Q, 'kernel_backend', lambda: 'cuda')
    monkeypatch.setattr(Q, 'stage_capacity', lambda kc, vc: 32 if {type(kc), type(vc)} <= {TurboCodec, AffineCodec, CalibratedTurboCodec} else 0)


def tokens(n, seed=0):
    mx.random.seed(seed)
    return mx.random.normal((B, H, n, D)), mx.random.normal((B, H, n, D))


def pair(stage, make=lambda: TurboQuantKVCache(4, 3)):
    "A staging cache and one that quantizes every token as it comes, with the same codecs"
    a = make(); b = Q.CodecKVCache(a.k_codec, a.v_codec); a.stage = stage; b.stage = 0
    return a, b


def same_contents(a, b):
    "Two caches hold the same keys and values, bit for bit, as every reader takes them (staged tokens quantized)"
    return all(mx.array_equal(x, y).item() for x, y in zip(a.dequantized(), b.dequantized()))


def same_quantized(a, b, n):
    "The first n quantized tokens of two caches hold the same codes"
    return all(mx.array_equal(x[..., :n, :], y[..., :n, :]).item() for x, y in zip((*a.keys, *a.values), (*b.keys, *b.values)))


def test_decode_tokens_stage_then_quantize_together(cuda):
    """Each decode step's token is written to the staging buffers; the step after a full stage quantizes its tokens at
    once, to the same codes as quantizing each token as it came (quantization is per token); at every step the cache
    holds what the cache that quantizes each token holds (staged tokens read as quantized); nbytes counts the buffers"""
    a, b = pair(4)
    k, v = tokens(10 + 9)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in range(10, 19):
        ka, va = a.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1]); b.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
        T = (t - 10) % 4 + 1
        assert a.offset == t + 1 and a.n_quantized == t + 1 - T and b.n_quantized == t + 1
        assert mx.array_equal(ka.tail, k[:, :, t + 1 - T:t + 1]).item() and mx.array_equal(va.tail, v[:, :, t + 1 - T:t + 1]).item()
        assert ka.staged is not None and ka.staged.shape == (B, H, 4, D) and ka.shape[2] == t + 1
        assert same_quantized(a, b, a.n_quantized) and same_contents(a, b)
        assert not mx.array_equal(ka.dequantize(), mx.concatenate([ka.dequantize()[:, :, :-T], k[:, :, t + 1 - T:t + 1]], axis=2)).item()
    parts = sum(p.nbytes for p in (*a.keys, *a.values))
    assert a.nbytes == parts + 2 * B * H * 4 * D * 4      # float32 buffers of 4 tokens, whatever T is


def test_a_multi_token_update_quantizes_the_staged_tokens_first(cuda):
    a, b = pair(8)
    k, v = tokens(20)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in (10, 11):
        for c in (a, b): c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    ka, _ = a.update_and_fetch(k[:, :, 12:16], v[:, :, 12:16]); b.update_and_fetch(k[:, :, 12:16], v[:, :, 12:16])
    assert a.n_quantized == a.offset == 16 and ka.tail.shape[-2] == 0 and ka.staged is None and a._stage is None
    assert same_quantized(a, b, 16)


def test_trim_within_and_past_the_stage(cuda):
    a, b = pair(8)
    k, v = tokens(20)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in range(10, 13): a.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    assert a.trim(2) == 2 and a.offset == 11 and a.n_quantized == 10
    ka, _ = a.update_and_fetch(k[:, :, 15:16], v[:, :, 15:16])      # written after the one staged token left
    assert mx.array_equal(ka.tail, mx.concatenate([k[:, :, 10:11], k[:, :, 15:16]], axis=2)).item()
    assert a.trim(5) == 5 and a.offset == 7 and a.n_quantized == 7 and a._n_tail() == 0
    ka, _ = a.update_and_fetch(k[:, :, 16:17], v[:, :, 16:17])
    assert a.n_quantized == 7 and mx.array_equal(ka.tail, k[:, :, 16:17]).item() and ka.shape[2] == 8
    assert same_quantized(a, b, 7)


def test_affine_caches_stage_too(cuda):
    """An affine cache stages as a turbo one (the decode kernel quantizes affine staged tokens as `mx.quantize` does):
    its staged tokens read as their codec stores them, its contents bit-equal to a cache that quantizes every token"""
    a, b = pair(4, lambda: Q.CodecKVCache(AffineCodec(8), AffineCodec(4)))
    k, v = tokens(16)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in range(10, 16):
        ka, _ = a.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1]); b.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
        assert ka.staged is not None and a.n_quantized == 10 + 4 * ((t - 10) // 4) and same_contents(a, b), t
    assert same_quantized(a, b, 14)


@pytest.mark.parametrize('kv', ['calibrated 3o/6o', 'calibrated 2 keys / affine:8'])
def test_calibrated_caches_stage_too(cuda, kv, tmp_path):
    """A calibrated cache (`auto:B`'s codecs; since 2026-12-01 the decode kernel quantizes their staged tokens by the pair
    kernel's arithmetic) stages as a turbo one: its staged tokens read as their codec stores them, its contents bit-equal
    to a cache that quantizes every token, and a prompt-cache file saved mid-stage holds them quantized"""
    make = ((lambda: Q.CodecKVCache(calibrated(3, 0, D), calibrated(6, 1, D))) if kv == 'calibrated 3o/6o'
            else (lambda: Q.CodecKVCache(calibrated(2, 0, D, outliers=False), AffineCodec(8))))
    a, b = pair(4, make)
    k, v = tokens(16)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in range(10, 16):
        ka, _ = a.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1]); b.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
        assert ka.staged is not None and a.n_quantized == 10 + 4 * ((t - 10) // 4) and same_contents(a, b), t
    assert same_quantized(a, b, 14) and a._n_tail() == 2
    f = str(tmp_path / 'cal.safetensors')
    save_prompt_cache(f, [a]); (c,) = load_prompt_cache(f)
    assert c.n_quantized == c.offset == 16 and same_quantized(c, b, 16) and same_contents(a, c)


def test_codecs_the_kernel_cannot_quantize_do_not_stage(cuda):
    "Where `stage_capacity` is 0 (here an exact key side beside turbo values) a cache quantizes each step's token"
    from mlx_kvq.codecs import Fp16Codec
    a, _ = pair(4, lambda: Q.CodecKVCache(Fp16Codec(), TurboCodec(3)))
    k, v = tokens(12)
    a.update_and_fetch(k[:, :, :10], v[:, :, :10])
    ka, _ = a.update_and_fetch(k[:, :, 10:11], v[:, :, 10:11])
    assert a.n_quantized == 11 and ka.staged is None and a._stage is None


def test_stage_capacity_of_the_real_kernels():
    """What `attention` records for a verified decode configuration: 32 tokens for turbo and affine at head dim 64 / 128
    with 4 query heads per KV head and at 64 with 16, 8 at 256 (the embedded Gemma's), 16 with 8 query heads at 128
    (8 for affine before the fold merged in two levels: the score buffer held FOLD partial weights, now one per merge
    group), none where the score buffer is full (16 query heads at 128); calibrated codecs (auto:B's, quantized by their
    pair kernel's arithmetic in a warp's scratch) 32 at head dim 64, 16 at 128 with outlier bands (32 with one band), 4 at
    256 (the embedded Gemma's global layers; none before 2026-12-02, when the warp's scratch held the centred row too),
    and none for a calibrated codec whose bands are not the ones the plan reads"""
    from mlx_kvq.attention import side_plan
    from mlx_kvq.attention_kernels import _side_layout
    def cap(kc, vc, G, D):
        kc.check_dim(D); vc.check_dim(D)
        A._record_stage_capacity(kc, vc, side_plan(kc, D), side_plan(vc, D), G, D, 32 * sum(_side_layout(side_plan(vc, D))[0]))
        return A.stage_capacity(kc, vc)
    assert cap(TurboCodec(4), TurboCodec(3, seed=1), 4, 128) == 32 and cap(TurboCodec(4), TurboCodec(4, seed=1), 4, 64) == 32
    assert cap(TurboCodec(4), TurboCodec(4, seed=1), 4, 256) == 8 and cap(TurboCodec(4), TurboCodec(4, seed=1), 16, 128) == 0
    assert cap(AffineCodec(8), AffineCodec(4), 4, 128) == 32 and cap(AffineCodec(4), AffineCodec(4), 8, 128) == 16
    assert cap(TurboCodec(4), TurboCodec(4, seed=1), 8, 128) == 16 and cap(TurboCodec(4), TurboCodec(4, seed=1), 16, 64) == 32
    assert cap(AffineCodec(4, 32), AffineCodec(4, 32), 4, 256) == 8 and cap(AffineCodec(4), AffineCodec(4), 16, 128) == 0
    sys.path.insert(0, str(Path(__file__).parent))
    from kernel_emulator import calibrated_pair
    assert cap(*calibrated_pair(128), 4, 128) == 16 and cap(*calibrated_pair(64), 4, 64) == 32 and cap(*calibrated_pair(256), 4, 256) == 4
    assert cap(calibrated(3, 0, 256, outliers=False), calibrated(6, 1, 256), 4, 256) == 4 and cap(calibrated(2, 0, 128, outliers=False), calibrated(6, 1, 128, outliers=False), 4, 128) == 32
    assert cap(calibrated(3, 0, 64), AffineCodec(8), 4, 64) == 32 and cap(calibrated(3, 0, 128), AffineCodec(8), 4, 128) == 32   # beside affine values (auto:B on Llama shapes; 16 at d128 before 2026-12-02)
    kc, vc = calibrated_pair(128)
    other = side_plan(calibrated(3, 0, 128), 128)                               # bands of other widths than the codec quantizes
    assert A._codec_stages(kc, side_plan(kc, 128)) and not A._codec_stages(kc, other)
    assert A.stage_capacity(TurboCodec(4), TurboCodec(4)) == 0     # codecs no decode call was verified for


def test_saved_staged_tokens_load_quantized(cuda, tmp_path):
    """A prompt-cache file saved mid-stage holds the staged tokens quantized, as the cache attends them (nothing in the
    cache changes): the loaded cache holds what the cache that quantizes every token holds, and a loaded cache goes on
    staging"""
    a, b = pair(8)
    k, v = tokens(20)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in range(10, 13):
        for c in (a, b): c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    f = str(tmp_path / 'c.safetensors')
    save_prompt_cache(f, [a])
    (c,) = load_prompt_cache(f)
    assert a.n_quantized == 10 and a._n_tail() == 3               # the saved cache still stages its 3 tokens
    assert type(c) is type(a) and c.offset == 13 and c.n_quantized == 13 and c._n_tail() == 0
    assert same_contents(c, a) and same_contents(c, b) and same_quantized(c, b, 13)
    c.stage = 8
    for t in (13, 14):
        kc, _ = c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1]); b.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    assert kc.staged is not None and c.n_quantized == 14 and mx.array_equal(kc.tail, k[:, :, 14:15]).item()
    assert same_contents(c, b)


def test_no_staging_off_cuda(monkeypatch):
    "Elsewhere than CUDA (no kernel reads staged tokens there) each step quantizes its token, whatever `stage` says"
    monkeypatch.setattr(Q, 'kernel_backend', lambda: None)   # 'elsewhere' on any machine, the GPU host too
    a, _ = pair(8)
    k, v = tokens(12)
    a.update_and_fetch(k[:, :, :10], v[:, :, :10])
    ka, _ = a.update_and_fetch(k[:, :, 10:11], v[:, :, 10:11])
    assert a.n_quantized == 11 and ka.staged is None and a._stage is None


def test_latent_caches_never_stage(cuda, monkeypatch):
    "MLA's latent cache (the model reads it dequantized) quantizes every step's latent even where its base class stages"
    monkeypatch.setattr(Q.CodecKVCache, 'stage', 8)
    c = QuantizedMLACache(8, 64)
    mx.random.seed(1)
    c.update_and_fetch(mx.random.normal((1, 1, 10, 128)), mx.random.normal((1, 1, 10, 32)))
    c.update_and_fetch(mx.random.normal((1, 1, 1, 128)), mx.random.normal((1, 1, 1, 32)))
    assert c.n_quantized == 11 and c._stage is None


@pytest.mark.parametrize('bad', [-1, 2.5, '32', True])
def test_a_bad_stage_is_refused_before_the_cache_changes(cuda, bad):
    a, _ = pair(8)
    k, v = tokens(12)
    a.update_and_fetch(k[:, :, :10], v[:, :, :10])
    a.stage = bad
    with pytest.raises(ValueError, match="non-negative integer"):
        a.update_and_fetch(k[:, :, 10:11], v[:, :, 10:11])
    assert a.offset == 10 and a.n_quantized == 10


def test_steps_of_a_stage_in_progress_are_checked_as_any_update(cuda):
    """A decode step like the last staged one takes the short path (`_stage_next`, no `check_update`); any other input
    goes through every check: a token of another dtype or head dim, or a `stage` changed mid-stage, is refused before
    the cache changes, and `stage = 0` mid-stage quantizes the staged tokens with the step's own"""
    from mlx_kvq.contract import CacheContractError
    a, b = pair(8)
    k, v = tokens(20)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in (10, 11, 12):
        for c in (a, b): c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    assert a._hot is not None and a._n_tail() == 3
    for bad_k, bad_v in ((k[:, :, 13:14].astype(mx.int32), v[:, :, 13:14]), (k[:, :, 13:14, :32], v[:, :, 13:14])):
        with pytest.raises(CacheContractError):
            a.update_and_fetch(bad_k, bad_v)
        assert a.offset == 13 and a._n_tail() == 3 and same_contents(a, b)
    a.stage = -1
    with pytest.raises(ValueError, match="non-negative integer"):
        a.update_and_fetch(k[:, :, 13:14], v[:, :, 13:14])
    assert a.offset == 13 and a._n_tail() == 3
    a.stage = 0
    ka, _ = a.update_and_fetch(k[:, :, 13:14], v[:, :, 13:14]); b.update_and_fetch(k[:, :, 13:14], v[:, :, 13:14])
    assert a.n_quantized == a.offset == 14 and ka.staged is None and a._stage is None and a._hot is None
    assert same_quantized(a, b, 14)


def test_a_stage_in_progress_is_filled_before_staging_is_asked_again(cuda, monkeypatch):
    """The short path does not ask `stage_capacity` / `kernel_backend` at every step: a stage in progress is filled
    (staged tokens are quantized tokens, so this changes no answer), then quantized, and the next step asks again"""
    a, b = pair(4)
    k, v = tokens(20)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in (10, 11):
        for c in (a, b): c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    monkeypatch.setattr(Q, 'kernel_backend', lambda: None)   # staging no longer offered
    for t in (12, 13):
        ka, _ = a.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1]); b.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
        assert ka.staged is not None and a.n_quantized == 10 and same_contents(a, b)
    ka, _ = a.update_and_fetch(k[:, :, 14:15], v[:, :, 14:15]); b.update_and_fetch(k[:, :, 14:15], v[:, :, 14:15])
    assert a.n_quantized == a.offset == 15 and ka.staged is None and a._stage is None
    assert same_quantized(a, b, 15)


@pytest.fixture
def writer(cuda, monkeypatch):
    """A stage's held run as `attention.staged_runner` gives it on CUDA, stood in by MLX ops here: `write` returns the
    reference attention over the stored tokens and the staging buffer with the step's token put at T - 1, and that
    buffer (what the folded kernel's writing call returns); the calls are counted"""
    from mlx_kvq.codecs import CachedSide, codec_attention
    calls = []
    def runner(queries, keys, values, scale):
        kc, vc = keys.codec, values.codec
        def attend(q, kp, vp, n, sb, T):
            sk, sv = sb[..., :D], sb[..., D:]   # (the buffer's key and value columns)
            ks, vs = (CachedSide(c, None, p if n else None, s[:, :, :T], n=n) for c, p, s in ((kc, kp, sk), (vc, vp, sv)))
            ks.staged, vs.staged = sk, sv
            return codec_attention(q, ks, vs, scale=scale)
        def read(*a):
            calls.append('read'); return attend(*a)
        def write(q, kp, vp, n, sb, T, nk, nv):
            calls.append('write')
            sb = mx.concatenate([sb[:, :, :T - 1], mx.concatenate([nk, nv], axis=-1), sb[:, :, T:]], axis=2)
            return attend(q, kp, vp, n, sb, T), sb
        return read, write
    monkeypatch.setattr(Q, 'staged_runner', runner)
    return calls


def test_deferred_writes(writer, tmp_path):
    """Once a stage's first attention call found its held run, a staged step's update makes no op and leaves its token
    pending (`_defer`); the decode kernel's writing call attends it and returns the buffers with it written. Anything
    else that reads the cache or the step's sides first writes the pending token as the cache would have (`_settle`):
    reading the sides, a step without attention, a masked call, `trim`, `state`. Through all of it the outputs are
    those of the cache that quantizes every token, and both hold the same tokens bit for bit"""
    from mlx_kvq.codecs import codec_attention
    a, b = pair(6)
    k, v = tokens(40)
    q = mx.random.normal((B, 2 * H, 1, D))
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    def step(t, how='attend'):
        ka, va = a.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1]); kb, vb = b.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
        pending = a._pend is not None
        if how == 'read': assert ka.tail.shape[-2] == a._n_tail() and a._pend is None
        if how in ('attend', 'read', 'mask'):
            mask = None if how != 'mask' else mx.ones((1, 1, 1, t + 1), dtype=mx.bool_)
            out = a.attend(q, ka, va, scale=D ** -0.5, mask=mask)
            ref = codec_attention(q, kb, vb, scale=D ** -0.5, mask=mask)
            assert mx.allclose(out, ref, atol=1e-5).item(), (t, how)
        if how != 'none': assert a._pend is None and same_contents(a, b), (t, how)
        return pending
    # the stage's first step (no held run yet), then deferred steps written by the kernel's call
    assert [step(t) for t in range(10, 14)] == [False, True, True, True] and writer == ['write'] * 3
    assert step(14, 'read') and writer[-1] == 'read'       # sides read first: written, then the held run's read
    assert step(15, 'none') and a._pend is not None        # no attention this step: the next update writes it
    assert step(16) is False                               # (the stage was full: quantized, a new stage begins)
    assert step(17) and step(18, 'mask')                   # a masked call takes the general path, written first
    assert step(19) and writer[-1] == 'write'
    assert step(20, 'none') and a._pend is not None and a.trim(2) == 2 and a._pend is None and b.trim(2) == 2 and same_contents(a, b)
    assert a.offset == b.offset == 19
    assert step(19) is False and step(20) and writer[-1] == 'write'   # after a trim, the stage's run is found again
    assert step(21, 'none') and a._pend is not None
    f = str(tmp_path / 'c.safetensors')
    save_prompt_cache(f, [a])                               # the pending token is in the file, quantized
    assert a._pend is None
    (c,) = load_prompt_cache(f)
    assert c.offset == b.offset == 22 and same_contents(c, b)
    assert step(22) is False and step(23) and writer.count('write') == 7
    assert same_quantized(a, b, a.n_quantized)


def test_a_staging_cache_batches(cuda):
    """mlx-lm's batching (`BatchQuantizedKVCache.merge`, as `BatchGenerator` merges single caches) takes a cache
    mid-stage: its staged tokens are quantized tokens, encoded after the stored ones, so the batch holds what a merge of
    caches that quantize every token holds"""
    from mlx_kvq.batch import BatchQuantizedKVCache
    a, b = pair(8)
    a2, b2 = pair(8)
    k, v = tokens(20)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for c in (a2, b2): c.update_and_fetch(k[:, :, :7], v[:, :, :7])
    for t in range(10, 13):
        for c in (a, b): c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    assert a._n_tail() == 3 and b._n_tail() == 0
    ba, bb = BatchQuantizedKVCache.merge([a, a2]), BatchQuantizedKVCache.merge([b, b2])
    assert mx.array_equal(mx.array(ba.offset), mx.array(bb.offset)).item()
    got, want = ba.dequantized(), bb.dequantized()
    assert got[0].shape == want[0].shape and got[0].shape[2] >= 13
    for x, y in zip(got, want): assert mx.array_equal(x, y).item()


def test_staged_tokens_decode_with_the_stored_ones(cuda):
    """`dequantized()` mid-stage decodes the stored and the staged tokens in one decode call (the staged tokens' parts
    joined to the stored ones, `CachedSide.quantized_parts`), over the same rows as a cache that stored them all: on an
    H200 a lone staged token decoded apart came out other floats than the same codes among the stored ones
    (`bench/h200_20261202e/d256b/`)"""
    a, b = pair(4)
    k, v = tokens(10 + 2)
    for c in (a, b): c.update_and_fetch(k[:, :, :10], v[:, :, :10])
    for t in (10, 11):
        for c in (a, b): c.update_and_fetch(k[:, :, t:t + 1], v[:, :, t:t + 1])
    assert a.n_quantized == 10 and a._n_tail() == 2 and b.n_quantized == 12
    calls = []
    for codec in (a.k_codec, a.v_codec):
        real = type(codec).decode
        codec.decode = (lambda real, codec: lambda parts, dtype=mx.float32: calls.append(parts[0].shape[-2]) or real(codec, parts, dtype))(real, codec)
    try:
        got = a.dequantized()
    finally:
        del a.k_codec.decode, a.v_codec.decode
    assert calls == [12, 12], calls                                  # one decode a side, over all 12 tokens
    assert all(mx.array_equal(x, y).item() for x, y in zip(got, b.dequantized()))
