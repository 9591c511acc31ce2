"""The package's import graph: no loops, and no import from a lower layer into a higher one.

Every import of a package module counts, including those inside functions and under
``TYPE_CHECKING``: a call-time import hides a loop, it does not remove it. The layers below
are listed from the bottom up; a module may import its own layer and the layers under it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import memcompile_local

PACKAGE = Path(memcompile_local.__file__).resolve().parent
NAME = "memcompile_local"

# Bottom first. A prefix names a module or a package (and everything under it); the longest
# matching prefix decides a module's layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("types", "fence", "errors", "config", "llm.interface", "protocols")),
    ("language", ("language",)),
    ("store", ("store", "store.postgres")),
    ("data", ("data",)),
    ("models", ("llm",)),
    ("address plane", ("address",)),
    ("evidence plane", ("evidence",)),
    ("fused retriever", ("fused",)),
    ("write side", ("build",)),
    ("retention", ("retention",)),
    ("views", ("views",)),
    ("pipeline", ("pipeline",)),
    ("facade", ("memory", "__init__")),
    ("benchmark", ("bench",)),
    ("service", ("service",)),
    ("command line", ("cli", "__main__")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    assert best is not None, f"module {module} is in no layer; add it to LAYERS"
    return best


def imports() -> dict[str, set[str]]:
    """module -> the package modules it imports (relative to the package)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        here = mod.split(".") if mod != "__init__" else []
        base = here if is_pkg else here[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    up = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    target = ".".join(up + ([node.module] if node.module else []))
                elif node.module and (node.module == NAME or node.module.startswith(NAME + ".")):
                    target = node.module[len(NAME) + 1:]
                else:
                    continue
                targets = [f"{target}.{a.name}" if target else a.name for a in node.names] + [target]
            elif isinstance(node, ast.Import):
                targets = [a.name[len(NAME) + 1:] for a in node.names if a.name.startswith(NAME + ".")]
            for t in targets:
                if t in modules and t != mod:
                    deps.add(t)
                elif not t:
                    deps.add("__init__")
        deps.discard(mod)
        out[mod] = deps
    return out


def test_every_module_has_a_layer():
    for mod in imports():
        layer_of(mod)


def test_no_import_reaches_up_a_layer():
    wrong = []
    for mod, deps in imports().items():
        for dep in deps:
            if layer_of(dep) > layer_of(mod):
                wrong.append(f"{mod} ({LAYERS[layer_of(mod)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})")
    assert not wrong, "imports from a lower layer into a higher one:\n" + "\n".join(sorted(wrong))


def test_no_import_loop():
    graph = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    loops: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                loops.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert not loops, "import loops:\n" + "\n".join(loops)


def test_the_walk_sees_imports():
    graph = imports()
    assert "pipeline.compile" in graph["memory"]
    assert "cli.args" in graph["cli.service"]
