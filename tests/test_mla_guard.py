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
from mlx_kvq import tiny as T
from mlx_kvq import integrate as I

SEED_001_MLA = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa", "kimi_linear",
                "kimi_vl", "longcat_flash", "longcat_flash_ngram", "minicpm3", "youtu_llm"}
FOUND_MLA = {"kimi_k25", "kimi_k3", "mistral4", "bailing_moe_v3", "bailing_hybrid"}
MLA = SEED_001_MLA | FOUND_MLA
SUBSET = ["deepseek_v3", "deepseek_v2", "deepseek_v32", "kimi_linear", "qwen3_next", "llama", "gemma3_text"]
# families whose tiny forward crashes the process on MLX 0.32.4 CPU (not a guard question): decisions only
NO_FORWARD = {"phi3small": "tiny forward segfaults in MLX 0.32.4 on CPU"}
FULL = os.environ.get("MLX_KVQ_FULL_SWEEP", "") not in ("", "0")
FAMILIES = T.model_families() if FULL else SUBSET


def _leaves(cs):
    for c in cs:
        if isinstance(c, mlc.CacheList): yield from _leaves(c.caches)
        else: yield c


def _build(family):
    try: return T.tiny_model(family)
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
    model = T.tiny_model("qwen3_next", head_dim=32)
    exact = mlc.make_prompt_cache(model)
    caches = make_prompt_cache(model, kv="affine:4", group_size=32)
    x = mx.array([[1, 2, 3, 4, 5]])
    mx.eval(model(x, cache=exact), model(x, cache=caches))
    a, b = next(_leaves(exact)), next(_leaves(caches))
    assert isinstance(b, mlc.ArraysCache)
    for s, t in zip(a.cache, b.cache):
        if s is not None: np.testing.assert_array_equal(np.array(s), np.array(t))


LATENT_SUBSET = ["deepseek_v3", "deepseek_v32", "kimi_linear", "glm4_moe_lite"]


def _kv_leaves(cs):
    return [c for c in _leaves(cs) if not isinstance(c, mlc.ArraysCache)]


@pytest.mark.parametrize("family", sorted(MLA) if FULL else LATENT_SUBSET)
def test_no_scheme_breaks_latent_caches(family):
    "integrate.make_prompt_cache(kv=s) for fp16 / affine:4 / turbo:3 decodes the exact tokens and leaves every latent exact"
    from mlx_kvq.integrate import make_prompt_cache
    model = _build(family)
    if G.mla_info(model).form != "latent": pytest.skip(f"{family} caches expanded keys/values")
    exact_caches = G.guarded_prompt_cache(model)
    exact = _greedy(model, exact_caches)
    for s in ("fp16", "affine:4", "turbo:3"):
        caches = make_prompt_cache(model, kv=s, group_size=32)
        assert _greedy(model, caches) == exact, s
        leaves = _kv_leaves(caches)
        assert leaves and all(type(c).__name__ == "MLACache" for c in leaves), (s, leaves)
        for c, e in zip(leaves, _kv_leaves(exact_caches)):      # the latent itself is bit-identical
            np.testing.assert_array_equal(np.array(c.keys[..., :c.offset, :]), np.array(e.keys[..., :e.offset, :]))
    # the MLA-aware scheme only when asked: latents quantized, DSA indexer keys exact, generation runs
    caches = I.apply_mla_scheme(make_prompt_cache(model, kv="affine:4", group_size=32), "affine:8", group_size=32)
    assert len(_greedy(model, caches)) == 3
    for c, e in zip(_kv_leaves(caches), _kv_leaves(exact_caches)):
        assert type(c).__name__ == ("QuantizedMLACache" if e.role == "latent" else "MLACache")
        assert c.offset == e.offset


class _FakeQuantLatent(mlc.KVCache):
    def __init__(self, codec):
        super().__init__(); self.codec = codec
    def update_and_fetch(self, keys, values):
        return super().update_and_fetch(self.codec.decode(self.codec.encode(keys), keys.dtype), values)


@pytest.mark.parametrize("family", ["deepseek_v3", "glm4_moe_lite", "kimi_linear"])
@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_latent_equals_fake_quant_reference(family, bits):
    "The model sees exactly decode(encode(latent)) and the exact RoPE key, through chunked prefill and decode"
    from mlx_kvq.qcache import AffineCodec
    model = _build(family)
    toks = mx.array(np.random.default_rng(bits).integers(0, 64, size=(1, 12)))
    def run(caches):
        out = [model(toks[:, :4], cache=caches), model(toks[:, 4:8], cache=caches)]
        out += [model(toks[:, i:i + 1], cache=caches) for i in range(8, 12)]
        return np.array(mx.concatenate(out, axis=1))
    got = run(I.apply_mla_scheme(G.guarded_prompt_cache(model), f"affine:{bits}", group_size=32))
    ref = run([_FakeQuantLatent(AffineCodec(bits, 32)) if type(c) is mlc.KVCache else c
               for c in mlc.make_prompt_cache(model)])
    exact = run(G.guarded_prompt_cache(model))
    np.testing.assert_array_equal(got, ref)
    assert not np.array_equal(got, exact)


def test_quantized_mla_cache_save_load_continue(tmp_path):
    model = T.tiny_model("deepseek_v3")
    caches = I.apply_mla_scheme(G.guarded_prompt_cache(model), "affine:6", group_size=32)
    x = mx.array([[1, 2, 3, 4, 5]])
    mx.eval(model(x, cache=caches))
    fn = str(tmp_path / "c.safetensors")
    mlc.save_prompt_cache(fn, caches)
    back = mlc.load_prompt_cache(fn)
    assert [type(c) for c in back] == [G.QuantizedMLACache] * 2
    y = mx.array([[6]])
    np.testing.assert_array_equal(np.array(model(y, cache=caches)), np.array(model(y, cache=back)))


def _run_cli(tmp_path, family, **overrides):
    import subprocess, sys
    d = tmp_path / family
    T.save_tiny_model_dir(family, d, **overrides)
    env = {**os.environ, "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"}
    r = subprocess.run([sys.executable, "-m", "mlx_kvq", "generate", "--model", str(d), "--kv", "affine:4",
                        "--max-tokens", "3", "--prompt", "the capital of france is"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout.splitlines()


def test_cli_generate_tiny_mla(tmp_path):
    lines = _run_cli(tmp_path, "deepseek_v3")
    rows = [l for l in lines if l.startswith("| 0")]
    assert rows, lines
    assert all("| mla |" in l and "MLACache | MLACache" in l and "kept exact" in l for l in rows), rows
    assert any("0/2 cache layers converted" in l and "MLA latent" in l for l in lines), lines


def test_cli_generate_tiny_hybrid(tmp_path):
    lines = _run_cli(tmp_path, "qwen3_next", head_dim=64)
    assert any("| arrays |" in l and "ArraysCache | ArraysCache" in l and "SSM" in l for l in lines), lines
    assert any("| kv |" in l and "KVCache | CodecKVCache | affine:4" in l for l in lines), lines
    assert any("1/2 cache layers converted" in l for l in lines), lines
