"""The package's layers import downwards only, lazy imports inside functions included, with no circle.

verification < backends < speed < engine < pairs < deploy < audit < bench < cli (docs/ARCHITECTURE.md): a module may
import its own package and the packages below it, never one above. `exactspec/__init__` is the public facade
and imports lazily from every layer; nothing imports it back for a name (only `exactspec.__version__`).
"""
from __future__ import annotations

import ast
import pathlib

import exactspec

ROOT = pathlib.Path(exactspec.__file__).resolve().parent
LAYERS = ["verification", "backends", "speed", "engine", "pairs", "deploy", "audit", "bench", "cli"]


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, mod: str | None = None) -> set[str]:
    """Every exactspec module `path` (module `mod`) imports, at module level or inside a function."""
    mod, out = mod or _module(path), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")[: len(mod.split(".")) - node.level + (path.name == "__init__.py")]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("exactspec"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names if (ROOT.parent / f"{target}.{a.name}".replace(
                    ".", "/")).with_suffix(".py").exists() or (ROOT.parent / f"{target}.{a.name}".replace(".", "/")).is_dir())
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("exactspec"))
    return out


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in ROOT.rglob("*.py")}


def test_every_module_lives_in_a_layer():
    loose = sorted(m for m in _graph() if _layer(m) is None and m not in ("exactspec", "exactspec.__main__"))
    assert not loose, f"modules outside the layers {LAYERS}: {loose}"


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for mod, deps in _graph().items():
        if mod in ("exactspec", "exactspec.__main__"):
            continue
        for dep in deps:
            if dep == "exactspec":
                upward.append(f"{mod} -> exactspec (the facade: import from the sub-package)")
            elif _layer(dep) is not None and _layer(dep) > _layer(mod):
                upward.append(f"{mod} -> {dep}")
    assert not upward, "imports that point up the layers:\n" + "\n".join(sorted(upward))


def test_no_import_circle_between_modules():
    graph = {m: {d for d in deps if d != m and d != "exactspec"} for m, deps in _graph().items() if m != "exactspec"}
    for m in graph:  # importing a package's submodule runs the package's __init__ first; ours import nothing
        graph[m] = {d for d in graph[m] if d in graph}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checks above can fail: a lazy import from the engine into a shipped pair is found and flagged."""
    f = tmp_path / "x.py"
    f.write_text("import torch\n\ndef f():\n    from exactspec.pairs.smollm2 import build_draft\n")
    deps = _imports(f, "exactspec.engine.x")
    assert "exactspec.pairs.smollm2" in deps
    assert any(_layer(d) > _layer("exactspec.engine.x") for d in deps)
