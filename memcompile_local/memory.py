"""The Python API an agent calls: ``Memory(store, config)``.

``add`` ingests turns, ``build`` makes descriptors/Cells/embeddings, ``compile`` returns the
reader context for a question, ``answer`` answers it, ``search`` returns the selected packets
with scores, ``get_all`` pages through a namespace, ``delete_turn`` erases one turn and
``forget`` a whole namespace. Models load lazily on first use, so a model-free configuration
never imports one.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from os import PathLike
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .address.extract_llm import LLMExtractor
from .address.extract_memo import MemoizedExtractor, forget_memo
from .address.extract_rule import RuleExtractor
from .append_in_place import InPlaceAppend
from .build import BuildResult, build_memory, dense_plan, layout_id
from .config import PipelineConfig, config_needs_llm
from .data.plain import GivenIds, parse_plain_given_ids
from .errors import ConfigError, ImmutablePacketError
from .evidence.answer import answer_settings
from .fused import fused_scores, query_vector
from .language.timeparse import parse_session_time
from .llm.client import LLMClient
from .llm.registry import backend_kwargs, embedder_kwargs, load_backend, load_embedder
from .pipeline import Context, MemoryView, compile_context
from .store import IngestResult, MemoryStore
from .turn_ids import assign_stable_ids
from .types import Conversation, Session, SourcePacket
from .view_load import ViewLoader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    text: str
    context: Context
    prompt_version: str = ""


@dataclass(frozen=True)
class SearchHit:
    """One packet of a compiled selection: its 1-based ``rank`` in the selection and a score.

    ``score`` is the fused selector's score on the fused path; on the other paths the packet's
    score in the normalized pool U_q, else its dense cosine, else None (a packet only an LLM
    stage chose). Scores order packets within one search; they are not comparable across
    selectors or questions.
    """

    packet: SourcePacket
    score: float | None
    rank: int


@dataclass(frozen=True)
class AddResult(IngestResult):
    """What ``Memory.add`` stored: the counts of ``IngestResult`` and ``ids``, the turn id of every
    turn given, in the order given (an id that was ``skipped`` names the stored turn it matched)."""

    ids: tuple[str, ...] = ()


def selection_scores(view: MemoryView, cfg: PipelineConfig, ctx: Context, query: str, ids: Sequence[str],
                     query_vec: np.ndarray | None, *, question_date: str | None = None) -> dict[str, float]:
    """The score of each selected packet id (see ``SearchHit``); ids without one are left out."""
    scores: dict[str, float] = {}
    if cfg.evidence.anchor_selector == "fused" and view.fusion is not None:
        anchor = parse_session_time(question_date) if question_date else None
        total = fused_scores(view.fusion, query, query_vec, cfg.fusion, anchor=anchor).total
        row = {pid: i for i, pid in enumerate(view.fusion.packet_ids)}
        return {pid: float(total[row[pid]]) for pid in ids if pid in row}
    dense = dict(ctx.dense)
    pool = {pc.packet_id: pc.score for pc in ctx.pool}
    for pid in ids:
        value = pool.get(pid, dense.get(pid))
        if value is not None:
            scores[pid] = float(value)
    return scores


@dataclass(frozen=True)
class PacketPage:
    """One page of a namespace's packets in dialogue order (``Memory.get_all``)."""

    packets: tuple[SourcePacket, ...]
    offset: int
    total: int

    @property
    def next_offset(self) -> int | None:
        """The ``offset`` of the next page, or None after the last one."""
        end = self.offset + len(self.packets)
        return end if end < self.total and self.packets else None


