"""Plots: quality versus cost of a grid of runs (the shape of the paper's Figure 3), and the
per-component ablation of the model-free path.

matplotlib is an optional dependency (the ``bench`` extra); it is imported when a plot is
drawn, with the non-interactive Agg backend so that plotting works without a display.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from memcompile_local.bench.report import run_point
from memcompile_local.errors import DataFormatError, MissingExtraError

__all__ = ["ablation_plot", "quality_vs_tokens_plot"]

logger = logging.getLogger(__name__)


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415 - optional heavy dependency, imported on use

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "bench", "plots") from exc
    return plt


def _save_png(fig: Any, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, format="png")
    return out


def quality_vs_tokens_plot(runs: Sequence[Mapping[str, Any]], path: str | Path, *,
                           title: str = "Quality vs. non-judge tokens per question") -> Path:
    """Write a PNG scatter: one labelled point per run, quality (%) against tokens per question.

    Runs are those of ``report.run_point``: quality is judge accuracy when every plotted run
    was judged, else mem0 F1 for all of them (one y axis must hold one metric). Runs without
    a token figure or a quality value are left out with a log message; at least one must
    remain. Returns the path written.
    """
    points = [run_point(run) for run in runs]
    usable = [p for p in points if p[1] is not None and p[2] is not None]
    for name, tokens, quality, _ in points:
        if tokens is None or quality is None:
            logger.info("run %r has no token figure or quality value; not plotted", name)
    if not usable:
        raise DataFormatError("<runs>", "token_table / metrics",
                              "at least one run with tokens per question and a quality value")
    metric_names = {p[3] for p in usable}
    if len(metric_names) > 1:
        # Mixed judged/unjudged runs: fall back to F1, which every LoCoMo run has.
        fallback = []
        for run in runs:
            metrics = run["metrics"]
            f1 = metrics.get("mem0_f1") if metrics.get("benchmark") == "longmemeval" else metrics["overall"]["mem0_f1"]
            name, tokens, _, _ = run_point(run)
            if tokens is not None and f1 is not None:
                fallback.append((name, tokens, f1, "F1 (mem0)"))
        usable = fallback
        if not usable:
            raise DataFormatError("<runs>", "metrics", "a common quality metric across runs")
    y_name = usable[0][3]

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    try:
        xs = [p[1] for p in usable]
        ys = [100 * p[2] for p in usable]
        ax.scatter(xs, ys, s=36, color="tab:blue", zorder=3)
        for name, x, y in zip((p[0] for p in usable), xs, ys):
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
        ax.set_xlabel("Non-judge tokens per question")
        ax.set_ylabel(f"{y_name} (%)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3, zorder=0)
        return _save_png(fig, path)
    finally:
        plt.close(fig)


def ablation_plot(rows: Sequence[tuple[str, float, float]], path: str | Path, *,
                  title: str = "Model-free path: recall@10 per variant") -> Path:
    """Write a PNG of horizontal bars: overall recall@10 and multi-hop recall@10 per variant.

    ``rows`` are (variant name, recall@10 %, multi-hop recall@10 %), the first being the full
    path; dashed lines mark its two figures so each component's delta reads off the bar ends.
    """
    if not rows:
        raise DataFormatError("<ablation>", "rows", "at least one (variant, recall@10, multi-hop) row")
    plt = _pyplot()
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
        return _save_png(fig, path)
    finally:
        plt.close(fig)
