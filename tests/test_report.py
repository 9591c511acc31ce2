"""Aggregation into benchmark metrics and the token table (bench.aggregate), their Markdown
(bench.report) and the plots."""

from __future__ import annotations

import json
import math

import pytest

from memcompile_local.bench import aggregate as A
from memcompile_local.bench import report as R
from memcompile_local.errors import DataFormatError

from _data_paths import LOCOMO_DEV, LOCOMO_MINI, require_dev


def _locomo_rows():
    return [
        {"question_id": "r1", "category": 4, "question": "Where?", "gold": "Paris", "prediction": "Paris",
         "judge_label": "CORRECT", "selected_ids": ["D1:1"], "gold_evidence": ["D1:1"],
         "recall_stages": {"pool_top10": ["D1:2"], "final": ["D1:1"]}, "tokens": {"answer": 12}},
        {"question_id": "r2", "category": 4, "question": "What?", "gold": "sunrise painting",
         "prediction": "The painting of a sunrise!", "judge_label": "WRONG",
         "gold_evidence": ["D1:2", "D1:3"],
         "recall_stages": {"pool_top10": ["D1:2"], "final": ["D1:2", "D1:3"]}},
        {"question_id": "r3", "category": 1, "question": "Which cities?", "gold": "Paris, Rome, Berlin",
         "prediction": "Rome, Paris", "judge_label": None, "judge_error": "OutputValidationError: bad",
         "gold_evidence": ["D2:1"], "recall_stages": {"pool_top10": [], "final": ["D2:1"]}},
        {"question_id": "r4", "category": 5, "question": "Adversarial?", "gold": None, "prediction": "x",
         "judge_label": None, "gold_evidence": ["D3:1"], "recall_stages": {"pool_top10": [], "final": []}},
        {"question_id": "r5", "category": 3, "question": "Would she?", "gold": "Psychology; counseling",
         "prediction": "psychology", "judge_label": "CORRECT", "gold_evidence": [],
         "recall_stages": {"pool_top10": [], "final": []}},
    ]


def test_locomo_metrics_hand_worked():
    pytest.importorskip("nltk")
    m = A.locomo_metrics(_locomo_rows())
    assert m["benchmark"] == "locomo"
    assert m["count"] == 4 and m["excluded_category5"] == 1
    assert m["stages"] == ["selected", "pool_top10", "final"]
    # Per-question mem0 F1: r1 1; r2 P={the,painting,of,a,sunrise}: 2/5, R 1 -> 4/7;
    # r3 {rome,paris} vs {paris,rome,berlin}: P 1, R 2/3 -> 0.8; r5 "psychology;" keeps its ';' -> 0
    o = m["overall"]
    assert o["mem0_f1"] == pytest.approx((1 + 4 / 7 + 0.8 + 0) / 4)
    # LoCoMo F1: r1 1; r2 0.8; r3 (1 + 1 + 0)/3; r5 cut at ';' -> 1
    assert o["locomo_f1"] == pytest.approx((1 + 0.8 + 2 / 3 + 1) / 4)
    # BLEU-1: r1 1; r2 2/6 (BP 1); r3 hyp [rome , paris] all match, BP exp(1-5/3);
    # r5 [psychology] vs [psychology ; counseling]: BP exp(1-3)
    assert o["mem0_bleu1"] == pytest.approx((1 + 1 / 3 + math.exp(-2 / 3) + math.exp(-2)) / 4)
    # Judge: the failed call counts in n as not correct and is reported as an error.
    assert o["judge"] == {"n": 4, "correct": 2, "errors": 1, "accuracy": 0.5}
    # Recall over questions with gold evidence (r1, r2, r3; r4 is category 5, r5 has none)
    assert o["recall"]["final"] == {"n": 3, "recall": 1.0, "fully_covered": 3, "full_coverage_rate": 1.0}
    pool = o["recall"]["pool_top10"]
    assert pool["n"] == 3 and pool["recall"] == pytest.approx((0 + 0.5 + 0) / 3) and pool["fully_covered"] == 0
    assert o["recall"]["selected"]["n"] == 1  # only r1 carries selected_ids

    single = m["per_category"]["4"]
    assert single["name"] == "single-hop" and single["count"] == 2
    assert single["judge"]["accuracy"] == 0.5
    assert single["mem0_f1"] == pytest.approx((1 + 4 / 7) / 2)
    assert m["per_category_name"]["multi-hop"] is m["per_category"]["1"]
    assert m["per_category"]["1"]["judge"] == {"n": 1, "correct": 0, "errors": 1, "accuracy": 0.0}
    assert m["per_category"]["2"]["count"] == 0 and m["per_category"]["2"]["mem0_f1"] is None
    assert m["overall_without_open_domain"]["count"] == 3
    json.dumps(m)  # JSON-serializable as written to metrics.json


