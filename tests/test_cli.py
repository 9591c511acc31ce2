"""The command line, driven in-process (model-free preset, hash embedder: no model needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memcompile_local.cli.main import build_parser, main
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


def test_ingest_max_turn_chars_reaches_the_loader(tmp_path, capsys):
    """Regression: ingest had no way to change the loaders' string cap."""
    store = tmp_path / "s.sqlite"
    # The example conversation's longest turn is well over 20 characters and well under 100,000.
    assert main(["ingest", str(example_conversation_path()), "--store", str(store), "--quiet",
                 "--max-turn-chars", "20"]) == 2
    assert "at most 20 characters" in capsys.readouterr().err and not store.exists()
    plain = tmp_path / "mine.json"
    plain.write_text(json.dumps({"namespace": "mine", "sessions": [
        {"time": "2024-01-01", "turns": [{"speaker": "Ana", "text": "a turn of thirty characters.."}]}]}))
    assert main(["ingest", str(plain), "--store", str(store), "--quiet", "--max-turn-chars", "20"]) == 2
    assert "at most 20 characters" in capsys.readouterr().err and not store.exists()
    assert main(["ingest", str(plain), "--store", str(store), "--quiet", "--max-turn-chars", "40"]) == 0
    assert "mine: 1 turns added" in capsys.readouterr().out
    for bad in ("0", "-3", "many"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["ingest", str(plain), "--max-turn-chars", bad])
    assert "expected a positive integer" in capsys.readouterr().err


