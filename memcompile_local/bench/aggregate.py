"""Aggregate per-question results into benchmark metrics and token tables (numbers only;
``bench/report.py`` renders them as Markdown).

Input rows are per-question mappings, the lines of a run's ``predictions.jsonl``:

``question_id``, ``category`` (LoCoMo int 1-5; LongMemEval rows may use ``question_type``),
``question``, ``gold``, ``prediction``, ``selected_ids`` (packet/turn ids handed to the
reader), ``gold_evidence`` (gold packet ids; LongMemEval: ``has_answer`` turn ids),
``answer_session_ids`` (LongMemEval), ``recall_stages`` (``{stage name: [ids]}``, e.g.
``{"pool_top10": [...], "a0": [...], "final": [...]}``), ``tokens`` (``{stage: n}``),
``judge_label`` ("CORRECT" / "WRONG" / None) and ``judge_error`` (text of a failed judge
call, else None or absent).

Rates are fractions in [0, 1] in every returned dict. Judge accuracy counts a failed judge
call as not correct and reports the number of such calls next to it; it is None when no row
of a group was judged at all.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from memcompile_local.bench.coverage import gold_recall, session_recall, turn_recall
from memcompile_local.bench.judge import LONGMEMEVAL_TYPES
from memcompile_local.bench.metrics import (
    LOCOMO_CATEGORY_NAMES,
    SCORED_LOCOMO_CATEGORIES,
    locomo_category,
    locomo_f1,
    mem0_bleu1,
    mem0_f1,
)
from memcompile_local.errors import DataFormatError

__all__ = [
    "score_locomo_row",
    "locomo_metrics",
    "longmemeval_metrics",
    "token_table",
    "add_judge_totals",
    "tokens_per_question",
    "run_point",
    "final_stage",
    "QUALITY_METRICS",
    "quality_value",
    "quality_size",
]

_JUDGED = ("CORRECT", "WRONG")


# --------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------

def _mean(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are not None (None when there are none: e.g. a retrieval-only run)."""
    kept = [v for v in values if v is not None]
    return (sum(kept) / len(kept)) if kept else None


def _judge_status(row: Mapping[str, Any]) -> str | None:
    """"correct", "wrong", "error", or None when the row was not judged."""
    if row.get("judge_error"):
        return "error"
    label = row.get("judge_label")
    if label is None:
        return None
    if label not in _JUDGED:
        raise DataFormatError("<prediction rows>", f"question {row.get('question_id')!r}.judge_label",
                              "CORRECT, WRONG or null", f"got {label!r}")
    return "correct" if label == "CORRECT" else "wrong"


def _judge_block(statuses: Sequence[str | None]) -> dict[str, Any]:
    judged = [s for s in statuses if s is not None]
    correct = sum(1 for s in judged if s == "correct")
    errors = sum(1 for s in judged if s == "error")
    return {"n": len(judged), "correct": correct, "errors": errors,
            "accuracy": (correct / len(judged)) if judged else None}