def test_locomo_metrics_without_judge_and_bad_rows():
    pytest.importorskip("nltk")
    rows = [{"question_id": "x", "category": 2, "gold": "2022", "prediction": "2022"}]
    m = A.locomo_metrics(rows)
    assert m["overall"]["judge"]["accuracy"] is None and m["stages"] == []
    with pytest.raises(DataFormatError):
        A.locomo_metrics([{"question_id": "x", "category": 9, "gold": "a", "prediction": "a"}])
    with pytest.raises(DataFormatError):
        A.locomo_metrics([{"question_id": "x", "category": 2, "gold": "a", "prediction": "a",
                           "judge_label": "RIGHT"}])


@pytest.mark.parametrize("path", [LOCOMO_MINI, LOCOMO_DEV], ids=["fixture", "dev"])
def test_locomo_metrics_on_gold_answers(path):
    pytest.importorskip("nltk")
    data = json.loads(require_dev(path).read_text())
    rows = []
    for conv in data:
        for i, qa in enumerate(conv["qa"]):
            rows.append({"question_id": f"{conv['sample_id']}:{i}", "category": qa["category"],
                         "gold": qa.get("answer"), "prediction": qa.get("answer"),
                         "gold_evidence": qa.get("evidence", []), "selected_ids": qa.get("evidence", [])})
    m = A.locomo_metrics(rows)
    n5 = sum(1 for r in rows if r["category"] == 5)
    assert m["excluded_category5"] == n5 and m["count"] == len(rows) - n5
    # The gold answer scores 1 against itself in the mem0 convention.
    assert m["overall"]["mem0_f1"] == 1.0 and m["overall"]["mem0_bleu1"] == 1.0
    assert m["overall"]["recall"]["selected"]["recall"] == 1.0
    # Single-hop LoCoMo F1 too; open-domain gold is cut at ';' while the prediction is not.
    assert m["per_category"]["4"]["locomo_f1"] == 1.0


def _lme_rows():
    return [
        {"question_id": "a_abs", "question_type": "single-session-user", "gold": "never said",
         "prediction": "I don't know", "judge_label": "CORRECT"},
        {"question_id": "u1", "question_type": "single-session-user", "gold": "red", "prediction": "blue",
         "judge_label": "WRONG", "answer_session_ids": ["s1"], "gold_evidence": ["s1:2"],
         "selected_ids": ["s1:0"]},
        {"question_id": "t1", "question_type": "temporal-reasoning", "gold": "18 days",
         "prediction": "19 days", "judge_label": "CORRECT", "answer_session_ids": ["s1", "s2"],
         "gold_evidence": ["s2:1"], "selected_ids": ["s2:1", "s3:0"]},
        {"question_id": "t2", "question_type": "temporal-reasoning", "gold": "3", "prediction": "3",
         "judge_label": None, "judge_error": "TransportError: down"},
        {"question_id": "k1", "category": "knowledge-update", "gold": "Tokyo", "prediction": "Tokyo",
         "judge_label": "CORRECT"},
    ]


