"""`compare`: a grid of backbones x presets from a YAML spec, one table, shared builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcompile_local.bench.compare import grid, load_spec, run_compare
from memcompile_local.errors import ConfigError

from _data_paths import LOCOMO_MINI as DEV


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "grid.yaml"
    p.write_text(text)
    return str(p)


def test_spec_errors_name_the_place(tmp_path):
    with pytest.raises(ConfigError, match="missing key 'presets'"):
        load_spec(write(tmp_path, "benchmark: locomo\ndata: x\nbackbones: [{name: a, backend: scripted}]\n"))
    with pytest.raises(ConfigError, match=r"backbones\[1\]: duplicate name"):
        load_spec(write(tmp_path, "benchmark: locomo\ndata: x\npresets: [A0]\n"
                                  "backbones: [{name: a, backend: scripted}, {name: a, backend: openai}]\n"))


def test_grid_applies_presets_and_backbones(tmp_path):
    spec = load_spec(write(tmp_path, "benchmark: locomo\ndata: x\npresets: [A1, model-free]\n"
                                     "backbones: [{name: small, backend: llamacpp, model: smollm2-135m},"
                                     " {name: server, backend: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}]\n"))
    runs = grid(spec)
    assert [name for name, _, _ in runs] == ["small-A1", "small-model-free", "server-A1", "server-model-free"]
    cfg = runs[3][1]
    assert cfg.model.backend == "openai" and cfg.model.base_url == "http://127.0.0.1:9/v1"
    assert cfg.evidence.anchor_selector == "fused" and runs[0][1].evidence.frontier == "none"


def test_retrieval_only_grid_writes_one_table(tmp_path):
    path = write(tmp_path, f"benchmark: locomo\ndata: {DEV}\nlimit: 3\nretrieval_only: true\n"
                           f"store: {tmp_path / 'grid.sqlite'}\n"
                           "presets: [model-free, model-free+layout-flat]\n"
                           "backbones: [{name: hash, backend: scripted, embedder: hash}]\n")
    runs = run_compare(path, out=str(tmp_path / "out"), progress=False, echo=lambda s: None)
    assert [r["name"] for r in runs] == ["hash-model-free", "hash-model-free+layout-flat"]
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "hash-model-free" in table and "hash-model-free+layout-flat" in table
    for r in runs:
        assert (tmp_path / "out" / r["name"] / "predictions.jsonl").exists()
