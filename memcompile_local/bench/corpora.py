"""The chat corpora beside LoCoMo and LongMemEval: REALTALK and BEAM, for ``eval``.

What ``eval realtalk`` and ``eval beam`` need on top of the LoCoMo run: reading the data
(a folder or several files, hashed together for the run id), reachable gold evidence, and
their metrics and report tables, laid out like LoCoMo's (per category and overall, with
evidence recall per stage) so the compare and export tools read them the same way.

* **Reachable gold.** A REALTALK evidence id that names no turn of its chat (about one in
  ten) cannot be retrieved by anyone; recall is scored on the ids that name a turn, and the
  report says how many ids were left out and how many questions had none left.
* **BEAM abstention** questions have no source turns: they are answered and judged, and left
  out of recall (as is any question without reachable gold).

Answers are scored with the mem0 F1 and BLEU-1 against the gold answer and judged by the
LoCoMo-style judge prompt (same fact or topic as the gold answer).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..data.beam import BEAM_CATEGORIES, beam_files, load_beam
from ..data.jsonio import DEFAULT_MAX_TURN_CHARS
from ..data.quirks import QuirkLog
from ..data.realtalk import REALTALK_CATEGORY_NAMES, load_realtalk, realtalk_files
from ..errors import DataFormatError
from ..types import Conversation
from .aggregate import _judge_block, _judge_status, _mean, _recall_block, _stage_ids, _stage_names
from .metrics import mem0_bleu1, mem0_f1

__all__ = [
    "CORPORA",
    "CORPUS_DEFINITIONS",
    "category_names",
    "corpus_files",
    "corpus_markdown",
    "corpus_metrics",
    "corpus_summary_lines",
    "data_sha256",
    "load_corpus",
    "split_reachable",
]

CORPORA = ("realtalk", "beam")
_TITLES = {"realtalk": "REALTALK", "beam": "BEAM"}


def category_names(benchmark: str) -> dict[str, str]:
    """``{category key as text: display name}`` in report order."""
    if benchmark == "realtalk":
        return {str(k): v for k, v in REALTALK_CATEGORY_NAMES.items()}
    if benchmark == "beam":
        return {c: c.replace("_", " ") for c in BEAM_CATEGORIES}
    raise DataFormatError("<benchmark>", "benchmark", "realtalk or beam", f"got {benchmark!r}")


def corpus_files(benchmark: str, data: str | Sequence[str]) -> list[Path]:
    """Every file the loader of ``benchmark`` reads for ``data``, in reading order."""
    if benchmark == "realtalk":
        return realtalk_files(data)
    if isinstance(data, (list, tuple)):
        if len(data) != 1:
            raise DataFormatError("<beam>", "--data", "one BEAM chat folder or size folder", f"got {len(data)} paths")
        data = data[0]
    return beam_files(data)


def load_corpus(benchmark: str, data: str | Sequence[str], *,
                max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS,
                quirks: QuirkLog | None = None) -> list[Conversation]:
    """The conversations of a REALTALK or BEAM ``--data`` value. ``quirks``: where BEAM's
    loader notes what it read past (a lenient log leaves out an odd chat or question instead of
    refusing the folder; see ``data/quirks.py``); REALTALK's loader is always strict."""
    if benchmark == "realtalk":
        return load_realtalk(data, max_turn_chars=max_turn_chars)
    if isinstance(data, (list, tuple)):
        corpus_files(benchmark, data)  # the one-folder check
        data = data[0]
    return load_beam(data, max_turn_chars=max_turn_chars, quirks=quirks)


def data_sha256(files: Iterable[Path]) -> str:
    """One hash over several files: their names (relative to their common folder) and bytes,
    in the given order, so that a changed, added or renamed file gives another run id."""
    files = list(files)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\x00" + f.parent.name.encode() + b"\x00")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def split_reachable(evidence: Sequence[str], known: set[str] | frozenset[str]) -> tuple[list[str], list[str]]:
    """``(ids that name a turn, ids that name none)`` of gold evidence, each in its order."""
    return [e for e in evidence if e in known], [e for e in evidence if e not in known]


# ---------------------------------------------------------------------------- metrics

def _group(name: str, rows: Sequence[Mapping[str, Any]], stages: Sequence[str]) -> dict[str, Any]:
    recall: dict[str, Any] = {}
    for stage in stages:
        pairs = []
        for row in rows:
            ids = _stage_ids(row, stage)
            if ids is not None and not row.get("is_abstention"):
                pairs.append((ids, row.get("gold_evidence") or ()))
        recall[stage] = _recall_block(pairs)
    answered = [r for r in rows if r.get("prediction") is not None]
    return {
        "name": name,
        "count": len(rows),
        "mem0_f1": _mean([mem0_f1(r["prediction"], r.get("gold")) for r in answered]) if answered else None,
        "mem0_bleu1": _mean([mem0_bleu1(r["prediction"], r.get("gold")) for r in answered]) if answered else None,
        "judge": _judge_block([_judge_status(r) for r in rows]),
        "recall": recall,
    }


