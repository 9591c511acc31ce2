"""Plots: quality versus cost of a grid of runs (the shape of the paper's Figure 3).

matplotlib is an optional dependency (the ``bench`` extra); it is imported when a plot is
drawn, with the non-interactive Agg backend so that plotting works without a display.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from memcompile_local.bench.aggregate import QUALITY_METRICS, quality_size, quality_value, tokens_per_question
from memcompile_local.errors import DataFormatError, MissingExtraError

__all__ = ["PlotPoint", "draw_quality_vs_tokens", "plot_points", "quality_vs_tokens_plot"]

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
    fig.savefig(out, format="png", bbox_inches="tight")  # keeps legends placed outside the axes
    return out


_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
            "tab:olive", "tab:cyan", "tab:gray")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


@dataclass(frozen=True)
class PlotPoint:
    """One run as the quality plot draws it: colour encodes the backbone, marker the preset."""

    name: str
    backbone: str
    preset: str
    tokens: float
    quality: float  # a fraction in [0, 1]
    n: int  # questions behind the quality figure
    colour: str
    marker: str


def _pick_metric(runs: Sequence[Mapping[str, Any]]) -> str | None:
    """The first quality metric every run with a token figure has (one y axis, one metric)."""
    with_tokens = [r for r in runs if tokens_per_question(r) is not None]
    for key, _, _ in QUALITY_METRICS:
        if with_tokens and all(quality_value(r["metrics"], key) is not None for r in with_tokens):
            return key
    # No metric common to all: the best one most runs have.
    counts = {key: sum(quality_value(r["metrics"], key) is not None for r in with_tokens)
              for key, _, _ in QUALITY_METRICS}
    best = max(counts.values(), default=0)
    return next((k for k, _, _ in QUALITY_METRICS if counts[k] == best), None) if best else None


def _context_axis(runs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether x should be the reader's context tokens: no run made a model call (every
    non-judge token figure is 0, as in a retrieval-only grid) and all report context tokens."""
    tokens = [tokens_per_question(r) for r in runs]
    return bool(runs) and all(t == 0 for t in tokens) and all(
        r.get("context_tokens_per_question") is not None for r in runs)


def plot_points(runs: Sequence[Mapping[str, Any]]) -> tuple[list[PlotPoint], str]:
    """The points of :func:`quality_vs_tokens_plot` and the y-axis label.

    A run is ``{"name", "metrics", "token_table" | "tokens_per_question"}`` plus optional
    ``backbone`` and ``preset`` (a compare grid sets them; otherwise the name is the backbone).
    Colours follow the backbones and markers the presets, each in first-seen order. Runs
    without a token figure or without the chosen metric are left out with a log message.
    When no run made a model call, ``tokens`` holds the reader's context tokens per question
    (``context_tokens_per_question``) instead of the zero generation tokens.
    """
    context = _context_axis(runs)
    metric = _pick_metric(runs)
    if metric is None:
        raise DataFormatError("<runs>", "token_table / metrics",
                              "at least one run with tokens per question and a quality value")
    backbones: dict[str, str] = {}
    presets: dict[str, str] = {}
    points = []
    lme = False
    for run in runs:
        name = str(run.get("name", "run"))
        tokens = run["context_tokens_per_question"] if context else tokens_per_question(run)
        value = quality_value(run["metrics"], metric)
        if tokens is None or value is None:
            logger.info("run %r has no token figure or no %s value; not plotted", name, metric)
            continue
        lme = lme or run["metrics"].get("benchmark") == "longmemeval"
        backbone = str(run.get("backbone") or name)
        preset = str(run.get("preset") or "")
        colour = backbones.setdefault(backbone, _COLOURS[len(backbones) % len(_COLOURS)])
        marker = presets.setdefault(preset, _MARKERS[len(presets) % len(_MARKERS)])
        points.append(PlotPoint(name, backbone, preset, float(tokens), float(value),
                                quality_size(run["metrics"], metric), colour, marker))
    label = next(lab_lme if lme else lab for key, lab, lab_lme in QUALITY_METRICS if key == metric)
    return points, label


def quality_vs_tokens_plot(runs: Sequence[Mapping[str, Any]], path: str | Path, *,
                           title: str = "Quality vs. non-judge tokens per question") -> Path:
    """Write a PNG scatter of quality (%) against non-judge tokens per question, one point per run.

    Colour encodes the backbone and marker the preset (two legends outside the axes); each
    point is labelled with its N, the questions behind its figure (one N shared by all goes in
    the title), and judge accuracies carry a 95% binomial interval so that a difference
    smaller than the noise reads as one. The y axis always
    spans 0-100% and the x axis starts at 0: the axes are never zoomed onto the points.
    The metric is the first of judge, F1, final-stage recall that every plotted run has.
    Returns the path written.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.4, 4.8), dpi=120)
    try:
        draw_quality_vs_tokens(ax, runs, title=title)
        return _save_png(fig, path)
    finally:
        plt.close(fig)


def draw_quality_vs_tokens(ax: Any, runs: Sequence[Mapping[str, Any]], *,
                           title: str = "Quality vs. non-judge tokens per question") -> Any:
    """Draw :func:`quality_vs_tokens_plot`'s scatter on the matplotlib axes ``ax``; returns ``ax``."""
    points, y_name = plot_points(runs)
    context = _context_axis(runs)
    judge = y_name.startswith("Judge")
    sizes = {p.n for p in points}
    for p in points:
        y = 100 * p.quality
        if judge and p.n:
            half = 100 * 1.96 * math.sqrt(max(p.quality * (1 - p.quality), 0.0) / p.n)
            ax.errorbar([p.tokens], [y], yerr=[[min(half, y)], [min(half, 100 - y)]], fmt="none",
                        ecolor=p.colour, elinewidth=1, capsize=3, alpha=0.7, zorder=2)
        ax.scatter([p.tokens], [y], s=52, color=p.colour, marker=p.marker, edgecolors="black",
                   linewidths=0.5, alpha=0.85, zorder=3)
        if len(sizes) > 1:  # one N for all points goes in the title instead
            ax.annotate(f"N={p.n}", (p.tokens, y), textcoords="offset points", xytext=(6, 4), fontsize=7)
    xmax = max((p.tokens for p in points), default=0.0)
    ax.set_xlim(0, xmax * 1.15 if xmax > 0 else 1.0)
    ax.set_ylim(0, 100)
    ax.set_xlabel("Context tokens per question (no model call was made)" if context
                  else "Non-judge tokens per question")
    ax.set_ylabel(f"{y_name} (%)")
    if context and title.startswith("Quality vs. non-judge tokens"):
        title = "Quality vs. context tokens per question"
    if len(sizes) == 1:
        title += f"; N = {next(iter(sizes))} questions per point"
    ax.set_title(title + ("; bars: 95% interval" if judge else ""), fontsize=10)
    ax.grid(True, alpha=0.3, zorder=0)
    # Legends sit outside the axes so that they never hide a point.
    backbone_handles = {p.backbone: ax.scatter([], [], color=p.colour, marker="o", s=36) for p in points}
    first = ax.legend(list(backbone_handles.values()), list(backbone_handles), title="backbone",
                      loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, title_fontsize=7)
    preset_handles = {p.preset: ax.scatter([], [], color="white", edgecolors="black", marker=p.marker, s=36)
                      for p in points if p.preset}
    if preset_handles:
        ax.add_artist(first)
        ax.legend(list(preset_handles.values()), list(preset_handles), title="preset",
                  loc="lower left", bbox_to_anchor=(1.02, 0.0), fontsize=7, title_fontsize=7)
    return ax