@dataclass(frozen=True)
class BuildPlan:
    """What a build of one namespace will do, said before it starts (``Memory.plan_build``)."""

    namespace: str
    turns: int  # packets stored
    to_extract: int  # packets the configured descriptor set has not extracted yet
    extractor: str  # "rule" or "llm"
    model: str  # "backend model" of the LLM extractor, "" for the rule extractor
    calls_min: int  # model calls the extraction makes at least ...
    calls_max: int  # ... and about at most (two-step: one metadata call per claim, ~3 claims a turn)

    @property
    def up_to_date(self) -> bool:
        return self.to_extract == 0

    def describe(self) -> str:
        """One line for a terminal, e.g. before an ``ask`` that has to build first."""
        if self.up_to_date:
            return f"{self.namespace}: {self.turns} turns, already extracted; placing Cells and embedding only"
        if self.extractor == "rule":
            calls = "no model calls"
        elif self.calls_min == self.calls_max:
            calls = f"{self.calls_min} model calls to {self.model}"
        else:
            calls = f"about {self.calls_min}-{self.calls_max} model calls to {self.model}"
        return (f"{self.namespace}: building memory for {self.to_extract} of {self.turns} turns "
                f"({self.extractor} extractor, {calls}), then Cells and embeddings")


_CLAIMS_PER_TURN = 3  # rough upper figure for the two-step extractor's metadata calls per turn


def turns_to_conversation(namespace: str, data: Any) -> tuple[Conversation, GivenIds | None]:
    """Accept a Conversation, a sequence of Sessions, or a list of plain dict sessions/turns.

    Returns the conversation and, for dict input, which ids the dicts gave (the others are
    replaced by stable ids in ``Memory.add``); None for typed input, whose ids are used as given.
    """
    if isinstance(data, Conversation):
        if data.namespace != namespace:
            data = Conversation(namespace=namespace, sessions=data.sessions, speakers=data.speakers,
                                questions=data.questions, source_path=data.source_path)
        return data, None
    if isinstance(data, Mapping):
        data = [data]  # one session dict
    items = list(data)
    if items and all(isinstance(s, Session) for s in items):
        return Conversation(namespace=namespace, sessions=tuple(items)), None
    if items and all(isinstance(s, Mapping) and "turns" in s for s in items):
        return parse_plain_given_ids({"namespace": namespace, "sessions": items}, "<add>", namespace=namespace)
    raise ConfigError("Memory.add expects a Conversation, Sessions, or a list of {'time', 'turns'} dicts")


def _with_ids(result: IngestResult, conversation: Conversation) -> AddResult:
    return AddResult(namespace=result.namespace, added=result.added, skipped=result.skipped,
                     ids=tuple(t.packet_id for s in conversation.sessions for t in s.turns))


class _QueryVectors:
    """An embedder that remembers what it embedded, so ``search`` scores with the query
    vector ``compile_context`` computed instead of embedding the query twice."""

    def __init__(self, embedder: Any):
        self._embedder = embedder
        self.last: np.ndarray | None = None

    def identity(self) -> dict[str, Any]:
        return self._embedder.identity()

    @property
    def dim(self) -> int:
        return self._embedder.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.asarray(self._embedder.embed(texts), dtype=np.float32)
        if len(texts) == 1:
            self.last = out[0]
        return out

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        # Query vectors of embedders with a query prefix (e5, bge); others embed queries as documents.
        embed = getattr(self._embedder, "embed_query", None) or self._embedder.embed
        out = np.asarray(embed(texts), dtype=np.float32)
        if len(texts):
            self.last = query_vector(out)  # several texts embed one query (FusionConfig.dense_query)
        return out