def _stage_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``selected`` (when rows carry selected_ids) then recall_stages keys in first-seen order."""
    names: list[str] = []
    if any("selected_ids" in r for r in rows):
        names.append("selected")
    for row in rows:
        for stage in (row.get("recall_stages") or {}):
            if stage not in names:
                names.append(stage)
    return names


def _stage_ids(row: Mapping[str, Any], stage: str) -> Sequence[Any] | None:
    """The ids of ``stage`` for this row, or None when the row lacks that stage."""
    if stage == "selected" and "selected_ids" in row and "selected" not in (row.get("recall_stages") or {}):
        return row.get("selected_ids") or ()
    stages = row.get("recall_stages") or {}
    if stage in stages:
        return stages[stage] or ()
    return None


def _recall_block(pairs: Sequence[tuple[Sequence[Any], Sequence[Any]]], recall_fn=gold_recall) -> dict[str, Any]:
    """Mean recall and full coverage over (selected, gold) pairs that have gold."""
    recalls: list[float] = []
    full = 0
    for selected, gold in pairs:
        value = recall_fn(selected, gold)
        if value is None:
            continue
        recalls.append(value)
        full += 1 if value == 1.0 else 0  # exactly 1.0 iff every gold id was selected
    n = len(recalls)
    return {"n": n, "recall": _mean(recalls), "fully_covered": full,
            "full_coverage_rate": (full / n) if n else None}


# --------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------

def score_locomo_row(row: Mapping[str, Any]) -> dict[str, float]:
    """``{"mem0_f1", "mem0_bleu1", "locomo_f1"}`` of one LoCoMo row of category 1-4.

    A row without a prediction (a retrieval-only run) scores None, not zero.
    """
    cat = locomo_category(row.get("category"), f"question {row.get('question_id')!r}.category")
    prediction, gold = row.get("prediction"), row.get("gold")
    if prediction is None:
        return {"mem0_f1": None, "mem0_bleu1": None, "locomo_f1": None}
    return {
        "mem0_f1": mem0_f1(prediction, gold),
        "mem0_bleu1": mem0_bleu1(prediction, gold),
        "locomo_f1": locomo_f1(prediction, gold, cat),
    }


def _locomo_group(name: str, items: list[tuple[Mapping[str, Any], dict[str, float]]],
                  stages: Sequence[str]) -> dict[str, Any]:
    recall: dict[str, Any] = {}
    for stage in stages:
        pairs = []
        for row, _ in items:
            ids = _stage_ids(row, stage)
            if ids is not None:
                pairs.append((ids, row.get("gold_evidence") or ()))
        recall[stage] = _recall_block(pairs)
    return {
        "name": name,
        "count": len(items),
        "mem0_f1": _mean([s["mem0_f1"] for _, s in items]),
        "mem0_bleu1": _mean([s["mem0_bleu1"] for _, s in items]),
        "locomo_f1": _mean([s["locomo_f1"] for _, s in items]),
        "judge": _judge_block([_judge_status(r) for r, _ in items]),
        "recall": recall,
    }


def locomo_metrics(rows: Iterable[Mapping[str, Any]], *, left_out_category5: int = 0) -> dict[str, Any]:
    """LoCoMo metrics over categories 1-4; category 5 rows are counted and left out.

    ``left_out_category5``: category 5 questions left out before there were rows (``eval``
    never answers them), added to the count of category 5 rows.

    Returns ``{"benchmark": "locomo", "count", "excluded_category5", "stages",
    "per_category": {"1".."4": group}, "per_category_name": {"multi-hop": group, ...},
    "overall": group, "overall_without_open_domain": group}``. A group holds ``name``,
    ``count``, the means of ``mem0_f1``, ``mem0_bleu1`` and ``locomo_f1``, ``judge``
    (``n``, ``correct``, ``errors``, ``accuracy``) and ``recall`` (per stage: ``n`` questions
    with gold evidence, mean ``recall``, ``fully_covered`` count and rate).
    """
    rows = list(rows)
    stages = _stage_names(rows)
    scored: dict[int, list[tuple[Mapping[str, Any], dict[str, float]]]] = {c: [] for c in SCORED_LOCOMO_CATEGORIES}
    if left_out_category5 < 0:
        raise ValueError(f"left_out_category5: expected a count of 0 or more, got {left_out_category5}")
    excluded = left_out_category5
    for row in rows:
        cat = locomo_category(row.get("category"), f"question {row.get('question_id')!r}.category")
        if cat == 5:
            excluded += 1
            continue
        scored[cat].append((row, score_locomo_row(row)))
    per_category = {str(c): _locomo_group(LOCOMO_CATEGORY_NAMES[c], scored[c], stages)
                    for c in SCORED_LOCOMO_CATEGORIES}
    everything = [item for c in SCORED_LOCOMO_CATEGORIES for item in scored[c]]
    without_open = [item for c in SCORED_LOCOMO_CATEGORIES if c != 3 for item in scored[c]]
    return {
        "benchmark": "locomo",
        "count": len(everything),
        "excluded_category5": excluded,
        "stages": stages,
        "per_category": per_category,
        "per_category_name": {g["name"]: g for g in per_category.values()},
        "overall": _locomo_group("overall", everything, stages),
        "overall_without_open_domain": _locomo_group("overall without open-domain", without_open, stages),
    }


# --------------------------------------------------------------------------------------
# LongMemEval
# --------------------------------------------------------------------------------------

def _lme_type(row: Mapping[str, Any]) -> str:
    qtype = row.get("question_type", row.get("category"))
    if qtype not in LONGMEMEVAL_TYPES:
        raise DataFormatError("<prediction rows>", f"question {row.get('question_id')!r}.question_type",
                              f"one of {', '.join(LONGMEMEVAL_TYPES)}", f"got {qtype!r}")
    return str(qtype)


def _is_abstention(row: Mapping[str, Any]) -> bool:
    return "_abs" in str(row.get("question_id", ""))


def longmemeval_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """LongMemEval metrics: judge accuracy per type, task-averaged, overall and on abstention.

    ``task_averaged_accuracy`` is the mean of the per-type accuracies of the six official
    types (over the types that have judged questions; ``types_missing`` lists the others).
    ``overall_accuracy`` is over all judged questions. Abstention questions (id containing
    ``_abs``) count in their type and overall, and are also reported apart. Evidence recall
    (per stage: ``session`` = share of answer sessions with a selected turn, ``turn`` =
    recall of ``has_answer`` turns) is computed over non-abstention questions, since an
    unanswerable question has no evidence to find. ``mem0_f1`` is the mean set F1 over
    non-abstention questions, a judge-free fallback.
    """
    rows = list(rows)
    stages = _stage_names(rows)
    by_type: dict[str, list[Mapping[str, Any]]] = {t: [] for t in LONGMEMEVAL_TYPES}
    for row in rows:
        by_type[_lme_type(row)].append(row)
    per_type = {}
    for qtype in LONGMEMEVAL_TYPES:
        group = by_type[qtype]
        per_type[qtype] = {"count": len(group), "judge": _judge_block([_judge_status(r) for r in group])}
    accuracies = [per_type[t]["judge"]["accuracy"] for t in LONGMEMEVAL_TYPES
                  if per_type[t]["judge"]["accuracy"] is not None]
    missing = [t for t in LONGMEMEVAL_TYPES if per_type[t]["judge"]["accuracy"] is None]
    overall = _judge_block([_judge_status(r) for r in rows])
    abstention_rows = [r for r in rows if _is_abstention(r)]
    answerable = [r for r in rows if not _is_abstention(r)]
    recall: dict[str, Any] = {}
    for stage in stages:
        session_pairs, turn_pairs = [], []
        for row in answerable:
            ids = _stage_ids(row, stage)
            if ids is None:
                continue
            session_pairs.append((ids, row.get("answer_session_ids") or ()))
            turn_pairs.append((ids, row.get("gold_evidence") or ()))
        recall[stage] = {"session": _recall_block(session_pairs, session_recall),
                         "turn": _recall_block(turn_pairs, turn_recall)}
    return {
        "benchmark": "longmemeval",
        "count": len(rows),
        "stages": stages,
        "per_type": per_type,
        "task_averaged_accuracy": _mean(accuracies),
        "types_missing": missing,
        "overall_accuracy": overall["accuracy"],
        "overall_judge": overall,
        "abstention": {"count": len(abstention_rows),
                       "judge": _judge_block([_judge_status(r) for r in abstention_rows])},
        "mem0_f1": _mean([mem0_f1(r.get("prediction"), r.get("gold")) for r in answerable]),
        "recall": recall,
    }


# --------------------------------------------------------------------------------------
# Token accounting (MemCompile paper, Appendix E, Table 8)
# --------------------------------------------------------------------------------------

_COLD_STAGES = (("fact", "Fact extraction"), ("metadata", "Metadata extraction"),
                ("extract", "Combined extraction"))
_SERVING_STAGES = (("intent", "Query intent"), ("schedule", "Packet scheduler"),
                   ("frontier", "Frontier"), ("answer", "Answer generation"))
_EMBEDDING_KEYS = ("embedding", "embeddings", "embed")


def _stage_total(value: Any, stage: str) -> int:
    """An int, or a ``{"prompt", "completion"[, "calls"]}`` / ``{"tokens"}`` mapping."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise DataFormatError("<token totals>", stage, "a non-negative token count", f"got {value!r}")
        return int(value)
    if isinstance(value, Mapping):
        if "tokens" in value:
            return _stage_total(value["tokens"], stage)
        return _stage_total(value.get("prompt", 0), stage) + _stage_total(value.get("completion", 0), stage)
    raise DataFormatError("<token totals>", stage, "a token count or a prompt/completion mapping",
                          f"got {value!r}")


