"""The command line, driven in-process (model-free preset, hash embedder: no model needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memcompile_local.cli import build_parser, main
from memcompile_local.data import example_conversation_path

MF = ["--preset", "model-free", "--embedder", "hash"]


def test_every_subcommand_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "memcompile_local", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "memcompile-local" in out.stdout


def test_ingest_ask_stats_forget(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    assert main(["ingest", str(example_conversation_path()), "--store", store, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "turns=40" in out and "example-1: 40 turns added" in out
    # Second ingest adds nothing.
    main(["ingest", str(example_conversation_path()), "--store", store, "--quiet"])
    assert "0 turns added, 40 already present" in capsys.readouterr().out

    assert main(["ask", "example-1", "What is the name of Nadia's cat?", "--store", store, "--no-answer",
                 "--json", "--quiet", *MF]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["packet_ids"]) == 10 and res["answer"] is None and res["context"]

    assert main(["stats", "--store", store, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["namespaces"]["example-1"]["packets"] == 40

    assert main(["forget", "example-1", "--store", store]) == 0
    capsys.readouterr()
    main(["stats", "--store", store, "--json"])
    assert "example-1" not in json.loads(capsys.readouterr().out)["namespaces"]


def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"sessions": [{"time": "2024-01-01", "turns": [{"speaker": "a", "text": 3}]}]}')
    store = tmp_path / "s.sqlite"
    assert main(["ingest", str(bad), "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "$.sessions[0].turns[0].text" in err
    assert not store.exists()


def test_unknown_preset_is_reported(tmp_path, capsys):
    rc = main(["ask", "x", "q", "--store", str(tmp_path / "s.sqlite"), "--preset", "A9"])
    assert rc == 2 and "unknown preset" in capsys.readouterr().err
