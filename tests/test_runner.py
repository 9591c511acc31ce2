"""The benchmark runner on the shipped LoCoMo/LongMemEval fixtures with a scripted backend: run
folder contents, resumability after an interruption, and exact token totals (one retrieval-only
run on the real dev file when ../shared/data is present)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.bench.health import ServerDownError, check_server
from memcompile_local.bench.judge_model import resolve_judge
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.config import JudgeConfig, ModelConfig, PipelineConfig
from memcompile_local.errors import ConfigError, TransportError
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.llm.registry import load_backend

from _data_paths import LOCOMO_MINI, LONGMEMEVAL_MINI
from _fake_openai import FakeOpenAIServer, Reply, chat_body, closed_port
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
    # The scripted backend also judges: a self-judge the tests accept explicitly.
    return apply_preset("A1", PipelineConfig()).replace(extraction={"extractor": "rule"},
                                                        judge={"allow_self_judge": True})


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
    first_attempt = read_jsonl(Path(s.out) / "attempts.jsonl")
    assert [a["completed"] for a in first_attempt] == [False] and first_attempt[0]["total_s"] > 0
    second = ScriptedBackend(judge_and_answer)
    out = EvalRunner(s, cfg(), backend=second, embedder=emb, echo=lambda s: None).run()
    # Regression: the resumed run reported only its own seconds as the wall time.
    attempts = read_jsonl(Path(s.out) / "attempts.jsonl")
    assert [a["completed"] for a in attempts] == [False, True] and out["attempts"] == 2
    assert out["wall_s"] == pytest.approx(sum(a["total_s"] for a in attempts), abs=0.02)
    assert out["wall_s"] > out["phases_s"]["total_s"]
    assert "over 2 attempt(s)" in (Path(s.out) / "report.md").read_text()
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
    assert rec["n"] == 10 and 0.3 < rec["recall"] <= 1
    # Regression: the report named the default backend and model although none ran.
    report = (tmp_path / "mf" / "report.md").read_text()
    assert "- `backend`: none (no model call)" in report and "- `model`: none" in report
    assert "llamacpp" not in report and "smollm2" not in report
    assert "- `judge`: none (not judged)" in report
    assert "- `embedder`: hash (dim 64)\n" in report  # the embedder that ran (injected), not the config's
    config = json.loads((tmp_path / "mf" / "config.json").read_text())
    assert config["model_identity"] is None and config["judge"] is None


def test_plan_is_printed_before_the_run_and_bounds_the_calls(tmp_path):
    lines: list[str] = []
    backend = ScriptedBackend(judge_and_answer)
    result = EvalRunner(spec(tmp_path, "plan", "p.sqlite"), cfg(), backend=backend, embedder=HashEmbedder(dim=64),
                        echo=lines.append).run()
    text = "\n".join(lines)
    assert "plan: build 2 memories (60 turns to extract: rule extractor, no model call)" in text
    assert "answer 6 questions (per question: " in text and "judge 6 answers" in text
    config = json.loads((tmp_path / "plan" / "config.json").read_text())
    planned = config["plan"]["model_calls"]
    assert f"at most {planned} new model calls" in text
    made = len(backend.requests)
    assert 0 < made <= planned  # an upper bound of what the run really asked
    assert text.index("plan:") < text.index("wrote ")
    assert result["questions"] == 6
    # A second run of the same folder plans nothing new to build or answer.
    again: list[str] = []
    EvalRunner(spec(tmp_path, "plan", "p.sqlite"), cfg(), backend=ScriptedBackend(judge_and_answer),
               embedder=HashEmbedder(dim=64), echo=again.append).run()
    assert "build nothing new; 2 already built" in "\n".join(again) and "answer 0 questions" in "\n".join(again)


class FailingAnswers:
    """Scripted replies, except that every answer call fails like a server that went away."""

    def __init__(self):
        self.inner = ScriptedBackend(self.reply)

    @staticmethod
    def reply(req):
        if req.stage == "answer":
            return TransportError("connection refused", retryable=True)
        return judge_and_answer(req)

    def identity(self):
        return self.inner.identity()

    def generate(self, requests):
        return self.inner.generate(requests)


def test_failed_questions_are_reported_and_their_waste_counted(tmp_path):
    """Regression: every question failing made the summary raise TypeError, and the waste
    table was empty because failed calls are logged under the questions' child run ids."""
    lines: list[str] = []
    s = spec(tmp_path, "fail", "f.sqlite")
    result = EvalRunner(s, cfg(), backend=FailingAnswers(), embedder=HashEmbedder(dim=64), echo=lines.append).run()
    assert len(result["failed_questions"]) == 6 and result["questions"] == 0
    assert result["waste_by_stage"]["answer"]["calls"] == 6
    assert "6 questions failed with model errors (0 of 6 answered)" in "\n".join(lines)
    assert "non-judge tokens per question: n/a" in "\n".join(lines)
    assert "- `wasted calls`: answer 6" in (Path(s.out) / "report.md").read_text()


