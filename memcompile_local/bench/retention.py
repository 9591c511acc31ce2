"""Retention metrics of budgeted pre-query retention (EMBER) and the budget curve.

For one question and one retained memory:

- **Retain-Recall**: the share of its gold evidence turns that survived retention (some
  capsule was cut from them);
- **Read-Recall@k**: the share of its gold evidence turns that reach the reader: the sources
  of the ``k`` capsules the query path selected over the retained memory.

``retention_table`` averages both per (writer, budget) over questions with gold evidence;
``retention_markdown`` prints it; ``budget_curve_plot`` draws recall against budget, one
line per writer (matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import DataFormatError
from .coverage import gold_recall
from .plots import _pyplot, _save_png

__all__ = ["retain_recall", "read_recall", "retention_table", "retention_markdown", "budget_curve_plot"]


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
