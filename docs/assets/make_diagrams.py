"""Draw the two diagrams of the README and the site (run from the repository root).

    python docs/assets/make_diagrams.py

writes ``docs/assets/overview.svg`` (the two planes and the model-free path) and
``docs/assets/pipeline.svg`` (the paper's steps mapped onto the modules). Text stays text in
the SVG (``svg.fonttype: none``), so the files are small and searchable. Needs matplotlib
(the ``bench`` extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent
matplotlib.rcParams.update({"svg.fonttype": "none", "font.family": "DejaVu Sans", "svg.hashsalt": "memcompile"})

INK = "#1f2430"
PAPER = "#e8edf9"     # the paper's path
FREE = "#e6f4ea"      # the model-free path
SHARED = "#f4f1e8"    # what both use
BOUNDARY = "#b3261e"


def box(ax, x, y, w, h, title, body="", fill=SHARED, size=9.5):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                linewidth=1.1, edgecolor=INK, facecolor=fill))
    if body:
        ax.text(x + w / 2, y + h - 0.22, title, ha="center", va="top", fontsize=size, weight="bold", color=INK)
        ax.text(x + w / 2, y + h - 0.58, body, ha="center", va="top", fontsize=size - 1.6, color=INK,
                linespacing=1.35)
    else:
        ax.text(x + w / 2, y + h / 2, title, ha="center", va="center", fontsize=size, weight="bold", color=INK)


def arrow(ax, x0, y0, x1, y1, color=INK, style="-|>", rad=0.0):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12, linewidth=1.2,
                                 color=color, connectionstyle=f"arc3,rad={rad}"))


def canvas(width, height):
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width * 1.6)
    ax.set_ylim(0, height * 1.6)
    ax.axis("off")
    return fig, ax


def overview() -> plt.Figure:
    fig, ax = canvas(11, 5.2)
    # shared: the store of immutable turns
    box(ax, 0.1, 3.0, 2.75, 2.3, "Store", "each turn an immutable\nSourcePacket: id, speaker,\ntime, text, caption;\nSQLite or PostgreSQL", size=8.6)
    ax.text(1.5, 5.75, "add / import", ha="center", fontsize=9, color=INK)
    arrow(ax, 1.5, 5.65, 1.5, 5.32)
    # paper path (top lane)
    ax.text(3.1, 7.95, "MemCompile (the paper's path: a capable model extracts, schedules, answers)",
            fontsize=10, weight="bold", color="#2b3f86")
    box(ax, 3.1, 5.4, 3.6, 2.3, "Address Plane",
        "claims (descriptors) extracted\nper turn, placed in Cells;\nquery intent routes Cells,\nBM25 and dense add hits",
        fill=PAPER)
    box(ax, 8.3, 5.4, 3.9, 2.3, "Evidence Plane",
        "anchor scheduler (LLM) picks\nK0 packets from the pool;\nbounded frontier adds support;\nMemPursuit: model-free option",
        fill=PAPER)
    # normalization boundary
    ax.plot([7.5, 7.5], [5.2, 7.75], color=BOUNDARY, linewidth=2, linestyle=(0, (4, 3)))
    ax.text(7.5, 5.05, "normalization boundary:\nhits collapse onto\ntheir SourcePackets", ha="center", va="top",
            fontsize=7.5, color=BOUNDARY)
    arrow(ax, 6.7, 6.55, 8.3, 6.55)
    # model-free path (bottom lane)
    ax.text(3.1, 2.55, "Model-free path (--preset model-free: zero model calls to select evidence)",
            fontsize=10, weight="bold", color="#1e6b34")
    box(ax, 3.1, 0.2, 3.6, 2.1, "Rule extraction",
        "claims, names, keywords and\nevent times from each turn;\nrule intent for the question", fill=FREE)
    box(ax, 8.3, 0.2, 3.9, 2.1, "Fused retriever",
        "BM25 + dense + speaker, time,\nrole, answer-type channels;\nweighted sum or learned ranker;\nMemPursuit for list questions",
        fill=FREE)
    arrow(ax, 6.7, 1.25, 8.3, 1.25)
    # store feeds both lanes
    arrow(ax, 2.8, 4.8, 3.1, 6.3, rad=-0.2)
    arrow(ax, 2.8, 3.4, 3.1, 1.4, rad=0.2)
    # reader view and answer
    box(ax, 13.3, 3.0, 2.6, 2.3, "Reader view", "the chosen turns with\ntheir claims, quoted\nas data; a compact\ncontext for the model")
    arrow(ax, 12.2, 6.3, 13.3, 4.8, rad=-0.15)
    arrow(ax, 12.2, 1.4, 13.3, 3.4, rad=0.15)
    box(ax, 13.3, 0.4, 2.6, 1.6, "Answer", "any backend; or stop\nat search / compile", size=9)
    arrow(ax, 14.6, 3.0, 14.6, 2.0)
    return fig


def pipeline() -> plt.Figure:
    fig, ax = canvas(12.6, 4.2)
    steps = [
        ("1 Store", "SourcePackets\nstore/, data/", SHARED),
        ("2 Address", "descriptors, Cells,\nintent, routing,\nBM25, dense\naddress/, build/", PAPER),
        ("3 Normalize", "hits -> packets,\nthe pool U_q\npipeline/normalize.py", "#fbe9e7"),
        ("4 Anchors", "scheduler, MMR,\npursuit, or fused\nevidence/, fused/", PAPER),
        ("5 Frontier", "bounded support\nappends\nevidence/frontier.py", PAPER),
        ("6 Reader view", "claim bundle, raw,\nrepresentative\nevidence/views.py", SHARED),
        ("7 Answer", "answer model\nevidence/answer.py", SHARED),
    ]
    w, gap, y, h = 2.5, 0.35, 2.2, 3.0
    for i, (title, body, fill) in enumerate(steps):
        x = 0.2 + i * (w + gap)
        box(ax, x, y, w, h, title, body, fill=fill, size=9.2)
        if i:
            arrow(ax, x - gap, y + h / 2, x, y + h / 2)
    ax.text(0.2, 6.15, "Algorithm 1 of the paper as the package runs it (pipeline/compile.py wires the steps; "
            "each is timed)", fontsize=10, weight="bold", color=INK)
    ax.text(0.2, 1.4, "Writes: Memory.add -> store/ (turns) -> build/ (claims, Cells, vectors) -> views/append.py "
            "(the loaded view grows in place)", fontsize=9, color=INK)
    ax.text(0.2, 0.7, "Questions: Memory.search / compile / answer -> views/ (the namespace's current view) -> "
            "pipeline/ -> evidence/answer.py", fontsize=9, color=INK)
    return fig


def main(out: Path = OUT) -> int:
    for name, make in (("overview", overview), ("pipeline", pipeline)):
        fig = make()
        fig.savefig(out / f"{name}.svg", bbox_inches="tight", metadata={"Date": None})
        if "--png" in sys.argv:
            fig.savefig(out / f"{name}.png", bbox_inches="tight", dpi=110)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
