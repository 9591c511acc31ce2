"""Per-round evidence recall of MERA's rounds (evidence/mera.py) and its report table.

A row holds ``gold_evidence``, ``category`` and ``mera_rounds`` = ``{"cumulative": [[ids
after round 0], [ids after round 1], ...], "tokens": [tokens of round 0, round 1, ...],
"final": [ids]}``. The cumulative set after round r is the first selection together with every
packet verified in rounds 1..r (not cut to the packet budget): the curve the MERA paper
reports (cumulative evidence recall, 55.5 -> 80.5 on LoCoMo). ``final`` is what the reader
gets, within the budget.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .coverage import gold_recall

__all__ = ["mera_row", "round_recall", "round_recall_markdown"]


def mera_row(trace: Mapping[str, Any], final: Sequence[str]) -> dict[str, Any]:
    """The ``mera_rounds`` field of a prediction row from a compile trace's ``anchors.mera``."""
    return {"cumulative": [list(c) for c in trace["cumulative"]],
            "tokens": [int(trace.get("round0_tokens", 0))] + [int(r["tokens"]) for r in trace["rounds"]],
            "rounds_run": len(trace["rounds"]), "stopped": trace["stopped"], "final": list(final)}


def _mean(values: list[float]) -> float | None:
    return round(100 * sum(values) / len(values), 2) if values else None


def round_recall(rows: Sequence[Mapping[str, Any]], category_names: Mapping[Any, str] | None = None) -> dict[str, Any]:
    """Mean gold recall (percent) of the cumulative set after each round, overall and per
    category, the final set's recall, and the mean planner + verifier tokens per round."""
    names = category_names or {}
    scored = [r for r in rows if r.get("mera_rounds") and r.get("gold_evidence")]
    if not scored:
        return {"questions": 0}
    depth = max(len(r["mera_rounds"]["cumulative"]) for r in scored)

    def curve(group: Sequence[Mapping[str, Any]]) -> list[float | None]:
        out = []
        for i in range(depth):
            vals = []
            for r in group:
                cum = r["mera_rounds"]["cumulative"]
                vals.append(gold_recall(cum[min(i, len(cum) - 1)], r["gold_evidence"]))
            out.append(_mean([v for v in vals if v is not None]))
        return out

    def final(group: Sequence[Mapping[str, Any]]) -> float | None:
        vals = [gold_recall(r["mera_rounds"]["final"], r["gold_evidence"]) for r in group]
        return _mean([v for v in vals if v is not None])

    by_cat: dict[str, list[Mapping[str, Any]]] = {}
    for r in scored:
        by_cat.setdefault(str(names.get(r.get("category"), r.get("category"))), []).append(r)
    tokens = []
    for i in range(depth):
        spent = [r["mera_rounds"]["tokens"][i] if i < len(r["mera_rounds"]["tokens"]) else 0 for r in scored]
        tokens.append(round(sum(spent) / len(spent), 1))
    ran = [r["mera_rounds"].get("rounds_run", 0) for r in scored]
    return {
        "questions": len(scored),
        "rounds": depth - 1,
        "overall": curve(scored),
        "final": final(scored),
        "by_category": {c: {"questions": len(g), "cumulative": curve(g), "final": final(g)}
                        for c, g in sorted(by_cat.items())},
        "tokens_per_round": tokens,
        "mean_rounds_run": round(sum(ran) / len(ran), 2),
    }


def round_recall_markdown(table: Mapping[str, Any]) -> str:
    """The ``round_recall`` table as markdown (one row per category, then all)."""
    if not table.get("questions"):
        return "## MERA rounds\n\nNo question with gold evidence ran MERA's rounds.\n"
    depth = table["rounds"] + 1
    head = ["Category", "Questions"] + [f"after round {i}" for i in range(depth)] + ["final (budget)"]
    lines = ["## MERA rounds: cumulative evidence recall",
             "",
             "Gold-evidence recall (%) of the first selection together with every packet verified "
             "up to each round (round 0: the first selection alone), and of the final set the reader "
             "gets within the same packet budget.",
             "",
             "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]

    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    for cat, row in table["by_category"].items():
        lines.append(f"| {cat} | {row['questions']} | " + " | ".join(fmt(v) for v in row["cumulative"])
                     + f" | {fmt(row['final'])} |")
    lines.append(f"| **all** | {table['questions']} | " + " | ".join(fmt(v) for v in table["overall"])
                 + f" | {fmt(table['final'])} |")
    lines.append("")
    lines.append("Planner + verifier tokens per question, by round: "
                 + (", ".join(f"round {i}: {t}" for i, t in enumerate(table["tokens_per_round"])) or "none")
                 + " (round 0: verifying the first selection)"
                 + f"; rounds run per question: {table['mean_rounds_run']}.")
    return "\n".join(lines) + "\n"
