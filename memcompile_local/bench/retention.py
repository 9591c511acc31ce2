"""Retention metrics of budgeted pre-query retention (EMBER) and the budget curve.

For one question and one retained memory:

- **Retain-Recall**: the share of its gold evidence turns that survived retention (some
  capsule was cut from them);
- **Read-Recall@k**: the share of its gold evidence turns that reach the reader: the sources
  of the ``k`` capsules the query path selected over the retained memory.

``retention_table`` averages both per (writer, budget) over questions with gold evidence;
``retention_markdown`` prints it; ``leave_one_out`` picks one of several writer settings per
held-out conversation from the others and scores the held-out one with it; ``budget_curve_plot``
draws recall against budget, one line per writer (matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import DataFormatError
from .coverage import gold_recall
from .plots import _pyplot, _save_png

__all__ = ["retain_recall", "read_recall", "retention_table", "retention_markdown", "leave_one_out",
           "budget_curve_plot"]


def retain_recall(retained_sources: Iterable[str], gold: Sequence[str]) -> float | None:
    return gold_recall(retained_sources, gold)


def read_recall(selected_capsules: Sequence[str], sources_of: Mapping[str, Sequence[str]], gold: Sequence[str]
                ) -> float | None:
    return gold_recall([s for c in selected_capsules for s in sources_of.get(c, (c,))], gold)


def _pct(vals: list[float | None]) -> float | None:
    v = [x for x in vals if x is not None]
    return round(100 * sum(v) / len(v), 2) if v else None


def retention_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows: ``writer``, ``budget`` (a label), ``retain`` and ``read`` (per-question recalls,
    None without gold), optional ``tokens`` (retained tokens) and ``source_tokens``. One
    output row per (writer, budget) in first-seen order."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["writer"], str(r["budget"])), []).append(r)
    out = []
    for (writer, budget), g in groups.items():
        out.append({"writer": writer, "budget": budget, "questions": sum(r["retain"] is not None for r in g),
                    "retain_recall": _pct([r["retain"] for r in g]),
                    "read_recall": _pct([r.get("read") for r in g])})
    return out


def _mean_read(rows: Sequence[Mapping[str, Any]], budgets: Sequence[str]) -> float:
    """Mean over ``budgets`` of the pooled Read-Recall of ``rows`` at that budget (0 when none)."""
    vals = []
    for b in budgets:
        v = [r["read"] for r in rows if str(r["budget"]) == b and r.get("read") is not None]
        vals.append(sum(v) / len(v) if v else 0.0)
    return sum(vals) / len(vals) if vals else 0.0


def leave_one_out(rows: Sequence[Mapping[str, Any]], settings: Sequence[str], budgets: Sequence[str]
                  ) -> dict[str, Any]:
    """Leave-one-conversation-out choice among writer ``settings`` (row ``writer`` names).

    Rows as in ``retention_table`` plus ``conversation``. For each conversation, the setting
    with the best Read-Recall on the other conversations (pooled over their questions, then
    averaged over ``budgets``; ties: the earlier setting) is the one it is scored with.
    Returns ``picks`` (conversation -> setting), ``in_sample`` (the setting the same rule picks
    on all conversations) and ``table``: ``retention_table`` rows per budget (writer ``"cv"``)
    over every conversation read with its pick.
    """
    budgets = [str(b) for b in budgets]
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    convs: list[str] = []
    for r in rows:
        if r["writer"] in settings:
            by.setdefault((r["writer"], r["conversation"]), []).append(r)
            if r["conversation"] not in convs:
                convs.append(r["conversation"])
    if not convs:
        raise DataFormatError("<retention>", "rows", "rows of the given settings with a conversation")

    def best(pool: Sequence[str]) -> str:
        scored = [(_mean_read([r for c in pool for r in by.get((s, c), ())], budgets), -i, s)
                  for i, s in enumerate(settings)]
        return max(scored)[2]

    picks = {c: best([o for o in convs if o != c]) if len(convs) > 1 else best(convs) for c in convs}
    chosen = [{**r, "writer": "cv"} for c in convs for r in by.get((picks[c], c), ())
              if str(r["budget"]) in budgets]
    return {"picks": picks, "in_sample": best(convs), "table": retention_table(chosen)}


def retention_markdown(table: Sequence[Mapping[str, Any]], *, read_label: str = "Read-Recall@10") -> str:
    budgets = list(dict.fromkeys(r["budget"] for r in table))
    writers = list(dict.fromkeys(r["writer"] for r in table))
    cell = {(r["writer"], r["budget"]): r for r in table}

    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    head = "| writer | " + " | ".join(f"{b}: Retain / {read_label}" for b in budgets) + " |"
    lines = [head, "|---|" + "---:|" * len(budgets)]
    for w in writers:
        parts = []
        for b in budgets:
            r = cell.get((w, b))
            parts.append("" if r is None else f"{fmt(r['retain_recall'])} / {fmt(r['read_recall'])}")
        lines.append(f"| {w} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def budget_curve_plot(table: Sequence[Mapping[str, Any]], path: str | Path, *, x: Mapping[str, float],
                      x_label: str = "retained source-evidence budget (share of the conversation's tokens, %)",
                      reference: float | None = None, title: str = "Budgeted pre-query retention") -> Path:
    """Two panels (Retain-Recall, Read-Recall) of recall against budget, one line per writer;
    ``x`` maps each budget label to its position; ``reference`` draws the unbudgeted path's
    Read-Recall as a dashed line."""
    if not table:
        raise DataFormatError("<retention>", "table", "at least one (writer, budget) row")
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    try:
        writers = list(dict.fromkeys(r["writer"] for r in table))
        for ax, key, label in ((axes[0], "retain_recall", "Retain-Recall (%)"),
                               (axes[1], "read_recall", "Read-Recall@10 (%)")):
            for w in writers:
                pts = sorted((x[r["budget"]], r[key]) for r in table if r["writer"] == w and r[key] is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=w)
            if key == "read_recall" and reference is not None:
                ax.axhline(reference, color="black", linestyle="--", linewidth=1, label="unbudgeted model-free")
            ax.set_xlabel(x_label, fontsize=8)
            ax.set_ylabel(label)
            ax.set_ylim(0, 100)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        fig.suptitle(title, fontsize=10)
        return _save_png(fig, path)
    finally:
        plt.close(fig)
