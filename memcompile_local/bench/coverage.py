"""Evidence metrics: gold recall of the selected SourcePackets and the source-aliasing audit.

Gold recall (MemCompile paper, Table 2 and Appendix C.2.1) asks how much of the benchmark's gold
evidence reached the reader: for one question it is the fraction of *distinct* gold ids that
appear among the selected packet ids; the benchmark figure is the mean over the questions
that have gold evidence, and a question is *fully covered* when every gold id was selected.

LongMemEval labels evidence at two levels. Turn ids are ``"<session_id>:<position>"`` (the
loader's convention), so the session of a selected turn is the part before the last colon.
Session recall is the fraction of the question's answer sessions that have at least one
selected turn; turn recall is gold recall against the ``has_answer`` turn ids.

The aliasing audit (MemCompile paper, Appendix A.4) measures how many slots of a ranked retrieval
list are taken by repeats of the same SourcePacket before source normalization. It is
self-contained here on purpose: it is the benchmark's canonical definition.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from memcompile_local.errors import DataFormatError

__all__ = [
    "gold_recall",
    "fully_covered",
    "recall_summary",
    "session_of",
    "session_recall",
    "turn_recall",
    "aliasing_audit",
    "nearest_rank_percentile",
]


def _distinct(ids: Iterable[Any]) -> set[str]:
    """Ids as a set of stripped strings; blanks dropped (malformed gold lists contain them)."""
    out: set[str] = set()
    for value in ids or ():
        text = str(value).strip()
        if text:
            out.add(text)
    return out


def gold_recall(selected_ids: Iterable[Any], gold_ids: Iterable[Any]) -> float | None:
    """Fraction of distinct gold ids present in ``selected_ids``; None when there is no gold."""
    gold = _distinct(gold_ids)
    if not gold:
        return None
    return len(gold & _distinct(selected_ids)) / len(gold)


def fully_covered(selected_ids: Iterable[Any], gold_ids: Iterable[Any]) -> bool:
    """True when every gold id was selected; False when there is no gold (nothing to cover)."""
    gold = _distinct(gold_ids)
    return bool(gold) and gold <= _distinct(selected_ids)


def session_of(turn_id: str) -> str:
    """The session id of a ``"<session_id>:<position>"`` turn id (text before the last colon)."""
    text = str(turn_id)
    if ":" not in text:
        raise DataFormatError("<turn id>", repr(text), "a turn id of the form '<session_id>:<position>'")
    return text.rsplit(":", 1)[0]


def session_recall(selected_turn_ids: Iterable[Any], answer_session_ids: Iterable[Any]) -> float | None:
    """Fraction of answer sessions with at least one selected turn; None without answer sessions."""
    gold = _distinct(answer_session_ids)
    if not gold:
        return None
    sessions = {session_of(t) for t in _distinct(selected_turn_ids)}
    return len(gold & sessions) / len(gold)


def turn_recall(selected_turn_ids: Iterable[Any], has_answer_turn_ids: Iterable[Any]) -> float | None:
    """Gold recall against LongMemEval's ``has_answer`` turns; None when no turn is labelled."""
    return gold_recall(selected_turn_ids, has_answer_turn_ids)


def _selected(row: Mapping[str, Any], stage: str | None) -> Sequence[Any]:
    if stage is None:
        return row.get("selected_ids") or ()
    stages = row.get("recall_stages") or {}
    if stage not in stages:
        raise DataFormatError("<prediction rows>", f"question {row.get('question_id')!r}.recall_stages",
                              f"a list of ids for stage {stage!r}", f"stages present: {sorted(stages)}")
    return stages[stage] or ()


def recall_summary(rows: Iterable[Mapping[str, Any]], stage: str | None = None,
                   gold_key: str = "gold_evidence", category_key: str = "category") -> dict[str, Any]:
    """Gold recall and full coverage over the rows that have gold evidence.

    ``rows`` are per-question mappings holding ``gold_key`` (gold ids) and either
    ``selected_ids`` (``stage`` None) or ``recall_stages[stage]``. Returns ``{"n", "recall",
    "fully_covered", "full_coverage_rate", "per_category": {str(category): same keys}}``
    where ``recall`` is the mean per-question recall (None when n = 0) and
    ``fully_covered`` a count. Rows without gold ids are skipped.
    """
    buckets: dict[str, list[tuple[float, bool]]] = {}
    overall: list[tuple[float, bool]] = []
    for row in rows:
        gold = row.get(gold_key) or ()
        selected = _selected(row, stage)
        recall = gold_recall(selected, gold)
        if recall is None:
            continue
        entry = (recall, fully_covered(selected, gold))
        overall.append(entry)
        buckets.setdefault(str(row.get(category_key)), []).append(entry)

    def summarize(entries: list[tuple[float, bool]]) -> dict[str, Any]:
        n = len(entries)
        full = sum(1 for _, covered in entries if covered)
        return {
            "n": n,
            "recall": (sum(r for r, _ in entries) / n) if n else None,
            "fully_covered": full,
            "full_coverage_rate": (full / n) if n else None,
        }

    out = summarize(overall)
    out["per_category"] = {key: summarize(buckets[key]) for key in sorted(buckets)}
    return out


def nearest_rank_percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile: the ceil(q/100 * n)-th smallest value.

    Always an observed value (the audit's P95 counts slots, so it should be an integer).
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {q}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def aliasing_audit(ranked_packet_ids_per_question: Sequence[Sequence[Any]] | Mapping[Any, Sequence[Any]],
                   depths: Sequence[int] = (10, 20, 40)) -> dict[int, dict[str, Any]]:
    """Source-aliasing statistics of ranked retrieval lists at several depths (Appendix A.4).

    Input: for each question the packet id of every retrieved slot in rank order (a
    sequence of lists, or a mapping question id -> list). For a depth d only questions
    whose list has at least d slots are *eligible*; their first d slots are audited.

    Returns, per depth: ``eligible`` (count), ``unique_mean`` (mean number of distinct
    packets in the d slots), ``dbr`` (duplicate-budget ratio: slots holding a packet already
    seen higher in the list, divided by all audited slots), ``affected`` (share of eligible
    questions with at least one such duplicate slot), and ``max_source_mean`` /
    ``max_source_p95`` / ``max_source_max`` over questions of the number of slots the most
    frequent packet occupies (P95 by nearest rank). Rates are fractions in [0, 1]; every
    statistic is None when no question is eligible.
    """
    lists = list(ranked_packet_ids_per_question.values()) if isinstance(
        ranked_packet_ids_per_question, Mapping) else list(ranked_packet_ids_per_question)
    out: dict[int, dict[str, Any]] = {}
    for depth in depths:
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"aliasing depth must be a positive int, got {depth!r}")
        uniques: list[int] = []
        max_sources: list[int] = []
        duplicate_slots = 0
        affected = 0
        for ranked in lists:
            if len(ranked) < depth:
                continue
            window = [str(p) for p in list(ranked)[:depth]]
            counts = Counter(window)
            uniques.append(len(counts))
            max_sources.append(max(counts.values()))
            duplicates = depth - len(counts)
            duplicate_slots += duplicates
            affected += 1 if duplicates else 0
        n = len(uniques)
        out[depth] = {
            "depth": depth,
            "eligible": n,
            "unique_mean": (sum(uniques) / n) if n else None,
            "dbr": (duplicate_slots / (n * depth)) if n else None,
            "affected": (affected / n) if n else None,
            "max_source_mean": (sum(max_sources) / n) if n else None,
            "max_source_p95": nearest_rank_percentile(max_sources, 95) if n else None,
            "max_source_max": max(max_sources) if n else None,
        }
    return out
