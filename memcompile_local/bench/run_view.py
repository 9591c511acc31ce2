"""A finished run folder as the inspector shows it: per-category recall and accuracy, and per
question the gold turns against the selected ones.

``load_run(folder)`` reads ``config.json``, ``metrics.json`` and ``predictions.jsonl`` without
writing anything (the runner's own reader cuts a torn last line off the file; a viewer must not
touch what it views, so a torn line is skipped and counted here instead). ``run_summary`` and
``question_page`` turn it into the plain JSON that ``serve --runs`` answers with and that
``bench/run_html.py`` renders. Figures come from the run's ``metrics.json``, computed by
``bench/aggregate.py``; the one figure it does not hold, LongMemEval's recall per question type,
is that same module's ``longmemeval_metrics`` over the rows of each type.

``find_runs(root)`` lists the run folders under a directory (a folder holding ``metrics.json``
and ``predictions.jsonl``), by path relative to it; a folder reached through a link that leaves
``root`` is not listed, so a name from the list is the only way a client can open a run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from memcompile_local.bench.aggregate import final_stage, longmemeval_metrics
from memcompile_local.bench.coverage import gold_recall, session_recall
from memcompile_local.bench.corpora import CORPORA
from memcompile_local.bench.judge import LONGMEMEVAL_TYPES
from memcompile_local.bench.metrics import LOCOMO_CATEGORY_NAMES
from memcompile_local.errors import DataFormatError

__all__ = ["RunFolder", "find_runs", "load_run", "run_summary", "question_page", "RUN_FILES"]

RUN_FILES = ("config.json", "metrics.json", "predictions.jsonl")
"""The files a run folder must hold to be listed and opened (``report.md`` is optional)."""

_LOCOMO_ORDER = ("4", "1", "2", "3")  # the paper's Table 1 column order, as report.md shows it
_MAX_DEPTH = 4  # compare grids nest their runs one or two folders down; deeper trees are not walked
_MAX_RUNS = 2000


@dataclass(frozen=True)
class RunFolder:
    """The parsed files of one run folder. ``label`` names it in errors and in the summary (the
    path relative to the served directory, never the server's absolute path)."""

    label: str
    config: dict
    result: dict  # metrics.json: run_id, metrics, token table, wall time, ...
    rows: tuple[dict, ...]  # predictions.jsonl, one per question
    torn_lines: int  # a last line cut short by a kill (skipped, the file is left as it is)
    report_md: str | None

    @property
    def metrics(self) -> dict:
        return self.result["metrics"]

    @property
    def benchmark(self) -> str:
        return str(self.metrics.get("benchmark"))


def _read_json(path: Path, label: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFormatError(label, "$", "a file of the run folder", "missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(label, "$", "a JSON object", str(exc)) from None
    if not isinstance(data, dict):
        raise DataFormatError(label, "$", "a JSON object", f"got {type(data).__name__}")
    return data


def _read_rows(path: Path, label: str) -> tuple[list[dict], int]:
    """The complete JSON lines of ``path`` and how many torn last lines were skipped (0 or 1)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataFormatError(label, "$", "a file of the run folder", "missing") from None
    end = data.rfind(b"\n") + 1
    torn = 1 if data[end:].strip() else 0
    rows = []
    for n, line in enumerate(data[:end].decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(label, f"line {n}", "one JSON object per line", exc.msg) from None
        if not isinstance(row, dict):
            raise DataFormatError(label, f"line {n}", "a JSON object", f"got {type(row).__name__}")
        for field in ("question_id", "question"):
            if field not in row:
                raise DataFormatError(label, f"line {n}.{field}", "a field of every prediction row", "missing")
        rows.append(row)
    return rows, torn


def load_run(folder: str | Path, *, label: str | None = None) -> RunFolder:
    """Read a run folder (nothing is written); typed ``DataFormatError`` naming the file and
    the place for a missing file or a malformed one."""
    folder = Path(folder)
    label = label or str(folder)
    config = _read_json(folder / "config.json", f"{label}/config.json")
    result = _read_json(folder / "metrics.json", f"{label}/metrics.json")
    metrics = result.get("metrics")
    if not isinstance(metrics, dict) or "benchmark" not in metrics:
        raise DataFormatError(f"{label}/metrics.json", "$.metrics", "the run's metrics with a 'benchmark' field")
    bench = metrics["benchmark"]
    if bench not in ("locomo", "longmemeval", *CORPORA):
        raise DataFormatError(f"{label}/metrics.json", "$.metrics.benchmark",
                              f"one of locomo, longmemeval, {', '.join(CORPORA)}", f"got {bench!r}")
    rows, torn = _read_rows(folder / "predictions.jsonl", f"{label}/predictions.jsonl")
    report = folder / "report.md"
    report_md = report.read_text(encoding="utf-8", errors="replace") if report.is_file() else None
    return RunFolder(label=label, config=config, result=result, rows=tuple(rows), torn_lines=torn,
                     report_md=report_md)


def find_runs(root: str | Path) -> dict[str, Path]:
    """``{name: folder}`` of the run folders under ``root``, names being paths relative to
    ``root`` with ``/``, sorted; ``root`` itself, when it is a run folder, is named by its own
    folder name. Hidden folders are
    skipped, and so is any folder whose real path is outside ``root``'s."""
    base = Path(root).resolve()
    found: dict[str, Path] = {}

    def walk(folder: Path, depth: int) -> None:
        if len(found) >= _MAX_RUNS:
            return
        real = folder.resolve()
        if real != base and base not in real.parents:
            return  # a link out of the served directory
        if all((real / name).is_file() for name in RUN_FILES):
            rel = real.relative_to(base).as_posix()
            found.setdefault(real.name if rel == "." else rel, real)
        if depth >= _MAX_DEPTH:
            return
        try:
            children = sorted(os.scandir(real), key=lambda e: e.name)
        except OSError:
            return
        for entry in children:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            walk(Path(entry.path), depth + 1)

    if base.is_dir():
        walk(base, 0)
    return dict(sorted(found.items()))


# ------------------------------------------------------------------ summary
def _stage_ids(row: Mapping[str, Any], stage: str | None) -> list[str]:
    """The ids a row selected at ``stage`` (``selected_ids`` for the stage ``selected`` or none)."""
    stages = row.get("recall_stages") or {}
    if stage and stage != "selected" and stage in stages:
        return [str(x) for x in stages[stage] or ()]
    return [str(x) for x in row.get("selected_ids") or ()]


def _category_key(run: RunFolder, row: Mapping[str, Any]) -> str:
    if run.benchmark == "longmemeval":
        return str(row.get("question_type", row.get("category")))
    return str(row.get("category"))


def _category_names(run: RunFolder) -> dict[str, str]:
    m = run.metrics
    if run.benchmark == "locomo":
        return {k: LOCOMO_CATEGORY_NAMES.get(int(k), k) for k in _LOCOMO_ORDER}
    if run.benchmark == "longmemeval":
        return {t: t for t in LONGMEMEVAL_TYPES}
    return {str(k): str(v) for k, v in (m.get("categories") or {}).items()}


def _group(key: str, name: str, block: Mapping[str, Any] | None, stage: str | None,
           recall: Mapping[str, Any] | None = None) -> dict:
    block = block or {}
    judge = block.get("judge") or {}
    rec = recall if recall is not None else ((block.get("recall") or {}).get(stage) or {} if stage else {})
    return {"key": key, "name": name, "count": block.get("count", 0),
            "recall": rec.get("recall"), "recall_n": rec.get("n", 0), "fully_covered": rec.get("fully_covered", 0),
            "accuracy": judge.get("accuracy"), "judged": judge.get("n", 0), "correct": judge.get("correct", 0),
            "judge_errors": judge.get("errors", 0)}


def _groups(run: RunFolder, stage: str | None) -> tuple[list[dict], dict]:
    """(per-category groups in report order, the overall group)."""
    m = run.metrics
    names = _category_names(run)
    if run.benchmark == "longmemeval":
        by_type: dict[str, list[dict]] = {t: [] for t in LONGMEMEVAL_TYPES}
        for row in run.rows:
            key = _category_key(run, row)
            if key in by_type:
                by_type[key].append(row)
        groups = []
        for t in LONGMEMEVAL_TYPES:
            turn = (longmemeval_metrics(by_type[t])["recall"].get(stage) or {}).get("turn") if stage else None
            groups.append(_group(t, t, (m.get("per_type") or {}).get(t), stage, recall=turn or {}))
        overall_recall = ((m.get("recall") or {}).get(stage) or {}).get("turn") if stage else None
        overall = _group("overall", "overall", {"count": m.get("count", 0), "judge": m.get("overall_judge")},
                         stage, recall=overall_recall or {})
        return groups, overall
    per = m.get("per_category") or {}
    groups = [_group(k, name, per.get(k), stage) for k, name in names.items() if k in per]
    return groups, _group("overall", "overall", m.get("overall"), stage)


def run_summary(run: RunFolder) -> dict:
    """The run's figures: configuration, per-category recall and accuracy, overall, and counts of
    questions by outcome (the page's header and plots)."""
    stage = final_stage(run.metrics)
    groups, overall = _groups(run, stage)
    outcomes = {"hit": 0, "partial": 0, "miss": 0, "no_gold": 0}
    for row in run.rows:
        outcomes[_question(run, row, stage)["outcome"]] += 1
    return {
        "name": run.label,
        "run_id": run.result.get("run_id"),
        "benchmark": run.benchmark,
        "stage": stage,
        "questions": len(run.rows),
        "torn_lines": run.torn_lines,
        "wall_s": run.result.get("wall_s"),
        "context_tokens_per_question": run.result.get("context_tokens_per_question"),
        "failed_questions": len(run.result.get("failed_questions") or ()),
        "config": _config_summary(run.config, run.result.get("judge")),
        "categories": groups,
        "overall": overall,
        "outcomes": outcomes,
        "has_report_md": run.report_md is not None,
    }


def _question(run: RunFolder, row: Mapping[str, Any], stage: str | None) -> dict:
    selected = _stage_ids(row, stage)
    gold = [str(x) for x in row.get("gold_evidence") or ()]
    chosen = set(selected)
    recall = gold_recall(selected, gold)
    out = {
        "question_id": str(row.get("question_id")),
        "category": _category_key(run, row),
        "category_name": _category_names(run).get(_category_key(run, row), _category_key(run, row)),
        "question": str(row.get("question", "")),
        "gold": None if row.get("gold") is None else str(row.get("gold")),
        "prediction": row.get("prediction"),
        "judge_label": row.get("judge_label"),
        "judge_error": row.get("judge_error"),
        "abstention": bool(row.get("is_abstention") or "_abs" in str(row.get("question_id", ""))),
        "recall": recall,
        "gold_ids": [{"id": g, "selected": g in chosen} for g in gold],
        "unreachable_ids": [str(x) for x in row.get("gold_evidence_unreachable") or ()],
        "selected_ids": [{"id": s, "gold": s in set(gold)} for s in selected],
    }
    if run.benchmark == "longmemeval":
        out["answer_sessions"] = [str(x) for x in row.get("answer_session_ids") or ()]
        out["session_recall"] = session_recall(selected, row.get("answer_session_ids") or ())
    out["outcome"] = ("no_gold" if recall is None else "hit" if recall == 1.0 else "miss" if recall == 0 else "partial")
    return out


def _failing(q: Mapping[str, Any]) -> bool:
    """A question that lost evidence or was judged wrong (or whose judge call failed)."""
    return q["outcome"] in ("miss", "partial") or q["judge_label"] == "WRONG" or bool(q["judge_error"])


def question_page(run: RunFolder, *, offset: int = 0, limit: int = 50, category: str | None = None,
                  failing: bool = False) -> dict:
    """Questions in file order, ``limit`` from ``offset`` after the filters: ``category`` (the
    key as in the summary's groups) and ``failing`` (evidence missed or judged wrong)."""
    stage = final_stage(run.metrics)
    picked = []
    for row in run.rows:
        q = _question(run, row, stage)
        if category is not None and q["category"] != category:
            continue
        if failing and not _failing(q):
            continue
        picked.append(q)
    page = picked[offset: offset + limit]
    return {"name": run.label, "total": len(picked), "offset": offset, "questions": page,
            "next_offset": offset + limit if offset + limit < len(picked) else None}


def all_questions(run: RunFolder) -> list[dict]:
    """Every question as ``question_page`` shows it (the HTML report lists them all)."""
    return question_page(run, offset=0, limit=max(1, len(run.rows)))["questions"]


def failing(question: Mapping[str, Any]) -> bool:
    """Whether a question of ``question_page`` lost evidence or was judged wrong."""
    return _failing(question)


def _config_summary(cfg: Mapping[str, Any], judge: Any) -> dict:
    """What the page's header says about how the run was made. The data file is named by its
    file name only: the served JSON never carries the server's own paths."""
    spec = cfg.get("spec") if isinstance(cfg.get("spec"), Mapping) else {}
    model = cfg.get("model_identity") if isinstance(cfg.get("model_identity"), Mapping) else None
    embedder = cfg.get("embedder_identity") if isinstance(cfg.get("embedder_identity"), Mapping) else None
    judge = judge if isinstance(judge, Mapping) else (cfg.get("judge") if isinstance(cfg.get("judge"), Mapping) else None)
    if judge and isinstance(judge.get("identity"), Mapping):  # the judge that ran, when it says
        judge = {**judge, **{k: v for k, v in judge["identity"].items() if k in ("backend", "model")}}
    versions = cfg.get("versions") if isinstance(cfg.get("versions"), Mapping) else {}
    data = spec.get("data", cfg.get("data"))
    return {
        "preset": spec.get("preset") or "(custom)",
        "data": Path(str(data)).name if data else None,
        "answered": spec.get("answer"),
        "model": f"{model.get('backend')}/{model.get('model')}" if model else "none (no model call)",
        "embedder": str(embedder.get("embedder")) if embedder else None,
        "judge": f"{judge.get('backend')}/{judge.get('model')}" if judge else "none (not judged)",
        "version": versions.get("memcompile-local"),
    }
