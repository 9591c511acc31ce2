"""Aggregate per-question results into benchmark metrics, token tables and Markdown reports.

Input rows are per-question mappings, the lines of a run's ``predictions.jsonl``:

``question_id``, ``category`` (LoCoMo int 1-5; LongMemEval rows may use ``question_type``),
``question``, ``gold``, ``prediction``, ``selected_ids`` (packet/turn ids handed to the
reader), ``gold_evidence`` (gold packet ids; LongMemEval: ``has_answer`` turn ids),
``answer_session_ids`` (LongMemEval), ``recall_stages`` (``{stage name: [ids]}``, e.g.
``{"pool_top10": [...], "a0": [...], "final": [...]}``), ``tokens`` (``{stage: n}``),
``judge_label`` ("CORRECT" / "WRONG" / None) and ``judge_error`` (text of a failed judge
call, else None or absent).

Rates are fractions in [0, 1] in every returned dict; Markdown renders them as percentages
with two decimals, as the paper's tables do. Judge accuracy counts a failed judge call as
not correct and reports the number of such calls next to it; it is None when no row of a
group was judged at all.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
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
    "LOCOMO_DISPLAY_ORDER",
    "DEFAULT_DEFINITIONS",
    "LOCOMO_DEFINITIONS",
    "LONGMEMEVAL_DEFINITIONS",
    "score_locomo_row",
    "locomo_metrics",
    "longmemeval_metrics",
    "token_table",
    "token_table_markdown",
    "metrics_markdown",
    "write_markdown_report",
    "run_point",
    "compare_table",
]

logger = logging.getLogger(__name__)

# The column order of the paper's Table 1.
LOCOMO_DISPLAY_ORDER: tuple[int, ...] = (4, 1, 2, 3)
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


def locomo_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """LoCoMo metrics over categories 1-4; category 5 rows are counted and left out.

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
    excluded = 0
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
# Token accounting (seed 000, Appendix E, Table 8)
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