def test_longmemeval_metrics_hand_worked():
    m = A.longmemeval_metrics(_lme_rows())
    assert m["benchmark"] == "longmemeval" and m["count"] == 5
    assert m["per_type"]["single-session-user"]["judge"]["accuracy"] == 0.5
    assert m["per_type"]["temporal-reasoning"]["judge"] == {"n": 2, "correct": 1, "errors": 1, "accuracy": 0.5}
    assert m["per_type"]["knowledge-update"]["judge"]["accuracy"] == 1.0
    # mean of the three judged types: (0.5 + 0.5 + 1) / 3
    assert m["task_averaged_accuracy"] == pytest.approx(2 / 3)
    assert m["types_missing"] == ["single-session-assistant", "single-session-preference", "multi-session"]
    assert m["overall_accuracy"] == pytest.approx(3 / 5)
    assert m["abstention"]["count"] == 1 and m["abstention"]["judge"]["accuracy"] == 1.0
    # Session recall: u1 1/1, t1 1/2 -> 0.75; turn recall: u1 0, t1 1 -> 0.5
    sel = m["recall"]["selected"]
    assert sel["session"]["n"] == 2 and sel["session"]["recall"] == pytest.approx(0.75)
    assert sel["turn"]["recall"] == pytest.approx(0.5) and sel["turn"]["fully_covered"] == 1
    # mem0 F1 over answerable rows: u1 0, t1 {19, days} vs {18, days} -> 0.5, t2 1, k1 1
    assert m["mem0_f1"] == pytest.approx((0 + 0.5 + 1 + 1) / 4)
    with pytest.raises(DataFormatError):
        A.longmemeval_metrics([{"question_id": "z", "question_type": "open-domain"}])


def test_token_table_layout_and_arithmetic():
    totals = {"fact": 100, "metadata": 300, "intent": {"prompt": 40, "completion": 10, "calls": 2},
              "schedule": 200, "frontier": 150, "answer": 200, "judge": 500, "embedding": 77}
    t = A.token_table(totals, 10)
    labels = [r["label"] for r in t["rows"]]
    assert labels == ["Fact extraction", "Metadata extraction", "Cold-build subtotal", "Query intent",
                      "Packet scheduler", "Frontier", "Answer generation", "Serving subtotal",
                      "Non-judge end-to-end", "Judge (excluded)", "Embeddings (excluded)"]
    by = {r["key"]: r for r in t["rows"]}
    assert by["cold_build"]["total"] == 400 and by["serving"]["total"] == 600
    assert t["non_judge_total"] == 1000 and t["non_judge_per_question"] == 100
    assert by["intent"]["total"] == 50 and by["intent"]["share"] == pytest.approx(0.05)
    assert by["fact"]["per_question"] == 10 and by["metadata"]["share"] == pytest.approx(0.3)
    assert by["non_judge"]["share"] == 1.0
    assert by["judge"]["total"] == 500 and by["judge"]["share"] is None
    assert by["embedding"]["total"] == 77 and t["judge_total"] == 500

    md = R.token_table_markdown(t)
    assert "| **Cold-build subtotal** | 400 | 40 | 40.0% |" in md
    assert "| Judge (excluded) | 500 | 50 | excluded |" in md


def test_token_table_combined_mode_and_other_stages():
    t = A.token_table({"extract": 300, "intent": 100, "pursuit": 100}, 4)
    labels = [r["label"] for r in t["rows"]]
    assert labels[:2] == ["Combined extraction", "Cold-build subtotal"]
    assert "Other (pursuit)" in labels and "Fact extraction" not in labels
    by = {r["key"]: r for r in t["rows"]}
    assert by["cold_build"]["share"] == pytest.approx(0.6)
    assert t["non_judge_total"] == 500 and by["pursuit"]["per_question"] == 25
    empty = A.token_table({}, 0)
    assert empty["non_judge_per_question"] is None and empty["rows"][0]["share"] is None
    with pytest.raises(DataFormatError):
        A.token_table({"fact": -1}, 1)
    with pytest.raises(DataFormatError):
        A.token_table({"fact": "many"}, 1)


