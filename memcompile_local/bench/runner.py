"""``memcompile-local eval``: one benchmark end to end into a resumable run folder.

Phases: build every memory once (cached in the store), answer every question (one line per
question appended to ``answers.jsonl`` as it finishes), judge (``judgments.jsonl``), then
score and write ``predictions.jsonl``, ``metrics.json`` and ``report.md``. Rerunning the
same command continues where an interrupted run stopped; the request cache answers every
call made before, and the ledger (marks per run id) reports the same token totals as an
uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import __version__
from ..config import PipelineConfig
from ..errors import ConfigError, DataFormatError, ModelError
from ..llm.interface import stable_hash
from ..progress import bar
from ..types import Conversation, QAItem

log = logging.getLogger(__name__)

LOCOMO_SCORED = (1, 2, 3, 4)


@dataclass(frozen=True)
class EvalSpec:
    benchmark: str  # "locomo" | "longmemeval"
    data: str
    store: str
    out: str | None = None
    limit: int | None = None
    conversations: tuple[str, ...] | None = None
    judge: bool = True
    judge_backend: str | None = None
    judge_model: str | None = None
    baseline: str | None = None  # "full-context" | "bm25" | "dense"
    preset: str | None = None
    progress: bool = True
    answer: bool = True  # False: retrieval only (evidence recall, no answer and no judge)


# ---------------------------------------------------------------------------- helpers

def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_jsonl(path: Path) -> list[dict]:
    """Read complete lines; a torn last line (killed mid-write) is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
        data = data[:end]
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


