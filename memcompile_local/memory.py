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
from typing import Any, Callable, Iterable, Mapping, Sequence

from .address.extract_llm import LLMExtractor
from .address.extract_memo import MemoizedExtractor, forget_memo
from .address.extract_rule import RuleExtractor
from .build.deletion import plan_turn_deletion
from .build.spec import BuildSpec, make_spec
from .build.stages import BuildResult, build_memory, layout_id
from .config import PipelineConfig, config_needs_llm
from .data.plain import GivenIds, parse_plain_given_ids
from .errors import ConfigError, ImmutablePacketError, StalePlanError
from .evidence.answer import answer_settings
from .evidence.relevance import Explanation
from .llm.client import LLMClient
from .llm.registry import backend_kwargs, embedder_kwargs, load_backend, load_embedder
from .pipeline.compile import Context, compile_context
from .store import IngestResult, Store, open_store
from .data.turn_ids import assign_stable_ids
from .types import Conversation, Session, SourcePacket
from .views.append import InPlaceAppend
from .views.cache import DEFAULT_MAX_VIEW_BYTES, ViewCache
from .views.filters import TurnFilter
from .views.pending import PartialViews
from .views.record import MemoryView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    text: str
    context: Context
    prompt_version: str = ""
    model: str = ""  # the answer model, "<backend> <model>"


@dataclass(frozen=True)
class SearchHit:
    """One packet of a compiled selection: its 1-based ``rank`` in the selection, its score and,
    when the search asked for it, why it was chosen.

    ``score`` lies in [0, 1] and never rises down the list, so a threshold keeps a prefix of
    it. Its meaning depends on the selector (``memcompile_local.evidence.relevance``): under
    the model-free default, the weighted channel sum on a fixed scale of the configuration
    (alternating dialogue) or the learned ranker's calibrated probability that the turn is
    gold evidence (user-assistant and bursty histories); an LLM ordering gives 1 / rank.
    ``explain`` (``search(..., explain=True)``): the selector, its raw score and the channels
    it read, with each channel's contribution for a weighted sum.
    """

    packet: SourcePacket
    score: float
    rank: int
    explain: Explanation | None = None


@dataclass(frozen=True)
class AddResult(IngestResult):
    """What ``Memory.add`` stored: the counts of ``IngestResult`` and ``ids``, the turn id of every
    turn given, in the order given (an id that was ``skipped`` names the stored turn it matched)."""

    ids: tuple[str, ...] = ()


def selection_scores(ctx: Context, ids: Sequence[str]) -> dict[str, float]:
    """The score of each selected packet id (see ``SearchHit``) as the compile that selected
    them gave it (``Context.scores``: computed in the pass that ranked them, with the
    question's ``question_date``); ``Memory.search`` and the service share it. Nothing is
    scored again here."""
    return {pid: ctx.scores[pid] for pid in ids if pid in ctx.scores}


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