def test_markdown_report_states_definitions(tmp_path):
    pytest.importorskip("nltk")
    m = A.locomo_metrics(_locomo_rows())
    table = A.token_table({"fact": 100, "metadata": 300, "answer": 600, "judge": 50}, 4)
    path = R.write_markdown_report(tmp_path / "out" / "report.md", m,
                                   {"model": "smollm2", "evidence": {"k0": 10}}, table,
                                   {"Custom score": "A definition supplied by the runner."})
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# LoCoMo benchmark report")
    assert "- `evidence.k0`: 10" in text and "- `model`: smollm2" in text
    # single-hop row: count 2, mem0 F1 (1 + 4/7)/2 = 78.57%, judge 50.00
    assert "| single-hop | 2 | 78.57 |" in text
    assert "| overall | 4 |" in text
    assert "Category 5 (adversarial) questions left out: 1." in text
    assert "| final | 3 | 100.00 | 3/3 |" in text
    assert "Cold-build subtotal" in text and "| **Non-judge end-to-end** | 1,000 | 250 | 100.0% |" in text
    defs = text.split("## Metric definitions", 1)[1]
    for name in ("F1 (mem0)", "BLEU-1 (mem0)", "F1 (LoCoMo)", "Judge", "Gold recall", "Non-judge tokens",
                 "Custom score"):
        assert f"**{name}**" in defs
    assert "|P∩G|/|P|" in defs and "Porter" in defs and "Tokenizer in this run:" in defs
    assert "**Session recall**" not in defs  # only the benchmark's own metrics are defined

    lme = R.write_markdown_report(tmp_path / "lme.md", A.longmemeval_metrics(_lme_rows()), "plain text config")
    body = lme.read_text(encoding="utf-8")
    assert "# LongMemEval benchmark report" in body and "plain text config" in body
    assert "Task-averaged accuracy: 66.67." in body and "| abstention (_abs) | 1 | 100.00 | 0 |" in body
    assert "| selected | 75.00 | 1/2 | 50.00 | 1/2 |" in body
    lme_defs = body.split("## Metric definitions", 1)[1]
    for name in ("Judge", "Task-averaged accuracy", "Overall accuracy", "Abstention accuracy",
                 "Session recall", "Turn recall"):
        assert f"**{name}**" in lme_defs
    assert "off-by-one" in lme_defs
    assert "**F1 (LoCoMo)**" not in lme_defs and "**Non-judge tokens**" not in lme_defs  # no token table


def test_compare_table_and_run_point():
    pytest.importorskip("nltk")
    m = A.locomo_metrics(_locomo_rows())
    runs = [
        {"name": "full", "metrics": m, "token_table": A.token_table({"answer": 800}, 4),
         "judge": {"backend": "openai", "model": "gpt-4o-mini", "prompt_version": "locomo-judge-v1"}},
        {"name": "lme", "metrics": A.longmemeval_metrics(_lme_rows()), "tokens_per_question": 50},
    ]
    md = R.compare_table(runs)
    assert "| full | 4 |" in md and "| openai/gpt-4o-mini (locomo-judge-v1) | final | 100.00 | 3/3 | 200 |" in md
    assert "| lme | 5 | 66.67 | 60.00 | 100.00 | none | selected | 75.00 | 50.00 | 50 |" in md
    assert A.run_point(runs[0]) == ("full", 200.0, 0.5, "Judge")
    assert A.run_point(runs[1]) == ("lme", 50.0, pytest.approx(2 / 3), "Judge (task-averaged)")
    unjudged = A.locomo_metrics([{"question_id": "x", "category": 2, "gold": "a b", "prediction": "a"}])
    assert A.run_point({"name": "u", "metrics": unjudged})[2:] == (pytest.approx(2 / 3), "F1 (mem0)")
    with pytest.raises(DataFormatError):
        R.compare_table([{"name": "?", "metrics": {"benchmark": "other"}}])


def test_quality_vs_tokens_plot_writes_png(tmp_path):
    pytest.importorskip("nltk")
    pytest.importorskip("matplotlib")
    from memcompile_local.bench.plots import quality_vs_tokens_plot

    m = A.locomo_metrics(_locomo_rows())
    runs = [{"name": "a", "metrics": m, "tokens_per_question": 100},
            {"name": "b", "metrics": m, "tokens_per_question": 300},
            {"name": "no tokens", "metrics": m}]
    out = quality_vs_tokens_plot(runs, tmp_path / "plots" / "q.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    with pytest.raises(DataFormatError):
        quality_vs_tokens_plot([{"name": "x", "metrics": m}], tmp_path / "none.png")


def test_plot_without_matplotlib_raises_missing_extra(monkeypatch, tmp_path):
    import sys

    from memcompile_local.bench.plots import quality_vs_tokens_plot
    from memcompile_local.errors import MissingExtraError

    metrics = A.longmemeval_metrics(_lme_rows())  # needs no nltk
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError) as info:
        quality_vs_tokens_plot([{"name": "a", "metrics": metrics, "tokens_per_question": 1}], tmp_path / "x.png")
    assert info.value.extra == "bench"
