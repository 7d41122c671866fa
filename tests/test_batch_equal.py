"""Batched generation equals single generation (issue 19).

Fast tests (tiny random models, CPU, float32): a request that runs in a batch stores the same codes and
produces the same greedy tokens as alone, for every kind of scheme, also when it joins a batch whose
prompt is still being processed or brings a prompt-cache history. `slow` (the embedded Gemma 3 270M,
`pytest tests/test_batch_equal.py --flags slow`): the issue's table, prompts of 6, 28 and 56 tokens,
16 greedy tokens, through `mlx_lm.batch_generate` and through `BatchGenerator` with one request
finishing early and one joining late. End to end, codes are equal only as far as the model's own
matmuls give equal keys and values (they do not bit for bit: nbs/05_batch, "Batched equals alone on a
real model", measures the logit difference), so where a prompt's alone run has a near-tie (top-2 margin below TIE)
the batch may take the runner-up there; the slow tests accept exactly that (`_tie_or_equal`): every token before it
equal, the batch's token the alone run's second choice, the margin within TIE, and fp16 caches always equal."""
import functools
import mlx.core as mx
import pytest
from mlx_lm.generate import BatchGenerator, generate_step

import mlx_kvq  # noqa: F401  (installs the attention dispatch)
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.turbo_codec import TurboCodec
from mlx_kvq.calibrated import HalfCodec, CalibratedTurboCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.kvsplit import QuantizedRotatingKVCache
from mlx_kvq.batch import BatchQuantizedKVCache, BatchQuantizedRotatingKVCache
from mlx_kvq.integrate import make_prompt_cache
from mlx_kvq.tiny import tiny_model


def _slow(request):
    if "slow" not in request.config.getoption("--flags").split():
        pytest.skip('needs the embedded Gemma: run with --flags "slow"')


# -- the same tokens in the same positions are stored as the same codes ----------------------------------------------

def _codecs(name, dim=64):
    mx.random.seed(1)
    if name == "affine:8,4": return AffineCodec(8), AffineCodec(4)
    if name == "turbo:4": return TurboCodec(4), TurboCodec(4, seed=1)
    if name == "affine:8/turbo:4": return AffineCodec(8), TurboCodec(4, seed=1)
    if name == "calibrated+half":   # what auto:B plans: calibrated TurboQuant keys, float16 values
        mean, scale = mx.random.normal((dim,)) * 0.1, mx.random.uniform(0.5, 2.0, (dim,))
        return CalibratedTurboCodec(4, mean=mean.tolist(), scale=scale.tolist(), outliers=[3, 9, 17, 40], outlier_bits=5), HalfCodec()
    raise KeyError(name)


def _parts(c):
    "Every stored part of a single cache, in token order"
    if isinstance(c, CodecKVCache): return [p[..., :c.n_quantized, :] for p in (*c.keys, *c.values)]
    k, v = c.keys_and_values() if c.offset >= c.keys.shape[2] else (c.keys[..., :c.offset, :], c.values[..., :c.offset, :])
    return [*k, *v]


@pytest.mark.parametrize("rotating", [False, True], ids=["linear", "rotating"])
@pytest.mark.parametrize("scheme", ["affine:8,4", "turbo:4", "affine:8/turbo:4", "calibrated+half"])
def test_same_codes_alone_or_batched(scheme, rotating):
    "Identical keys/values through mlx-lm's batch flow (merge, right-padded prefill, finalize, decode, filter) -> identical codes"
    H, D, lens, steps = 2, 64, [3, 11, 7], 5
    mx.random.seed(0)
    kv = [(mx.random.normal((1, H, n + steps, D)), mx.random.normal((1, H, n + steps, D))) for n in lens]
    def single():
        kc, vc = _codecs(scheme)
        return QuantizedRotatingKVCache(64, 0, kc, vc) if rotating else CodecKVCache(kc, vc)
    alone = []
    for (k, v), n in zip(kv, lens):
        c = single()
        c.update_and_fetch(k[:, :, :n], v[:, :, :n])
        for s in range(steps): c.update_and_fetch(k[:, :, n + s:n + s + 1], v[:, :, n + s:n + s + 1])
        alone.append(c)
    b = type(single()).merge([single() for _ in lens])
    assert isinstance(b, BatchQuantizedRotatingKVCache if rotating else BatchQuantizedKVCache)
    L = max(lens)
    b.prepare(lengths=lens, right_padding=[L - n for n in lens])
    pad = lambda x, n: mx.pad(x[:, :, :n], [(0, 0), (0, 0), (0, L - n), (0, 0)])
    b.update_and_fetch(mx.concatenate([pad(k, n) for (k, _), n in zip(kv, lens)]),
                       mx.concatenate([pad(v, n) for (_, v), n in zip(kv, lens)]))
    b.finalize()
    for s in range(steps):
        b.update_and_fetch(mx.concatenate([k[:, :, n + s:n + s + 1] for (k, _), n in zip(kv, lens)]),
                           mx.concatenate([v[:, :, n + s:n + s + 1] for (_, v), n in zip(kv, lens)]))
    b.filter([0, 2])      # the middle request finishes first
    for i, j in ((0, 0), (1, 2)):
        got, want = _parts(b.extract(i)), _parts(alone[j])
        assert [p.shape for p in got] == [p.shape for p in want]
        for g, w in zip(got, want): assert mx.array_equal(g, w), f"request {j}: stored codes differ from the request alone"


