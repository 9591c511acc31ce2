"""One run folder as a self-contained HTML page (``memcompile-local report RUN_DIR``).

The page shows what the inspector's Runs page shows (``bench/run_view.py`` computes both):
per-category recall and accuracy as a table and an inline SVG bar chart, and every question with
its gold turns against the selected ones, hits and misses marked in words and symbols as well as
colour. It loads nothing (no script, no stylesheet, no font from elsewhere), so it opens the same
from a mail attachment, an archive or a machine without network. Every text from the run files is
escaped, and invisible direction controls are shown as visible marks.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from memcompile_local.bench.run_view import RunFolder, all_questions, failing, run_summary
from memcompile_local.bench.runfiles import atomic_write

__all__ = ["render_run_html", "write_run_html", "bar_chart_svg", "visible_text"]

# Characters that reorder or hide the text around them (bidi embeddings, overrides, isolates
# and marks): shown as a visible [U+XXXX] mark so a crafted question cannot disguise itself.
_BIDI = re.compile("[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")


def visible_text(text: Any) -> str:
    """``text`` escaped for HTML, with direction controls as visible ``[U+XXXX]`` marks."""
    out, last = [], 0
    value = "" if text is None else str(text)
    for m in _BIDI.finditer(value):
        out.append(html.escape(value[last:m.start()]))
        out.append(f'<span class="ctl" title="invisible direction control">[U+{ord(m.group()):04X}]</span>')
        last = m.end()
    out.append(html.escape(value[last:]))
    return "".join(out)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def bar_chart_svg(groups: Iterable[Mapping[str, Any]], *, title: str) -> str:
    """Horizontal bars of recall and accuracy per group, each bar labelled with its value, the
    two series told apart by fill pattern and by a legend (not by colour alone)."""
    groups = list(groups)
    row_h, bar_h, label_w, plot_w = 44, 16, 190, 360
    height = 40 + row_h * len(groups) + 30
    width = label_w + plot_w + 70
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" aria-labelledby="chart-title">',
             f'<title id="chart-title">{html.escape(title)}</title>',
             '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
             '<line x1="0" y1="0" x2="0" y2="6" stroke="#7a4a00" stroke-width="3"/></pattern></defs>',
             f'<rect x="{label_w}" y="8" width="14" height="10" fill="#1d4f91"/>'
             f'<text x="{label_w + 18}" y="17" font-size="12">recall (solid)</text>'
             f'<rect x="{label_w + 120}" y="8" width="14" height="10" fill="url(#hatch)" stroke="#7a4a00"/>'
             f'<text x="{label_w + 138}" y="17" font-size="12">accuracy (hatched)</text>']
    for i, g in enumerate(groups):
        y = 34 + i * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + bar_h}" font-size="12" text-anchor="end">'
                     f'{html.escape(str(g["name"]))} (n={int(g.get("count") or 0)})</text>')
        for j, (key, fill, stroke) in enumerate((("recall", "#1d4f91", "#1d4f91"),
                                                  ("accuracy", "url(#hatch)", "#7a4a00"))):
            value = g.get(key)
            yy = y + j * (bar_h + 2)
            w = 0 if value is None else max(1.0, plot_w * float(value))
            parts.append(f'<rect x="{label_w}" y="{yy}" width="{w:.1f}" height="{bar_h}" fill="{fill}" '
                         f'stroke="{stroke}"><title>{key} {_pct(value)}</title></rect>')
            parts.append(f'<text x="{label_w + w + 4:.1f}" y="{yy + bar_h - 4}" font-size="11">'
                         f'{key[0].upper()} {_pct(value)}</text>')
    axis_y = 34 + row_h * len(groups)
    for frac in (0, 0.5, 1):
        x = label_w + plot_w * frac
        parts.append(f'<line x1="{x}" y1="28" x2="{x}" y2="{axis_y}" stroke="#999" stroke-dasharray="2,3"/>'
                     f'<text x="{x}" y="{axis_y + 14}" font-size="11" text-anchor="middle">{int(frac * 100)}%</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:1rem;color:#111;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #bbb;padding:.3rem .5rem;vertical-align:top;text-align:left}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.wrap{overflow-x:auto}.ctl{border:1px dashed #555;font-size:.8em;padding:0 .15em}
.hit{font-weight:600}.miss{text-decoration:underline wavy #a00}.id{font-family:ui-monospace,monospace;white-space:nowrap}
.tag{display:inline-block;border:1px solid #555;border-radius:3px;padding:0 .3em;margin:.1em;font-size:.85em}
.q{unicode-bidi:isolate;white-space:pre-wrap;overflow-wrap:anywhere}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}
svg{max-width:100%;height:auto}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
"""


def _ids(items: Iterable[Mapping[str, Any]], flag: str, yes: str, no: str, loss: bool) -> str:
    """Id tags: ✓ for a hit; otherwise ✗ when that is a loss (a missed gold turn), · when neutral."""
    out = []
    for it in items:
        marked = bool(it.get(flag))
        label = yes if marked else no
        cls, sign = ("hit", "✓") if marked else (("miss", "✗") if loss else ("other", "·"))
        out.append(f'<span class="tag id {cls}">{sign} {visible_text(it["id"])} <small>({label})</small></span>')
    return " ".join(out) or "—"


