"""Render benchmark results as Markdown: a run's ``report.md``, the compare table of a grid,
the aliasing section and the short console summary.

The numbers come from ``bench/aggregate.py`` (``locomo_metrics``, ``longmemeval_metrics``,
``token_table``); nothing here computes a metric. Rates arrive as fractions in [0, 1] and
are rendered as percentages with two decimals, as the paper's tables do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from memcompile_local.bench.aggregate import final_stage, tokens_per_question
from memcompile_local.bench.corpora import (CORPORA, CORPUS_DEFINITIONS, corpus_markdown, corpus_summary_lines,
                                            report_title)
from memcompile_local.bench.judge import LONGMEMEVAL_TYPES
from memcompile_local.bench.metrics import bleu_tokenizer_name
from memcompile_local.data.quirks import describe_kind
from memcompile_local.errors import DataFormatError

__all__ = [
    "LOCOMO_DISPLAY_ORDER",
    "DEFAULT_DEFINITIONS",
    "LOCOMO_DEFINITIONS",
    "LONGMEMEVAL_DEFINITIONS",
    "token_table_markdown",
    "metrics_markdown",
    "write_markdown_report",
    "quirks_markdown",
    "recall_by_type_markdown",
    "compare_table",
    "aliasing_markdown",
    "summary_text",
]

# The column order of the paper's Table 1.
LOCOMO_DISPLAY_ORDER: tuple[int, ...] = (4, 1, 2, 3)


def _int(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def token_table_markdown(table: Mapping[str, Any]) -> str:
    """The token table as Markdown: stage, total, tokens per question, share (one decimal)."""
    lines = ["| Stage | Total tokens | Tokens/question | Share of non-judge total |",
             "|---|---:|---:|---:|"]
    for r in table["rows"]:
        share = "excluded" if r["kind"] == "excluded" else (
            "n/a" if r["share"] is None else f"{100 * r['share']:.1f}%")
        label = f"**{r['label']}**" if r["kind"] in ("subtotal", "total") else r["label"]
        lines.append(f"| {label} | {_int(r['total'])} | {_int(r['per_question'])} | {share} |")
    lines.append("")
    lines.append(f"Per-question figures divide each total by {table['n_questions']} questions; "
                 "shares are rounded independently.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------

_COMMON_DEFINITIONS: dict[str, str] = {
    "Non-judge tokens": (
        "Prompt plus completion tokens of the unique successful model calls of construction (fact and "
        "metadata extraction) and serving (query intent, packet scheduler, frontier, answer generation). "
        "Judge calls and embeddings are counted separately and excluded. Tokens per question divide each "
        "total by the number of scored questions."),
}

LOCOMO_DEFINITIONS: dict[str, str] = {
    "F1 (mem0)": (
        "Token-set F1 of the mem0 evaluation harness used by the paper's comparison tables: both strings "
        "are lowercased, each of . , ! ? is replaced by a space and the text is split on whitespace; with "
        "P and G the sets of prediction and gold tokens, precision = |P∩G|/|P|, recall = |P∩G|/|G|, "
        "F1 = 2·precision·recall/(precision+recall), and 0 when either answer is empty."),
    "BLEU-1 (mem0)": (
        "Sentence BLEU with unigram weight only, on NLTK word tokens of the lowercased strings: clipped "
        "unigram precision times the brevity penalty exp(1 − r/c) (1 when the prediction is longer than "
        "the gold answer); 0 when no token matches. NLTK smoothing method1 is specified, which never "
        "changes a unigram-only score."),
    "F1 (LoCoMo)": (
        "The LoCoMo benchmark's own F1: lowercase, delete punctuation, drop the words a, an, the and "
        "and, Porter-stem, then F1 over token multisets. Multi-hop answers are split at commas and each "
        "gold item takes its best match among the predicted items, averaged over gold items; open-domain "
        "gold answers are cut at the first ';'."),
    "Judge": (
        "Share of questions an LLM judge labels CORRECT. The judge is lenient: an answer about the same "
        "fact or topic as the gold answer counts whatever its wording or length, and a time answer "
        "naming the same period in another format counts. A judge call that fails counts as not correct "
        "and is reported in the Judge errors column."),
    "Gold recall": (
        "For one question, the fraction of its distinct gold evidence ids present among the selected "
        "SourcePackets of a stage; averaged over the questions that have gold evidence. A question is "
        "fully covered when all of its gold ids were selected."),
    "Categories": (
        "LoCoMo categories 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop are scored; category 5 "
        "(adversarial) has no gold answer and is left out. Overall covers categories 1-4; the row without "
        "open-domain leaves out category 3, whose lexical scores the paper does not compare."),
    **_COMMON_DEFINITIONS,
}

LONGMEMEVAL_DEFINITIONS: dict[str, str] = {
    "Judge": (
        "Share of questions an LLM judge accepts, with one check per question type: the response "
        "contains the correct answer (single-session user/assistant, multi-session; equivalent answers "
        "and full intermediate steps count, a partial answer does not); the same with off-by-one day, "
        "week or month counts tolerated (temporal reasoning); the updated value counts even next to "
        "stale ones (knowledge update); the response meets a personalization rubric (preference); and "
        "recognising that the question cannot be answered (ids containing _abs). A judge call that "
        "fails counts as not correct and is reported in the Judge errors column."),
    "Task-averaged accuracy": "The unweighted mean of the judge accuracies of the question types.",
    "Overall accuracy": "Judge accuracy over all questions.",
    "Abstention accuracy": (
        "Judge accuracy on the questions whose id contains _abs, where the correct behaviour is to say "
        "the question cannot be answered; they also count in their own type."),
    "Session recall": (
        "The fraction of a question's answer sessions with at least one selected turn, averaged over "
        "answerable questions."),
    "Turn recall": (
        "Gold recall against the turns labelled has_answer: the fraction of those turns among the "
        "selected ones, averaged over answerable questions that have such turns; fully covered when "
        "all were selected."),
    **_COMMON_DEFINITIONS,
}

DEFAULT_DEFINITIONS: dict[str, dict[str, str]] = {
    "locomo": LOCOMO_DEFINITIONS,
    "longmemeval": LONGMEMEVAL_DEFINITIONS,
    **{name: {**CORPUS_DEFINITIONS, **_COMMON_DEFINITIONS} for name in CORPORA},
}


def _recall_cells(block: Mapping[str, Any]) -> tuple[str, str]:
    n = block.get("n", 0)
    return _pct(block.get("recall")), f"{block.get('fully_covered', 0)}/{n}"


def _locomo_markdown(metrics: Mapping[str, Any]) -> str:
    groups = [metrics["per_category"][str(c)] for c in LOCOMO_DISPLAY_ORDER]
    groups += [metrics["overall"], metrics["overall_without_open_domain"]]
    lines = ["| Category | Count | F1 (mem0) | BLEU-1 (mem0) | F1 (LoCoMo) | Judge | Judge errors |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for g in groups:
        lines.append(f"| {g['name']} | {g['count']} | {_pct(g['mem0_f1'])} | {_pct(g['mem0_bleu1'])} | "
                     f"{_pct(g['locomo_f1'])} | {_pct(g['judge']['accuracy'])} | {g['judge']['errors']} |")
    lines.append("")
    lines.append(f"Scored questions: {metrics['count']} (categories 1-4). Category 5 (adversarial) "
                 f"questions left out: {metrics['excluded_category5']}.")
    stages = metrics.get("stages") or []
    if stages:
        lines += ["", "### Evidence recall", "",
                  "| Stage | Questions with gold | Gold recall | Fully covered | "
                  + " | ".join(f"Recall {metrics['per_category'][str(c)]['name']}" for c in LOCOMO_DISPLAY_ORDER)
                  + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(LOCOMO_DISPLAY_ORDER)]
        for stage in stages:
            block = metrics["overall"]["recall"][stage]
            recall, full = _recall_cells(block)
            per_cat = " | ".join(_pct(metrics["per_category"][str(c)]["recall"][stage]["recall"])
                                 for c in LOCOMO_DISPLAY_ORDER)
            lines.append(f"| {stage} | {block['n']} | {recall} | {full} | {per_cat} |")
    return "\n".join(lines)


def _longmemeval_markdown(metrics: Mapping[str, Any]) -> str:
    lines = ["| Question type | Count | Judge | Judge errors |", "|---|---:|---:|---:|"]
    for qtype in LONGMEMEVAL_TYPES:
        g = metrics["per_type"][qtype]
        lines.append(f"| {qtype} | {g['count']} | {_pct(g['judge']['accuracy'])} | {g['judge']['errors']} |")
    ab = metrics["abstention"]
    lines.append(f"| abstention (_abs) | {ab['count']} | {_pct(ab['judge']['accuracy'])} | "
                 f"{ab['judge']['errors']} |")
    lines += ["",
              f"Task-averaged accuracy: {_pct(metrics['task_averaged_accuracy'])}. "
              f"Overall accuracy: {_pct(metrics['overall_accuracy'])} over {metrics['count']} questions."]
    if metrics.get("types_missing"):
        lines.append(f"Types without judged questions (left out of the task average): "
                     f"{', '.join(metrics['types_missing'])}.")
    stages = metrics.get("stages") or []
    if stages:
        lines += ["", "### Evidence recall", "",
                  "| Stage | Session recall | Sessions fully covered | Turn recall | Turns fully covered |",
                  "|---|---:|---:|---:|---:|"]
        for stage in stages:
            s_recall, s_full = _recall_cells(metrics["recall"][stage]["session"])
            t_recall, t_full = _recall_cells(metrics["recall"][stage]["turn"])
            lines.append(f"| {stage} | {s_recall} | {s_full} | {t_recall} | {t_full} |")
    if metrics.get("recall_by_type"):
        lines += ["", "### Evidence recall per question type", "", recall_by_type_markdown(metrics["recall_by_type"])]
    return "\n".join(lines)


def recall_by_type_markdown(block: Mapping[str, Any]) -> str:
    """Turn and session recall per question type (rows) for every stage (column pairs), from
    ``bench.metrics.recall_by_type``; each cell says how many questions it averages."""
    stages = list(block.get("stages") or [])
    table = block.get("table") or {}
    if not stages:
        return "(no selections)"
    groups = list(block.get("types") or []) + ["overall"]
    head = "| Question type | " + " | ".join(f"{s} turn | {s} session" for s in stages) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(stages)]
    for g in groups:
        cells = []
        for s in stages:
            c = table.get(s, {}).get(g)
            if c is None:
                cells += ["n/a", "n/a"]
                continue
            cells += [f"{_pct(c['turn'])} ({c['n_turn']})", f"{_pct(c['session'])} ({c['n_session']})"]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    sizes = ", ".join(f"{s} {table[s]['overall']['mean_selected']:.1f}" for s in stages
                      if table.get(s, {}).get("overall", {}).get("mean_selected") is not None)
    k = block.get("k")
    lines += ["", (f"Recall@{k}: the first {k} selected turns of each stage. " if k else "")
              + f"Mean turns selected per question: {sizes}. In brackets: questions averaged "
              "(abstention questions and questions without that gold are left out)."]
    return "\n".join(lines)


def metrics_markdown(metrics: Mapping[str, Any]) -> str:
    """The results tables of a ``locomo_metrics`` or ``longmemeval_metrics`` dict."""
    kind = metrics.get("benchmark")
    if kind == "locomo":
        return _locomo_markdown(metrics)
    if kind == "longmemeval":
        return _longmemeval_markdown(metrics)
    if kind in CORPORA:
        return corpus_markdown(metrics)
    raise DataFormatError("<metrics>", "benchmark", "'locomo', 'longmemeval', 'realtalk' or 'beam'", f"got {kind!r}")


def _config_lines(config: Any, prefix: str = "") -> list[str]:
    if isinstance(config, Mapping):
        lines: list[str] = []
        for key in sorted(config, key=str):
            value = config[key]
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                lines += _config_lines(value, f"{name}.")
            else:
                lines.append(f"- `{name}`: {value}")
        return lines
    return [str(config)]


def _bleu_tokenizer_note() -> str | None:
    try:
        return bleu_tokenizer_name()
    except ImportError:  # MissingExtraError is an ImportError: nltk not installed
        return None


def quirks_markdown(quirks: Mapping[str, Any]) -> str:
    """The "Data quirks" section's body from ``QuirkLog.as_dict()``: a count per kind, what was
    done with each, and the first places of each kind."""
    counts = quirks.get("counts") or {}
    if not counts:
        return "None: every question was read whole."
    lines = ["| Quirk | Count | What the run did |", "|---|---:|---|"]
    for kind, n in counts.items():
        lines.append(f"| {kind} | {n} | {describe_kind(kind)} |")
    left = quirks.get("questions_left_out") or 0
    lines += ["", f"Questions left out of the run: {left}."
              + (" A strict run (`--strict`) refuses the data instead." if not quirks.get("strict") else "")]
    for kind in counts:
        places = (quirks.get("examples") or {}).get(kind) or []
        if places:
            lines += ["", f"First places ({kind}):", ""]
            lines += [f"- `{q['path']}` at `{q['where']}`: {q['detail']}" for q in places[:5]]
    return "\n".join(lines)


def write_markdown_report(path: str | Path, metrics: Mapping[str, Any], config_summary: Any,
                          token_table: Mapping[str, Any] | None = None,
                          definitions: Mapping[str, str] | None = None,
                          quirks: Mapping[str, Any] | None = None) -> Path:
    """Write a Markdown report: configuration, results, data quirks, token cost and metric
    definitions.

    ``definitions`` (metric name -> definition in words) are added to, and override, the
    benchmark's entry of :data:`DEFAULT_DEFINITIONS`; every metric in the report is defined
    in its last section. ``quirks``: what the loader read past (``QuirkLog.as_dict()``; None:
    no section). Returns the path written.
    """
    out = Path(path)
    title = {"locomo": "LoCoMo", "longmemeval": "LongMemEval"}.get(str(metrics.get("benchmark")),
                                                                   report_title(str(metrics.get("benchmark"))))
    parts = [f"# {title} benchmark report", "", "## Configuration", ""]
    parts += _config_lines(config_summary) or ["(none given)"]
    parts += ["", "## Results", "", "Rates are percentages.", "", metrics_markdown(metrics)]
    if quirks is not None:
        parts += ["", "## Data quirks", "", quirks_markdown(quirks)]
    if token_table is not None:
        parts += ["", "## Token cost", "", token_table_markdown(token_table)]
    merged = dict(DEFAULT_DEFINITIONS.get(str(metrics.get("benchmark")), {}))
    if token_table is None:
        merged.pop("Non-judge tokens", None)
    merged.update(definitions or {})
    if "BLEU-1 (mem0)" in merged:
        tokenizer = _bleu_tokenizer_note()
        if tokenizer:
            merged["BLEU-1 (mem0)"] = merged["BLEU-1 (mem0)"] + f" Tokenizer in this run: {tokenizer}."
    parts += ["", "## Metric definitions", ""]
    parts += [f"- **{name}**: {text}" for name, text in merged.items()]
    parts.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


# --------------------------------------------------------------------------------------
# Grids of runs
# --------------------------------------------------------------------------------------

def _judge_name(run: Mapping[str, Any]) -> str:
    """``backend/model (prompt version)`` of the run's judge, ``none`` when it was not judged."""
    judge = run.get("judge")
    if not judge:
        return "none"
    text = f"{judge.get('backend')}/{judge.get('model')}"
    return f"{text} ({judge['prompt_version']})" if judge.get("prompt_version") else text


