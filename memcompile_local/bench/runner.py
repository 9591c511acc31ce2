"""``memcompile-local eval``: one benchmark end to end into a resumable run folder.

Phases: ingest every conversation, say what the run will do (``bench/plan.py``), check that
a server backend answers (``bench/health.py``), build every memory once (cached in the
store), answer every question (one line per question appended to ``answers.jsonl`` as it
finishes), judge (``judgments.jsonl``), then score and write ``predictions.jsonl``,
``metrics.json`` and ``report.md``. Rerunning the same command continues where an
interrupted run stopped; the request cache answers every call made before, and the ledger
(marks per run id) reports the same token totals as an uninterrupted run. Each attempt is
recorded in ``attempts.jsonl`` from its start, and each question it begins in
``question_attempts.jsonl`` (``bench/attempts.py``), so the reported wall time is that of all
attempts together, a ``kill -9``-ed one included, and the report says how many attempts the
questions took.

The judge is a model of its own (``JudgeConfig``, ``bench/judge_model.py``); a run whose
judge would be its answer model is refused unless the judge section allows it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import platform
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import __version__
from ..address import extract_rule
from ..address.extract_memo import MemoizedExtractor, conversation_turn_keys, reuse_plan
from ..address import prompts as address_prompts
from ..config import ModelConfig, PipelineConfig, config_needs_llm
from ..data import DEFAULT_MAX_TURN_CHARS, count_dataset, load_locomo, load_longmemeval
from ..data.hf import is_hf_source, resolve_hf_source
from ..data.quirks import QuirkLog
from ..errors import ConfigError, DataFormatError, ModelError
from ..evidence import prompts as evidence_prompts
from ..evidence.answer import AnswerSettings, answer_settings
from ..language.tokens import count_tokens
from ..llm.batching import MicroBatcher
from ..llm.client import LLMClient, NoModelBackend
from ..llm.interface import stable_hash
from ..llm.registry import backend_kwargs, load_backend
from ..memory import Memory
from ..build.progress import bar
from ..build.stages import BuildOutputs, BuildResult, build_memory
from ..store import RequestCache, describe_location, open_store
from ..types import Conversation, QAItem
from ..views.fresh import view_after_build
from . import judge as judge_module
from .aggregate import add_judge_totals, locomo_metrics, longmemeval_metrics, token_table
from .attempts import AttemptLog, summarize_attempts
from .baselines import baseline_context
from .corpora import CORPORA, corpus_files, corpus_metrics, data_sha256, load_corpus, split_reachable
from .coverage import aliasing_audit
from .health import check_server
from .judge import judge_locomo_many, judge_longmemeval_many, judge_prompt_version
from .judge_model import is_self_judge, judge_description, resolve_judge
from .metrics import recall_by_type
from .plan import RunPlan, question_calls, turn_calls
from .report import aliasing_markdown, summary_text, write_markdown_report
from .retain_eval import (retain_memories, retention_row, retention_summary, retention_summary_markdown,
                          sources_in_order)
from .rounds import mera_row, round_recall, round_recall_markdown
from ..data.locomo import LOCOMO_CATEGORY_NAMES
from .runfiles import JsonlAppender, atomic_write, file_sha256, read_jsonl

log = logging.getLogger(__name__)

LOCOMO_SCORED = (1, 2, 3, 4)
DEFAULT_RUN_VIEWS = 4
"""Views a run holds by default: the conversation being answered, the one being built, and a few
more. A LongMemEval-S view is about 10 MB, so all 500 held would take gigabytes."""
_SERVER_BACKENDS = ("openai", "vllm", "transformers")  # backends that serve concurrent questions


@dataclass(frozen=True)
class EvalSpec:
    """What to run: benchmark and data (a file, or ``hf:ORG/NAME[:FILE]``), store, run
    folder and selection. The judge model is the ``judge`` section of the pipeline config."""

    benchmark: str  # "locomo" | "longmemeval" | "realtalk" | "beam"
    data: str | tuple[str, ...]  # several paths: REALTALK chat files
    store: str
    out: str | None = None
    limit: int | None = None
    conversations: tuple[str, ...] | None = None
    judge: bool = True
    baseline: str | None = None  # "full-context" | "bm25" | "dense"
    preset: str | None = None
    progress: bool = True
    answer: bool = True  # False: retrieval only (evidence recall, no answer and no judge)
    # Budgeted pre-query retention (bench/retain_eval.py): questions read only the capsules a
    # writer kept; below 1 a share of each conversation's tokens, else tokens. None: off.
    retain_budget: float | None = None
    writer: str = "model-free"
    max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS  # longest string the loaders accept (None: no cap)
    # Refuse the whole data file when one question (or BEAM chat) cannot be read whole, instead of
    # leaving it out and counting it in the run's data quirks (``data/quirks.py``).
    strict: bool = False
    # Most views held at once (None: ``DEFAULT_RUN_VIEWS``, more with many workers); the others are
    # evicted, least recently used first. Memory's byte bound (``views.cache``) applies as well.
    max_views: int | None = None
    # Also select with this baseline ("bm25" or "dense") for every question of a pipeline run and
    # score it beside the pipeline (recall stage ``baseline_<kind>``); None: only the pipeline.
    with_baseline: str | None = None

    @property
    def judging(self) -> bool:
        return self.judge and self.answer


# ---------------------------------------------------------------------------- helpers

def _versions() -> dict[str, str]:
    out = {"memcompile-local": __version__, "python": platform.python_version()}
    for pkg in ("numpy", "bm25s", "torch", "sentence-transformers", "llama-cpp-python", "outlines", "vllm", "openai",
                "datasets"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def prompt_versions() -> dict[str, str]:
    """Every versioned prompt of the package (part of the cache identity of each call)."""
    versions: dict[str, str] = {}
    for label, module in (("address", address_prompts), ("evidence", evidence_prompts), ("bench", judge_module)):
        for name in dir(module):
            value = getattr(module, name)
            if name.endswith("VERSION") and isinstance(value, str):
                versions[f"{label}.{name}"] = value
            elif hasattr(value, "version") and isinstance(getattr(value, "version"), str) and name.isupper():
                versions[f"{label}.{name}"] = value.version
    return versions


def select_questions(benchmark: str, convs: Sequence[Conversation], limit: int | None) -> list[tuple[Conversation, QAItem]]:
    """LoCoMo: categories 1-4 (category 5 is excluded, as in the paper), ``limit`` per
    conversation; REALTALK and BEAM: every question, ``limit`` per conversation (BEAM's
    abstention questions too: they are answered, and left out of recall); LongMemEval: every
    question (one per conversation)."""
    out: list[tuple[Conversation, QAItem]] = []
    for conv in convs:
        qs = [q for q in conv.questions if benchmark != "locomo" or q.category in LOCOMO_SCORED]
        if limit is not None and benchmark != "longmemeval":
            qs = qs[:limit]
        out.extend((conv, q) for q in qs)
    return out


def category5_left_out(benchmark: str, convs: Sequence[Conversation]) -> int:
    """How many LoCoMo category 5 (adversarial) questions ``convs`` hold: the ones
    :func:`select_questions` leaves out of a LoCoMo run (0 for the other benchmarks)."""
    if benchmark != "locomo":
        return 0
    return sum(1 for conv in convs for q in conv.questions if q.category not in LOCOMO_SCORED)


def data_file(spec: EvalSpec) -> str:
    """The local file of the benchmark data: the path itself, or the file an ``hf:`` source
    resolves to (downloaded or exported into the Hugging Face cache). REALTALK and BEAM data
    (folders, several files) is returned as given."""
    if spec.benchmark in CORPORA:
        return spec.data
    if is_hf_source(spec.data):
        return str(resolve_hf_source(spec.data, benchmark=spec.benchmark))
    return spec.data


def load_benchmark(spec: EvalSpec, path: str | None = None, quirks: QuirkLog | None = None) -> list[Conversation]:
    """The conversations of the run's data file (``path``, else :func:`data_file`). ``quirks``:
    where the LongMemEval and BEAM loaders note what they read past (None: a log of
    ``spec.strict``, dropped)."""
    path = path or data_file(spec)
    if quirks is None:
        quirks = QuirkLog(strict=spec.strict)
    if spec.benchmark == "locomo":
        convs = load_locomo(path, conversations=spec.conversations, max_turn_chars=spec.max_turn_chars)
    elif spec.benchmark == "longmemeval":
        convs = load_longmemeval(path, limit=spec.limit, max_turn_chars=spec.max_turn_chars, quirks=quirks)
    elif spec.benchmark in CORPORA:
        convs = load_corpus(spec.benchmark, path, max_turn_chars=spec.max_turn_chars, quirks=quirks)
        if spec.conversations:
            have = [c.namespace for c in convs]
            missing = [c for c in spec.conversations if c not in have]
            if missing:
                raise ConfigError(f"{spec.data}: no conversation {missing[0]!r}; it has {', '.join(have)}")
            convs = [c for c in convs if c.namespace in spec.conversations]
    else:
        raise ConfigError(f"unknown benchmark {spec.benchmark!r}; expected locomo, longmemeval, realtalk or beam")
    log.info("loaded %s: %s", spec.data, count_dataset(convs))
    return convs


def run_identity(spec: EvalSpec, cfg: PipelineConfig, data_sha: str) -> str:
    """The run id: data, configuration (judge included) and every versioned stage of the code.

    The prompt and rule-extractor versions are part of it so that a run folder written by an
    older package is never resumed (and silently mixed) by a newer one.
    """
    ident = {
        "benchmark": spec.benchmark, "data": data_sha, "config": cfg.to_dict(), "limit": spec.limit,
        "conversations": list(spec.conversations or []), "baseline": spec.baseline,
        "code": {"package": __version__, "prompts": prompt_versions(),
                 "rule_extractor": extract_rule.RULE_EXTRACTOR_VERSION},
        "answer": answer_record(answer_settings(cfg.model)) if spec.answer else None,
    }
    if spec.retain_budget is not None:  # only then, so that other runs keep their ids
        ident["retain"] = {"budget": spec.retain_budget, "writer": spec.writer}
    if spec.with_baseline:  # rows carry one more stage
        ident["with_baseline"] = spec.with_baseline
    return "eval-" + stable_hash(ident)[:16]


def answer_record(settings: AnswerSettings) -> dict[str, Any]:
    """What the answer step of a run does, for its id and config.json: the prompt version
    ("answer/temporal" for the full prompts chosen per question), the completion cap, the
    blocks read (None: all) and whether a restated question is dropped."""
    return {"prompt": settings.prompt.version if settings.prompt else "answer/temporal",
            "max_tokens": settings.max_tokens, "max_blocks": settings.max_blocks,
            "strip_restatement": settings.strip_restatement, "summary": settings.describe()}


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


def child_run_ids(run_id: str, convs: Sequence[Conversation], items: Sequence[tuple[Conversation, QAItem]],
                  baseline: str | None) -> list[str]:
    """The run ids the run's clients log under: the run itself, each build and each question."""
    ids = [run_id]
    if baseline is None:
        ids += [f"{run_id}/build/{c.namespace}" for c in convs]
    ids += [f"{run_id}/q/{q.question_id}" for _, q in items]
    return ids