def token_table(totals_by_stage: Mapping[str, Any], n_questions: int) -> dict[str, Any]:
    """Generation-token accounting laid out like the paper's Table 8.

    ``totals_by_stage`` maps stage -> tokens (an int, or the client's
    ``{"prompt", "completion", "calls"}`` row, summed). Rows, in order: fact and metadata
    extraction (and the combined ``extract`` stage when present), the cold-build subtotal,
    query intent, packet scheduler, frontier, answer generation, any other non-judge stage,
    the serving subtotal and the non-judge end-to-end total; then judge and embeddings,
    which are kept out of every subtotal. Each row has ``total``, ``per_question``
    (total / ``n_questions``) and ``share`` of the non-judge total (None for the excluded
    rows). Also returns ``non_judge_total`` and ``non_judge_per_question``.
    """
    if not isinstance(n_questions, int) or n_questions < 0:
        raise DataFormatError("<token table>", "n_questions", "a non-negative int", f"got {n_questions!r}")
    totals = {str(k): _stage_total(v, str(k)) for k, v in totals_by_stage.items()}
    known = {k for k, _ in _COLD_STAGES} | {k for k, _ in _SERVING_STAGES} | {"judge"} | set(_EMBEDDING_KEYS)
    others = sorted(k for k in totals if k not in known)

    cold_keys = [k for k, _ in _COLD_STAGES if k in totals]
    if "extract" not in totals:  # the two-call layout shows both rows even when zero
        cold_keys = ["fact", "metadata"]
    cold_rows = [(k, label) for k, label in _COLD_STAGES if k in cold_keys]
    serving_rows = list(_SERVING_STAGES) + [(k, f"Other ({k})") for k in others]

    cold_total = sum(totals.get(k, 0) for k, _ in cold_rows)
    serving_total = sum(totals.get(k, 0) for k, _ in serving_rows)
    non_judge = cold_total + serving_total
    judge_total = totals.get("judge", 0)
    embedding_total = sum(totals.get(k, 0) for k in _EMBEDDING_KEYS)

    def row(key: str, label: str, kind: str, total: int) -> dict[str, Any]:
        return {
            "key": key,
            "label": label,
            "kind": kind,
            "total": total,
            "per_question": (total / n_questions) if n_questions else None,
            "share": (total / non_judge if non_judge else None) if kind != "excluded" else None,
        }

    rows = [row(k, label, "stage", totals.get(k, 0)) for k, label in cold_rows]
    rows.append(row("cold_build", "Cold-build subtotal", "subtotal", cold_total))
    rows += [row(k, label, "stage", totals.get(k, 0)) for k, label in serving_rows]
    rows.append(row("serving", "Serving subtotal", "subtotal", serving_total))
    rows.append(row("non_judge", "Non-judge end-to-end", "total", non_judge))
    rows.append(row("judge", "Judge (excluded)", "excluded", judge_total))
    rows.append(row("embedding", "Embeddings (excluded)", "excluded", embedding_total))
    return {
        "n_questions": n_questions,
        "rows": rows,
        "cold_build_total": cold_total,
        "serving_total": serving_total,
        "non_judge_total": non_judge,
        "non_judge_per_question": (non_judge / n_questions) if n_questions else None,
        "judge_total": judge_total,
        "embedding_total": embedding_total,
    }


