"""Per-family tests of mlx_kvq.mla_guard on tiny random mlx-lm models.

By default a representative subset runs (MLA latent, MLA expanded, DSA CacheList, MLA + linear hybrid,
SSM hybrid, plain GQA: a few seconds on a 2-core CPU). The full sweep over every family of the installed
mlx-lm runs with `MLX_KVQ_FULL_SWEEP=1 pytest tests/test_mla_guard.py`; families that cannot be built tiny are
skipped with the builder's reason (never the MLA families or the default subset).
"""
import os

import mlx.core as mx
import numpy as np
import pytest
import mlx_lm.models.cache as mlc
from mlx_lm.generate import generate_step

from mlx_kvq import mla_guard as G

SEED_001_MLA = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa", "kimi_linear",
                "kimi_vl", "longcat_flash", "longcat_flash_ngram", "minicpm3", "youtu_llm"}
FOUND_MLA = {"kimi_k25", "kimi_k3", "mistral4", "bailing_moe_v3", "bailing_hybrid"}
MLA = SEED_001_MLA | FOUND_MLA
SUBSET = ["deepseek_v3", "deepseek_v2", "deepseek_v32", "kimi_linear", "qwen3_next", "llama", "gemma3_text"]
# families whose tiny forward crashes the process on MLX 0.32.4 CPU (not a guard question): decisions only
NO_FORWARD = {"phi3small": "tiny forward segfaults in MLX 0.32.4 on CPU"}
FULL = os.environ.get("MLX_KVQ_FULL_SWEEP", "") not in ("", "0")
FAMILIES = G.model_families() if FULL else SUBSET


def _leaves(cs):
    for c in cs:
        if isinstance(c, mlc.CacheList): yield from _leaves(c.caches)
        else: yield c


def _build(family):
    try: return G.tiny_model(family)
    except Exception as e:
        if family in MLA or family in SUBSET: raise          # these must always build
        pytest.skip(f"{family} cannot be built tiny: {type(e).__name__}: {e}")


def _greedy(model, cache=None, **kw):
    return [int(t) for t, _ in generate_step(mx.array([1, 2, 3]), model, max_tokens=3, prefill_step_size=2,
                                             prompt_cache=cache, **kw)]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_decision(family):
    model = _build(family)
    info = G.mla_info(model)
    assert info.uses_mla == (family in MLA), (family, info)
    decisions = G.layer_decisions(model)
    assert all(d.kind in G.CACHE_KINDS for d in decisions)
    if family in MLA or family in SUBSET: assert decisions
    for d in decisions:
        if d.kind in ("mla", "arrays", "quantized", "unknown"): assert not d.can_quantize, d
        if d.kind in ("kv", "rotating"): assert d.can_quantize, d
    # the guarded caches run the model, and latent MLA caches hold (B, 1, L, r) latents and (B, 1, L, d_r) RoPE keys
    caches = G.guarded_prompt_cache(model)
    if family in NO_FORWARD: pytest.skip(f"{family}: {NO_FORWARD[family]}")
    try: mx.eval(model(mx.array([[1, 2, 3]]), cache=caches))
    except Exception as e:
        if family in MLA or family in SUBSET: raise
        pytest.skip(f"{family} does not run tiny: {type(e).__name__}: {e}")
    for c in _leaves(caches):
        if isinstance(c, G.MLACache) and c.role == "latent":
            assert (c.keys.shape[1], c.keys.shape[-1], c.values.shape[-1]) == (1, info.kv_lora_rank, info.qk_rope_head_dim)
    if info.form == "latent":
        assert all(isinstance(c, G.MLACache) for c in _leaves(caches) if isinstance(c, mlc.KVCache))
    if info.form == "expanded":
        assert all(type(c) is mlc.KVCache and c.keys.shape[1] > 1 for c in _leaves(caches) if isinstance(c, mlc.KVCache))


@pytest.mark.parametrize("family", sorted(MLA) if FULL else ["deepseek_v3", "deepseek_v32", "kimi_linear"])
def test_latent_families_survive_kv_bits(family):
    model = _build(family)
    if G.mla_info(model).form != "latent": pytest.skip(f"{family} caches expanded keys/values")
    q4 = dict(kv_bits=4, kv_group_size=32, quantized_kv_start=0)
    exact = _greedy(model)
    own = mlc.make_prompt_cache(model)
    if any(type(c) is mlc.KVCache for c in own):           # mlx-lm's own path converts these and breaks
        with pytest.raises(Exception):
            _greedy(model, own, **q4)
    assert _greedy(model, G.guarded_prompt_cache(model), **q4) == exact


def test_seed_000_with_integrate():
    "Seed 000: tiny DeepSeek V3, 4 bits, group 32, 3-token prompt, prefill step 2."
    from mlx_kvq.integrate import make_prompt_cache
    model = G.tiny_deepseek_v3()
    q4 = dict(kv_bits=4, kv_group_size=32, quantized_kv_start=0)
    with pytest.raises(AttributeError, match="swapaxes"):
        _greedy(model, **q4)
    exact = _greedy(model)
    caches, report = make_prompt_cache(model, kv="affine:4", group_size=32, return_report=True)
    assert _greedy(model, caches) == exact
    assert [l.kind for l in report.layers] == ["mla", "mla"]


def test_ssm_state_untouched_in_hybrid():
    from mlx_kvq.integrate import make_prompt_cache
    model = G.tiny_model("qwen3_next", head_dim=32)
    exact = mlc.make_prompt_cache(model)
    caches = make_prompt_cache(model, kv="affine:4", group_size=32)
    x = mx.array([[1, 2, 3, 4, 5]])
    mx.eval(model(x, cache=exact), model(x, cache=caches))
    a, b = next(_leaves(exact)), next(_leaves(caches))
    assert isinstance(b, mlc.ArraysCache)
    for s, t in zip(a.cache, b.cache):
        if s is not None: np.testing.assert_array_equal(np.array(s), np.array(t))