def test_a_self_judge_is_refused_unless_allowed(tmp_path):
    s = spec(tmp_path, "self", "s.sqlite")
    plain = apply_preset("A1", PipelineConfig()).replace(extraction={"extractor": "rule"})
    with pytest.raises(ConfigError, match="the judge would be the answer model itself .*--allow-self-judge"):
        EvalRunner(s, plain, backend=ScriptedBackend(judge_and_answer), embedder=HashEmbedder(dim=64),
                   echo=lambda s: None).run()
    assert not Path(s.out).exists()  # refused before any work
    # A judge with a model of its own: named in config.json, report.md and metrics.json.
    judge = ScriptedBackend(judge_and_answer)
    answerer = ScriptedBackend(judge_and_answer)
    result = EvalRunner(s, plain, backend=answerer, judge_backend=judge, embedder=HashEmbedder(dim=64),
                        echo=lambda s: None).run()
    assert {r.stage for r in judge.requests} == {"judge"} and "judge" not in {r.stage for r in answerer.requests}
    info = json.loads((Path(s.out) / "config.json").read_text())["judge"]
    assert info["prompt_version"] == "locomo-judge-v2" and info["self_judge"] is False
    assert result["judge"] == info
    assert "- `judge`: scripted" in (Path(s.out) / "report.md").read_text()
    # Allowed explicitly, the report says that the answer model judged itself.
    s2 = spec(tmp_path, "self2", "s.sqlite")
    EvalRunner(s2, cfg(), backend=ScriptedBackend(judge_and_answer), embedder=HashEmbedder(dim=64),
               echo=lambda s: None).run()
    assert "the answer model judging itself, allowed explicitly" in (Path(s2.out) / "report.md").read_text()


def test_judge_section_resolution():
    answer = ModelConfig(backend="openai", model="Qwen/Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:8000/v1",
                         options={"server_kind": "vllm"})
    judge = resolve_judge(answer, JudgeConfig(model="gpt-4o-mini"))
    # The judge does not inherit the answer model's server, key variable or server options.
    assert (judge.backend, judge.model, judge.base_url, judge.api_key_env) == (
        "openai", "gpt-4o-mini", None, "OPENAI_API_KEY")
    assert judge.options == {}  # another server (OpenAI's API): the answer server's options stay behind
    other = resolve_judge(answer, JudgeConfig(backend="llamacpp", model="qwen2.5-1.5b"))
    assert other.options == {} and other.base_url is None
    with pytest.raises(ConfigError, match="judge would be the answer model itself"):
        resolve_judge(answer, JudgeConfig())
    with pytest.raises(ConfigError):  # same backend, model and server named again is still itself
        resolve_judge(answer, JudgeConfig(model=answer.model, base_url=answer.base_url))
    assert resolve_judge(answer, JudgeConfig(allow_self_judge=True)) == answer