# -- greedy tokens on tiny random models ----------------------------------------------------------------------------

@functools.lru_cache(None)
def _tiny(family):
    over = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=256,
                intermediate_size=256, tie_word_embeddings=True)
    if family == "gemma3_text": over.update(num_hidden_layers=3, query_pre_attn_scalar=64, sliding_window=16, sliding_window_pattern=3)
    m = tiny_model(family, max_params=50_000_000, seed=0, **over)
    mx.eval(m.parameters())
    return m


def _alone(model, prompt, n, kv, history=None, prefill_step_size=2048):
    caches = make_prompt_cache(model, kv=kv)
    if history: model(mx.array([history]), cache=caches); mx.eval([c.state for c in caches])
    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n, prompt_cache=caches,
                                             prefill_step_size=prefill_step_size)]


TINY_SCHEMES = ["affine:8,4", "turbo:4", "turbo:3", "affine:8/turbo:4"]


@pytest.mark.parametrize("kv", TINY_SCHEMES)
@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_join_while_prompt_is_processed(family, kv):
    "A request joins while a long prompt is still being prefilled in chunks (the prompt batch is extended by a fresh one)"
    model = _tiny(family)
    long, short, step = [(7 * i + 3) % 256 for i in range(23)], [11, 5, 200, 17, 9], 4
    gen = BatchGenerator(model, max_tokens=8, prefill_step_size=step, prefill_batch_size=4, completion_batch_size=8)
    out = {}
    (u0,) = gen.insert([long], [8], caches=[make_prompt_cache(model, kv=kv)]); out[u0] = []
    for _ in range(2): gen.next()                     # two chunks of the long prompt are in the cache
    (u1,) = gen.insert([short], [6], caches=[make_prompt_cache(model, kv=kv)]); out[u1] = []
    while resp := gen.next_generated():
        for r in resp: out[r.uid].append(r.token)
    gen.close()
    assert out[u0] == _alone(model, long, 8, kv, prefill_step_size=step)
    assert out[u1] == _alone(model, short, 6, kv, prefill_step_size=step)


@pytest.mark.parametrize("kv", TINY_SCHEMES)
def test_history_batched_with_fresh(kv):
    "A request bringing a prompt-cache history (its codecs have seen the head dim) batched with a fresh request"
    model = _tiny("gemma3_text")
    hist, rest, fresh = [3, 141, 59, 26, 53, 58, 97, 93, 23], [84, 62, 64], [2, 71, 82, 81, 8]
    caches = make_prompt_cache(model, kv=kv)
    model(mx.array([hist]), cache=caches); mx.eval([c.state for c in caches])
    gen = BatchGenerator(model, max_tokens=6)
    uids = gen.insert([rest, fresh], [6, 6], caches=[caches, make_prompt_cache(model, kv=kv)])
    out = {u: [] for u in uids}
    while resp := gen.next_generated():
        for r in resp: out[r.uid].append(r.token)
    gen.close()
    assert out[uids[0]] == _alone(model, rest, 6, kv, history=hist)
    assert out[uids[1]] == _alone(model, fresh, 6, kv)