def corpus_metrics(rows: Iterable[Mapping[str, Any]], benchmark: str) -> dict[str, Any]:
    """REALTALK or BEAM metrics of prediction rows.

    Returns ``{"benchmark", "count", "stages", "categories": {key: name}, "per_category":
    {key: group}, "overall": group, "evidence": {...}}``; a group holds ``name``, ``count``,
    mean ``mem0_f1`` / ``mem0_bleu1`` over answered rows (None in a retrieval-only run),
    ``judge`` and ``recall`` per stage (``n`` questions with reachable gold, mean ``recall``,
    ``fully_covered`` and its rate). ``evidence`` counts gold ids (``gold_ids``, the reachable
    ones ``reachable_ids``, ``dropped_ids``), ``questions_with_dropped``,
    ``questions_without_gold`` (no reachable id: left out of recall) and ``abstention``.
    """
    rows = list(rows)
    names = category_names(benchmark)
    stages = _stage_names(rows)
    by_cat: dict[str, list[Mapping[str, Any]]] = {k: [] for k in names}
    for row in rows:
        key = str(row.get("category"))
        if key not in by_cat:
            raise DataFormatError("<prediction rows>", f"question {row.get('question_id')!r}.category",
                                  f"one of {', '.join(names)}", f"got {row.get('category')!r}")
        by_cat[key].append(row)
    reachable = sum(len(r.get("gold_evidence") or ()) for r in rows)
    dropped = sum(len(r.get("gold_evidence_unreachable") or ()) for r in rows)
    return {
        "benchmark": benchmark,
        "count": len(rows),
        "stages": stages,
        "categories": names,
        "per_category": {k: _group(names[k], by_cat[k], stages) for k in names},
        "overall": _group("overall", rows, stages),
        "evidence": {
            "gold_ids": reachable + dropped,
            "reachable_ids": reachable,
            "dropped_ids": dropped,
            "questions_with_dropped": sum(1 for r in rows if r.get("gold_evidence_unreachable")),
            "questions_without_gold": sum(1 for r in rows if not r.get("gold_evidence")),
            "abstention": sum(1 for r in rows if r.get("is_abstention")),
        },
    }


# ---------------------------------------------------------------------------- report

def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def corpus_markdown(metrics: Mapping[str, Any]) -> str:
    """The results tables of :func:`corpus_metrics`: answers and judge per category, evidence
    recall per stage and category, and how much gold was unreachable."""
    cats = list(metrics["categories"])
    groups = [metrics["per_category"][k] for k in cats] + [metrics["overall"]]
    lines = ["| Category | Count | F1 (mem0) | BLEU-1 (mem0) | Judge | Judge errors |",
             "|---|---:|---:|---:|---:|---:|"]
    for g in groups:
        lines.append(f"| {g['name']} | {g['count']} | {_pct(g['mem0_f1'])} | {_pct(g['mem0_bleu1'])} | "
                     f"{_pct(g['judge']['accuracy'])} | {g['judge']['errors']} |")
    ev = metrics["evidence"]
    lines += ["", f"Questions: {metrics['count']}. Gold evidence ids: {ev['gold_ids']}, of which "
              f"{ev['dropped_ids']} name no turn (in {ev['questions_with_dropped']} questions) and are left "
              f"out of recall; {ev['questions_without_gold']} questions have no reachable gold "
              f"({ev['abstention']} abstention) and are left out of recall."]
    stages = metrics.get("stages") or []
    if stages:
        lines += ["", "### Evidence recall (reachable gold)", "",
                  "| Stage | Questions with gold | Gold recall | Fully covered | "
                  + " | ".join(f"Recall {metrics['per_category'][k]['name']}" for k in cats) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(cats)]
        for stage in stages:
            block = metrics["overall"]["recall"][stage]
            per_cat = " | ".join(_pct(metrics["per_category"][k]["recall"][stage]["recall"]) for k in cats)
            lines.append(f"| {stage} | {block['n']} | {_pct(block['recall'])} | "
                         f"{block['fully_covered']}/{block['n']} | {per_cat} |")
    return "\n".join(lines)


def corpus_summary_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The console lines of ``eval``: count, F1, judge and final recall per category."""
    lines = [f"{'category':26s} {'n':>4s} {'F1':>6s} {'Judge':>6s} {'Recall':>6s}"]
    groups = [metrics["per_category"][k] for k in metrics["categories"]] + [metrics["overall"]]

    def cell(x: float | None) -> str:
        return "   n/a" if x is None else f"{100 * x:6.2f}"
    for g in groups:
        rec = (g["recall"].get("final") or {}).get("recall")
        lines.append(f"{g['name']:26s} {g['count']:4d} {cell(g['mem0_f1'])} {cell(g['judge']['accuracy'])} "
                     f"{cell(rec)}")
    ev = metrics["evidence"]
    lines.append(f"gold ids naming no turn: {ev['dropped_ids']} of {ev['gold_ids']} (left out of recall)")
    return lines


CORPUS_DEFINITIONS: dict[str, str] = {
    "F1 (mem0)": (
        "Token-set F1 of the mem0 evaluation harness against the gold answer (BEAM: the question's answer, "
        "ideal answer, ideal response, ideal summary or expected compliance, whichever it has)."),
    "BLEU-1 (mem0)": "Sentence BLEU with unigram weight only, as for LoCoMo.",
    "Judge": (
        "Share of questions an LLM judge labels CORRECT with the LoCoMo judge prompt: an answer about the same "
        "fact or topic as the gold answer counts. A judge call that fails counts as not correct."),
    "Gold recall": (
        "For one question, the fraction of its distinct reachable gold evidence ids among the selected turns "
        "of a stage, averaged over questions with reachable gold. An evidence id that names no turn of the "
        "conversation is left out (and counted); abstention questions have no evidence and are left out."),
    "Categories": (
        "REALTALK: 1 multi-hop, 2 temporal, 3 open-domain. BEAM: the ten probing question types of the "
        "authors' files; abstention is answered and judged but has no evidence to recall."),
}


def report_title(benchmark: str) -> str:
    return _TITLES.get(benchmark, benchmark)