def test_a_server_that_is_down_stops_the_run_before_any_question(tmp_path):
    pytest.importorskip("openai")
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    c = cfg().replace(model={"backend": "openai", "model": "m", "base_url": url, "options": {"max_retries": 0}},
                      judge={"allow_self_judge": True})
    s = spec(tmp_path, "down", "d.sqlite")
    with pytest.raises(ServerDownError, match=f"answer model server at {url}"):
        EvalRunner(s, c, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    assert not (Path(s.out) / "answers.jsonl").exists()
    # A live server passes the one-token check (and only that one call is made here).
    seen = []

    def reply(path, body, hit):
        seen.append(body)
        return Reply(body=chat_body("OK", prompt_tokens=5, completion_tokens=1))

    with FakeOpenAIServer(reply) as srv:
        backend = load_backend("openai", model="m", base_url=srv.base_url, max_retries=0)
        assert check_server(backend, role="judge") == srv.base_url
    assert len(seen) == 1 and seen[0]["max_tokens"] == 1
    assert check_server(ScriptedBackend(judge_and_answer), role="answer model") is None  # not a server


def test_a_run_folder_of_another_configuration_or_code_version_is_not_resumed(tmp_path, monkeypatch):
    from memcompile_local.address import extract_rule
    from memcompile_local.bench import runner as R

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


def test_cli_eval_judge_flags(tmp_path, capsys):
    from memcompile_local.cli import main

    base = ["eval", "locomo", "--data", str(DEV), "--store", str(tmp_path / "c.sqlite"), "--limit", "2", "--quiet"]
    # The default judge is the answer model: refused before any model is loaded, with the way out.
    assert main(base + ["--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "the judge would be the answer model itself (llamacpp smollm2-135m)" in err and "--allow-self-judge" in err
    assert not (tmp_path / "a").exists()
    # A model-free retrieval-only run needs no judge and no model.
    assert main(base + ["--out", str(tmp_path / "b"), "--preset", "model-free", "--embedder", "hash",
                        "--retrieval-only"]) == 0
    assert "at most 0 new model calls" in capsys.readouterr().out
    # --judge-* flags fill the config's judge section (part of the run id).
    from argparse import Namespace

    from memcompile_local.bench.runner import judge_section_from_args

    args = Namespace(judge_backend="openai", judge_model="gpt-4o-mini", judge_base_url="http://127.0.0.1:9/v1",
                     judge_api_key_env="JUDGE_KEY", allow_self_judge=True)
    j = judge_section_from_args(args, PipelineConfig()).judge
    assert (j.backend, j.model, j.base_url, j.api_key_env, j.allow_self_judge) == (
        "openai", "gpt-4o-mini", "http://127.0.0.1:9/v1", "JUDGE_KEY", True)


def test_eval_over_http_with_a_judge_of_its_own(tmp_path):
    """Answer model and judge are two models of an OpenAI-compatible server on 127.0.0.1: one
    health call each, then answers from one model and judgments from the other."""
    pytest.importorskip("openai")
    calls: list[tuple[str, int | None]] = []

    def reply(path, body, hit):
        calls.append((body["model"], body.get("max_tokens")))
        if body["model"] == "judge-m" and body.get("max_tokens") != 1:
            return Reply(body=chat_body(json.dumps({"label": "CORRECT"})))
        return Reply(body=chat_body("Biscuit"))

    with FakeOpenAIServer(reply) as srv:
        c = apply_preset("model-free", PipelineConfig()).replace(
            model={"backend": "openai", "model": "answer-m", "base_url": srv.base_url, "concurrency": 4,
                   "options": {"max_retries": 0}},
            judge={"model": "judge-m", "base_url": srv.base_url})
        lines: list[str] = []
        s = spec(tmp_path, "http", "h.sqlite")
        result = EvalRunner(s, c, embedder=HashEmbedder(dim=64), echo=lines.append).run()
    health = [m for m, mt in calls if mt == 1]
    assert health == ["answer-m", "judge-m"]  # one check per server role, before the work
    assert calls.index(("answer-m", 1)) == 0
    assert sum(m == "answer-m" for m, mt in calls if mt != 1) == 6
    assert sum(m == "judge-m" for m, mt in calls if mt != 1) == 6
    assert result["metrics"]["overall"]["judge"]["accuracy"] == 1.0
    info = json.loads((Path(s.out) / "config.json").read_text())["judge"]
    assert (info["backend"], info["model"], info["base_url"], info["self_judge"]) == (
        "openai", "judge-m", srv.base_url, False)
    report = (Path(s.out) / "report.md").read_text()
    assert f"- `judge`: openai judge-m, prompt locomo-judge-v2, at {srv.base_url}" in report


def test_a_small_answer_model_is_evaluated_with_its_small_model_settings(tmp_path):
    """Regression: eval answered every model with the full prompts and all blocks, so a run of
    the embedded SmolLM2 scored a prompt that Memory.answer never sends it."""
    def restating(req):
        if req.stage == "answer":
            return "The answer is blue."
        return judge_and_answer(req)

    small = cfg()  # the default model section is the embedded SmolLM2 ("auto" -> small)
    assert (small.model.backend, small.model.model) == ("llamacpp", "smollm2-135m")
    s = spec(tmp_path, "small", "s.sqlite")
    backend = ScriptedBackend(restating)
    EvalRunner(s, small, backend=backend, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    answers = [r for r in backend.requests if r.stage == "answer"]
    assert answers and all(r.prompt_version == "answer-small/2" and r.max_tokens == 16 for r in answers)
    for r in answers:
        evidence = r.messages[-1].content.split("\n\nQuestion: ")[0]
        assert evidence.count("\n\n") == 0  # the first block only
    rows = read_jsonl(Path(s.out) / "predictions.jsonl")
    assert rows and all(r["prediction"] == "blue" for r in rows)  # restatement dropped
    config = json.loads((Path(s.out) / "config.json").read_text())
    assert config["answer"]["prompt"] == "answer-small/2" and config["answer"]["max_blocks"] == 1

    full = spec(tmp_path, "full", "f.sqlite")
    EvalRunner(full, cfg().replace(model={"answer_prompt": "full"}), backend=ScriptedBackend(judge_and_answer),
               embedder=HashEmbedder(dim=64), echo=lambda s: None).run()
    full_config = json.loads((Path(full.out) / "config.json").read_text())
    assert full_config["answer"]["prompt"] == "answer/temporal" and full_config["answer"]["max_blocks"] is None
    assert full_config["run_id"] != config["run_id"]