def test_demo_help_says_it_scores_the_example_questions(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "answer every example question and print the score" in " ".join(out.split())


def test_unknown_preset_is_reported(tmp_path, capsys):
    rc = main(["ask", "x", "q", "--store", str(tmp_path / "s.sqlite"), "--preset", "A9"])
    assert rc == 2 and "unknown preset" in capsys.readouterr().err


# ------------------------------------------------------------------ issue 16.4, 16.6, 16.9, 15.8


def _ingested(tmp_path, capsys) -> str:
    store = str(tmp_path / "s.sqlite")
    assert main(["ingest", str(example_conversation_path()), "--store", store, "--quiet"]) == 0
    capsys.readouterr()
    return store


def test_help_explains_positionals_format_stats_and_compare(capsys):
    for argv, phrases in [
        (["ask", "--help"], ["the question", "namespace to ask", "--no-build", "--max-tokens"]),
        (["ingest", "--help"], ["locomo10.json", "detect", "conversations"]),
        (["stats", "--help"], ["only this namespace", "JSON"]),
        (["compare", "--help"], ["YAML", "backbones"]),
        (["eval", "--help"], ["of each conversation"]),
        (["presets", "--help"], ["compose"]),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        for phrase in phrases:
            assert phrase in text, (argv, phrase)


def test_verbose_is_accepted_after_the_subcommand():
    parser = build_parser()
    assert parser.parse_args(["stats", "-vv"]).verbose == 2
    assert parser.parse_args(["-v", "stats"]).verbose == 1
    assert parser.parse_args(["stats"]).verbose == 0


def test_quiet_switches_off_library_progress_bars(tmp_path):
    code = ("from memcompile_local.cli import main\n"
            f"main(['ask', 'x', 'q', '--store', {str(tmp_path / 'none.sqlite')!r}, '--quiet'])\n"
            "from tqdm.auto import tqdm\n"
            "print('DISABLED' if tqdm(range(2)).disable else 'ENABLED')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "DISABLED" in out.stdout, out.stderr


def test_stats_prints_tables_not_dicts(tmp_path, capsys):
    store = _ingested(tmp_path, capsys)
    assert main(["stats", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "namespace" in out
    row = next(line for line in out.splitlines() if line.startswith("example-1"))
    assert row.split()[1] == "40"  # turns column


def test_forget_of_an_unknown_namespace_says_so(tmp_path, capsys):
    store = _ingested(tmp_path, capsys)
    assert main(["forget", "nope", "--store", store]) == 2
    err = capsys.readouterr().err
    assert "no namespace 'nope'" in err and "example-1" in err


@pytest.mark.parametrize("argv", [
    ["ask", "example-1", "q", "--no-answer", *MF],
    ["stats"],
    ["forget", "example-1"],
    ["build", *MF],
])
def test_a_mistyped_store_on_a_read_command_creates_no_file(tmp_path, capsys, argv):
    typo = tmp_path / "typo.sqlite"
    assert main([*argv, "--store", str(typo)]) == 2
    assert not typo.exists() and not list(tmp_path.iterdir())
    assert "typo.sqlite" in capsys.readouterr().err


def test_ask_on_a_namespace_never_built_says_what_it_builds(tmp_path, capsys):
    store = _ingested(tmp_path, capsys)
    assert main(["ask", "example-1", "What is the name of Nadia's cat?", "--store", store, "--no-answer",
                 "--no-build", *MF]) == 2
    err = capsys.readouterr().err
    assert "not built" in err and "memcompile-local build example-1" in err
    main(["stats", "--store", store, "--json"])
    assert json.loads(capsys.readouterr().out)["namespaces"]["example-1"]["extracted_packets"] == {}

    assert main(["ask", "example-1", "What is the name of Nadia's cat?", "--store", store, "--no-answer",
                 *MF]) == 0
    err = capsys.readouterr().err
    assert "building memory for 40 of 40 turns" in err and "no model calls" in err
    # Built now: a second ask says nothing about building, and --no-build works.
    assert main(["ask", "example-1", "Who has a cat?", "--store", store, "--no-answer", "--no-build", *MF]) == 0
    assert "building" not in capsys.readouterr().err


def test_repeated_presets_compose_and_conflicts_are_refused(tmp_path, capsys):
    store = _ingested(tmp_path, capsys)
    argv = ["ask", "example-1", "What is the name of Nadia's cat?", "--store", store, "--no-answer", "--json",
            "--quiet", "--embedder", "hash"]
    assert main([*argv, "--preset", "model-free", "--preset", "view-raw"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert main([*argv, "--preset", "model-free"]) == 0
    claims = json.loads(capsys.readouterr().out)
    assert raw["packet_ids"] == claims["packet_ids"] and raw["context"] != claims["context"]

    assert main([*argv, "--preset", "model-free", "--preset", "A1"]) == 2
    err = capsys.readouterr().err
    assert "'model-free'" in err and "'A1'" in err and "LLM" in err


def test_max_tokens_flag_and_the_small_model_caps():
    from memcompile_local.cli.args import config_from_args

    parser = build_parser()
    cfg = config_from_args(parser.parse_args(["ask", "a", "q"]))
    assert cfg.model.max_tokens == 256 and cfg.extraction.extractor == "rule"
    assert (cfg.evidence.max_schedule_pool, cfg.evidence.max_candidate_chars) == (40, 240)
    cfg = config_from_args(parser.parse_args(["ask", "a", "q", "--max-tokens", "64", "--extractor", "llm"]))
    assert cfg.model.max_tokens == 64 and cfg.extraction.extractor == "llm"
    # Another model: no caps.
    cfg = config_from_args(parser.parse_args(["ask", "a", "q", "--backend", "openai", "--model", "m"]))
    assert cfg.model.max_tokens == 2048 and cfg.extraction.extractor == "llm"
    assert cfg.evidence.max_schedule_pool is None


def test_max_tokens_from_a_config_file_wins_over_the_caps(tmp_path):
    from memcompile_local.cli.args import config_from_args

    conf = tmp_path / "c.yaml"
    conf.write_text("model: {max_tokens: 1024}\nextraction: {extractor: llm}\n")
    cfg = config_from_args(build_parser().parse_args(["ask", "a", "q", "--config", str(conf)]))
    assert cfg.model.max_tokens == 1024 and cfg.extraction.extractor == "llm"
    assert cfg.evidence.max_schedule_pool == 40


def test_a_second_plain_file_for_the_same_namespace_appends(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    first, second = tmp_path / "week1.json", tmp_path / "week2.jsonl"
    first.write_text(json.dumps({"namespace": "me", "sessions": [
        {"time": "2024-05-01", "turns": [{"speaker": "Ana", "text": "I bought a red bike."}]}]}))
    second.write_text('{"namespace": "me"}\n' + json.dumps(
        {"time": "2024-05-08", "turns": [{"speaker": "Ana", "text": "The bike has a flat tyre."}]}) + "\n")
    assert main(["ingest", str(first), "--store", store, "--quiet"]) == 0
    assert main(["ingest", str(second), "--store", store, "--quiet"]) == 0  # collided on S1:1 before
    assert "me: 1 turns added" in capsys.readouterr().out
    assert main(["ingest", str(second), "--store", store, "--quiet"]) == 0
    assert "me: 0 turns added, 1 already present" in capsys.readouterr().out
    main(["stats", "--store", store, "--json"])
    assert json.loads(capsys.readouterr().out)["namespaces"]["me"]["sessions"] == 2


def test_the_small_model_note_appears_only_when_the_model_runs(capsys):
    from memcompile_local.cli.args import config_from_args

    parser = build_parser()
    config_from_args(parser.parse_args(["ask", "a", "q", "--preset", "model-free", "--no-answer"]), announce=True)
    assert "small-model settings" not in capsys.readouterr().err  # nothing calls the model
    config_from_args(parser.parse_args(["ask", "a", "q", "--preset", "model-free"]), announce=True)
    assert "max_tokens=256" in capsys.readouterr().err  # the answer does
