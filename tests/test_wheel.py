"""The built wheel installs ``adapters/`` as ``memcompile_local.adapters``, never as ``adapters``,
and holds nothing of ``research/`` or ``scripts/``."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_adapters_under_the_package(tmp_path):
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, cwd=tmp_path)
    wheel = next(dist.glob("memcompile_local-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "memcompile_local/adapters/__init__.py" in names
    assert "memcompile_local/adapters/llamacpp.py" in names
    assert "memcompile_local/data/example_conversation.json" in names
    assert not any(n.startswith("adapters/") for n in names)
    # Every subpackage of the source tree ships (the package list in pyproject.toml is explicit).
    source_packages = {p.parent.relative_to(ROOT).as_posix()
                       for p in (ROOT / "memcompile_local").rglob("__init__.py")}
    assert source_packages, "no subpackages found"
    for pkg in sorted(source_packages):
        assert f"{pkg}/__init__.py" in names, f"{pkg} is missing from the wheel (add it to pyproject.toml)"
    # Package data the code reads at run time (the learned ranker's model files).
    for f in sorted((ROOT / "memcompile_local" / "fused" / "models").glob("*.json")):
        assert f"memcompile_local/fused/models/{f.name}" in names, f"{f.name} is missing from the wheel"
    assert "memcompile_local/py.typed" in names or not (ROOT / "memcompile_local" / "py.typed").exists()
    # The research notebooks and the user's scripts are not installed: nothing from research/ or
    # scripts/, and none of the modules that moved from the package to research/.
    assert (ROOT / "research" / "ablate_model_free.py").exists()
    assert not [n for n in names if n.split("/")[0] in ("research", "scripts") or "/research/" in n]
    moved = {"chatnorm.py", "framing.py", "passages.py", "dropped.py", "cv_corpora.py", "ablate_model_free.py"}
    assert not [n for n in names if n.rsplit("/", 1)[-1] in moved]

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # --no-deps: the check is about the package layout; the package's import needs only the stdlib.
    # The installed wheel alone: a PYTHONPATH naming a source checkout (as a worktree's test run
    # sets) would shadow it with the source tree, where adapters/ sits at the top level.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True, capture_output=True,
                   env=clean)
    code = ("import importlib.util, memcompile_local.adapters as a; "
            "print(a.__name__); print(importlib.util.find_spec('adapters') is None)")
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert out.stdout.split() == ["memcompile_local.adapters", "True"]


def test_the_package_list_leaves_research_and_scripts_out():
    """The fast half of the check above: pyproject's explicit package list names the package and
    its subpackages only, so neither research/ nor scripts/ can be installed."""
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = doc["tool"]["setuptools"]["packages"]
    assert packages and all(p == "memcompile_local" or p.startswith("memcompile_local.") for p in packages)
    assert not (ROOT / "research" / "__init__.py").exists() and not (ROOT / "scripts" / "__init__.py").exists()
    # research/ does not hide under the package either.
    assert not list((ROOT / "memcompile_local").rglob("research"))