def add_judge_totals(stage_totals: Mapping[str, Any], judge_totals: Mapping[str, Mapping[str, int]]
                     ) -> dict[str, Any]:
    """``stage_totals`` plus one ``judge`` row summing every stage of the judge's client.

    The judge's calls are logged under their own run id, so a run's totals never include
    them; the token table lists them as an excluded row.
    """
    out = dict(stage_totals)
    if judge_totals:
        judge = {"prompt": 0, "completion": 0, "calls": 0}
        for row in judge_totals.values():
            for key in judge:
                judge[key] += int(row.get(key, 0))
        out["judge"] = judge
    return out


# --------------------------------------------------------------------------------------
# Runs of a grid
# --------------------------------------------------------------------------------------

def tokens_per_question(run: Mapping[str, Any]) -> float | None:
    """Non-judge tokens per question of a run (``tokens_per_question`` or its token table)."""
    if run.get("tokens_per_question") is not None:
        return float(run["tokens_per_question"])
    table = run.get("token_table")
    if table and table.get("non_judge_per_question") is not None:
        return float(table["non_judge_per_question"])
    return None


# Quality metrics a run can be plotted by, best first: (key, axis label for LoCoMo, for LongMemEval).
QUALITY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("judge", "Judge", "Judge (task-averaged)"),
    ("f1", "F1 (mem0)", "F1 (mem0)"),
    ("recall", "Gold recall (final stage)", "Turn recall (final stage)"),
)