def run_waste(store: RequestCache, run_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Wasted calls per stage over several run ids.

    Failed attempts are logged under the id of the client that made them, a child id such as
    ``<run>/q/<question>``, so the run's own id alone finds none of them.
    """
    out: dict[str, dict[str, int]] = {}
    for rid in run_ids:
        for stage, row in store.waste_totals(run_id=rid).items():
            acc = out.setdefault(stage, {"prompt": 0, "completion": 0, "calls": 0})
            for key in acc:
                acc[key] += int(row.get(key, 0))
    return {stage: out[stage] for stage in sorted(out)}


@dataclass
class BuildStats:
    """What one attempt's builds did: turns stored in the namespaces built, turns extracted (and
    of those, how many the extractor ran on: the rest were repeats served by the process's
    extraction memo), documents given a vector, and texts embedded (the rest were linked to a
    vector another document with the same text already had, or found stored)."""

    namespaces: int = 0
    turns: int = 0
    extracted: int = 0
    extracted_fresh: int = 0
    documents: int = 0
    embedded: int = 0

    def add(self, result: BuildResult, outputs: BuildOutputs, fresh: int | None) -> None:
        self.namespaces += 1
        self.turns += result.packets
        self.extracted += result.extracted_now
        self.extracted_fresh += result.extracted_now if fresh is None else fresh
        self.documents += sum(len(v) for v in outputs.vectors.values())
        self.embedded += result.embedded_now

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return (f"built {self.namespaces} memories: {self.turns} turns stored, {self.extracted} extracted "
                f"({self.extracted_fresh} by the extractor, {self.extracted - self.extracted_fresh} repeats "
                f"from its memo); {self.documents} documents with a vector, {self.embedded} texts embedded")


# ---------------------------------------------------------------------------- runner

class EvalRunner:
    """Runs one benchmark configuration; see the module docstring for the phases.

    ``backend``/``judge_backend``/``embedder`` replace the ones the configuration names
    (tests pass scripted ones). An injected ``judge_backend`` is a judge of its own; without
    one the judge comes from ``cfg.judge`` and a self-judge is refused unless allowed.
    """

    def __init__(self, spec: EvalSpec, cfg: PipelineConfig, *, backend: Any = None, embedder: Any = None,
                 judge_backend: Any = None, echo: Callable[[str], None] = print):
        self.spec = spec
        self.cfg = cfg
        self.echo = echo
        self._backend = backend
        self._embedder = embedder
        self._judge_backend = judge_backend
        self._baseline_cache: dict = {}  # baseline indexes per namespace, shared by the questions
        self._embed_identity: dict[str, Any] = {}
        self._retained: dict = {}  # namespace -> RetainedMemory under --retain-budget
        self._turn_ids: dict[str, frozenset[str]] = {}  # turn ids per namespace (reachable gold)
        self.quirks = QuirkLog(strict=spec.strict)  # what the loader read past (the last run's)
        self.build_stats = BuildStats()  # what this attempt's builds did
        self._attempts: AttemptLog | None = None  # this attempt's records, once the run folder exists
        self._category5_left_out = 0  # LoCoMo category 5 questions of the run's conversations

    # -- setup
    def _make_backend(self, mcfg: ModelConfig) -> Any:
        backend = load_backend(mcfg.backend, **backend_kwargs(mcfg))
        if mcfg.backend in ("vllm", "transformers") and mcfg.concurrency > 1:
            backend = MicroBatcher(backend)  # questions run in threads; merge their calls
        return backend

    def _judge_model(self) -> tuple[ModelConfig | None, bool]:
        """(the judge's model section, whether it is the answer model); (None, False) when
        the run does not judge or an injected judge backend is used."""
        if not self.spec.judging or self._judge_backend is not None:
            return None, False
        judge = resolve_judge(self.cfg.model, self.cfg.judge)
        return judge, is_self_judge(self.cfg.model, judge)

    def run(self) -> dict[str, Any]:
        spec, cfg = self.spec, self.cfg
        t_start = time.perf_counter()
        path = data_file(spec)
        self.quirks = QuirkLog(strict=spec.strict)
        convs = load_benchmark(spec, path, self.quirks)
        items = select_questions(spec.benchmark, convs, spec.limit)
        # LoCoMo's adversarial questions of the conversations run, never selected (whatever the
        # limit): the report counts them.
        self._category5_left_out = category5_left_out(spec.benchmark, convs)
        if not items:
            raise ConfigError(f"{spec.data}: no questions selected")
        data_sha = (data_sha256(corpus_files(spec.benchmark, path)) if spec.benchmark in CORPORA
                    else file_sha256(path))
        run_id = run_identity(spec, cfg, data_sha)
        out = Path(spec.out or Path("runs") / f"{spec.benchmark}-{spec.baseline or spec.preset or 'custom'}-{run_id[-8:]}")
        check_run_folder(out, run_id)
        judge_cfg, self_judge = self._judge_model()  # a refused self-judge stops here, before any work
        if spec.with_baseline and spec.baseline:
            raise ConfigError("--with-baseline scores a baseline beside the pipeline; with --baseline there is "
                              "no pipeline (use one of them)")

        store = open_store(spec.store)
        phases: dict[str, float] = {}
        completed = False
        self._attempts = None
        try:
            uses_model = (spec.answer or (config_needs_llm(cfg) and spec.baseline is None)
                          or (spec.retain_budget is not None and spec.writer == "llm"))
            backend = (self._backend or self._make_backend(cfg.model)) if uses_model else NoModelBackend()
            client = LLMClient(backend, store, run_id=run_id)
            workers = max(1, cfg.model.concurrency) if cfg.model.backend in _SERVER_BACKENDS else 1
            # At most this many views held: the conversations being answered and the one being built.
            max_views = spec.max_views if spec.max_views is not None else max(DEFAULT_RUN_VIEWS, workers + 1)
            mem = Memory(store, cfg, client=client, embedder=self._embedder, run_id=run_id,
                         progress=spec.progress and spec.retain_budget is not None, max_views=max_views)

            answers_path, judgments_path = out / "answers.jsonl", out / "judgments.jsonl"
            done = {r["question_id"]: r for r in read_jsonl(answers_path)}
            todo = [(c, q) for c, q in items if q.question_id not in done]
            judged = {r["question_id"] for r in read_jsonl(judgments_path)}
            if spec.retain_budget is not None:
                # Retention writes each memory's capsules from the whole built memory first: the
                # two-phase order (every memory ingested and built, then the questions).
                for conv in convs:
                    mem.add(conv.namespace, conv)
            plan = self._plan(mem, client, convs, items, todo, judged)
            self.echo(f"run {run_id}: {len(convs)} conversations, {len(items)} questions -> {out}")
            if len(self.quirks):
                left = self.quirks.questions_left_out
                self.echo(self.quirks.summary() + (f"; {left} question(s) left out" if left else "")
                          + " (counts in report.md and metrics.json; --strict refuses instead)")
            self.echo(plan.describe())

            judge_backend = None
            if spec.judging and self._judge_backend is not None:
                judge_backend = self._judge_backend
            elif spec.judging and len(judged) < len(items):  # load a judge only when there is work for it
                # A self-judge (allowed explicitly) is the answer backend itself: never load it twice.
                judge_backend = backend if self_judge else self._make_backend(judge_cfg)
            if uses_model and (todo or plan.build_calls):
                check_server(backend, role="answer model")
            if judge_backend is not None and judge_backend is not backend and plan.judged:
                check_server(judge_backend, role="judge")

            out.mkdir(parents=True, exist_ok=True)
            # Recorded from here on, so that a kill -9 leaves this attempt's line behind.
            self._attempts = AttemptLog(out)
            self._attempts.start(started_unix=time.time() - (time.perf_counter() - t_start))
            attempts = self._attempts
            judge_info = self._judge_info(judge_cfg, self_judge, judge_backend)
            self._write_config(out, run_id, data_sha, client, mem, plan, judge_info, uses_model)

            appender = JsonlAppender(answers_path)
            errors: list[str] = []

            def work(pair: tuple[Conversation, QAItem]) -> None:
                conv, q = pair
                # Started before its first model call: a question cut off by a kill is counted.
                attempts.question_started(q.question_id)
                try:
                    row = self._answer_one(mem, client, run_id, conv, q)
                except ModelError as exc:
                    errors.append(f"{q.question_id}: {exc}")
                    log.warning("question %s failed: %s", q.question_id, exc)
                    attempts.question_ended(q.question_id, failed=True, error=str(exc))
                    return
                appender.append(row)
                attempts.question_ended(q.question_id)

            if spec.retain_budget is not None:
                self._two_phase(mem, client, run_id, convs, todo, work, workers, phases)
            else:
                # Phases 1 and 2 together: each conversation with questions left is ingested,
                # built and answered before the next, so memory holds a few views, not all.
                self._stream(mem, client, run_id, todo, work, workers, max_views, phases)
                if self.build_stats.namespaces:
                    self.echo(self.build_stats.describe())
            rows = {r["question_id"]: r for r in read_jsonl(answers_path)}
            ordered = [rows[q.question_id] for _, q in items if q.question_id in rows]

            # Phase 3: judge.
            t0 = time.perf_counter()
            judge_totals: dict[str, dict[str, int]] = {}
            judge_waste: dict[str, dict[str, int]] = {}
            if spec.judging:
                judge_totals, judge_waste = self._judge(out, ordered, store, run_id, judge_backend)
            phases["judge_s"] = time.perf_counter() - t0

            # Phase 4: score and write.
            waste = run_waste(store, child_run_ids(run_id, convs, items, spec.baseline))
            phases["total_s"] = time.perf_counter() - t_start
            result = self._finish(out, ordered, client.totals(), judge_totals, waste, judge_waste, phases,
                                  errors, run_id, judge_info, uses_model, len(items))
            completed = True
            return result
        finally:
            store.close()
            if out.exists():
                # Every attempt, interrupted or not, adds its time to the run's wall time.
                phases.setdefault("total_s", time.perf_counter() - t_start)
                (self._attempts or AttemptLog(out)).finish(completed, phases)

    # -- build and answer
    def _build_view(self, mem: Memory, client: LLMClient, run_id: str, conv: Conversation) -> BuildResult:
        """Ingest and build ``conv``'s memory and hold its view, made from the build's own outputs
        (``views/fresh.py``: nothing is read back from the store)."""
        mem.add(conv.namespace, conv)
        spec = mem.spec
        outputs = BuildOutputs()
        extractor = mem.extractor(client.child(f"{run_id}/build/{conv.namespace}"))
        result = build_memory(mem.store, conv.namespace, extractor, mem.config.placement, mem.embedder,
                              on_failure=mem.config.extraction.on_failure, dense=spec.dense, keep=outputs,
                              remember_placement=False)
        view_after_build(mem.views, spec, mem.store, mem.embedder, outputs)
        self.build_stats.add(result, outputs, getattr(extractor, "misses", None))
        return result

    def _stream(self, mem: Memory, client: LLMClient, run_id: str, todo: Sequence[tuple[Conversation, QAItem]],
                work: Callable[[tuple[Conversation, QAItem]], None], workers: int, max_views: int,
                phases: dict[str, float]) -> None:
        """Each conversation with questions left, in file order: ingest, build (unless a baseline
        runs), answer. With several workers the next conversation builds while earlier ones are
        answered, with at most ``max_views - 1`` conversations in flight so that no held view is
        evicted before its questions are done. A conversation whose questions were all answered
        by an earlier attempt is neither ingested nor built."""
        by_conv: dict[str, list[tuple[Conversation, QAItem]]] = {}
        for pair in todo:
            by_conv.setdefault(pair[0].namespace, []).append(pair)
        convs = [pairs[0][0] for pairs in by_conv.values()]
        turns = sum(sum(len(s.turns) for s in c.sessions) for c in convs)
        build_s = 0.0
        t0 = time.perf_counter()
        # Turns that come again in another conversation (LongMemEval's shared sessions) are
        # extracted once: the rule extractor's memo keeps exactly those, until their last use.
        plan = (reuse_plan(k for c in convs for k in conversation_turn_keys(c))
                if self.spec.baseline is None and isinstance(mem.extractor(), MemoizedExtractor)
                else contextlib.nullcontext())
        unit = "turn" if self.spec.baseline is None else "turn (ingested)"
        with plan, bar(total=turns, desc="build and answer", unit=unit, enabled=self.spec.progress) as pb, \
                ThreadPoolExecutor(max_workers=workers) as pool:
            in_flight: deque[tuple[Conversation, int, list[Future]]] = deque()
            answered = 0

            def settle(limit: int) -> None:
                # Wait for the oldest conversations until at most ``limit`` are in flight.
                nonlocal answered
                while len(in_flight) > limit:
                    conv, n_questions, futures = in_flight.popleft()
                    for f in futures:
                        f.result()
                    answered += n_questions
                    pb.update(sum(len(s.turns) for s in conv.sessions))
                    pb.set_postfix_str(f"{answered}/{len(todo)} questions")
                    self._release(conv)

            for conv in convs:
                tb = time.perf_counter()
                if self.spec.baseline is None:
                    self._build_view(mem, client, run_id, conv)
                else:
                    mem.add(conv.namespace, conv)
                build_s += time.perf_counter() - tb
                self._heartbeat()
                pairs = by_conv[conv.namespace]
                if workers == 1:
                    for pair in pairs:
                        work(pair)
                    in_flight.append((conv, len(pairs), []))
                    settle(0)
                else:
                    in_flight.append((conv, len(pairs), [pool.submit(work, pair) for pair in pairs]))
                    settle(max(0, max_views - 2))
            settle(0)
        phases["build_s"] = build_s
        phases["questions_s"] = time.perf_counter() - t0 - build_s

    def _heartbeat(self) -> None:
        """Refresh this attempt's line now and then, so that a killed attempt keeps its time."""
        if self._attempts is not None:
            self._attempts.heartbeat()

    def _release(self, conv: Conversation) -> None:
        """Let go of what a finished conversation held beyond the bounded view cache (the
        baselines' per-namespace indexes)."""
        for key in [k for k in self._baseline_cache if len(k) > 1 and k[1] == conv.namespace]:
            del self._baseline_cache[key]

    def _two_phase(self, mem: Memory, client: LLMClient, run_id: str, convs: Sequence[Conversation],
                   todo: Sequence[tuple[Conversation, QAItem]], work: Callable[[tuple[Conversation, QAItem]], None],
                   workers: int, phases: dict[str, float]) -> None:
        """Build every memory (and its retained memory), then answer: retention's order."""
        spec = self.spec
        t0 = time.perf_counter()
        if spec.baseline is None:
            with bar(total=len(convs), desc="build", unit="memory", enabled=spec.progress) as pb:
                for conv in convs:
                    mem.build(conv.namespace, client=client.child(f"{run_id}/build/{conv.namespace}"))
                    self._heartbeat()
                    pb.update(1)
            self._retained = retain_memories(
                mem, [(c.namespace, c.speakers) for c in convs], spec.writer, spec.retain_budget,
                client=client.child(f"{run_id}/retain") if spec.writer == "llm" else None)
        phases["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
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

    # -- plan
    def _plan(self, mem: Memory, client: LLMClient, convs: Sequence[Conversation],
              items: Sequence[tuple[Conversation, QAItem]], todo: Sequence[tuple[Conversation, QAItem]],
              judged: set[str]) -> RunPlan:
        to_build: dict[str, int] = {}
        built = 0
        if self.spec.baseline is None:
            descriptor_set = mem.extractor(client).descriptor_set
            pending = {c.namespace for c, _ in todo}
            for conv in convs:
                if self.spec.retain_budget is None and conv.namespace not in pending:
                    built += 1  # all its questions answered: not built again
                    continue
                # Counted without reading the turns; a namespace not ingested yet has all its turns to do.
                turns = max(mem.store.packet_count(conv.namespace), sum(len(s.turns) for s in conv.sessions))
                left = turns - len(mem.store.extracted_packet_ids(conv.namespace, descriptor_set))
                if left > 0:
                    to_build[conv.namespace] = left
                else:
                    built += 1
        to_judge = sum(1 for _, q in items if q.question_id not in judged) if self.spec.judging else 0
        return RunPlan(to_build=to_build, built=built, turn_calls=turn_calls(self.cfg), questions=len(todo),
                       per_question=question_calls(self.cfg, baseline=self.spec.baseline, answer=self.spec.answer),
                       judged=to_judge)

    # -- one question
    def _answer_one(self, mem: Memory, client: LLMClient, run_id: str, conv: Conversation, q: QAItem) -> dict[str, Any]:
        qclient = client.child(f"{run_id}/q/{q.question_id}")
        t0 = time.perf_counter()
        candidate_packets: list[str] = []
        extras: dict[str, Any] = {}
        if self.spec.baseline:
            # The embedder loads only for the dense baseline.
            embedder = mem.embedder if self.spec.baseline == "dense" else None
            packet_ids, text = baseline_context(self.spec.baseline, mem.store, embedder, conv.namespace, q.question,
                                                self.cfg, cache=self._baseline_cache)
            stages = {"final": list(packet_ids)}
            timings: dict[str, float] = {}
        else:
            # address_trace: the fused path skips the Address Plane unless asked; pool_top10
            # and the aliasing audit read it.
            retained = self._retained.get(conv.namespace) if self._retained else None
            ctx = mem.compile(retained.namespace if retained else conv.namespace, q.question, client=qclient,
                              address_trace=True)
            packet_ids, text = ctx.packet_ids, ctx.text
            stages = {
                "pool_top10": [pc.packet_id for pc in ctx.pool[:10]],
                "a0": list(ctx.anchors),
                "final": list(ctx.packet_ids),
            }
            if retained is not None:  # capsule ids -> the turns they were cut from
                extras["retention"] = retention_row(retained, ctx.packet_ids, q.evidence)
                stages = {k: sources_in_order(retained, v) for k, v in stages.items()}
                packet_ids = tuple(stages["final"])
            if self.spec.with_baseline:
                # The baseline's own selection, scored beside the pipeline's in the same run.
                tb = time.perf_counter()
                embedder = mem.embedder if self.spec.with_baseline == "dense" else None
                ids, _text = baseline_context(self.spec.with_baseline, mem.store, embedder, conv.namespace,
                                              q.question, self.cfg, cache=self._baseline_cache)
                stages[f"baseline_{self.spec.with_baseline}"] = list(ids)
                extras["baseline_ms"] = round((time.perf_counter() - tb) * 1000, 1)
            mera = ctx.trace.get("anchors", {}).get("mera")
            if mera is not None:
                extras["mera_rounds"] = mera_row(mera, ctx.packet_ids)
            timings = ctx.timings_ms
            # Packet of each address hit before normalization, for the aliasing audit (A.4).
            candidate_packets = [c.packet_id for c in ctx.address.candidates[:40]]
        prediction = None
        if self.spec.answer:
            # The same settings Memory.answer uses, so the embedded small model is evaluated
            # with the prompt it is answered with.
            prediction = answer_settings(self.cfg.model).answer(
                qclient, q.question, text, namespace=conv.namespace,
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
            "context_tokens": count_tokens(text),
            "timings_ms": {k: round(v, 2) for k, v in timings.items()},
            "candidate_packets": candidate_packets,
            "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
            **extras,
        }
        if self.spec.benchmark == "longmemeval":
            row["question_type"] = q.category
            row["answer_session_ids"] = list(q.evidence_sessions)
            row["is_abstention"] = q.is_abstention
        if self.spec.benchmark in CORPORA:
            known = self._turn_ids.get(conv.namespace)
            if known is None:
                known = self._turn_ids[conv.namespace] = frozenset(t.packet_id for _, t in conv.iter_turns())
            row["gold_evidence"], row["gold_evidence_unreachable"] = split_reachable(q.evidence, known)
            row["is_abstention"] = q.is_abstention
        return row

    # -- judge
    def _judge_info(self, judge_cfg: ModelConfig | None, self_judge: bool, judge_backend: Any) -> dict | None:
        if not self.spec.judging:
            return None
        version = judge_prompt_version(self.spec.benchmark)
        identity = judge_backend.identity() if judge_backend is not None else None
        if judge_cfg is None:  # an injected judge backend: name it by its identity
            ident = identity or {}
            judge_cfg = dataclasses.replace(self.cfg.model, backend=str(ident.get("backend", "custom")),
                                            model=str(ident.get("model", "?")), base_url=ident.get("base_url"))
        return judge_description(judge_cfg, version, self_judge=self_judge, identity=identity)

    def _judge(self, out: Path, rows: list[dict], store: RequestCache, run_id: str, judge_backend: Any
               ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        spec = self.spec
        path = out / "judgments.jsonl"
        have = {r["question_id"] for r in read_jsonl(path)}
        todo = [r for r in rows if r["question_id"] not in have]
        judge_id = f"{run_id}/judge"
        if judge_backend is None:  # everything was judged by an earlier attempt
            return store.token_totals(run_id=judge_id), store.waste_totals(run_id=judge_id)
        jclient = LLMClient(judge_backend, store, run_id=judge_id)
        appender = JsonlAppender(path)
        chunk = 32
        with bar(total=len(todo), desc="judge", unit="q", enabled=spec.progress) as pb:
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                if spec.benchmark != "longmemeval":  # REALTALK and BEAM are judged like LoCoMo
                    results = judge_locomo_many(jclient, [(r["question"], r["gold"], r["prediction"]) for r in part])
                else:
                    results = judge_longmemeval_many(
                        jclient, [(r["question_id"], r["question_type"], r["question"], r["gold"], r["prediction"])
                                  for r in part])
                for r, res in zip(part, results):
                    appender.append({"question_id": r["question_id"], "judge_label": res.label,
                                     "judge_error": res.error})
                self._heartbeat()
                pb.update(len(part))
        return jclient.totals(), jclient.waste_totals()

    # -- scoring and files
    def _finish(self, out: Path, rows: list[dict], totals: dict, judge_totals: dict, waste: dict, judge_waste: dict,
                phases: dict, errors: list[str], run_id: str, judge_info: dict | None,
                uses_model: bool, n_selected: int) -> dict[str, Any]:
        judged = {r["question_id"]: r for r in read_jsonl(out / "judgments.jsonl")}
        merged = []
        for r in rows:
            j = judged.get(r["question_id"], {})
            merged.append({**r, "judge_label": j.get("judge_label"), "judge_error": j.get("judge_error")})
        atomic_write(out / "predictions.jsonl",
                     "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in merged))
        if self.spec.benchmark in CORPORA:
            metrics = corpus_metrics(merged, self.spec.benchmark)
        else:
            metrics = (locomo_metrics(merged, left_out_category5=self._category5_left_out)
                       if self.spec.benchmark == "locomo" else longmemeval_metrics(merged))
        if self.spec.benchmark == "longmemeval":
            metrics["recall_by_type"] = recall_by_type(merged, k=self.cfg.evidence.k0)
        audited = [r["candidate_packets"] for r in merged if r.get("candidate_packets")]
        aliasing = {str(k): v for k, v in aliasing_audit(audited).items()} if audited else {}
        stage_totals = add_judge_totals(totals, judge_totals)
        table = token_table(stage_totals, len(merged))
        attempt_summary = summarize_attempts(
            out, current=self._attempts.number if self._attempts else None, current_s=phases["total_s"])
        wall_s = attempt_summary["wall_s"]
        result = {
            "run_id": run_id,
            "metrics": metrics,
            "token_table": table,
            "tokens_by_stage": stage_totals,
            "waste_by_stage": waste,
            "judge_waste_by_stage": judge_waste,
            "phases_s": {k: round(v, 2) for k, v in phases.items()},
            "wall_s": round(wall_s, 2),
            "attempts": attempt_summary["attempts"],
            # How the attempts ended (a killed one too) and how many each question took.
            "attempt_summary": attempt_summary,
            "questions": len(merged),
            # Tokens handed to the reader: the cost axis of runs that make no model call.
            "context_tokens_per_question": (sum(r.get("context_tokens", 0) for r in merged) / len(merged)
                                            if merged else None),
            "failed_questions": errors,
            "aliasing_audit": aliasing,
            "judge": judge_info,
            # What the loader read past in the data as published (counts by kind, first places).
            "data_quirks": self.quirks.as_dict(),
            # What this attempt's builds did (an attempt that resumed builds only what was left).
            "build": self.build_stats.as_dict(),
        }
        extra_md = []
        if any(r.get("mera_rounds") for r in merged):
            result["mera_rounds"] = round_recall(merged, LOCOMO_CATEGORY_NAMES if self.spec.benchmark == "locomo"
                                                 else None)
            extra_md.append(round_recall_markdown(result["mera_rounds"]))
        if self._retained:
            result["retention"] = retention_summary(merged, self._retained)
            extra_md.append(retention_summary_markdown(result["retention"]))
        atomic_write(out / "metrics.json", json.dumps(result, indent=2, sort_keys=True, default=str))
        model = self.cfg.model
        summary = {
            "run": run_id, "benchmark": self.spec.benchmark, "data": self.spec.data,
            "preset": self.spec.preset or "(custom)", "baseline": self.spec.baseline or "none",
            # A retrieval-only run on the model-free path loads no model: say so, not the config's default.
            "backend": model.backend if uses_model else "none (no model call)",
            "model": model.model if uses_model else "none",
            "embedder": _embedder_name(self._embed_identity, model),
            "judge": _judge_line(judge_info),
            "wall time (s)": wall_time_line(attempt_summary),
        }
        retried = question_attempts_line(attempt_summary)
        if retried:
            summary["question attempts"] = retried
        if waste:
            summary["wasted calls"] = ", ".join(f"{k} {v['calls']}" for k, v in waste.items())
        write_markdown_report(out / "report.md", metrics, summary, table, quirks=self.quirks.as_dict())
        if aliasing:
            with open(out / "report.md", "a", encoding="utf-8") as fh:
                fh.write("\n" + aliasing_markdown(aliasing) + "\n")
        if extra_md:
            with open(out / "report.md", "a", encoding="utf-8") as fh:
                fh.write("".join("\n" + md for md in extra_md))
        self.echo(summary_text(metrics, table, wall_s))
        self.echo(f"wrote {out}/predictions.jsonl, metrics.json, report.md")
        if errors:
            self.echo(f"{len(errors)} questions failed with model errors ({len(merged)} of {n_selected} "
                      "answered); rerun to retry them")
        return result

    def _write_config(self, out: Path, run_id: str, data_sha: str, client: LLMClient, mem: Memory, plan: RunPlan,
                      judge_info: dict | None, uses_model: bool) -> None:
        try:
            embed_identity = mem.embedder.identity()
        except Exception as exc:  # noqa: BLE001 - an embedder that cannot load is reported later
            embed_identity = {"error": str(exc)}
        self._embed_identity = embed_identity
        cfg_doc = {
            "run_id": run_id,
            "benchmark": self.spec.benchmark,
            "data": self.spec.data,
            "data_sha256": data_sha,
            "spec": {**dataclasses.asdict(self.spec), "store": describe_location(self.spec.store)},
            "config": self.cfg.to_dict(),
            "versions": _versions(),
            "prompt_versions": prompt_versions(),
            "answer": answer_record(answer_settings(self.cfg.model)) if self.spec.answer else None,
            "model_identity": client._backend_identity if uses_model else None,
            "embedder_identity": embed_identity,
            "judge": judge_info,
            "plan": plan.to_dict(),
        }
        atomic_write(out / "config.json", json.dumps(cfg_doc, indent=2, sort_keys=True, default=str))


def wall_time_line(summary: dict[str, Any]) -> str:
    """The report's wall time: seconds over all attempts, and how the unfinished ones ended."""
    line = f"{summary['wall_s']:.1f} over {summary['attempts']} attempt(s)"
    ended = [f"{summary[k]} {k}" for k in ("stopped", "killed") if summary[k]]
    if ended:
        line += f" ({', '.join(ended)}"
        line += "; a killed attempt counts up to its last record)" if summary["killed"] else ")"
    return line


def question_attempts_line(summary: dict[str, Any]) -> str | None:
    """How many attempts the questions took, when some took more than one (else None)."""
    q = summary["questions"]
    if not q["with_several"] and not q["cut_off"]:
        return None
    return (f"{q['question_attempts']} question attempts; {q['with_several']} question(s) took more than one "
            f"(at most {q['most']}); {q['cut_off']} cut off by a stopped or killed attempt, {q['failed']} failed")


def _embedder_name(identity: dict[str, Any], model: ModelConfig) -> str:
    """The embedder the run used (an injected one too), from its identity; else the config's."""
    kind = identity.get("embedder")
    if not kind:
        return "hash" if model.embedder == "hash" else f"{model.embedder} {model.embed_model}"
    if identity.get("model"):
        return f"{kind} {identity['model']}"
    return f"{kind} (dim {identity['dim']})" if identity.get("dim") else str(kind)


def _judge_line(judge_info: dict | None) -> str:
    if not judge_info:
        return "none (not judged)"
    line = f"{judge_info['backend']} {judge_info['model']}, prompt {judge_info['prompt_version']}"
    if judge_info.get("base_url"):
        line += f", at {judge_info['base_url']}"
    if judge_info.get("self_judge"):
        line += " (the answer model judging itself, allowed explicitly)"
    return line


def judge_section_from_args(args: Any, cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` with the ``--judge-*`` flags written into its judge section (flags win)."""
    changes = {}
    for flag, field_name in (("judge_backend", "backend"), ("judge_model", "model"),
                             ("judge_base_url", "base_url"), ("judge_api_key_env", "api_key_env")):
        value = getattr(args, flag, None)
        if value is not None:
            changes[field_name] = value
    if getattr(args, "allow_self_judge", False):
        changes["allow_self_judge"] = True
    return cfg.replace(judge=changes) if changes else cfg


def run_eval_from_args(args: Any, cfg: PipelineConfig) -> int:
    """``eval``'s command: 0 when every question was answered, 1 when some failed."""
    data = args.data
    if isinstance(data, (list, tuple)):  # --data takes several paths (REALTALK chat files)
        if len(data) > 1 and args.benchmark != "realtalk":
            raise ConfigError(f"--data: {args.benchmark} reads one path, got {len(data)}")
        data = data[0] if len(data) == 1 else tuple(data)
    max_chars = getattr(args, "max_turn_chars", None)
    spec = EvalSpec(
        benchmark=args.benchmark, data=data, store=args.store, out=args.out, limit=args.limit,
        conversations=tuple(c.strip() for c in args.conversations.split(",")) if args.conversations else None,
        judge=not args.no_judge, baseline=args.baseline, preset=args.preset, progress=not args.quiet,
        answer=not args.retrieval_only,
        retain_budget=getattr(args, "retain_budget", None), writer=getattr(args, "writer", None) or "model-free",
        max_turn_chars=DEFAULT_MAX_TURN_CHARS if max_chars is None else max_chars,
        strict=bool(getattr(args, "strict", False)),
        max_views=getattr(args, "max_views", None),
        with_baseline=getattr(args, "with_baseline", None),
    )
    result = EvalRunner(spec, judge_section_from_args(args, cfg)).run()
    return 1 if result["failed_questions"] else 0
