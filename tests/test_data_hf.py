"""`--data hf:...`: hub datasets through datasets/huggingface_hub, tested offline on a dataset
saved with save_to_disk, a local data file and a hand-populated hub cache."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.bench.runner import EvalRunner, EvalSpec
from memcompile_local.cli import main
from memcompile_local.config import PipelineConfig
from memcompile_local.data import load_locomo, load_longmemeval
from memcompile_local.data.hf import HubUnavailableError, parse_hf_source, resolve_hf_source, rows_to_json
from memcompile_local.errors import ConfigError
from memcompile_local.pipeline.presets import apply_preset

from _data_paths import LOCOMO_MINI, LONGMEMEVAL_MINI

datasets = pytest.importorskip("datasets")

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCOMPILE_CACHE", str(tmp_path / "mc-cache"))
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)


def _arrow_rows(path: Path) -> list[dict]:
    """The fixture's items as an Arrow column can hold them: one type per field (answers as text)."""
    rows = json.loads(path.read_text(encoding="utf-8"))
    for row in rows:
        for qa in row.get("qa", []):
            if "answer" in qa:
                qa["answer"] = str(qa["answer"])
    return rows


def _same(a, b):
    return [dataclasses.replace(c, source_path=None) for c in a] == [dataclasses.replace(c, source_path=None) for c in b]


def test_parse_sources():
    assert parse_hf_source("hf:org/name") == ("org/name", None)
    assert parse_hf_source("hf:org/name:data/locomo10.json") == ("org/name", "data/locomo10.json")
    assert parse_hf_source("hf:/data/saved")[0] == "/data/saved"
    for bad in ("hf:", "hf:justname", "hf:a/b/c", "locomo.json"):
        with pytest.raises(ConfigError):
            parse_hf_source(bad)


def test_saved_dataset_gives_the_same_conversations_as_the_json_file(tmp_path):
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(_arrow_rows(LOCOMO_MINI)).save_to_disk(str(folder))
    local = resolve_hf_source(f"hf:{folder}", benchmark="locomo")
    assert local.parent == tmp_path / "mc-cache" / "hf"  # converted once, under MEMCOMPILE_CACHE
    assert _same(load_locomo(local), load_locomo(LOCOMO_MINI))
    assert resolve_hf_source(f"hf:{folder}", benchmark="locomo") == local  # same content, same file


def test_local_data_files_jsonl_and_parquet(tmp_path):
    rows = json.loads(LONGMEMEVAL_MINI.read_text(encoding="utf-8"))
    jsonl = tmp_path / "lme.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = load_longmemeval(resolve_hf_source(f"hf:{jsonl}", benchmark="longmemeval"))
    assert _same(got, load_longmemeval(LONGMEMEVAL_MINI))
    parquet = tmp_path / "locomo.parquet"
    datasets.Dataset.from_list(_arrow_rows(LOCOMO_MINI)).to_parquet(str(parquet))
    assert _same(load_locomo(resolve_hf_source(f"hf:{parquet}", benchmark="locomo")), load_locomo(LOCOMO_MINI))
    # A .json file is handed to the package's own loader as it is (its errors are located).
    assert resolve_hf_source(f"hf:{LOCOMO_MINI}") == LOCOMO_MINI
    with pytest.raises(HubUnavailableError, match="does not exist"):
        resolve_hf_source(f"hf:{tmp_path / 'missing'}")


def test_rows_to_json_drops_arrow_fillers():
    assert rows_to_json([{"a": {"x": 1, "y": None}, "b": [{"c": None, "d": 2}], "e": None}]) == [
        {"a": {"x": 1}, "b": [{"d": 2}]}]


def test_eval_runs_on_an_hf_source(tmp_path):
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(_arrow_rows(LOCOMO_MINI)).save_to_disk(str(folder))
    spec = EvalSpec(benchmark="locomo", data=f"hf:{folder}", store=str(tmp_path / "s.sqlite"), out=str(tmp_path / "r"),
                    limit=2, progress=False, answer=False)
    result = EvalRunner(spec, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    assert result["questions"] == 4
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["data"] == f"hf:{folder}" and len(config["data_sha256"]) == 64


def test_ingest_reads_an_hf_source(tmp_path, capsys):
    """ingest takes the same hf: sources as eval."""
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(_arrow_rows(LOCOMO_MINI)).save_to_disk(str(folder))
    store = str(tmp_path / "s.sqlite")
    assert main(["ingest", f"hf:{folder}", "--format", "locomo", "--store", store, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "mini-1: 36 turns added" in out and "mini-2: 24 turns added" in out
    assert main(["ingest", f"hf:{tmp_path / 'missing'}", "--store", store, "--quiet"]) == 2


_OFFLINE_SNIPPET = r"""
import sys
from memcompile_local.data.hf import HubUnavailableError, resolve_hf_source
for source in sys.argv[1:]:
    try:
        print("OK", resolve_hf_source(source, benchmark="locomo"))
    except HubUnavailableError as exc:
        print("ERR", exc)
"""


def test_offline_hub_errors_name_the_cache_and_a_cached_file_loads(tmp_path):
    """A fresh interpreter, so that the libraries read the offline switches and cache paths."""
    hub = tmp_path / "hub"
    snapshot = hub / "datasets--someone--mini-locomo" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "locomo_mini.json").write_bytes(LOCOMO_MINI.read_bytes())
    (hub / "datasets--someone--mini-locomo" / "refs").mkdir()
    (hub / "datasets--someone--mini-locomo" / "refs" / "main").write_text("a" * 40)
    env = dict(os.environ, **OFFLINE, HF_HUB_CACHE=str(hub), HF_DATASETS_CACHE=str(tmp_path / "ds"),
               MEMCOMPILE_CACHE=str(tmp_path / "mc"))
    run = subprocess.run([sys.executable, "-c", _OFFLINE_SNIPPET, "hf:someone/mini-locomo:locomo_mini.json",
                          "hf:nobody/not-there", "hf:nobody/not-there:x.json"],
                         env=env, capture_output=True, text=True, timeout=300, check=True)
    lines = run.stdout.strip().splitlines()
    assert lines[0] == f"OK {snapshot / 'locomo_mini.json'}"
    for line in lines[1:]:
        assert line.startswith("ERR cannot load hf:nobody/not-there")
        assert "offline" in line and str(hub) in line and str(tmp_path / "ds") in line
