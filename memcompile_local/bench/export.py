"""``memcompile-local export RUN_DIR``: a run's predictions as a dataset file.

One row per question, from the run folder's ``predictions.jsonl`` and ``config.json``:
the run id, benchmark, question id, namespace, category, question, gold answer, prediction,
the selected packet ids and the ids of each recall stage, the gold evidence, the judge label
and error, ``correct`` (judge said CORRECT; None when not judged), the final-stage gold
recall, tokens per stage and context tokens, then every other field the prediction lines
carry (``candidate_packets``, ``timings_ms``, ``wall_ms``, LongMemEval's session recall, ...)
under its own name, so nothing of ``predictions.jsonl`` is dropped. Columns are the same in
every row (a stage a row lacks gets 0 tokens or an empty id list, a field a row lacks is None),
as a columnar file needs; a mapping column that is empty in every row (``tokens`` of a
``--retrieval-only`` run, which calls no model) is None, since parquet cannot hold a struct
without fields.

The default output is ``RUN_DIR/export.<format>``: never one of the run's own files, which a
resumed ``eval`` reads back (``predictions.jsonl`` above all); ``--out`` naming one of them is
refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..data.hf import export_rows
from ..errors import ConfigError, DataFormatError
from .coverage import gold_recall
from .runfiles import read_jsonl

__all__ = ["EXPORT_FORMATS", "prediction_rows", "export_run"]

EXPORT_FORMATS = ("parquet", "jsonl")

# Files ``eval`` writes into a run folder and reads back; an export never replaces one.
RUN_FILES = ("predictions.jsonl", "answers.jsonl", "attempts.jsonl", "question_attempts.jsonl", "judgments.jsonl",
             "config.json", "metrics.json", "report.md")

# Prediction fields the export maps to columns of its own (the rest are copied as they are).
_MAPPED = {"question_id", "namespace", "question_type", "category", "question", "gold", "prediction",
           "selected_ids", "recall_stages", "gold_evidence", "judge_label", "judge_error", "tokens",
           "context_tokens"}


def _run_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.json"
    if not path.exists():
        raise ConfigError(f"{run_dir} is not a run folder: it has no config.json (run `eval` first)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(str(path), "$", "a run config written by this package", str(exc)) from exc


def prediction_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """The export rows of a finished run folder (see the module docstring)."""
    folder = Path(run_dir)
    config = _run_config(folder)
    preds_path = folder / "predictions.jsonl"
    if not preds_path.exists():
        raise ConfigError(f"{folder} has no predictions.jsonl: the run has not finished (rerun `eval` to finish it)")
    preds = read_jsonl(preds_path)
    stage_names = sorted({s for r in preds for s in (r.get("recall_stages") or {})})
    token_names = sorted({s for r in preds for s in (r.get("tokens") or {})})
    rows = []
    for r in preds:
        stages = r.get("recall_stages") or {}
        tokens = r.get("tokens") or {}
        label = r.get("judge_label")
        final = stages.get("final", r.get("selected_ids") or [])
        rows.append({
            "run_id": config.get("run_id"),
            "benchmark": config.get("benchmark"),
            "question_id": r["question_id"],
            "namespace": r.get("namespace"),
            "category": str(r.get("question_type", r.get("category"))),
            "question": r.get("question"),
            "gold": None if r.get("gold") is None else str(r.get("gold")),
            "prediction": r.get("prediction"),
            "selected_ids": list(r.get("selected_ids") or []),
            "recall_stages": {s: list(stages.get(s) or []) for s in stage_names},
            "gold_evidence": list(r.get("gold_evidence") or []),
            "judge_label": label,
            "judge_error": r.get("judge_error"),
            "correct": None if label is None else label == "CORRECT",
            "gold_recall": gold_recall(final, r.get("gold_evidence") or []),
            "tokens": {s: int(tokens.get(s, 0)) for s in token_names},
            "context_tokens": int(r.get("context_tokens") or 0),
        })
    extra = sorted({k for r in preds for k in r} - _MAPPED - set(rows[0] if rows else ()))
    for row, r in zip(rows, preds):
        for k in extra:
            row[k] = r.get(k)
    for name in list(rows[0]) if rows else []:
        values = [row[name] for row in rows]
        if all(isinstance(v, dict) and not v for v in values):
            for row in rows:
                row[name] = None
        elif all(v is None or isinstance(v, dict) for v in values) and any(values):
            # A mapping whose keys differ by row (timings of the stages a question ran): the
            # same keys in every row, None where a row lacks one.
            keys = sorted({k for v in values if v for k in v})
            for row in rows:
                v = row[name]
                row[name] = None if v is None else {k: v.get(k) for k in keys}
    return rows


def export_run(run_dir: str | Path, fmt: str = "parquet", out: str | Path | None = None) -> Path:
    """Write :func:`prediction_rows` of ``run_dir`` as ``fmt`` (parquet or jsonl); returns the path
    (default ``RUN_DIR/export.<fmt>``; a file of the run itself is refused)."""
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"export format {fmt!r}: expected one of {', '.join(EXPORT_FORMATS)}")
    target = Path(out) if out else Path(run_dir) / f"export.{fmt}"
    own = {(Path(run_dir) / name).resolve() for name in RUN_FILES}
    if target.resolve() in own:
        raise ConfigError(f"export --out {target}: that is a file of the run itself; write the export elsewhere")
    rows = prediction_rows(run_dir)
    if not rows:
        raise ConfigError(f"{run_dir}: predictions.jsonl has no rows to export")
    return export_rows(rows, target, fmt)


def export_from_args(args: Any) -> int:
    """The ``export`` command."""
    path = export_run(args.run_dir, args.format, args.out)
    print(f"wrote {path}")
    return 0
