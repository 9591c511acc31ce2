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


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_dry_run_lists_runs_and_shared_builds_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example's relative runs/ folder must not appear
    data = tmp_path / "memcompile_local" / "data" / "example_conversation.json"  # its data, relative to the cwd
    data.parent.mkdir(parents=True)
    data.symlink_to(EXAMPLES.parent / "memcompile_local" / "data" / "example_conversation.json")
    lines: list[str] = []
    runs = run_compare(str(EXAMPLES / "compare-offline.yaml"), dry_run=True, echo=lines.append)
    assert [r["name"] for r in runs] == ["hash-model-free", "hash-baseline-bm25", "hash-baseline-dense",
                                         "minilm-model-free", "minilm-baseline-bm25", "minilm-baseline-dense"]
    text = "\n".join(lines)
    assert "6 runs:" in text and "3 builds" in text
    # The baselines share the "no build" entry; the model-free runs differ by embedder only.
    assert runs[1]["build"] == runs[2]["build"] == runs[4]["build"] == runs[5]["build"]
    assert runs[0]["build"] != runs[3]["build"]
    assert "embedder hash;" in text and "embedder sentence-transformers all-MiniLM-L6-v2" in text
    assert "dry run: nothing was run" in text and not (tmp_path / "runs").exists()

    with pytest.raises(ConfigError, match="at data: locomo10.json does not exist"):
        run_compare(str(EXAMPLES / "compare-grid.yaml"), dry_run=True, echo=lambda s: None)
    (tmp_path / "locomo10.json").write_text("[]", encoding="utf-8")  # the grid's data, relative to the cwd
    gpu = run_compare(str(EXAMPLES / "compare-grid.yaml"), dry_run=True, echo=lambda s: None)
    # The GPU grid's judge keeps its own server: gpt-4o-mini never goes to the vLLM backbone's URL.
    assert {r["judge"] for r in gpu} == {"openai gpt-4o-mini"}
    by = {r["name"]: r["build"] for r in gpu}
    assert by["smollm2-A0"] == by["smollm2-A1"] != by["qwen7b-A0"]
    assert by["smollm2-model-free"] == by["qwen7b-model-free"]  # rule descriptors: one build for both


def test_a_grid_without_a_judge_of_its_own_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").write_text("[]", encoding="utf-8")  # the specs' data file
    path = write(tmp_path, "benchmark: locomo\ndata: x\npresets: [A1]\n"
                           "backbones: [{name: small, backend: llamacpp, model: smollm2-135m}]\n")
    with pytest.raises(ConfigError, match="judge would be the answer model itself"):
        run_compare(path, dry_run=True, echo=lambda s: None)
    ok = write(tmp_path, "benchmark: locomo\ndata: x\npresets: [A1]\njudge: {backend: openai, model: j}\n"
                         "backbones: [{name: small, backend: llamacpp, model: smollm2-135m}]\n")
    (run,) = run_compare(ok, dry_run=True, echo=lambda s: None)
    assert run["judge"] == "openai j"
    with pytest.raises(ConfigError, match="at judge: unknown key"):
        load_spec(write(tmp_path, "benchmark: locomo\ndata: x\npresets: [A1]\njudge: {url: y}\n"
                                  "backbones: [{name: s, backend: scripted}]\n"))
    with pytest.raises(ConfigError, match="at baselines"):
        load_spec(write(tmp_path, "benchmark: locomo\ndata: x\npresets: [A1]\nbaselines: [bm99]\n"
                                  "backbones: [{name: s, backend: scripted}]\n"))


def _metrics(judge_acc, n, recall=0.5):
    return {"benchmark": "locomo", "stages": ["final"],
            "overall": {"count": n, "mem0_f1": 0.4, "judge": {"n": n, "accuracy": judge_acc},
                        "recall": {"final": {"n": n, "recall": recall}}}}


def test_plot_encodes_backbone_and_preset_shows_n_and_keeps_full_axes(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from memcompile_local.bench.plots import draw_quality_vs_tokens, plot_points, quality_vs_tokens_plot

    runs = [{"name": f"{b}-{p}", "backbone": b, "preset": p, "tokens_per_question": t,
             "metrics": _metrics(acc, n)}
            for b, p, t, acc, n in [("small", "A0", 900, 0.52, 40), ("small", "model-free", 120, 0.55, 40),
                                    ("big", "A0", 1500, 0.61, 60), ("big", "model-free", 150, 0.60, 60)]]
    points, label = plot_points(runs)
    assert label == "Judge"
    colour = {p.backbone: p.colour for p in points}
    marker = {p.preset: p.marker for p in points}
    assert len(set(colour.values())) == 2 and len(set(marker.values())) == 2
    assert all(p.colour == colour[p.backbone] and p.marker == marker[p.preset] for p in points)
    assert [p.n for p in points] == [40, 40, 60, 60]
    fig, ax = plt.subplots()
    try:
        draw_quality_vs_tokens(ax, runs)
        # Judge accuracies between 52% and 61% are drawn on the full 0-100 scale, x from 0.
        assert ax.get_ylim() == (0.0, 100.0) and ax.get_xlim()[0] == 0.0
        labels = {t.get_text() for t in ax.texts}
        assert labels == {"N=40", "N=60"}
        assert "95% interval" in ax.get_title()
        legend_texts = [t.get_text() for legend in [ax.get_legend(), *ax.artists] for t in legend.get_texts()]
        assert set(legend_texts) == {"small", "big", "A0", "model-free"}
    finally:
        plt.close(fig)
    out = quality_vs_tokens_plot(runs, tmp_path / "grid.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Retrieval-only runs (no model call): recall against the reader's context tokens.
    flat = [{"name": "r", "backbone": "hash", "preset": "model-free", "tokens_per_question": 0,
             "context_tokens_per_question": 480.0, "metrics": _metrics(None, 10, recall=0.9)}]
    flat[0]["metrics"]["overall"]["mem0_f1"] = None
    (p,), label = plot_points(flat)
    assert label == "Gold recall (final stage)" and p.tokens == 480.0 and p.quality == 0.9 and p.n == 10


def test_cli_compare_limit_overrides_the_spec(tmp_path, capsys):
    from memcompile_local.cli import main

    path = write(tmp_path, f"benchmark: locomo\ndata: {DEV}\nlimit: 5\nretrieval_only: true\njudge: false\n"
                           f"store: {tmp_path / 'nested' / 'grid.sqlite'}\n"
                           "presets: [model-free]\nbaselines: [bm25]\n"
                           "backbones: [{name: hash, backend: none, embedder: hash}]\n")
    assert main(["compare", path, "--out", str(tmp_path / "out"), "--limit", "1", "--quiet"]) == 0
    assert (tmp_path / "nested" / "grid.sqlite").exists()  # the store's folder is made on demand
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "| hash-model-free | 2 |" in table and "| hash-baseline-bm25 | 2 |" in table  # 1 per conversation
    assert (tmp_path / "out" / "compare.png").read_bytes()[:4] == b"\x89PNG"