class Memory:
    """Long-term memory over a store file, configured by a PipelineConfig."""

    def __init__(
        self,
        store: MemoryStore | str | PathLike,
        config: PipelineConfig | None = None,
        *,
        backend: Any = None,
        embedder: Any = None,
        client: Any = None,
        run_id: str | None = None,
        progress: bool = False,
    ):
        self.store = store if isinstance(store, MemoryStore) else MemoryStore(store)
        self._owns_store = not isinstance(store, MemoryStore)
        self.config = config or PipelineConfig()
        self._backend = backend
        self._embedder = embedder
        self._client = client
        self.run_id = run_id
        self.progress = progress
        self._views: dict[tuple, MemoryView] = {}
        self._lock = threading.RLock()
        # One lock per namespace serialises view builds: concurrent first compiles build it once
        # and get the same object, while other namespaces are not held up.
        self._view_locks: dict[str, threading.Lock] = {}
        # Each namespace's last view load, so the next load after an append redoes only new work.
        self._loader = ViewLoader()
        self._config_key_of: tuple[PipelineConfig, tuple] | None = None
        self._appender: InPlaceAppend | None = None  # made on the first add under the rule extractor

    # -- models -------------------------------------------------------------------------
    @property
    def client(self):
        """The LLM client (cache + ledger over the store); loads the backend on first use."""
        with self._lock:
            if self._client is None:
                backend = self._backend or load_backend(self.config.model.backend, **backend_kwargs(self.config.model))
                self._client = LLMClient(backend, self.store, run_id=self.run_id)
            return self._client

    @property
    def embedder(self):
        with self._lock:
            if self._embedder is None:
                self._embedder = load_embedder(self.config.model.embedder, **embedder_kwargs(self.config.model))
            return self._embedder

    def needs_llm(self) -> bool:
        return config_needs_llm(self.config)

    def uses_fusion(self) -> bool:
        # The fused index serves the fused selector, and the scheduler when its pool is the fused top-N.
        return self.config.evidence.anchor_selector == "fused" or self.config.fusion.schedule_pool == "fused"

    def uses_context_embeddings(self) -> bool:
        """The fused selector's dense channel also embeds each turn with its neighbours."""
        return self.uses_fusion() and self.config.fusion.dense_neighbor_context and self.embedder is not None

    def extractor(self, client: Any = None):
        """The configured descriptor extractor; ``client`` overrides the LLM client (sub-runs)."""
        c = self.config.extraction
        if c.extractor == "rule":
            # Memoized by turn content: namespaces sharing sessions (LongMemEval) extract each turn once.
            return MemoizedExtractor(RuleExtractor(c))
        return LLMExtractor(client or self.client, combined=c.combined_call, config=c,
                            max_tokens=self.config.model.max_tokens)

    # -- write side ---------------------------------------------------------------------------
    def add(self, namespace: str, data: Conversation | Sequence[Session] | Iterable[Mapping] | Mapping,
            *, given_ids: GivenIds | None = None, in_place: bool = True) -> AddResult:
        """Ingest turns (all-or-nothing); identical turns already present are skipped.

        Returns an ``AddResult``: the added and skipped counts and the id of every turn given.

        ``data`` is a Conversation or Sessions (their ids are used as given), or plain session
        dicts ``{"time": ..., "turns": [{"speaker": ..., "text": ...}], "id": ...}`` (one dict or
        a list). Ids the dicts leave out are stable across calls (``memcompile_local.turn_ids``):
        a session without ``id`` continues the stored session with the same ``time``, else it
        is a new session numbered after the stored ones; a turn without ``id`` that equals a
        stored turn of its session is that turn, any other turn gets the next ``S<n>:<m>`` of
        its session. So calling ``add`` again with the same session adds nothing, and with
        new turns (alone or after the old ones) adds exactly those. A turn identical to a
        stored one of the same session is stored once; give ids to keep repeats.

        ``given_ids`` (with a Conversation read from a plain file, see
        ``data.plain.load_plain_given_ids``) marks which of its ids the file wrote; the others
        are replaced by stable ids in the same way.

        In place (the default): under the rule extractor, while this Memory holds a current
        view of the namespace, the new turns are also built and the view extended in place
        (``append_in_place``: one transaction, and the next ``compile`` does not reload). An
        agent that adds a turn and then searches pays for that turn only. Otherwise (no view
        held, an LLM extractor, another writer moved the store, or ``in_place=False``) the
        turns are only stored and the next ``view`` builds and loads.
        """
        conversation, given = turns_to_conversation(namespace, data)
        if given_ids is not None and isinstance(data, Conversation):
            given = given_ids
        if given is None:
            return _with_ids(self._ingest(conversation, in_place), conversation)
        for attempt in range(3):
            # A view held for the store's current generation holds exactly the stored packets:
            # then an agent's one-turn add does not read the whole namespace (12 ms at 1k turns).
            held = self.cached_view(namespace, generation=self.store.generation(namespace)) if attempt == 0 else None
            stored = held[0].packets if held is not None else self.store.packets(namespace)
            stable = assign_stable_ids(conversation, given, stored)
            try:
                return _with_ids(self._ingest(stable, in_place and attempt == 0), stable)
            except ImmutablePacketError:
                # Another writer took the ids we picked between our read and our write:
                # pick again against what it stored (explicit ids that clash fail each time).
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _ingest(self, conversation: Conversation, in_place: bool) -> IngestResult:
        """Store ``conversation``; in place (built, view extended) when that applies."""
        if in_place and self.config.extraction.extractor == "rule":
            with self._lock:
                if self._appender is None:
                    self._appender = InPlaceAppend(self)
            done = self._appender.add(conversation.namespace, conversation)
            if done is not None:
                return done
        return self.store.ingest(conversation)

    def plan_build(self, namespace: str) -> BuildPlan:
        """What ``build`` would do now: turns left to extract and about how many model calls."""
        # The LLM extractor's descriptor set names the backend's identity: this builds the
        # backend object (cheap; a model loads on its first call), it sends nothing.
        dset = self.extractor().descriptor_set
        turns = self.store.packet_count(namespace)
        todo = turns - len(self.store.extracted_packet_ids(namespace, dset))
        if self.config.extraction.extractor == "rule":
            return BuildPlan(namespace, turns, todo, "rule", "", 0, 0)
        m = self.config.model
        per_max = 1 if self.config.extraction.combined_call else 1 + _CLAIMS_PER_TURN
        per_min = 1 if self.config.extraction.combined_call else 2
        return BuildPlan(namespace, turns, todo, "llm", f"{m.backend} {m.model}", todo * per_min, todo * per_max)

    def is_built(self, namespace: str) -> bool:
        """Whether every turn is extracted by the configured descriptor set and Cells exist."""
        plan = self.plan_build(namespace)
        if not plan.up_to_date:
            return False
        if self.config.placement.layout == "flat":
            return True
        dset = self.extractor().descriptor_set
        return bool(self.store.cells(namespace, layout_id(dset, self.config.placement)))

    def build(self, namespace: str, *, client: Any = None) -> BuildResult:
        """Extract, place and embed whatever is not built yet (no model call when up to date)."""
        return build_memory(self.store, namespace, self.extractor(client), self.config.placement,
                            self.embedder, progress=self.progress,
                            on_failure=self.config.extraction.on_failure,
                            dense=dense_plan(self.config, self.uses_context_embeddings()))

    def forget(self, namespace: str) -> dict[str, int]:
        """Erase ``namespace`` from the store (``MemoryStore.forget``); rows deleted per table."""
        with self._lock:
            self._views = {k: v for k, v in self._views.items() if k[0] != namespace}
        self._loader.drop(namespace)
        if self._appender is not None:
            self._appender.forget(namespace)
        forget_memo()  # the process-wide extraction memo holds the erased turns' text as keys
        return self.store.forget(namespace)

    def delete_turn(self, namespace: str, packet_id: str) -> dict[str, int]:
        """Erase one turn with everything derived from it; rows deleted per table.

        Goes with it: its descriptors and extraction markers, its embeddings and those of its
        in-session neighbours (their context documents quoted it), every cached model request
        and response of the namespace that quoted its text or claims, the namespace's Cells
        (rebuilt on the next build or compile, as are the neighbour documents), and the next
        turn's descriptors (its extraction saw the deleted turn as context; it is extracted
        again). The file is then scrubbed as ``forget`` scrubs it. Raises ``ConfigError`` when
        the namespace has no such turn.
        """
        if self.store.get_packet(namespace, packet_id) is None:
            raise ConfigError(f"namespace {namespace!r} has no turn {packet_id!r} in {self.store.path}")
        with self._lock:
            self._views = {k: v for k, v in self._views.items() if k[0] != namespace}
        self._loader.drop(namespace)
        if self._appender is not None:
            self._appender.forget(namespace)
        forget_memo()
        return self.store.delete_packet(namespace, packet_id)

    def get_all(self, namespace: str, *, offset: int = 0, limit: int = 100) -> PacketPage:
        """Up to ``limit`` packets of ``namespace`` from ``offset`` on, in dialogue order.

        ``page.next_offset`` is the offset of the next page (None after the last).
        """
        if offset < 0 or limit < 1:
            raise ConfigError(f"get_all needs offset >= 0 and limit >= 1, got offset={offset}, limit={limit}")
        packets = self.store.packets(namespace)
        return PacketPage(tuple(packets[offset: offset + limit]), offset, len(packets))

    # -- read side ----------------------------------------------------------------------------
    def view(self, namespace: str, *, build: bool = True) -> MemoryView:
        """The query-time structures of ``namespace``, built once and cached while current.

        The cache key is the namespace, the store's generation of it and the configuration
        parts the view is made of. The generation is read on every call: any write to the
        namespace or a ``forget``, in this or another process, changes it, so a view of changed
        or forgotten data is never returned. Concurrent first calls build the view once (under
        a per-namespace lock) and all get the same object. When the namespace is not built for
        this configuration it is built first, unless ``build=False``, which raises
        ``ConfigError`` instead.
        """
        key = self._view_key(namespace)
        with self._lock:
            cached = self._views.get(key)
            if cached is not None:
                return cached
            lock = self._view_locks.setdefault(namespace, threading.Lock())
        with lock:
            # Another thread may have built it (and written) while this one waited.
            key = self._view_key(namespace)
            with self._lock:
                cached = self._views.get(key)
            if cached is not None:
                return cached
            if not self.is_built(namespace):
                if not build:
                    plan = self.plan_build(namespace)
                    raise ConfigError(
                        f"namespace {namespace!r} is not built for this configuration "
                        f"({plan.turns - plan.to_extract} of {plan.turns} turns extracted); "
                        f"run `memcompile-local build {namespace}` first, or allow the build")
                log.info("build %s", self.plan_build(namespace).describe())
                self.build(namespace)
            view, generation = self._load_view(namespace)
            # The steps above may have written; key the view on the generation read after them
            # (its data were read after that, so none of them is older than the key).
            key = self._view_key(namespace, generation=generation)
            with self._lock:
                # Only the newest view of a namespace can be current: drop the older ones so a
                # long-running server that appends all day does not keep every view it built.
                self._views = {k: v for k, v in self._views.items() if k[0] != namespace}
                self._views[key] = view
            return view

    def _view_key(self, namespace: str, *, generation: int | None = None) -> tuple:
        if generation is None:
            generation = self.store.generation(namespace)
        if not self.store.packet_count(namespace):
            raise ConfigError(f"namespace {namespace!r} has no turns in {self.store.path}")
        return (namespace, generation, *self._config_key())

    def _config_key(self) -> tuple:
        """The configuration part of a view's cache key (what its structures are made of)."""
        c = self.config
        held = self._config_key_of
        if held is not None and held[0] is c:  # computed for this config object already
            return held[1]
        dset = self.extractor().descriptor_set
        parts = repr((c.placement, c.routing, c.fusion, c.model.embedder, c.model.embed_model,
                      self.uses_context_embeddings()))
        key = (dset, layout_id(dset, c.placement), parts)
        # Every search reads it (about 0.14 ms to make: an extractor, a layout hash, a repr).
        self._config_key_of = (c, key)
        return key

    def cached_view(self, namespace: str, *, generation: int | None = None) -> tuple[MemoryView, int] | None:
        """(the view of ``namespace`` this Memory holds, its generation), or None.

        With ``generation`` only a view of exactly that generation counts (pass the store's
        generation now for a view that is current); without it, the newest one held. Loads
        and builds nothing, so a search can serve a current view without the checks of ``view``.
        """
        config_key = self._config_key()
        with self._lock:
            for key, view in self._views.items():
                if key[0] == namespace and key[2:] == config_key and generation in (None, key[1]):
                    return view, key[1]
        return None

    def plan_append(self, namespace: str, base: MemoryView, packets: Sequence[SourcePacket],
                    descriptors: Mapping[str, Sequence[Any]]):
        """The view ``base`` becomes once ``packets`` and their descriptors are stored, or None
        when it must be loaded instead (``view_load.ViewLoader.plan_append``; writes nothing)."""
        return self._loader.plan_append(self, namespace, base, packets, descriptors)

    def adopt_append(self, plan, generation: int) -> MemoryView | None:
        """Make a planned append's view the cached view of its namespace at ``generation``
        (None, and nothing cached, when the namespace was forgotten or reloaded since the plan).

        The caller has written everything the plan describes and read ``generation`` after
        its last write, knowing that nobody else wrote the namespace since ``plan.base`` was
        current. A newer view already held is kept instead.
        """
        view = self._loader.adopt(self, plan, generation)
        if view is None:  # forgotten or reloaded meanwhile: the next search loads from the store
            return None
        key = (plan.namespace, generation, *self._config_key())
        with self._lock:
            held = [k for k in self._views if k[0] == plan.namespace]
            if any(k[1] > generation for k in held):
                return self._views[max(held, key=lambda k: k[1])]
            self._views = {k: v for k, v in self._views.items() if k[0] != plan.namespace}
            self._views[key] = view
        return view

    def _load_view(self, namespace: str) -> tuple[MemoryView, int]:
        """Read a built namespace into a MemoryView (embedding any document not embedded yet),
        with the generation read before its data. Reuses the per-packet work of the previous
        load of the namespace where the texts are unchanged (``view_load.ViewLoader``)."""
        return self._loader.load(self, namespace)

    def compile(self, namespace: str, question: str, *, client: Any = None,
                address_trace: bool = False, build: bool = True, question_date: str | None = None) -> Context:
        """Select and render the evidence for ``question`` (ids, rendered text, per-stage trace).

        ``question_date``: when the question is asked (a date string); relative times in it
        ("last month") are matched against turns' dates from there.

        ``address_trace=True`` fills ``Context.address``/``pool`` on the fused path too (see
        ``pipeline.compile_context``). ``build=False``: fail instead of building a namespace
        that is not built (see ``view``).
        """
        view = self.view(namespace, build=build)
        if client is None and self.needs_llm():
            client = self.client
        return compile_context(question, view, self.config, client=client, embedder=self.embedder,
                               address_trace=address_trace, question_date=question_date)

    def search(self, namespace: str, query: str, k: int | None = None, *, client: Any = None,
               build: bool = True, question_date: str | None = None) -> list[SearchHit]:
        """The packets the configured pipeline selects for ``query``, best first, with scores.

        The same selection ``compile`` makes, without rendering it; ``k`` (default: the
        configured K0) bounds the anchors and the returned list. See ``SearchHit`` for what
        the score is on each path.
        """
        cfg = self.config
        if k is not None:
            if k < 1:
                raise ConfigError(f"search needs k >= 1, got {k}")
            cfg = cfg.replace(evidence={"k0": int(k)})
        view = self.view(namespace, build=build)
        if client is None and self.needs_llm():
            client = self.client
        vectors = _QueryVectors(self.embedder) if self.embedder is not None else None
        ctx = compile_context(query, view, cfg, client=client, embedder=vectors, question_date=question_date)
        ids = list(ctx.packet_ids[:k] if k is not None else ctx.packet_ids)
        scores = selection_scores(view, cfg, ctx, query, ids, vectors.last if vectors else None,
                                  question_date=question_date)
        return [SearchHit(view.packets_by_id[pid], scores.get(pid), rank)
                for rank, pid in enumerate(ids, start=1)]

    def answer(self, namespace: str, question: str, *, client: Any = None,
               question_date: str | None = None, build: bool = True) -> Answer:
        """Compile the context, then answer from it with the answer prompt.

        The prompt, completion cap and blocks read follow ``answer_settings(config.model)``:
        the embedded SmolLM2-135M gets the short small-model prompt (``model.answer_prompt``).
        """
        client = client or self.client
        ctx = self.compile(namespace, question, client=client, build=build, question_date=question_date)
        res = answer_settings(self.config.model).answer(client, question, ctx.text, namespace=namespace,
                                                        question_date=question_date)
        return Answer(text=res.text, context=ctx, prompt_version=res.prompt_version)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