def _int(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def token_table_markdown(table: Mapping[str, Any]) -> str:
    """The token table as Markdown: stage, total, tokens per question, share (one decimal)."""
    lines = ["| Stage | Total tokens | Tokens/question | Share of non-judge total |",
             "|---|---:|---:|---:|"]
    for r in table["rows"]:
        share = "excluded" if r["kind"] == "excluded" else (
            "n/a" if r["share"] is None else f"{100 * r['share']:.1f}%")
        label = f"**{r['label']}**" if r["kind"] in ("subtotal", "total") else r["label"]
        lines.append(f"| {label} | {_int(r['total'])} | {_int(r['per_question'])} | {share} |")
    lines.append("")
    lines.append(f"Per-question figures divide each total by {table['n_questions']} questions; "
                 "shares are rounded independently.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------

_COMMON_DEFINITIONS: dict[str, str] = {
    "Non-judge tokens": (
        "Prompt plus completion tokens of the unique successful model calls of construction (fact and "
        "metadata extraction) and serving (query intent, packet scheduler, frontier, answer generation). "
        "Judge calls and embeddings are counted separately and excluded. Tokens per question divide each "
        "total by the number of scored questions."),
}

LOCOMO_DEFINITIONS: dict[str, str] = {
    "F1 (mem0)": (
        "Token-set F1 of the mem0 evaluation harness used by the paper's comparison tables: both strings "
        "are lowercased, each of . , ! ? is replaced by a space and the text is split on whitespace; with "
        "P and G the sets of prediction and gold tokens, precision = |P∩G|/|P|, recall = |P∩G|/|G|, "
        "F1 = 2·precision·recall/(precision+recall), and 0 when either answer is empty."),
    "BLEU-1 (mem0)": (
        "Sentence BLEU with unigram weight only, on NLTK word tokens of the lowercased strings: clipped "
        "unigram precision times the brevity penalty exp(1 − r/c) (1 when the prediction is longer than "
        "the gold answer); 0 when no token matches. NLTK smoothing method1 is specified, which never "
        "changes a unigram-only score."),
    "F1 (LoCoMo)": (
        "The LoCoMo benchmark's own F1: lowercase, delete punctuation, drop the words a, an, the and "
        "and, Porter-stem, then F1 over token multisets. Multi-hop answers are split at commas and each "
        "gold item takes its best match among the predicted items, averaged over gold items; open-domain "
        "gold answers are cut at the first ';'."),
    "Judge": (
        "Share of questions an LLM judge labels CORRECT. The judge is lenient: an answer about the same "
        "fact or topic as the gold answer counts whatever its wording or length, and a time answer "
        "naming the same period in another format counts. A judge call that fails counts as not correct "
        "and is reported in the Judge errors column."),
    "Gold recall": (
        "For one question, the fraction of its distinct gold evidence ids present among the selected "
        "SourcePackets of a stage; averaged over the questions that have gold evidence. A question is "
        "fully covered when all of its gold ids were selected."),
    "Categories": (
        "LoCoMo categories 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop are scored; category 5 "
        "(adversarial) has no gold answer and is left out. Overall covers categories 1-4; the row without "
        "open-domain leaves out category 3, whose lexical scores the paper does not compare."),
    **_COMMON_DEFINITIONS,
}

LONGMEMEVAL_DEFINITIONS: dict[str, str] = {
    "Judge": (
        "Share of questions an LLM judge accepts, with one check per question type: the response "
        "contains the correct answer (single-session user/assistant, multi-session; equivalent answers "
        "and full intermediate steps count, a partial answer does not); the same with off-by-one day, "
        "week or month counts tolerated (temporal reasoning); the updated value counts even next to "
        "stale ones (knowledge update); the response meets a personalization rubric (preference); and "
        "recognising that the question cannot be answered (ids containing _abs). A judge call that "
        "fails counts as not correct and is reported in the Judge errors column."),
    "Task-averaged accuracy": "The unweighted mean of the judge accuracies of the question types.",
    "Overall accuracy": "Judge accuracy over all questions.",
    "Abstention accuracy": (
        "Judge accuracy on the questions whose id contains _abs, where the correct behaviour is to say "
        "the question cannot be answered; they also count in their own type."),
    "Session recall": (
        "The fraction of a question's answer sessions with at least one selected turn, averaged over "
        "answerable questions."),
    "Turn recall": (
        "Gold recall against the turns labelled has_answer: the fraction of those turns among the "
        "selected ones, averaged over answerable questions that have such turns; fully covered when "
        "all were selected."),
    **_COMMON_DEFINITIONS,
}

DEFAULT_DEFINITIONS: dict[str, dict[str, str]] = {
    "locomo": LOCOMO_DEFINITIONS,
    "longmemeval": LONGMEMEVAL_DEFINITIONS,
}


def _recall_cells(block: Mapping[str, Any]) -> tuple[str, str]:
    n = block.get("n", 0)
    return _pct(block.get("recall")), f"{block.get('fully_covered', 0)}/{n}"


def _locomo_markdown(metrics: Mapping[str, Any]) -> str:
    groups = [metrics["per_category"][str(c)] for c in LOCOMO_DISPLAY_ORDER]
    groups += [metrics["overall"], metrics["overall_without_open_domain"]]
    lines = ["| Category | Count | F1 (mem0) | BLEU-1 (mem0) | F1 (LoCoMo) | Judge | Judge errors |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for g in groups:
        lines.append(f"| {g['name']} | {g['count']} | {_pct(g['mem0_f1'])} | {_pct(g['mem0_bleu1'])} | "
                     f"{_pct(g['locomo_f1'])} | {_pct(g['judge']['accuracy'])} | {g['judge']['errors']} |")
    lines.append("")
    lines.append(f"Scored questions: {metrics['count']} (categories 1-4). Category 5 (adversarial) "
                 f"questions left out: {metrics['excluded_category5']}.")
    stages = metrics.get("stages") or []
    if stages:
        lines += ["", "### Evidence recall", "",
                  "| Stage | Questions with gold | Gold recall | Fully covered | "
                  + " | ".join(f"Recall {metrics['per_category'][str(c)]['name']}" for c in LOCOMO_DISPLAY_ORDER)
                  + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(LOCOMO_DISPLAY_ORDER)]
        for stage in stages:
            block = metrics["overall"]["recall"][stage]
            recall, full = _recall_cells(block)
            per_cat = " | ".join(_pct(metrics["per_category"][str(c)]["recall"][stage]["recall"])
                                 for c in LOCOMO_DISPLAY_ORDER)
            lines.append(f"| {stage} | {block['n']} | {recall} | {full} | {per_cat} |")
    return "\n".join(lines)


def _longmemeval_markdown(metrics: Mapping[str, Any]) -> str:
    lines = ["| Question type | Count | Judge | Judge errors |", "|---|---:|---:|---:|"]
    for qtype in LONGMEMEVAL_TYPES:
        g = metrics["per_type"][qtype]
        lines.append(f"| {qtype} | {g['count']} | {_pct(g['judge']['accuracy'])} | {g['judge']['errors']} |")
    ab = metrics["abstention"]
    lines.append(f"| abstention (_abs) | {ab['count']} | {_pct(ab['judge']['accuracy'])} | "
                 f"{ab['judge']['errors']} |")
    lines += ["",
              f"Task-averaged accuracy: {_pct(metrics['task_averaged_accuracy'])}. "
              f"Overall accuracy: {_pct(metrics['overall_accuracy'])} over {metrics['count']} questions."]
    if metrics.get("types_missing"):
        lines.append(f"Types without judged questions (left out of the task average): "
                     f"{', '.join(metrics['types_missing'])}.")
    stages = metrics.get("stages") or []
    if stages:
        lines += ["", "### Evidence recall", "",
                  "| Stage | Session recall | Sessions fully covered | Turn recall | Turns fully covered |",
                  "|---|---:|---:|---:|---:|"]
        for stage in stages:
            s_recall, s_full = _recall_cells(metrics["recall"][stage]["session"])
            t_recall, t_full = _recall_cells(metrics["recall"][stage]["turn"])
            lines.append(f"| {stage} | {s_recall} | {s_full} | {t_recall} | {t_full} |")
    return "\n".join(lines)


def metrics_markdown(metrics: Mapping[str, Any]) -> str:
    """The results tables of a ``locomo_metrics`` or ``longmemeval_metrics`` dict."""
    kind = metrics.get("benchmark")
    if kind == "locomo":
        return _locomo_markdown(metrics)
    if kind == "longmemeval":
        return _longmemeval_markdown(metrics)
    raise DataFormatError("<metrics>", "benchmark", "'locomo' or 'longmemeval'", f"got {kind!r}")


def _config_lines(config: Any, prefix: str = "") -> list[str]:
    if isinstance(config, Mapping):
        lines: list[str] = []
        for key in sorted(config, key=str):
            value = config[key]
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                lines += _config_lines(value, f"{name}.")
            else:
                lines.append(f"- `{name}`: {value}")
        return lines
    return [str(config)]


def _bleu_tokenizer_note() -> str | None:
    try:
        from memcompile_local.bench.metrics import bleu_tokenizer_name

        return bleu_tokenizer_name()
    except ImportError:  # MissingExtraError is an ImportError: nltk not installed
        return None


def write_markdown_report(path: str | Path, metrics: Mapping[str, Any], config_summary: Any,
                          token_table: Mapping[str, Any] | None = None,
                          definitions: Mapping[str, str] | None = None) -> Path:
    """Write a Markdown report: configuration, results, token cost and metric definitions.

    ``definitions`` (metric name -> definition in words) are added to, and override, the
    benchmark's entry of :data:`DEFAULT_DEFINITIONS`; every metric in the report is defined
    in its last section. Returns the path written.
    """
    out = Path(path)
    title = {"locomo": "LoCoMo", "longmemeval": "LongMemEval"}.get(str(metrics.get("benchmark")), "Benchmark")
    parts = [f"# {title} benchmark report", "", "## Configuration", ""]
    parts += _config_lines(config_summary) or ["(none given)"]
    parts += ["", "## Results", "", "Rates are percentages.", "", metrics_markdown(metrics)]
    if token_table is not None:
        parts += ["", "## Token cost", "", token_table_markdown(token_table)]
    merged = dict(DEFAULT_DEFINITIONS.get(str(metrics.get("benchmark")), {}))
    if token_table is None:
        merged.pop("Non-judge tokens", None)
    merged.update(definitions or {})
    if "BLEU-1 (mem0)" in merged:
        tokenizer = _bleu_tokenizer_note()
        if tokenizer:
            merged["BLEU-1 (mem0)"] = merged["BLEU-1 (mem0)"] + f" Tokenizer in this run: {tokenizer}."
    parts += ["", "## Metric definitions", ""]
    parts += [f"- **{name}**: {text}" for name, text in merged.items()]
    parts.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


# --------------------------------------------------------------------------------------
# Grids of runs
# --------------------------------------------------------------------------------------

def _tokens_per_question(run: Mapping[str, Any]) -> float | None:
    if run.get("tokens_per_question") is not None:
        return float(run["tokens_per_question"])
    table = run.get("token_table")
    if table and table.get("non_judge_per_question") is not None:
        return float(table["non_judge_per_question"])
    return None


def run_point(run: Mapping[str, Any]) -> tuple[str, float | None, float | None, str]:
    """(name, non-judge tokens per question, quality, quality name) of one run.

    A run is ``{"name", "metrics", "token_table" | "tokens_per_question"}``. Quality is the
    judge accuracy (LongMemEval: task-averaged) when the run was judged, else the mem0 F1.
    """
    metrics = run["metrics"]
    name = str(run.get("name", "run"))
    tokens = _tokens_per_question(run)
    if metrics.get("benchmark") == "longmemeval":
        if metrics.get("task_averaged_accuracy") is not None:
            return name, tokens, metrics["task_averaged_accuracy"], "Judge (task-averaged)"
        return name, tokens, metrics.get("mem0_f1"), "F1 (mem0)"
    overall = metrics["overall"]
    if overall["judge"]["accuracy"] is not None:
        return name, tokens, overall["judge"]["accuracy"], "Judge"
    return name, tokens, overall["mem0_f1"], "F1 (mem0)"


def _final_stage(metrics: Mapping[str, Any]) -> str | None:
    stages = metrics.get("stages") or []
    if "final" in stages:
        return "final"
    return stages[-1] if stages else None


def compare_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table comparing runs, one table per benchmark present.

    LoCoMo columns: overall count, F1 (mem0), BLEU-1 (mem0), F1 (LoCoMo), judge accuracy,
    gold recall and fully covered of the ``final`` stage (else the last stage), non-judge
    tokens per question. LongMemEval columns: count, task-averaged and overall accuracy,
    abstention accuracy, session and turn recall, tokens per question.
    """
    tables: list[str] = []
    locomo = [r for r in runs if r["metrics"].get("benchmark") == "locomo"]
    lme = [r for r in runs if r["metrics"].get("benchmark") == "longmemeval"]
    if len(locomo) + len(lme) != len(runs):
        raise DataFormatError("<runs>", "metrics.benchmark", "'locomo' or 'longmemeval' for every run")
    if locomo:
        lines = ["| Run | N | F1 (mem0) | BLEU-1 (mem0) | F1 (LoCoMo) | Judge | Recall stage | "
                 "Gold recall | Fully covered | Tokens/question |",
                 "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
        for run in locomo:
            m = run["metrics"]
            o = m["overall"]
            stage = _final_stage(m)
            recall, full = _recall_cells(o["recall"][stage]) if stage else ("n/a", "n/a")
            lines.append(f"| {run.get('name', 'run')} | {o['count']} | {_pct(o['mem0_f1'])} | "
                         f"{_pct(o['mem0_bleu1'])} | {_pct(o['locomo_f1'])} | {_pct(o['judge']['accuracy'])} | "
                         f"{stage or 'n/a'} | {recall} | {full} | {_int(_tokens_per_question(run))} |")
        tables.append("\n".join(lines))
    if lme:
        lines = ["| Run | N | Task-averaged | Overall | Abstention | Recall stage | Session recall | "
                 "Turn recall | Tokens/question |",
                 "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
        for run in lme:
            m = run["metrics"]
            stage = _final_stage(m)
            s_recall = _pct(m["recall"][stage]["session"]["recall"]) if stage else "n/a"
            t_recall = _pct(m["recall"][stage]["turn"]["recall"]) if stage else "n/a"
            lines.append(f"| {run.get('name', 'run')} | {m['count']} | {_pct(m['task_averaged_accuracy'])} | "
                         f"{_pct(m['overall_accuracy'])} | {_pct(m['abstention']['judge']['accuracy'])} | "
                         f"{stage or 'n/a'} | {s_recall} | {t_recall} | {_int(_tokens_per_question(run))} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)