def render_run_html(run: RunFolder) -> str:
    """The whole page for ``run`` (see the module doc)."""
    s = run_summary(run)
    questions = all_questions(run)
    title = f"Run {s['name']} ({s['benchmark']})"
    cfg = s["config"]
    head = "".join(f"<dt>{html.escape(k)}</dt><dd>{visible_text(v)}</dd>" for k, v in (
        ("benchmark", s["benchmark"]), ("run id", s["run_id"]), ("preset", cfg.get("preset")),
        ("data", cfg.get("data")), ("answer model", cfg.get("model")), ("embedder", cfg.get("embedder")),
        ("judge", cfg.get("judge")), ("questions", s["questions"]), ("recall stage", s["stage"]),
        ("wall time", "n/a" if s["wall_s"] is None else f"{s['wall_s']:.1f} s"),
        ("memcompile-local", cfg.get("version"))))
    rows = []
    for g in [*s["categories"], s["overall"]]:
        rows.append(f'<tr><th scope="row">{visible_text(g["name"])}</th><td class="num">{g["count"]}</td>'
                    f'<td class="num">{_pct(g["recall"])}</td><td class="num">{g["fully_covered"]}/{g["recall_n"]}</td>'
                    f'<td class="num">{_pct(g["accuracy"])}</td><td class="num">{g["correct"]}/{g["judged"]}</td>'
                    f'<td class="num">{g["judge_errors"]}</td></tr>')
    o = s["outcomes"]
    qrows = []
    for q in questions:
        fail = failing(q)
        judge = q["judge_label"] or ("error" if q["judge_error"] else "not judged")
        unreachable = "".join(f'<span class="tag id">⊘ {visible_text(u)} <small>(not in the history)</small></span>'
                              for u in q["unreachable_ids"])
        qrows.append(
            f'<tr id="q-{html.escape(q["question_id"], quote=True)}"><td class="id">{visible_text(q["question_id"])}'
            f'{"<br><strong>✗ failing</strong>" if fail else "<br>✓ ok"}</td>'
            f'<td>{visible_text(q["category_name"])}</td>'
            f'<td><div class="q">{visible_text(q["question"])}</div><div><small>gold answer:</small> '
            f'<span class="q">{visible_text(q["gold"])}</span></div>'
            f'<div><small>prediction:</small> <span class="q">{visible_text(q["prediction"])}</span></div></td>'
            f'<td class="num">{_pct(q["recall"])}<br><small>{html.escape(q["outcome"].replace("_", " "))}</small></td>'
            f'<td>{html.escape(str(judge))}</td>'
            f'<td>{_ids(q["gold_ids"], "selected", "selected", "missed", True)}{unreachable}</td>'
            f'<td>{_ids(q["selected_ids"], "gold", "gold", "not gold", False)}</td></tr>')
    torn = (f"<p><strong>Note:</strong> predictions.jsonl ends in {s['torn_lines']} torn line (a run killed "
            "mid-write); it is left out.</p>") if s["torn_lines"] else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body><main>
<h1>{visible_text(title)}</h1>
<dl>{head}</dl>{torn}
<h2 id="categories">Recall and accuracy per category</h2>
<p>Recall: mean share of each question's gold turns among the turns selected at stage
<strong>{html.escape(str(s["stage"]))}</strong>. Accuracy: share of judged answers labelled correct.</p>
<div class="wrap"><table><caption class="sr">per category</caption><thead><tr><th scope="col">Category</th>
<th scope="col" class="num">Questions</th><th scope="col" class="num">Recall</th><th scope="col" class="num">Fully covered</th>
<th scope="col" class="num">Accuracy</th><th scope="col" class="num">Correct/judged</th><th scope="col" class="num">Judge errors</th>
</tr></thead><tbody>{"".join(rows)}</tbody></table></div>
<figure>{bar_chart_svg(s["categories"] + [s["overall"]], title="Recall and accuracy per category")}
<figcaption>Recall (solid) and accuracy (hatched) per category; each bar is labelled with its value.</figcaption></figure>
<p>Questions by evidence: {o["hit"]} with every gold turn selected, {o["partial"]} with some, {o["miss"]} with none,
{o["no_gold"]} without gold turns.</p>
<h2 id="questions">Questions</h2>
<p>Gold turns: ✓ selected, ✗ missed, ⊘ named by the benchmark but absent from the history.
Selected turns: ✓ gold, · not gold. A question is failing when it missed a gold turn or was judged wrong.</p>
<div class="wrap"><table><thead><tr><th scope="col">Question id</th><th scope="col">Category</th>
<th scope="col">Question, gold answer, prediction</th><th scope="col" class="num">Recall</th><th scope="col">Judge</th>
<th scope="col">Gold turns</th><th scope="col">Selected turns (rank order)</th></tr></thead>
<tbody>{"".join(qrows)}</tbody></table></div>
</main></body></html>
"""


def write_run_html(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the page of the run folder ``run_dir`` to ``out`` (default ``run_dir/report.html``)
    through a temporary file and a rename; returns the path written."""
    from memcompile_local.bench.run_view import load_run

    run = load_run(run_dir, label=Path(run_dir).resolve().name)
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, render_run_html(run))
    return target