# -- the table on the embedded Gemma (slow) -----------------------------------------------------------------

GEMMA_SCHEMES = ["fp16", "affine:8,4", "turbo:4", "turbo:3", "affine:8/turbo:4", "auto:5"]


@functools.lru_cache(None)
def _gemma():
    from pydoc_data.topics import topics
    from mlx_kvq.models import load
    model, tok = load()
    text = lambda k: tok.encode(" ".join(topics[k].split()))
    prompts = [tok.encode("Hello, my name is"), text("assert")[:28], text("if")[:56]]
    assert [len(p) for p in prompts] == [6, 28, 56]
    return model, tok, prompts, text("while")[:17]


@functools.lru_cache(None)
def _gemma_alone(kv, i):
    """Prompt i alone: its 16 greedy tokens and, per step, (first choice, second choice, their log-probability margin)"""
    model, _, prompts, late = _gemma()
    toks, tops = [], []
    for t, lp in generate_step(mx.array((prompts + [late])[i]), model, max_tokens=16, prompt_cache=make_prompt_cache(model, kv=kv)):
        order = mx.argsort(-lp)[:2].tolist()
        toks.append(int(t)); tops.append((order[0], order[1], (lp[order[0]] - lp[order[1]]).item()))
    return toks, tops


def _first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


TIE = 0.5   # log-probability margin (nats) within which the batch may take the alone run's second choice: the flips
            # measured end to end came at 0.049 (turbo:4) and 0.116 (affine:8,4), each after one stored code had
            # rounded the other way (nbs/05_batch, "Batched equals alone on a real model", 2026-11-29)

def _tie_or_equal(got, kv, i, n=16):
    """None if the batch's tokens `got` equal prompt i's first n alone tokens, or differ first where the alone run had a
    near-tie that the batch took the other way (fp16: never); else what differs"""
    toks, tops = _gemma_alone(kv, i)
    d = _first_difference(got, toks[:n])
    if d is None: return None
    if kv == "fp16" or d >= min(len(got), n): return f"differs from token {d}"
    first, second, margin = tops[d]
    if got[d] != second or margin > TIE: return f"differs from token {d}: batch {got[d]}, alone {first} (runner-up {second}, margin {margin:.3f})"
    return None


@pytest.mark.parametrize("kv", GEMMA_SCHEMES)
def test_gemma_batch_generate_table(request, kv):
    _slow(request)
    import mlx_lm
    model, tok, prompts, _ = _gemma()
    r = mlx_lm.batch_generate(model, tok, prompts, prompt_caches=[make_prompt_cache(model, kv=kv) for _ in prompts],
                              max_tokens=16, return_token_ids=True)
    got = [[int(t) for t in toks] for toks in r.token_ids]
    row = [_first_difference(g, _gemma_alone(kv, i)[0]) for i, g in enumerate(got)]
    print(f"| {kv} | " + " | ".join("equal" if d is None else f"differs from token {d}" + (f" (alone margin {_gemma_alone(kv, i)[1][d][2]:.3f})" if d < 16 else "")
                                    for i, d in enumerate(row)) + " |")
    assert [_tie_or_equal(g, kv, i) for i, g in enumerate(got)] == [None] * len(prompts)


@pytest.mark.parametrize("kv", GEMMA_SCHEMES)
def test_gemma_join_late_finish_early(request, kv):
    "BatchGenerator: three requests of 6, 28, 56 tokens, the 6-token one stops after 5 tokens, a fourth joins after 3 steps"
    _slow(request)
    model, _, prompts, late = _gemma()
    ns = [5, 16, 16]
    gen = BatchGenerator(model, max_tokens=16)
    uids = gen.insert(prompts, ns, caches=[make_prompt_cache(model, kv=kv) for _ in prompts])
    out, steps = {u: [] for u in uids}, 0
    while resp := gen.next_generated():
        for r in resp: out[r.uid].append(r.token)
        steps += 1
        if steps == 3:
            (u,) = gen.insert([late], [10], caches=[make_prompt_cache(model, kv=kv)]); out[u] = []; uids.append(u)
    gen.close()
    assert [_tie_or_equal(out[u], kv, i, n) for i, (u, n) in enumerate(zip(uids, ns + [10]))] == [None] * 4
