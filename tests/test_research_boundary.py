"""The boundary between the product and its lab notebook: research/ reaches the package only
through public names, its tests too, and the package never imports research code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.research


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_imports(path: Path) -> list[str]:
    """``from memcompile_local... import _name`` and ``memcompile_local...._module`` in ``path``
    (dunder names such as ``__version__`` are public)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memcompile_local"):
            parts = node.module.split(".")
            out += [f"{node.module}.{a.name}" for a in node.names if _private(a.name)]
            out += [node.module] if any(_private(p) for p in parts) else []
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("memcompile_local")
                    and any(_private(p) for p in a.name.split("."))]
    return out


def _research_tests() -> list[Path]:
    return [p for p in (ROOT / "tests").glob("test_*.py") if "pytest.mark.research" in p.read_text(encoding="utf-8")]


def test_research_and_its_tests_use_public_names_only():
    files = [*sorted((ROOT / "research").glob("*.py")), *sorted((ROOT / "scripts").glob("*.py")),
             *_research_tests()]
    assert len(_research_tests()) >= 6  # the research tests are marked, so they are found here
    assert [f"{f.relative_to(ROOT)}: {hit}" for f in files for hit in _private_imports(f)] == []


def test_the_scan_finds_a_private_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from memcompile_local.bench.baselines import _cached, raw_turn_matrix\n"
                 "import memcompile_local.fused._hidden\nfrom memcompile_local.fused import channels\n")
    assert _private_imports(f) == ["memcompile_local.bench.baselines._cached", "memcompile_local.fused._hidden"]


def test_the_package_imports_no_research_module():
    research = {p.stem for p in (ROOT / "research").glob("*.py")}
    for path in [*(ROOT / "memcompile_local").rglob("*.py"), *(ROOT / "adapters").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                assert not {a.name.split(".")[0] for a in node.names} & (research | {"research"}), path
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert (node.module or "").split(".")[0] not in research | {"research"}, path