class JsonlAppender:
    """Appends one JSON object per line, flushed and fsynced, from several threads."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def append(self, obj: dict) -> None:
        line = json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"memcompile-local": __version__, "python": platform.python_version()}
    for pkg in ("numpy", "bm25s", "torch", "sentence-transformers", "llama-cpp-python", "outlines", "vllm", "openai"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def prompt_versions() -> dict[str, str]:
    """Every versioned prompt of the package (part of the cache identity of each call)."""
    import importlib

    versions: dict[str, str] = {}
    for mod in ("memcompile_local.address.prompts", "memcompile_local.evidence.prompts", "memcompile_local.bench.judge"):
        try:
            m = importlib.import_module(mod)
        except ImportError:  # pragma: no cover
            continue
        for name in dir(m):
            value = getattr(m, name)
            if name.endswith("VERSION") and isinstance(value, str):
                versions[f"{mod.rsplit('.', 2)[-2]}.{name}"] = value
            elif hasattr(value, "version") and isinstance(getattr(value, "version"), str) and name.isupper():
                versions[f"{mod.rsplit('.', 2)[-2]}.{name}"] = value.version
    return versions


def select_questions(benchmark: str, convs: Sequence[Conversation], limit: int | None) -> list[tuple[Conversation, QAItem]]:
    """LoCoMo: categories 1-4 (category 5 is excluded, as in the paper), ``limit`` per
    conversation; LongMemEval: every question (one per conversation)."""
    out: list[tuple[Conversation, QAItem]] = []
    for conv in convs:
        qs = [q for q in conv.questions if benchmark != "locomo" or q.category in LOCOMO_SCORED]
        if limit is not None and benchmark == "locomo":
            qs = qs[:limit]
        out.extend((conv, q) for q in qs)
    return out


def load_benchmark(spec: EvalSpec) -> list[Conversation]:
    from ..data import count_dataset, load_locomo, load_longmemeval

    if spec.benchmark == "locomo":
        convs = load_locomo(spec.data, conversations=spec.conversations)
    elif spec.benchmark == "longmemeval":
        convs = load_longmemeval(spec.data, limit=spec.limit)
    else:
        raise ConfigError(f"unknown benchmark {spec.benchmark!r}; expected locomo or longmemeval")
    c = count_dataset(convs)
    log.info("loaded %s: %s", spec.data, c)
    return convs


def run_identity(spec: EvalSpec, cfg: PipelineConfig, data_sha: str) -> str:
    """The run id: data, configuration and every versioned stage of the code.

    The prompt and rule-extractor versions are part of it so that a run folder written by an
    older package is never resumed (and silently mixed) by a newer one.
    """
    from ..address.extract_rule import RULE_EXTRACTOR_VERSION

    ident = {
        "benchmark": spec.benchmark, "data": data_sha, "config": cfg.to_dict(), "limit": spec.limit,
        "conversations": list(spec.conversations or []), "baseline": spec.baseline,
        "code": {"package": __version__, "prompts": prompt_versions(), "rule_extractor": RULE_EXTRACTOR_VERSION},
    }
    return "eval-" + stable_hash(ident)[:16]


def check_run_folder(out: Path, run_id: str) -> None:
    """Refuse to resume a run folder that holds another run (other config, data or code)."""
    path = out / "config.json"
    if not path.exists():
        return
    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("run_id")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise DataFormatError(str(path), "$.run_id", "a run config written by this package", str(exc)) from exc
    if found != run_id:
        raise ConfigError(f"{out} holds run {found}, not {run_id} (the configuration, data or package "
                          f"version differs); choose another --out or remove that folder")


# ---------------------------------------------------------------------------- runner

class EvalRunner:
    """Runs one benchmark configuration; see the module docstring for the phases."""

    def __init__(self, spec: EvalSpec, cfg: PipelineConfig, *, backend: Any = None, embedder: Any = None,
                 judge_backend: Any = None, echo: Callable[[str], None] = print):
        self.spec = spec
        self.cfg = cfg
        self.echo = echo
        self._backend = backend
        self._embedder = embedder
        self._judge_backend = judge_backend
        self._baseline_cache: dict = {}  # baseline indexes per namespace, shared by the questions

    # -- setup
    def _make_backend(self, name: str, model: str | None) -> Any:
        from ..llm.batching import MicroBatcher
        from ..llm.registry import backend_kwargs, load_backend

        mcfg = dataclasses.replace(self.cfg.model, backend=name, model=model or self.cfg.model.model)
        backend = load_backend(name, **backend_kwargs(mcfg))
        if name in ("vllm", "transformers") and self.cfg.model.concurrency > 1:
            backend = MicroBatcher(backend)  # questions run in threads; merge their calls
        return backend

    def run(self) -> dict[str, Any]:
        from ..llm.client import LLMClient
        from ..config import config_needs_llm
        from ..memory import Memory
        from ..store import MemoryStore

        spec, cfg = self.spec, self.cfg
        t_start = time.perf_counter()
        convs = load_benchmark(spec)
        items = select_questions(spec.benchmark, convs, spec.limit)
        if not items:
            raise ConfigError(f"{spec.data}: no questions selected")
        data_sha = _file_sha256(spec.data)
        run_id = run_identity(spec, cfg, data_sha)
        out = Path(spec.out or Path("runs") / f"{spec.benchmark}-{spec.baseline or spec.preset or 'custom'}-{run_id[-8:]}")
        check_run_folder(out, run_id)
        out.mkdir(parents=True, exist_ok=True)
        self.echo(f"run {run_id}: {len(convs)} conversations, {len(items)} questions -> {out}")

        store = MemoryStore(spec.store)
        try:
            if spec.answer or config_needs_llm(cfg):
                backend = self._backend or self._make_backend(cfg.model.backend, None)
            else:  # retrieval only on the model-free path: no model is loaded at all
                from ..llm.client import NoModelBackend

                backend = NoModelBackend()
            client = LLMClient(backend, store, run_id=run_id)
            mem = Memory(store, cfg, client=client, embedder=self._embedder, run_id=run_id,
                         progress=spec.progress)
            self._write_config(out, run_id, data_sha, client, mem)
            phases: dict[str, float] = {}

            # Phase 1: ingest and build every memory once.
            t0 = time.perf_counter()
            with bar(total=len(convs), desc="build", unit="memory", enabled=spec.progress) as pb:
                for conv in convs:
                    mem.add(conv.namespace, conv)
                    if spec.baseline is None:
                        mem.build(conv.namespace, client=client.child(f"{run_id}/build/{conv.namespace}"))
                    pb.update(1)
            phases["build_s"] = time.perf_counter() - t0

            # Phase 2: answer the questions not answered yet.
            t0 = time.perf_counter()
            answers_path = out / "answers.jsonl"
            done = {r["question_id"]: r for r in read_jsonl(answers_path)}
            todo = [(c, q) for c, q in items if q.question_id not in done]
            appender = JsonlAppender(answers_path)
            workers = max(1, cfg.model.concurrency) if cfg.model.backend in ("openai", "vllm", "transformers") else 1
            errors: list[str] = []

            def work(pair: tuple[Conversation, QAItem]) -> None:
                conv, q = pair
                try:
                    row = self._answer_one(mem, client, run_id, conv, q)
                except ModelError as exc:
                    errors.append(f"{q.question_id}: {exc}")
                    log.warning("question %s failed: %s", q.question_id, exc)
                    return
                appender.append(row)

            with bar(total=len(todo), desc="questions", unit="q", enabled=spec.progress) as pb:
                if workers == 1:
                    for pair in todo:
                        work(pair)
                        pb.update(1)
                else:
                    with ThreadPoolExecutor(max_workers=workers) as pool:
                        for _ in pool.map(work, todo):
                            pb.update(1)
            phases["questions_s"] = time.perf_counter() - t0
            rows = {r["question_id"]: r for r in read_jsonl(answers_path)}
            ordered = [rows[q.question_id] for _, q in items if q.question_id in rows]

            # Phase 3: judge.
            t0 = time.perf_counter()
            judge_totals: dict[str, dict[str, int]] = {}
            if spec.judge and spec.answer:
                judge_totals = self._judge(out, ordered, store, run_id)
            phases["judge_s"] = time.perf_counter() - t0

            # Phase 4: score and write.
            totals = client.totals()
            metrics = self._finish(out, ordered, totals, judge_totals, client.waste_totals(), phases,
                                   t_start, errors, run_id)
            return metrics
        finally:
            store.close()

    # -- one question
    def _answer_one(self, mem: Any, client: Any, run_id: str, conv: Conversation, q: QAItem) -> dict[str, Any]:
        from ..evidence.answer import answer_question, use_temporal_prompt

        qclient = client.child(f"{run_id}/q/{q.question_id}")
        t0 = time.perf_counter()
        candidate_packets: list[str] = []
        if self.spec.baseline:
            from .baselines import baseline_context

            packet_ids, text = baseline_context(self.spec.baseline, mem, conv.namespace, q.question, self.cfg,
                                                cache=self._baseline_cache)
            stages = {"final": list(packet_ids)}
            timings: dict[str, float] = {}
        else:
            # address_trace: the fused path skips the Address Plane unless asked; pool_top10
            # and the aliasing audit read it.
            ctx = mem.compile(conv.namespace, q.question, client=qclient, address_trace=True)
            packet_ids, text = ctx.packet_ids, ctx.text
            stages = {
                "pool_top10": [pc.packet_id for pc in ctx.pool[:10]],
                "a0": list(ctx.anchors),
                "final": list(ctx.packet_ids),
            }
            timings = ctx.timings_ms
            # Packet of each address hit before normalization, for the aliasing audit (A.4).
            candidate_packets = [c.packet_id for c in ctx.address.candidates[:40]]
        prediction = None
        if self.spec.answer:
            prediction = answer_question(
                qclient, q.question, text, temporal=use_temporal_prompt(q.question), namespace=conv.namespace,
                max_tokens=self.cfg.model.max_tokens,
                question_date=q.question_date if self.spec.benchmark == "longmemeval" else None).text
        tokens = {stage: v["prompt"] + v["completion"] for stage, v in qclient.totals().items()}
        row: dict[str, Any] = {
            "question_id": q.question_id,
            "namespace": conv.namespace,
            "category": q.category,
            "question": q.question,
            "gold": q.answer,
            "prediction": prediction,
            "selected_ids": list(packet_ids),
            "gold_evidence": list(q.evidence),
            "recall_stages": stages,
            "tokens": tokens,
            "context_tokens": _count(text),
            "timings_ms": {k: round(v, 2) for k, v in timings.items()},
            "candidate_packets": candidate_packets,
            "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
        }
        if self.spec.benchmark == "longmemeval":
            row["question_type"] = q.category
            row["answer_session_ids"] = list(q.evidence_sessions)
            row["is_abstention"] = q.is_abstention
        return row

    # -- judge
    def _judge(self, out: Path, rows: list[dict], store: Any, run_id: str) -> dict[str, dict[str, int]]:
        from ..llm.client import LLMClient
        from .judge import judge_locomo_many, judge_longmemeval_many

        spec = self.spec
        path = out / "judgments.jsonl"
        have = {r["question_id"] for r in read_jsonl(path)}
        todo = [r for r in rows if r["question_id"] not in have]
        if self._judge_backend is not None:
            jb = self._judge_backend
        elif spec.judge_backend or spec.judge_model:
            jb = self._make_backend(spec.judge_backend or self.cfg.model.backend, spec.judge_model or self.cfg.model.model)
        else:
            jb = self._backend or self._make_backend(self.cfg.model.backend, None)
        jclient = LLMClient(jb, store, run_id=f"{run_id}/judge")
        appender = JsonlAppender(path)
        chunk = 32
        with bar(total=len(todo), desc="judge", unit="q", enabled=spec.progress) as pb:
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                if spec.benchmark == "locomo":
                    results = judge_locomo_many(jclient, [(r["question"], r["gold"], r["prediction"]) for r in part])
                else:
                    results = judge_longmemeval_many(
                        jclient, [(r["question_id"], r["question_type"], r["question"], r["gold"], r["prediction"])
                                  for r in part])
                for r, res in zip(part, results):
                    appender.append({"question_id": r["question_id"], "judge_label": res.label,
                                     "judge_error": res.error})
                pb.update(len(part))
        return jclient.totals()

    # -- scoring and files
    def _finish(self, out: Path, rows: list[dict], totals: dict, judge_totals: dict, waste: dict,
                phases: dict, t_start: float, errors: list[str], run_id: str) -> dict[str, Any]:
        from .report import locomo_metrics, longmemeval_metrics, token_table, write_markdown_report

        judged = {r["question_id"]: r for r in read_jsonl(out / "judgments.jsonl")}
        merged = []
        for r in rows:
            j = judged.get(r["question_id"], {})
            merged.append({**r, "judge_label": j.get("judge_label"), "judge_error": j.get("judge_error")})
        _atomic_write(out / "predictions.jsonl",
                      "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in merged))
        metrics = locomo_metrics(merged) if self.spec.benchmark == "locomo" else longmemeval_metrics(merged)
        from .coverage import aliasing_audit

        audited = [r["candidate_packets"] for r in merged if r.get("candidate_packets")]
        aliasing = {str(k): v for k, v in aliasing_audit(audited).items()} if audited else {}
        stage_totals = {k: v for k, v in totals.items()}
        if judge_totals:
            judge_sum = {"prompt": 0, "completion": 0, "calls": 0}
            for v in judge_totals.values():
                for key in judge_sum:
                    judge_sum[key] += v.get(key, 0)
            stage_totals["judge"] = judge_sum
        table = token_table(stage_totals, len(merged))
        phases["total_s"] = time.perf_counter() - t_start
        result = {
            "run_id": run_id,
            "metrics": metrics,
            "token_table": table,
            "tokens_by_stage": stage_totals,
            "waste_by_stage": waste,
            "phases_s": {k: round(v, 2) for k, v in phases.items()},
            "questions": len(merged),
            "failed_questions": errors,
            "aliasing_audit": aliasing,
        }
        _atomic_write(out / "metrics.json", json.dumps(result, indent=2, sort_keys=True, default=str))
        summary = json.loads((out / "config.json").read_text(encoding="utf-8"))
        write_markdown_report(out / "report.md", metrics, {
            "run": run_id, "benchmark": self.spec.benchmark, "data": self.spec.data,
            "preset": self.spec.preset or "(custom)", "baseline": self.spec.baseline or "none",
            "backend": summary["config"]["model"]["backend"], "model": summary["config"]["model"]["model"],
            "embedder": f"{summary['config']['model']['embedder']} {summary['config']['model']['embed_model']}",
            "wall time (s)": round(phases["total_s"], 1),
        }, table)
        if aliasing:
            _append_aliasing(out / "report.md", aliasing)
        self.echo(_summary_text(metrics, table, phases))
        self.echo(f"wrote {out}/predictions.jsonl, metrics.json, report.md")
        if errors:
            self.echo(f"{len(errors)} questions failed with model errors; rerun to retry them")
        return result

    def _write_config(self, out: Path, run_id: str, data_sha: str, client: Any, mem: Any) -> None:
        try:
            embed_identity = mem.embedder.identity()
        except Exception as exc:  # noqa: BLE001 - an embedder that cannot load is reported later
            embed_identity = {"error": str(exc)}
        cfg_doc = {
            "run_id": run_id,
            "benchmark": self.spec.benchmark,
            "data": self.spec.data,
            "data_sha256": data_sha,
            "spec": dataclasses.asdict(self.spec),
            "config": self.cfg.to_dict(),
            "versions": _versions(),
            "prompt_versions": prompt_versions(),
            "model_identity": client._backend_identity,
            "embedder_identity": embed_identity,
        }
        _atomic_write(out / "config.json", json.dumps(cfg_doc, indent=2, sort_keys=True, default=str))


def _append_aliasing(path: Path, aliasing: dict) -> None:
    lines = ["", "## Source aliasing before normalization", "",
             "Address hits (claims) in candidate order, before they are collapsed to packets "
             "(seed 000, Appendix A.4). Eligible: questions with at least that many hits. DBR: share of "
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
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def _count(text: str) -> int:
    from ..language.tokens import count_tokens

    return count_tokens(text)


def _summary_text(metrics: dict, table: dict, phases: dict) -> str:
    lines = []
    if metrics.get("benchmark") == "locomo":
        lines.append(f"{'category':14s} {'n':>4s} {'F1':>6s} {'B1':>6s} {'LoCoMo-F1':>9s} {'Judge':>6s} {'Recall':>6s}")
        groups = [(v.get("name", k), v) for k, v in metrics["per_category"].items()] + [("overall", metrics["overall"])]
        for name, g in groups:
            judge = g.get("judge", {}).get("accuracy")
            rec = (g.get("recall", {}).get("final") or {}).get("recall")
            lines.append(f"{name:14s} {g['count']:4d} {_pct(g.get('mem0_f1'))} {_pct(g.get('mem0_bleu1'))} "
                         f"{_pct(g.get('locomo_f1')):>9s} {_pct(judge)} {_pct(rec)}")
    else:
        lines.append(f"task-averaged accuracy {_pct(metrics.get('task_averaged_accuracy'))}, "
                     f"overall {_pct(metrics.get('overall_accuracy'))}")
    lines.append(f"non-judge tokens per question: {table.get('non_judge_per_question', 0):.0f}; "
                 f"wall time {phases.get('total_s', 0):.1f} s")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:6.2f}"


def run_eval_from_args(args: Any, cfg: PipelineConfig) -> int:
    spec = EvalSpec(
        benchmark=args.benchmark, data=args.data, store=args.store, out=args.out, limit=args.limit,
        conversations=tuple(c.strip() for c in args.conversations.split(",")) if args.conversations else None,
        judge=not args.no_judge, judge_backend=args.judge_backend, judge_model=args.judge_model,
        baseline=args.baseline, preset=args.preset, progress=not args.quiet,
        answer=not args.retrieval_only,
    )
    EvalRunner(spec, cfg).run()
    return 0