def compare_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table comparing runs, one table per benchmark present.

    LoCoMo columns: overall count, F1 (mem0), BLEU-1 (mem0), F1 (LoCoMo), judge accuracy and
    the judge that gave it (``run["judge"]``: backend, model, prompt version), gold recall and
    fully covered of the ``final`` stage (else the last stage), non-judge tokens per question.
    LongMemEval columns: count, task-averaged and overall accuracy, abstention accuracy, the
    judge, session and turn recall, tokens per question.
    """
    tables: list[str] = []
    locomo = [r for r in runs if r["metrics"].get("benchmark") == "locomo"]
    lme = [r for r in runs if r["metrics"].get("benchmark") == "longmemeval"]
    if len(locomo) + len(lme) != len(runs):
        raise DataFormatError("<runs>", "metrics.benchmark", "'locomo' or 'longmemeval' for every run")
    if locomo:
        lines = ["| Run | N | F1 (mem0) | BLEU-1 (mem0) | F1 (LoCoMo) | Judge | Judged by | Recall stage | "
                 "Gold recall | Fully covered | Tokens/question |",
                 "|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|"]
        for run in locomo:
            m = run["metrics"]
            o = m["overall"]
            stage = final_stage(m)
            recall, full = _recall_cells(o["recall"][stage]) if stage else ("n/a", "n/a")
            lines.append(f"| {run.get('name', 'run')} | {o['count']} | {_pct(o['mem0_f1'])} | "
                         f"{_pct(o['mem0_bleu1'])} | {_pct(o['locomo_f1'])} | {_pct(o['judge']['accuracy'])} | "
                         f"{_judge_name(run)} | {stage or 'n/a'} | {recall} | {full} | "
                         f"{_int(tokens_per_question(run))} |")
        tables.append("\n".join(lines))
    if lme:
        lines = ["| Run | N | Task-averaged | Overall | Abstention | Judged by | Recall stage | Session recall | "
                 "Turn recall | Tokens/question |",
                 "|---|---:|---:|---:|---:|---|---|---:|---:|---:|"]
        for run in lme:
            m = run["metrics"]
            stage = final_stage(m)
            s_recall = _pct(m["recall"][stage]["session"]["recall"]) if stage else "n/a"
            t_recall = _pct(m["recall"][stage]["turn"]["recall"]) if stage else "n/a"
            lines.append(f"| {run.get('name', 'run')} | {m['count']} | {_pct(m['task_averaged_accuracy'])} | "
                         f"{_pct(m['overall_accuracy'])} | {_pct(m['abstention']['judge']['accuracy'])} | "
                         f"{_judge_name(run)} | {stage or 'n/a'} | {s_recall} | {t_recall} | "
                         f"{_int(tokens_per_question(run))} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


# --------------------------------------------------------------------------------------
# Run extras: the aliasing audit section and the console summary
# --------------------------------------------------------------------------------------

def aliasing_markdown(aliasing: Mapping[str, Mapping[str, Any]]) -> str:
    """The report section of ``bench.coverage.aliasing_audit`` results (depth -> figures)."""
    lines = ["## Source aliasing before normalization", "",
             "Address hits (claims) in candidate order, before they are collapsed to packets "
             "(MemCompile paper, Appendix A.4). Eligible: questions with at least that many hits. DBR: share of "
             "slots holding a packet already seen higher in the list. Affected: share of eligible questions "
             "with such a slot. Max-source: slots held by the most repeated packet (mean / p95 / max).", "",
             "| Depth | Eligible | Unique packets | DBR | Affected | Max-source mean/p95/max |",
             "|---:|---:|---:|---:|---:|---|"]
    for depth, a in aliasing.items():
        if not a.get("eligible"):
            lines.append(f"| {depth} | 0 | n/a | n/a | n/a | n/a |")
            continue
        lines.append(f"| {depth} | {a['eligible']} | {a['unique_mean']:.2f} | {100 * a['dbr']:.2f}% | "
                     f"{100 * a['affected']:.2f}% | {a['max_source_mean']:.2f}/{a['max_source_p95']}/{a['max_source_max']} |")
    return "\n".join(lines)


def _pct6(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:6.2f}"


def recall_by_type_lines(block: Mapping[str, Any], stages: Sequence[str] | None = None) -> list[str]:
    """Console lines: turn / session recall per question type of the final selection and of any
    baseline scored beside it (``stages`` to choose others)."""
    table = block.get("table") or {}
    if stages is None:
        found = list(block.get("stages") or [])
        stages = ([s for s in found if s == "final"] + [s for s in found if s.startswith("baseline_")]) or found[:1]
    k = block.get("k")
    head = f"{'recall' + (f'@{k}' if k else '') + ' turn/session':27s} {'n':>4s} " + " ".join(
        f"{s[:19]:>19s}" for s in stages)
    lines = [head]
    for g in list(block.get("types") or []) + ["overall"]:
        cells = []
        n = 0
        for s in stages:
            c = table.get(s, {}).get(g)
            n = max(n, c["n_session"] if c else 0)
            cells.append(f"{_pct6(c['turn']) if c else '   n/a'} / {_pct6(c['session']) if c else '   n/a'}"
                         .rjust(19))
        lines.append(f"{g[:27]:27s} {n:4d} " + " ".join(cells))
    return lines


def summary_text(metrics: Mapping[str, Any], table: Mapping[str, Any], wall_s: float | None) -> str:
    """The few lines ``eval`` prints at the end: scores per category (LoCoMo) or the judge
    accuracies (LongMemEval), tokens per question and wall time. Missing figures (no
    question answered, no judge) print as n/a."""
    lines = []
    if metrics.get("benchmark") == "locomo":
        lines.append(f"{'category':14s} {'n':>4s} {'F1':>6s} {'B1':>6s} {'LoCoMo-F1':>9s} {'Judge':>6s} {'Recall':>6s}")
        groups = [(v.get("name", k), v) for k, v in metrics["per_category"].items()] + [("overall", metrics["overall"])]
        for name, g in groups:
            judge = g.get("judge", {}).get("accuracy")
            rec = (g.get("recall", {}).get("final") or {}).get("recall")
            lines.append(f"{name:14s} {g['count']:4d} {_pct6(g.get('mem0_f1'))} {_pct6(g.get('mem0_bleu1'))} "
                         f"{_pct6(g.get('locomo_f1')):>9s} {_pct6(judge)} {_pct6(rec)}")
    elif metrics.get("benchmark") in CORPORA:
        lines += corpus_summary_lines(metrics)
    else:
        lines.append(f"task-averaged accuracy {_pct6(metrics.get('task_averaged_accuracy'))}, "
                     f"overall {_pct6(metrics.get('overall_accuracy'))}")
        if metrics.get("recall_by_type"):
            lines += recall_by_type_lines(metrics["recall_by_type"])
    per_q = table.get("non_judge_per_question")
    lines.append(f"non-judge tokens per question: {'n/a' if per_q is None else f'{per_q:.0f}'}; "
                 f"wall time {'n/a' if wall_s is None else f'{wall_s:.1f}'} s")
    return "\n".join(lines)
