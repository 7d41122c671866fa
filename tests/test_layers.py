"""The package is built in layers and imports only go down (DESIGN.md, "The layers").

The module graph is read from the package's own source with `ast` (nothing is imported): a module may import
modules of its own layer or of a lower one, never of a higher one; imports inside one layer form no cycle; no
function body imports an mlx_kvq module (a deferred import is how a cycle hides); every module has a layer.
"""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "mlx_kvq"

LAYERS = {
    1: "codebook rotation packing",                                              # math
    2: "codecs turbo_codec calibrated attention attention_kernels",                                # codecs and attention over their parts
    3: "contract qcache turboquant kvsplit batch planned mla_guard dsv4 dsv4_cache dsv4_model",  # caches
    4: "schemes dispatch integrate",                                             # schemes and policy
    5: "models eval recipe auto pareto tiny distributed cli bench serve bench_serve __main__",   # tools (distributed imports recipe)
}
LAYER = {m: k for k, names in LAYERS.items() for m in names.split()}
SKIP = {"__init__", "_modidx"}      # the package's front door (imports everything) and nbdev's index


def modules():
    return sorted(p.stem for p in PKG.glob("*.py") if p.stem not in SKIP)


def _target(node, name):
    "Package module names an import node refers to"
    if isinstance(node, ast.ImportFrom):
        if node.level == 0 and not (node.module or "").startswith("mlx_kvq"): return []
        if node.level > 1: return []
        base = (node.module or "").removeprefix("mlx_kvq").lstrip(".")
        if base: return [base.split(".")[0]]
        return [a.name for a in node.names]                 # `from . import qcache` / `from mlx_kvq import qcache`
    return [a.name.split(".")[1] for a in node.names if a.name.startswith("mlx_kvq.")]


def graph():
    "{module: [(imported module, line, inside a function)]}"
    out = {}
    for m in modules():
        tree = ast.parse((PKG / f"{m}.py").read_text())
        edges = []
        def visit(node, in_fn):
            for ch in ast.iter_child_nodes(node):
                fn = in_fn or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(ch, (ast.Import, ast.ImportFrom)):
                    edges.extend((t, ch.lineno, in_fn) for t in _target(ch, m) if t not in SKIP and t != "__version__")
                visit(ch, fn)
        visit(tree, False)
        out[m] = edges
    return out


def check(g, layer):
    "Every violation of the layering in graph `g`, as readable lines"
    bad = [f"{m}: no layer assigned (add it to LAYERS in tests/test_layers.py)" for m in g if m not in layer]
    for m, edges in g.items():
        for t, line, in_fn in edges:
            if t not in layer: continue
            if in_fn: bad.append(f"{m}.py:{line} imports mlx_kvq.{t} inside a function (move it to the top)")
            if m in layer and layer[t] > layer[m]:
                bad.append(f"{m}.py:{line} imports mlx_kvq.{t}: layer {layer[m]} may not import layer {layer[t]}")
    same = {m: {t for t, _, _ in e if layer.get(t) == layer.get(m) and t != m} for m, e in g.items()}
    state = {}
    def dfs(m, path):
        state[m] = 1
        for t in sorted(same.get(m, ())):
            if state.get(t) == 1: bad.append("import cycle: " + " -> ".join(path[path.index(t):] + [t]))
            elif t not in state: dfs(t, path + [t])
        state[m] = 2
    for m in sorted(same):
        if m not in state: dfs(m, [m])
    return bad


def test_imports_only_go_down():
    bad = check(graph(), LAYER)
    assert not bad, "\n".join(bad)


def test_the_check_catches_violations():
    g = {"qcache": [("codecs", 1, False)], "codecs": [("qcache", 3, False)]}
    assert any("layer 2 may not import layer 3" in b for b in check(g, LAYER))
    g = {"kvsplit": [("batch", 1, False)], "batch": [("kvsplit", 2, False)]}
    assert any(b.startswith("import cycle") for b in check(g, LAYER))
    assert any("inside a function" in b for b in check({"eval": [("models", 9, True)]}, LAYER))
    assert any("no layer assigned" in b for b in check({"newmod": []}, LAYER))


def test_every_layer_has_its_modules():
    present = set(modules())
    for k, names in LAYERS.items():
        assert present & set(names.split()), f"layer {k} has no module"


def test_public_api():
    import mlx_kvq
    from mlx_kvq import (TurboQuantKVCache, KVSplitCache, QuantizedRotatingKVCache, BatchQuantizedKVCache,  # noqa: F401
                         make_prompt_cache, load, parse_scheme, save_prompt_cache, load_prompt_cache)
    assert mlx_kvq.parse_scheme("auto:5").family == "auto"      # the recipe registered its family
    # old import paths keep working
    from mlx_kvq.qcache import AffineCodec, Codec, codec_attention  # noqa: F401
    from mlx_kvq.turboquant import TurboCodec  # noqa: F401
    from mlx_kvq.integrate import parse_scheme as p2, install  # noqa: F401
    assert p2 is parse_scheme
