"""The benchmark runner on the shipped LoCoMo/LongMemEval fixtures with a scripted backend: run
folder contents, resumability after an interruption, and exact token totals (one retrieval-only
run on the real dev file when ../shared/data is present)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.config import PipelineConfig
from memcompile_local.evidence.presets import apply_preset

from _data_paths import LOCOMO_MINI, LONGMEMEVAL_MINI
from test_pipeline_e2e import responder

DEV = LOCOMO_MINI
TURNS = {"mini-1": 36, "mini-2": 24}  # turns per conversation of the fixture


def judge_and_answer(req):
    if req.stage == "judge":
        return json.dumps({"label": "CORRECT" if "blue" in req.messages[-1].content else "WRONG"})
    if req.stage == "answer":
        return "blue"
    return responder(req)


class Interrupting:
    """A scripted backend that raises KeyboardInterrupt at the n-th answer call."""

    def __init__(self, n: int):
        self.inner = ScriptedBackend(judge_and_answer)
        self.n = n
        self.answers = 0

    def identity(self):
        return self.inner.identity()

    def generate(self, requests):
        self.answers += sum(r.stage == "answer" for r in requests)
        if self.answers >= self.n:
            raise KeyboardInterrupt
        return self.inner.generate(requests)


def spec(tmp_path: Path, name: str, store: str) -> EvalSpec:
    return EvalSpec(benchmark="locomo", data=str(DEV), store=str(tmp_path / store), out=str(tmp_path / name),
                    limit=3, progress=False)


def cfg() -> PipelineConfig:
    # A1 (LLM anchors, no frontier) keeps the scripted run small; rule extraction keeps it fast.
    return apply_preset("A1", PipelineConfig()).replace(extraction={"extractor": "rule"})


def test_run_folder_contents_and_resume_after_interrupt(tmp_path):
    emb = HashEmbedder(dim=64)
    # Uninterrupted reference run.
    ref = EvalRunner(spec(tmp_path, "ref", "ref.sqlite"), cfg(), backend=ScriptedBackend(judge_and_answer),
                     embedder=emb, echo=lambda s: None).run()

    # Interrupted at the 4th answer, then resumed with a fresh backend.
    s = spec(tmp_path, "run", "run.sqlite")
    with pytest.raises(KeyboardInterrupt):
        EvalRunner(s, cfg(), backend=Interrupting(4), embedder=emb, echo=lambda s: None).run()
    done = read_jsonl(Path(s.out) / "answers.jsonl")
    assert 0 < len(done) < 6
    second = ScriptedBackend(judge_and_answer)
    out = EvalRunner(s, cfg(), backend=second, embedder=emb, echo=lambda s: None).run()
    # Answered questions were not asked again.
    answered_again = [r for r in second.requests if r.stage == "answer"
                      and any(d["question"] in r.messages[-1].content for d in done)]
    assert answered_again == []

    folder = Path(s.out)
    for name in ("config.json", "predictions.jsonl", "metrics.json", "report.md", "answers.jsonl", "judgments.jsonl"):
        assert (folder / name).exists(), name
    rows = read_jsonl(folder / "predictions.jsonl")
    assert len(rows) == 6  # 3 questions (categories 1-4) in each of the 2 conversations
    for r in rows:
        assert r["category"] in (1, 2, 3, 4)
        assert r["prediction"] == "blue" and r["judge_label"] in ("CORRECT", "WRONG")
        assert len(r["selected_ids"]) == 10 and r["recall_stages"]["final"] == r["selected_ids"]
        assert set(r["tokens"]) >= {"schedule", "answer"}
    config = json.loads((folder / "config.json").read_text())
    assert config["prompt_versions"] and config["versions"]["memcompile-local"]
    # The resumed run reports exactly the totals of the uninterrupted one.
    assert out["tokens_by_stage"] == ref["tokens_by_stage"]
    assert out["metrics"]["overall"]["judge"]["accuracy"] == ref["metrics"]["overall"]["judge"]["accuracy"]
    report = (folder / "report.md").read_text()
    assert "## Metric definitions" in report and "## Token cost" in report
    assert "## Source aliasing before normalization" in report
    assert set(out["aliasing_audit"]) == {"10", "20", "40"} and out["aliasing_audit"]["10"]["eligible"] > 0

    # A third run makes zero model calls and changes nothing.
    third = ScriptedBackend(judge_and_answer)
    again = EvalRunner(s, cfg(), backend=third, embedder=emb, echo=lambda s: None).run()
    assert third.requests == []
    assert again["tokens_by_stage"] == ref["tokens_by_stage"]


def test_retrieval_only_model_free_run_makes_no_model_call(tmp_path):
    s = EvalSpec(benchmark="locomo", data=str(DEV), store=str(tmp_path / "m.sqlite"), out=str(tmp_path / "mf"),
                 limit=5, progress=False, answer=False)
    result = EvalRunner(s, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    assert result["tokens_by_stage"] == {}
    rec = result["metrics"]["overall"]["recall"]["final"]
    assert rec["n"] == 10 and 0 <= rec["recall"] <= 1


def test_a_run_folder_of_another_configuration_or_code_version_is_not_resumed(tmp_path, monkeypatch):
    from memcompile_local.address import extract_rule
    from memcompile_local.bench import runner as R
    from memcompile_local.errors import ConfigError

    s = EvalSpec(benchmark="locomo", data=str(DEV), store=str(tmp_path / "m.sqlite"), out=str(tmp_path / "mf"),
                 limit=2, progress=False, answer=False)
    mf = apply_preset("model-free", PipelineConfig())
    EvalRunner(s, mf, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    before = (tmp_path / "mf" / "predictions.jsonl").read_bytes()
    other = mf.replace(fusion={"speaker_weight": 0.5})
    with pytest.raises(ConfigError, match="holds run eval-"):
        EvalRunner(s, other, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    EvalRunner(s, mf, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()  # same run: resumes
    # A newer rule extractor changes the run id even with the same configuration.
    base_id = R.run_identity(s, mf, "x")
    monkeypatch.setattr(extract_rule, "RULE_EXTRACTOR_VERSION", "rule-test")
    assert R.run_identity(s, mf, "x") != base_id
    with pytest.raises(ConfigError):
        EvalRunner(s, mf, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    assert (tmp_path / "mf" / "predictions.jsonl").read_bytes() == before  # nothing touched


@pytest.mark.parametrize("baseline", ["bm25", "dense", "full-context"])
def test_baselines_use_the_same_answer_step(tmp_path, baseline):
    s = EvalSpec(benchmark="locomo", data=str(DEV), store=str(tmp_path / "b.sqlite"), out=str(tmp_path / baseline),
                 limit=2, progress=False, baseline=baseline, judge=False)
    backend = ScriptedBackend(judge_and_answer)
    result = EvalRunner(s, cfg(), backend=backend, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    rows = read_jsonl(Path(s.out) / "predictions.jsonl")
    assert len(rows) == 4 and all(r["prediction"] == "blue" for r in rows)
    assert {r.stage for r in backend.requests} == {"answer"}  # no build, no scheduler: retrieval is the baseline
    for r in rows:
        assert len(set(r["selected_ids"])) == len(r["selected_ids"])
        if baseline == "dense":
            assert len(r["selected_ids"]) == 10  # K0 turns: every turn has a cosine
        elif baseline == "bm25":
            assert 0 < len(r["selected_ids"]) <= 10  # only turns sharing a term with the question score
        else:
            assert len(r["selected_ids"]) == TURNS[r["namespace"]]  # every turn of the conversation
    assert result["tokens_by_stage"]["answer"]["calls"] == 4


def test_longmemeval_single_question_run(tmp_path):
    lme = LONGMEMEVAL_MINI
    s = EvalSpec(benchmark="longmemeval", data=str(lme), store=str(tmp_path / "l.sqlite"), out=str(tmp_path / "lme"),
                 progress=False)

    def reply(req):
        if req.stage == "judge":
            return json.dumps({"answer": "yes"})
        return judge_and_answer(req)
    result = EvalRunner(s, cfg(), backend=ScriptedBackend(reply), embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    m = result["metrics"]
    assert m["overall_accuracy"] == 1.0 and m["task_averaged_accuracy"] == 1.0
    rows = read_jsonl(Path(s.out) / "predictions.jsonl")
    assert [r["question_id"] for r in rows] == ["mini-q1", "mini-q2_abs"]
    assert rows[0]["question_type"] == "single-session-user" and rows[0]["answer_session_ids"] == ["answer_mini_dog"]
    assert rows[0]["gold_evidence"] == ["answer_mini_dog:1"] and rows[1]["is_abstention"] is True
    assert m["abstention"]["count"] == 1


def test_retrieval_only_run_on_the_dev_file(tmp_path, dev_locomo):
    s = EvalSpec(benchmark="locomo", data=str(dev_locomo), store=str(tmp_path / "m.sqlite"), out=str(tmp_path / "mf"),
                 limit=5, progress=False, answer=False)
    result = EvalRunner(s, apply_preset("model-free", PipelineConfig()), embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    assert result["tokens_by_stage"] == {} and result["questions"] == 10
    rec = result["metrics"]["overall"]["recall"]["final"]
    assert rec["n"] == 10 and rec["recall"] > 0.3  # the hash embedder still finds much of the evidence
