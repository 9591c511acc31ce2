"""The ablation's bar chart: overall and multi-hop recall@10 per row (``ablate_model_free.py --plot``).

matplotlib is the ``bench`` extra; it is imported when a chart is drawn, with the Agg backend
so that drawing needs no display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def ablation_plot(rows: Sequence[tuple[str, float, float]], path: str | Path, *,
                  title: str = "Model-free path: recall@10 per variant") -> Path:
    """Write a PNG of horizontal bars: overall recall@10 and multi-hop recall@10 per variant.

    ``rows`` are (variant name, recall@10 %, multi-hop recall@10 %), the first being the full
    path; dashed lines mark its two figures so each component's delta reads off the bar ends.
    """
    if not rows:
        raise ValueError("ablation_plot needs at least one (variant, recall@10, multi-hop) row")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    n = len(rows)
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * n + 1.4), dpi=120)
    try:
        ys = list(range(n))[::-1]  # first row on top
        h = 0.38
        ax.barh([y + h / 2 for y in ys], [r[1] for r in rows], height=h, color="tab:blue", label="recall@10")
        ax.barh([y - h / 2 for y in ys], [r[2] for r in rows], height=h, color="tab:orange",
                label="multi-hop recall@10")
        ax.axvline(rows[0][1], color="tab:blue", linestyle="--", linewidth=1)
        ax.axvline(rows[0][2], color="tab:orange", linestyle="--", linewidth=1)
        ax.set_yticks(ys)
        ax.set_yticklabels([r[0] for r in rows], fontsize=7)
        ax.set_xlabel("gold-evidence recall at 10 packets (%)")
        ax.set_xlim(0, 100)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(out, format="png", bbox_inches="tight")
        return out
    finally:
        plt.close(fig)
