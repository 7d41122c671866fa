"""One definition of bits per value in every table (issue: eval counted only full layers for some rows).

On a tiny model with the embedded Gemma 3's layer layout (18 layers, every sixth global, the rest sliding-window,
one KV head): every scheme family's printed bits per value times the values its caches hold is its kv bytes.
The values held are counted independently: the float32 reference cache stores exactly 4 bytes per value held,
and every scheme holds the same tokens (quantized rotating caches keep the same ring as mlx-lm's).
"""
import math

import mlx.core as mx
import pytest
from mlx_lm.models import gemma3_text

import mlx_kvq
from mlx_kvq.eval import evaluate
from mlx_kvq.integrate import make_prompt_cache, bits_per_value, values_held, kv_bytes
from mlx_kvq import recipe

CALIB = [(7 * i) % 97 + 1 for i in range(300)]


@pytest.fixture(scope="module")
def gemma_layout():
    mx.random.seed(0)
    args = gemma3_text.ModelArgs(model_type="gemma3_text", hidden_size=64, num_hidden_layers=18, intermediate_size=64,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=64, vocab_size=100,
                                 sliding_window=32, sliding_window_pattern=6)
    m = gemma3_text.Model(args); mx.eval(m.parameters())
    return m


def test_eval_rows_count_every_byte_over_every_value(gemma_layout):
    toks = [(5 * i) % 97 + 1 for i in range(260)]
    rep = evaluate(gemma_layout, toks, ["fp16", "turbo:4", "affine:8,4", "affine:8/turbo:4", "auto:4"],
                   contexts=[256], chunk=64, speed=False, progress=False, calib_tokens=CALIB)
    R = {r["scheme"]: r for r in rep.rows}
    ref = R["reference"]
    assert ref["bits_per_value"] == 32.0                 # float32: 4 bytes per value held, in every layer
    held = ref["kv_bytes"] / 4
    for name, r in R.items():
        assert math.isclose(r["bits_per_value"] * held / 8, r["kv_bytes"], rel_tol=1e-9), (name, r)
    # the full-layer figure is its own, clearly named column (over the 3 global layers only)
    assert ref["bits_full_layers"] == 32.0 and all("bits_full_layers" in r for r in rep.rows)
    # exact edge layers: the first (sliding) and the last (global) layer stay float32, so the full layers and the
    # whole model store different bits per value; the headline column is the whole model's
    edge = evaluate(gemma_layout, toks, ["turbo:4"], contexts=[256], chunk=64, speed=False, progress=False, fp16_layers=1)
    r = {x["scheme"]: x for x in edge.rows}["turbo:4"]
    assert math.isclose(r["bits_per_value"] * held / 8, r["kv_bytes"], rel_tol=1e-9), r
    assert r["bits_full_layers"] > r["bits_per_value"] + 1, r      # 1 of 3 global layers exact vs 2 of 18 layers


def test_report_recipe_and_caches_agree(gemma_layout):
    x = mx.array([[(3 * i) % 97 + 1 for i in range(100)]])
    for kv in ("turbo:4", "affine:8,4", "auto:4"):
        cs = make_prompt_cache(gemma_layout, kv, calib_tokens=CALIB)
        gemma_layout(x, cache=cs)
        v = values_held(cs, gemma_layout)
        # 3 global layers hold all 100 tokens, 15 sliding layers hold their ring (mlx-lm keeps window-1 + chunk)
        assert v == sum(min(100, c.keys.shape[2]) if isinstance(getattr(c, "max_size", None), int) else 100
                        for c in cs) * (64 + 64)
        assert math.isclose(bits_per_value(cs, gemma_layout) * v / 8, kv_bytes(cs), rel_tol=1e-12)
    ref = recipe.reference(gemma_layout, [(3 * i) % 97 + 1 for i in range(130)], chunk=64)
    cs = make_prompt_cache(gemma_layout, "turbo:4")
    res = recipe.score_caches(gemma_layout, ref, cs)
    assert res["bits_all"] == bits_per_value(cs, gemma_layout)
    _, report = make_prompt_cache(gemma_layout, "turbo:4", return_report=True)
    assert math.isclose(report.bits_per_value, 8 * report.bytes_per_token_after / (18 * 128))