class Memory:
    """Long-term memory over a store file, configured by a PipelineConfig."""

    def __init__(
        self,
        store: Store | str | PathLike,
        config: PipelineConfig | None = None,
        *,
        backend: Any = None,
        embedder: Any = None,
        client: Any = None,
        run_id: str | None = None,
        progress: bool = False,
        max_views: int | None = None,
        max_view_bytes: int | None = DEFAULT_MAX_VIEW_BYTES,
    ):
        # A path or URL is opened here (and closed by ``close``); a store object is the caller's.
        self._owns_store = isinstance(store, (str, PathLike))
        self.store: Store = open_store(store) if self._owns_store else store
        self.config = config or PipelineConfig()
        self._backend = backend
        self._embedder = embedder
        self._client = client
        self.run_id = run_id
        self.progress = progress
        self._lock = threading.RLock()
        # The current view of each namespace, and each namespace's last load (the next load
        # after an append redoes only new work).
        # Bounded (least recently used namespaces leave first), so a process serving many users
        # holds a working set: ``max_views`` namespaces, ``max_view_bytes`` estimated bytes.
        self.views = ViewCache(max_namespaces=max_views, max_bytes=max_view_bytes)
        self._spec_of: tuple[PipelineConfig, BuildSpec] | None = None
        self._extractor_of: tuple[PipelineConfig, Any] | None = None
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

    def uses_context_embeddings(self) -> bool:
        """The fused selector's dense channel also embeds each turn with its neighbours."""
        return self.spec.context_vectors

    @property
    def spec(self) -> BuildSpec:
        """What builds and views are made of under the current config (made once per config;
        loads the embedder, whose identity is part of it)."""
        c = self.config
        held = self._spec_of
        if held is not None and held[0] is c:
            return held[1]
        spec = make_spec(c, self.extractor().descriptor_set, self.embedder)
        self._spec_of = (c, spec)
        return spec

    def extractor(self, client: Any = None):
        """The configured descriptor extractor, made once per config; ``client`` overrides the
        LLM client (sub-runs) and gets an extractor of its own."""
        c = self.config
        if client is None:
            held = self._extractor_of
            if held is not None and held[0] is c:
                return held[1]
        if c.extraction.extractor == "rule":
            # Memoized by turn content: namespaces sharing sessions (LongMemEval) extract each turn once.
            extractor = MemoizedExtractor(RuleExtractor(c.extraction))
        else:
            extractor = LLMExtractor(client or self.client, combined=c.extraction.combined_call, config=c.extraction,
                                     max_tokens=c.model.max_tokens)
        if client is None:
            self._extractor_of = (c, extractor)
        return extractor

    def in_place_appender(self, lease_free: Callable[[str], bool] | None = None) -> InPlaceAppend:
        """An appender that extends this Memory's held views (rule extractor; see ``add``).
        ``lease_free(namespace)``: whether no other process holds the namespace's build lease
        (the service's check; None: no check)."""
        return InPlaceAppend(self.store, self.views, self.spec, self.extractor(), self.embedder, lease_free)

    def partial_views(self) -> PartialViews:
        """Views over built plus not-yet-extracted turns under this config (the service's search
        while a background build is behind)."""
        return PartialViews(self.store, self.spec, self.embedder)

    # -- write side ---------------------------------------------------------------------------
    def add(self, namespace: str, data: Conversation | Sequence[Session] | Iterable[Mapping] | Mapping,
            *, given_ids: GivenIds | None = None, in_place: bool = True) -> AddResult:
        """Ingest turns (all-or-nothing); identical turns already present are skipped.

        Returns an ``AddResult``: the added and skipped counts and the id of every turn given.

        ``data`` is a Conversation or Sessions (their ids are used as given), or plain session
        dicts ``{"time": ..., "turns": [{"speaker": ..., "text": ...}], "id": ...}`` (one dict or
        a list). Ids the dicts leave out are stable across calls (``memcompile_local.data.turn_ids``):
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
        (``views.append``: one transaction, and the next ``compile`` does not reload). An
        agent that adds a turn and then searches pays for that turn only. Otherwise (no view
        held, an LLM extractor, another writer moved the store, or ``in_place=False``) the
        turns are only stored and the next ``view`` builds and loads.
        """
        conversation, given = turns_to_conversation(namespace, data)
        if given_ids is not None and isinstance(data, Conversation):
            given = given_ids
        if given is None:
            return _with_ids(self._ingest(conversation, in_place), conversation)
        # A view held for the store's current generation holds exactly the stored packets:
        # then an agent's one-turn add does not read the whole namespace.
        held = self.cached_view(namespace, generation=self.store.generation(namespace))
        stored = held[0].packets if held is not None else self.store.packets(namespace)
        stable = assign_stable_ids(conversation, given, stored)
        try:
            return _with_ids(self._ingest(stable, in_place), stable)
        except ImmutablePacketError:
            # Another writer took the ids we picked between our read and our write: pick again
            # against what it stored, reading and writing in one store transaction (explicit
            # ids that clash fail again, and are reported).
            with self.store.transaction():
                stable = assign_stable_ids(conversation, given, self.store.packets(namespace))
                return _with_ids(self._ingest(stable, False), stable)

    def _ingest(self, conversation: Conversation, in_place: bool) -> IngestResult:
        """Store ``conversation``; in place (built, view extended) when that applies."""
        if in_place and self.config.extraction.extractor == "rule":
            spec = self.spec
            with self._lock:
                if self._appender is None or self._appender.spec is not spec:
                    self._appender = self.in_place_appender()
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
        # The layout id without the spec: a build check needs no embedder loaded.
        return bool(self.store.cells(namespace, layout_id(self.extractor().descriptor_set, self.config.placement)))

    def build(self, namespace: str, *, client: Any = None, embed: bool = True) -> BuildResult:
        """Extract, place and embed whatever is not built yet (no model call when up to date).

        ``embed=False`` extracts and places only: the next view load embeds whatever packet and
        context documents are missing (the service's in-request build relies on that).
        """
        return build_memory(self.store, namespace, self.extractor(client), self.config.placement,
                            self.embedder if embed else None, progress=self.progress,
                            on_failure=self.config.extraction.on_failure, dense=self.spec.dense if embed else None)

    def forget(self, namespace: str) -> dict[str, int]:
        """Erase ``namespace`` from the store (``MemoryStore.forget``); rows deleted per table."""
        self.views.drop(namespace)
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
        self.views.drop(namespace)
        if self._appender is not None:
            self._appender.forget(namespace)
        forget_memo()
        for attempt in range(3):
            # The write side decides what goes (build.deletion); the store deletes exactly that,
            # refusing a plan another writer made stale meanwhile.
            plan = plan_turn_deletion(self.store, namespace, packet_id)
            try:
                return self.store.delete_rows(plan)
            except StalePlanError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def get_all(self, namespace: str, *, offset: int = 0, limit: int = 100,
                filters: TurnFilter | None = None) -> PacketPage:
        """Up to ``limit`` packets of ``namespace`` from ``offset`` on, in dialogue order.

        ``filters`` (``views.filters.TurnFilter``): only the matching packets, paged among
        themselves (``total`` counts them). ``page.next_offset`` is the offset of the next page
        (None after the last).
        """
        if offset < 0 or limit < 1:
            raise ConfigError(f"get_all needs offset >= 0 and limit >= 1, got offset={offset}, limit={limit}")
        packets = self.store.packets(namespace)
        if filters is not None and not filters.empty:
            packets = filters.select(packets)
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
        cached = self.views.get(key)
        if cached is not None:
            return cached
        with self.views.namespace_lock(namespace):
            # Another thread may have built it (and written) while this one waited.
            key = self._view_key(namespace)
            cached = self.views.get(key)
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
            self.views.put(self._view_key(namespace, generation=generation), view)
            return view

    def _view_key(self, namespace: str, *, generation: int | None = None) -> tuple:
        if generation is None:
            generation = self.store.generation(namespace)
        if not self.store.packet_count(namespace):
            raise ConfigError(f"namespace {namespace!r} has no turns in {self.store.path}")
        return (namespace, generation, *self.spec.view_key)

    def cached_view(self, namespace: str, *, generation: int | None = None) -> tuple[MemoryView, int] | None:
        """(the view of ``namespace`` this Memory holds, its generation), or None.

        With ``generation`` only a view of exactly that generation counts (pass the store's
        generation now for a view that is current); without it, the newest one held. Loads
        and builds nothing, so a search can serve a current view without the checks of ``view``.
        """
        return self.views.held(namespace, self.spec, generation=generation)

    def _load_view(self, namespace: str) -> tuple[MemoryView, int]:
        """Read a built namespace into a MemoryView (embedding any document not embedded yet),
        with the generation read before its data. Reuses the per-packet work of the previous
        load of the namespace where the texts are unchanged (``views.load.ViewLoader``)."""
        return self.views.load(self.spec, self.store, self.embedder, namespace)

    def compile(self, namespace: str, question: str, *, client: Any = None,
                address_trace: bool = False, build: bool = True, question_date: str | None = None,
                filters: TurnFilter | None = None) -> Context:
        """Select and render the evidence for ``question`` (ids, rendered text, per-stage trace).

        ``question_date``: when the question is asked (a date string); relative times in it
        ("last month") are matched against turns' dates from there. ``filters``: evidence only
        from the turns that match (``views.filters.TurnFilter``: speaker, session, agent,
        metadata, time range), chosen among them before the cut to K0.

        ``address_trace=True`` fills ``Context.address``/``pool`` on the fused path too (see
        ``pipeline.compile_context``). ``build=False``: fail instead of building a namespace
        that is not built (see ``view``).
        """
        return self.compile_view(self.view(namespace, build=build), question, client=client,
                                 address_trace=address_trace, question_date=question_date, filters=filters)

    def compile_view(self, view: MemoryView, question: str, *, k: int | None = None, client: Any = None,
                     address_trace: bool = False, question_date: str | None = None,
                     filters: TurnFilter | None = None, explain: bool = False) -> Context:
        """``compile`` over a given view (one of ``view``, or the service's partial view); ``k``
        overrides the configured K0; ``question_date`` and ``filters`` as in ``compile``;
        ``explain`` fills ``Context.explanations``. The one place a question is compiled."""
        cfg = self.config if k is None else self.config.replace(evidence={"k0": int(k)})
        if client is None and config_needs_llm(cfg):
            client = self.client
        allowed = filters.allowed_ids(view.packets) if filters is not None else None
        return compile_context(question, view, cfg, client=client, embedder=self.embedder,
                               address_trace=address_trace, question_date=question_date, allowed=allowed,
                               explain=explain)

    def search(self, namespace: str, query: str, k: int | None = None, *, client: Any = None,
               build: bool = True, question_date: str | None = None,
               filters: TurnFilter | None = None, explain: bool = False) -> list[SearchHit]:
        """The packets the configured pipeline selects for ``query``, best first, with scores.

        The same selection ``compile`` makes, without rendering it; ``k`` (default: the
        configured K0) bounds the anchors and the returned list. ``filters``: only matching
        turns, k of them when k match (see ``compile``). See ``SearchHit`` for what the score
        means on each path; ``explain=True`` adds to each hit the numbers it was chosen by.
        """
        if k is not None and k < 1:
            raise ConfigError(f"search needs k >= 1, got {k}")
        view = self.view(namespace, build=build)
        ctx = self.compile_view(view, query, k=k, client=client, question_date=question_date, filters=filters,
                                explain=explain)
        ids = list(ctx.packet_ids[:k] if k is not None else ctx.packet_ids)
        return [SearchHit(view.packets_by_id[pid], ctx.scores[pid], rank, ctx.explanations.get(pid))
                for rank, pid in enumerate(ids, start=1)]

    def answer(self, namespace: str, question: str, *, client: Any = None,
               question_date: str | None = None, build: bool = True) -> Answer:
        """Compile the context, then answer from it with the answer prompt.

        The prompt, completion cap and blocks read follow ``answer_settings(config.model)``:
        the embedded SmolLM2-135M gets the short small-model prompt (``model.answer_prompt``).
        """
        client = client or self.client
        ctx = self.compile(namespace, question, client=client, build=build, question_date=question_date)
        return self.answer_context(ctx, client=client, question_date=question_date)

    def answer_context(self, ctx: Context, *, client: Any = None, question_date: str | None = None) -> Answer:
        """Answer ``ctx.question`` from a compiled context: the one answer path (``answer``, the
        service's ``/answer``, ``ask``). The prompt, completion cap, blocks read and reply
        cleaning follow ``answer_settings(config.model)``."""
        client = client or self.client
        res = answer_settings(self.config.model).answer(client, ctx.question, ctx.text, namespace=ctx.namespace,
                                                        question_date=question_date)
        return Answer(text=res.text, context=ctx, prompt_version=res.prompt_version, model=self.answer_model)

    @property
    def answer_model(self) -> str:
        """The model that answers, as "<backend> <model>"."""
        return f"{self.config.model.backend} {self.config.model.model}"

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