def quality_value(metrics: Mapping[str, Any], metric: str) -> float | None:
    """A run's figure for ``metric`` ("judge", "f1" or "recall"; None when it has none).

    Judge: overall accuracy (LongMemEval: task-averaged); F1: overall mem0 F1 (LongMemEval:
    over answerable questions); recall: gold recall (LongMemEval: turn recall) of the final stage.
    """
    lme = metrics.get("benchmark") == "longmemeval"
    if metric == "judge":
        return metrics.get("task_averaged_accuracy") if lme else metrics["overall"]["judge"]["accuracy"]
    if metric == "f1":
        return metrics.get("mem0_f1") if lme else metrics["overall"]["mem0_f1"]
    if metric == "recall":
        stage = final_stage(metrics)
        if stage is None:
            return None
        return metrics["recall"][stage]["turn"]["recall"] if lme else metrics["overall"]["recall"][stage]["recall"]
    raise DataFormatError("<metrics>", "quality metric", "judge, f1 or recall", f"got {metric!r}")


def quality_size(metrics: Mapping[str, Any], metric: str) -> int:
    """How many questions a run's ``metric`` figure averages over (its N)."""
    lme = metrics.get("benchmark") == "longmemeval"
    if metric == "judge":
        return int(metrics["overall_judge"]["n"] if lme else metrics["overall"]["judge"]["n"])
    if metric == "recall":
        stage = final_stage(metrics)
        if stage is None:
            return 0
        return int(metrics["recall"][stage]["turn"]["n"] if lme else metrics["overall"]["recall"][stage]["n"])
    return int(metrics["count"] if lme else metrics["overall"]["count"])


def run_point(run: Mapping[str, Any]) -> tuple[str, float | None, float | None, str]:
    """(name, non-judge tokens per question, quality, quality name) of one run.

    A run is ``{"name", "metrics", "token_table" | "tokens_per_question"}``. Quality is the
    first of :data:`QUALITY_METRICS` the run has: judge accuracy (LongMemEval: task-averaged)
    when it was judged, else the mem0 F1 when it answered, else the final-stage recall.
    """
    metrics = run["metrics"]
    name = str(run.get("name", "run"))
    tokens = tokens_per_question(run)
    lme = metrics.get("benchmark") == "longmemeval"
    for key, locomo_label, lme_label in QUALITY_METRICS:
        value = quality_value(metrics, key)
        if value is not None:
            return name, tokens, value, lme_label if lme else locomo_label
    return name, tokens, None, QUALITY_METRICS[-1][2 if lme else 1]


def final_stage(metrics: Mapping[str, Any]) -> str | None:
    """The stage whose recall stands for a run: ``final`` when present, else the last one."""
    stages = metrics.get("stages") or []
    if "final" in stages:
        return "final"
    return stages[-1] if stages else None
