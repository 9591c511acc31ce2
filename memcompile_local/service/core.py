"""What the REST routes and the MCP tools do, without HTTP: one ``MemoryService`` per process.

Every method takes the authenticated tenant and a user id and resolves the store namespace
itself (``auth.namespace_for``); nothing a client sends names a namespace directly. Bad input
raises :class:`~memcompile_local.service.errors.ServiceError` with its HTTP status before
anything is written; an append is one store transaction.

Online ingest: under a rule (model-free) extractor an append builds descriptors, Cells and
embeddings of the new turns in the request, holding the namespace's build lease. Under an LLM
extractor it enqueues the namespace in the durable build queue (``store/queue.py``) and returns;
the background worker (``worker.py``) extracts, and until then searches use the built-so-far view
(``view.py``).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import socket
import threading
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

from ..config import PipelineConfig, config_needs_llm
from ..data.plain import GivenIds
from ..data.turn_ids import assign_stable_ids
from ..errors import ConfigError, ImmutablePacketError, MissingExtraError, TransportError
from ..memory import Memory, selection_scores
from ..pipeline.presets import PRESETS, apply_presets
from ..store import is_database_url, open_store
from ..store.factory import sqlite_path
from ..types import Conversation, Session, Turn
from ..views.pending import PartialViews, pending_turns
from ..views.record import MemoryView
from ..llm.registry import embedder_kwargs, load_embedder
from .auth import namespace_for, tenant_prefix, user_of, validate_user_id
from .embed_batch import DEFAULT_WINDOW_S, BatchedQueryEmbedder
from .imports import FileStatus, HeldStatus, Importer, StoreStatus
from .errors import ServiceError
from .limits import Limits
from ..views.filters import TurnFilter, time_bound
from .validate import (TurnInput, check_id, check_k, check_label, check_metadata, check_text, check_time,
                       parse_append)

def _check_explain(value: Any) -> bool:
    """A request's ``explain`` flag: true or false (400 naming the field otherwise)."""
    if not isinstance(value, bool):
        raise ServiceError(400, "bad_request", "explain must be true or false", field="explain")
    return value


# Tries at picking a user's next turn ids when other server processes append to the same user.
_ID_ATTEMPTS = 6

log = logging.getLogger(__name__)

def owner_alive(owner: str) -> bool:
    """Whether the process named by a lease owner (``"<pid>-<random>@<host>"``, see
    MemoryService.owner) runs.

    Only a process of this machine can be judged: an owner on another host (servers sharing a
    database) counts as alive, and its lease ends by expiring.
    """
    owner, _, host = owner.partition("@")
    if host and host != socket.gethostname():
        return True
    pid_text = owner.split("-", 1)[0]
    if not pid_text.isdigit():
        return True  # not ours to judge: wait for the lease to expire
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class MemoryService:
    """The memory service over one store file (see the module doc).

    ``config``: the pipeline configuration; ``backend``/``embedder``: prebuilt model objects
    (tests pass a scripted backend and the hash embedder); ``limits``: request bounds.
    """

    def __init__(self, store_path: str, config: PipelineConfig | None = None, *, limits: Limits | None = None,
                 backend: Any = None, embedder: Any = None, query_batch_ms: float = DEFAULT_WINDOW_S * 1000):
        self.config = config or PipelineConfig()
        self.limits = limits or Limits()
        if query_batch_ms < 0:
            raise ConfigError(f"query_batch_ms must be >= 0, got {query_batch_ms}")
        if query_batch_ms > 0:
            # Concurrent searches share one query-embedding call (embed_batch.py). The model is
            # loaded here, at start, instead of in the first search.
            if embedder is None:
                embedder = load_embedder(self.config.model.embedder, **embedder_kwargs(self.config.model))
            embedder = BatchedQueryEmbedder(embedder, window_s=query_batch_ms / 1000)
        self.query_embedder = embedder if isinstance(embedder, BatchedQueryEmbedder) else None
        self.store = open_store(store_path)
        # A second, read-only connection for the per-search checks (does the user exist, which
        # generation is current): the main connection is locked while an append's transaction
        # commits, and a search of another user should not queue behind that fsync. WAL lets
        # it read the last commit meanwhile. A database server's pool has connections enough.
        self._probe = (self.store if str(store_path) == ":memory:" or is_database_url(store_path)
                       else open_store(store_path, read_only=True))
        self.store.open_build_queue()
        self.queue = self.store  # the store's BuildLeases (store.base)
        self._backend = backend
        self.memory = Memory(self.store, self.config, backend=backend, embedder=embedder,
                             max_views=self.limits.max_views, max_view_bytes=self.limits.max_view_mb << 20)
        self.pending = self.memory.partial_views()
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
        # Model-free extraction is fast enough to run in the append request itself.
        self.inline_build = self.config.extraction.extractor == "rule"
        self._presets: OrderedDict[str, Memory] = OrderedDict()
        self._presets_lock = threading.Lock()
        self._view_locks: dict[str, threading.Lock] = {}
        # Appends that extend this process's loaded view instead of making the next search load one.
        self.appender = self.memory.in_place_appender(lambda ns: not self.queue.held_by_other(ns, self.owner))
        log.info("memory service over %s: answer model %s", self.store.path, self.memory.answer_model)
        # A store that announces other processes' writes (PostgreSQL's NOTIFY) lets this server
        # drop a stale view at once; the generation check on every search stays what makes it safe.
        listen = getattr(self.store, "listen", None)
        self._listener = listen(self._store_changed) if callable(listen) else None
        self.backend_down_since: float | None = None
        # Views are loaded ahead of the next search, one namespace at a time (see _warm_views).
        self._warm_queue: queue.Queue[str] = queue.Queue()
        self._warm_waiting: set[str] = set()
        self._warm_thread = threading.Thread(target=self._warm_views, name="memcompile-view-warmer", daemon=True)
        self._warm_thread.start()
        # Batch imports (imports.py): job status in the database of a database store (every
        # replica reads it), in files beside a store file (every process of this machine does).
        file = None if is_database_url(store_path) else sqlite_path(store_path)
        if file is None:
            status = StoreStatus(self.store)
        elif file == ":memory:":
            status = HeldStatus()
        else:
            status = FileStatus(Path(f"{file}.imports"))
        self.importer = Importer(self, status, owner_alive)

    def _store_changed(self, namespace: str, generation: int) -> None:
        """Another process committed ``generation`` of ``namespace``: drop each held view of it
        that is older."""
        for mem in [self.memory, *list(self._presets.values())]:
            held = mem.views.held(namespace, mem.spec)
            if held is not None and held[1] < generation:
                mem.views.drop(namespace)
                log.debug("dropped the view of %s (generation %d < %d)", namespace, held[1], generation)

    def close(self) -> None:
        self.importer.close()
        if self._listener is not None:
            self._listener.stop()
        if self._probe is not self.store:
            self._probe.close()
        self.store.close()

    # ------------------------------------------------------------------ tenancy
    def namespace(self, tenant: str, user_id: str) -> str:
        return namespace_for(tenant, validate_user_id(user_id))

    def _existing(self, tenant: str, user_id: str) -> str:
        ns = self.namespace(tenant, user_id)
        if not self._probe.packet_count(ns):
            raise ServiceError(404, "not_found", f"no memory for user {user_id!r}", field="user_id")
        return ns

    # ------------------------------------------------------------------ append
    def parse_append(self, body: Any) -> list[TurnInput]:
        """Validate an append body (``validate.parse_append``)."""
        return parse_append(body, self.limits)

    def add_turns(self, tenant: str, user_id: str, body: Any) -> dict:
        """Append turns (all-or-nothing, idempotent by turn id); returns ids and counts.

        Turns the client sent without ids are named as ``Memory.add`` names them
        (``turn_ids.assign_stable_ids``: ``S<session>:<n>``), so a memory written through REST,
        MCP and Python has one kind of id; a turn matches a stored one only with the same time
        too, and a turn the server's clock dated is always new.
        """
        ns = self.namespace(tenant, user_id)
        turns = self.parse_append(body)
        seen: dict[str, str] = {}
        for t in turns:
            if t.turn_id is not None:
                if t.turn_id in seen:
                    raise ServiceError(400, "bad_request", f"turn id {t.turn_id!r} repeats ({seen[t.turn_id]} "
                                       f"and {t.where})", field=f"{t.where}.id")
                seen[t.turn_id] = t.where
        if not self.inline_build:
            room = self.limits.max_queue_turns - self.queue.depth()["turns"]
            if len(turns) > room:
                raise ServiceError(429, "queue_full",
                                   f"the build queue holds {self.limits.max_queue_turns - room} turns "
                                   f"(limit {self.limits.max_queue_turns}); retry later",
                                   headers={"Retry-After": "5"})
        for attempt in range(_ID_ATTEMPTS):
            try:
                # Ids are picked and stored under the user's lock, so two appends of this process
                # never pick the same next id; another process's append is met by the retry.
                with self._view_lock(ns):
                    if attempt == 0:
                        conv = self._conversation(ns, turns)
                        ids = [turn.packet_id for s in conv.sessions for turn in s.turns]
                        done = self.appender.add(ns, conv) if self.inline_build else None
                        # The plain path: the service's own appender (with its lease check) has
                        # declined or does not apply, so Memory.add must not try one of its own.
                        stored = self.memory.add(ns, conv, in_place=False) if done is None else None
                    else:
                        # Read and write in one store transaction: on SQLite no other process
                        # commits in between, so this pick cannot collide again.
                        with self.store.transaction():
                            conv = self._conversation(ns, turns, fresh_read=True)
                            ids = [turn.packet_id for s in conv.sessions for turn in s.turns]
                            done, stored = None, self.memory.add(ns, conv, in_place=False)
                break
            except ImmutablePacketError:
                # Another writer took the ids picked here between the read and the write: pick
                # again against what it stored (explicit ids that clash fail each time).
                if attempt == _ID_ATTEMPTS - 1 or all(t.turn_id is not None for t in turns):
                    raise
                time.sleep(random.uniform(0.0, 0.01 * attempt))  # writers that met do not meet again
        if done is not None:
            return {"user_id": user_id, "ids": ids, "added": done.added, "skipped": done.skipped,
                    "built": True, "pending_turns": 0}
        built = False
        if stored.added:
            if self.inline_build:
                built = self.build_now(ns)
                if built:
                    self.schedule_warm(ns)
            if not built:
                self.queue.enqueue(ns, stored.added)
        return {
            "user_id": user_id,
            "ids": ids,
            "added": stored.added,
            "skipped": stored.skipped,
            "built": built or not stored.added,
            "pending_turns": 0 if built else pending_turns(self.store, self.memory.extractor().descriptor_set, ns),
        }

    def _conversation(self, ns: str, turns: Sequence[TurnInput], *, fresh_read: bool = False) -> Conversation:
        """The turns as Sessions with stable ids (see ``add_turns``), in the order sent.

        Each run of consecutive turns of one session and time is one Session; a session id the
        client gave (``default`` for single turns) keeps one index across requests and
        processes (``BuildQueue.session_indexes``); one it left out is matched by its time.
        """
        named = [t.session_id for t in turns if t.session_id is not None]
        index = self.queue.session_indexes(ns, named) if named else {}
        sessions: list[Session] = []
        given_sessions: list[bool] = []
        given_turns: list[tuple[bool, ...]] = []
        fresh: set[tuple[int, int]] = set()
        run: list[TurnInput] = []
        for n, t in enumerate(turns):
            run.append(t)
            nxt = turns[n + 1] if n + 1 < len(turns) else None
            if nxt is None or (nxt.session_id, nxt.time, nxt.group) != (t.session_id, t.time, t.group):
                si = len(sessions)
                sessions.append(Session(index=index.get(t.session_id, 0) if t.session_id else 0,
                                        session_id=t.session_id or f"unnamed_{si}", time=t.time,
                                        turns=tuple(Turn(packet_id=r.turn_id or f"new_{si}_{j}", speaker=r.speaker,
                                                         text=r.text, image_caption=r.image_caption,
                                                         agent_id=r.agent_id, metadata_json=r.metadata_json)
                                                    for j, r in enumerate(run))))
                given_sessions.append(t.session_id is not None)
                given_turns.append(tuple(r.turn_id is not None for r in run))
                fresh.update((si, j) for j, r in enumerate(run) if not r.timed)
                run = []
        # A view held for the store's current generation holds exactly the stored packets: an
        # agent's one-turn append then does not read the whole namespace.
        held = None if fresh_read else self.memory.cached_view(ns, generation=self.store.generation(ns))
        stored = held[0].packets if held is not None else self.store.packets(ns)
        conv = Conversation(namespace=ns, sessions=tuple(sessions))
        return assign_stable_ids(conv, GivenIds(tuple(given_sessions), tuple(given_turns)), stored,
                                 match_time=True, fresh=fresh, indexes=index)

    def build_now(self, ns: str, *, wait_s: float = 10.0) -> bool:
        """Extract and place ``ns``'s new turns in this request, under its lease.

        Returns False when another holder kept the lease past ``wait_s`` (the caller queues the
        namespace instead). Embeddings are left to the next view load: ``Memory.view`` embeds
        whatever packet and context documents are missing on every load anyway, so embedding
        here as well would compute every document key of the memory twice per append.
        """
        if not self._acquire_lease(ns, wait_s):
            return False
        try:
            self.memory.build(ns, embed=False)
        finally:
            self.queue.release(ns, self.owner)
        return True

    def _acquire_lease(self, ns: str, wait_s: float) -> bool:
        """Take ``ns``'s build lease, waiting up to ``wait_s``; False when another holder kept it."""
        deadline = time.monotonic() + wait_s
        reaped = False
        while not self.queue.acquire(ns, self.owner, lease_s=60.0):
            if not reaped:
                self.queue.reap(owner_alive)  # a killed process's lease must not hold us up
                reaped = True
                continue
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    # ------------------------------------------------------------------ view warming
    def schedule_warm(self, ns: str) -> None:
        """Load ``ns``'s new view in the background, so a search that comes later finds it ready.

        An agent appends a turn and searches when the next message arrives; loading the view
        costs time proportional to the memory, and here it is spent between the two. A search
        that arrives while the load runs waits for it (the per-namespace view lock), so nothing
        is loaded twice; a namespace already waiting to be loaded is not queued again.
        """
        with self._presets_lock:
            if ns in self._warm_waiting:
                return
            self._warm_waiting.add(ns)
        self._warm_queue.put(ns)

    def _warm_views(self) -> None:
        while True:
            ns = self._warm_queue.get()
            with self._presets_lock:
                self._warm_waiting.discard(ns)
            try:
                if self.store.packet_count(ns):
                    with self._view_lock(ns):
                        current_view(self.memory, self.pending, ns, allow_build=self.inline_build)
            except Exception as exc:  # a forget or a closed store meanwhile: the next search reports it
                log.debug("view warm-up of %s skipped: %s", ns, exc)
            finally:
                self._warm_queue.task_done()

    def wait_warm(self) -> None:
        """Block until every scheduled view load has finished (tests and benchmarks)."""
        self._warm_queue.join()

    # ------------------------------------------------------------------ imports
    def start_import(self, tenant: str, user_id: str, raw: bytes, *, fmt: Any = "auto", conversation: Any = None) -> dict:
        """Validate an uploaded history and queue its import (``imports.py``); the job's first status."""
        ns = self.namespace(tenant, user_id)
        if not isinstance(fmt, str):
            raise ServiceError(400, "bad_request", "format must be a string", field="format")
        parts = self.importer.parse(ns, raw, fmt, conversation)
        return self.importer.submit(tenant, user_id, ns, parts, fmt)

    def import_status(self, tenant: str, user_id: str, job_id: str) -> dict:
        """The status of one import job of this tenant's user (404 for any other)."""
        validate_user_id(user_id)
        return self.importer.get(tenant, user_id, job_id)

    def turns_conversation(self, ns: str, turns: Sequence[TurnInput]) -> Conversation:
        """Validated turns as a Conversation with the ids an append would give them (call under
        ``view_lock(ns)``)."""
        return self._conversation(ns, turns)

    def view_lock(self, ns: str) -> threading.Lock:
        """The per-user lock under which writes pick ids and views load."""
        return self._view_lock(ns)

    # ------------------------------------------------------------------ read side
    def _view_lock(self, ns: str) -> threading.Lock:
        with self._presets_lock:
            lock = self._view_locks.get(ns)
            if lock is None:
                lock = self._view_locks[ns] = threading.Lock()
            return lock

    def memory_for(self, preset: str | None) -> Memory:
        """The Memory of ``preset`` (sharing the store, backend and embedder), or the base one."""
        if not preset:
            return self.memory
        with self._presets_lock:
            mem = self._presets.get(preset)
            if mem is not None:
                self._presets.move_to_end(preset)
                return mem
        for name in preset.split("+"):
            if name not in PRESETS:
                raise ServiceError(400, "bad_request", f"unknown preset {name!r}; known: {', '.join(PRESETS)}",
                                   field="preset")
        cfg = apply_presets(preset, self.config)
        base = self.config.extraction
        if (cfg.extraction.extractor, cfg.extraction.combined_call) != (base.extractor, base.combined_call):
            raise ServiceError(400, "bad_request",
                               f"preset {preset!r} uses another extractor than the server's memories are built with",
                               field="preset")
        if config_needs_llm(cfg) and not config_needs_llm(self.config):
            raise ServiceError(400, "bad_request",
                               f"preset {preset!r} calls a model at search time; this server is model-free",
                               field="preset")
        mem = Memory(self.store, cfg, backend=self._backend, embedder=self.memory.embedder)
        with self._presets_lock:
            self._presets[preset] = mem
            while len(self._presets) > 8:
                self._presets.popitem(last=False)
        return mem

    def _query_args(self, query: Any, k: Any, preset: Any, question_date: Any) -> tuple:
        query = check_text(query, "query", max_chars=self.limits.max_text_chars)
        k = check_k(k, self.limits)
        if preset is not None and not isinstance(preset, str):
            raise ServiceError(400, "bad_request", "preset must be a string", field="preset")
        if question_date is not None:
            question_date = check_time(question_date, "question_date")
        return query, k, preset, question_date

    def filters(self, *, speaker: Any = None, session_id: Any = None, agent_id: Any = None, metadata: Any = None,
                time_from: Any = None, time_to: Any = None, names: tuple[str, str] = ("from", "to")) -> TurnFilter | None:
        """The ``TurnFilter`` of a request's filter fields (400 naming the field), None when none is set.

        The user is the tenant's isolation boundary (the namespace); ``agent_id`` and
        ``session_id`` scope within one user's memory, as filters. ``names``: how the request
        spells the two time bounds (REST ``from``/``to``, MCP ``time_from``/``time_to``).
        """
        if speaker is not None:
            speaker = check_label(speaker, "speaker")
        if session_id is not None:
            session_id = check_label(session_id, "session_id")
        if agent_id is not None:  # a label, as the plain format (and so an import) may store one
            agent_id = check_label(agent_id, "agent_id")
        if metadata is not None:
            check_metadata(metadata, "metadata", self.limits)
        bounds = []
        for value, name, end in ((time_from, names[0], False), (time_to, names[1], True)):
            bounds.append(None if value is None else time_bound(check_time(value, name), end=end))
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            raise ServiceError(400, "invalid_time", f"the time range ends ({names[1]}) before it starts "
                               f"({names[0]})", field=names[1])
        f = TurnFilter.make(speaker=speaker, session_id=session_id, agent_id=agent_id, metadata=metadata,
                            time_from=bounds[0], time_to=bounds[1])
        return None if f.empty else f

    def search(self, tenant: str, user_id: str, query: Any, *, k: Any = None, preset: Any = None,
               question_date: Any = None, filters: TurnFilter | None = None, explain: Any = False) -> dict:
        """The compiled evidence for ``query`` (Memory.compile over built + pending turns), each
        packet with its ``rank`` and ``score`` as ``Memory.search`` gives them.

        ``question_date``: when the question is asked; relative times in it ("last month")
        are matched against the turns' dates from that day (as ``Memory.search`` does).
        ``filters`` (see ``filters``): evidence only from matching turns, k of them when k match.
        ``explain``: each packet also carries ``explain`` (``SearchHit.explain``)."""
        query, k, preset, question_date = self._query_args(query, k, preset, question_date)
        explain = _check_explain(explain)
        ns = self.namespace(tenant, user_id)
        # One store read per search while this process holds a current view of the user: the
        # generation, since a held view with turns in it says that the user exists. Without a
        # held view the store is asked first whether the user exists (404 for no memory).
        generation = None
        held = self._held(ns, preset)
        if held is not None:
            generation = self._probe.generation(ns)
            if held[1] != generation:
                self._existing(tenant, user_id)
        else:
            self._existing(tenant, user_id)
        selected, behind, _mem = self._compile(ns, query, k=k, preset=preset, question_date=question_date,
                                               filters=filters, generation=generation, explain=explain)
        return self._context_json(user_id, selected, behind, explain=explain)

    def _held(self, ns: str, preset: str | None) -> tuple[MemoryView, int] | None:
        """The view of ``ns`` (with turns) and its generation that the Memory of ``preset`` (one
        made already) holds, whatever the store's generation is now; None when none."""
        mem = self._presets.get(preset) if preset else self.memory
        held = mem.cached_view(ns) if mem is not None else None
        return held if held is not None and held[0].packets else None

    def _compile(self, ns: str, query: str, *, k: int | None, preset: str | None, question_date: str | None = None,
                 filters: TurnFilter | None = None, generation: int | None = None, explain: bool = False):
        mem = self.memory_for(preset)
        # A view held for the store's current generation is complete (only built namespaces
        # are cached there): serve it without the build checks below.
        held = mem.cached_view(ns, generation=self._probe.generation(ns) if generation is None else generation)
        if held is not None:
            view, behind = held[0], 0
        else:
            if self.inline_build and pending_turns(self.store, mem.extractor().descriptor_set, ns):
                self.build_now(ns)  # turns left by a request that could not get the lease
            # One thread per namespace loads a new view; the others wait for it instead of each
            # rebuilding the same indexes (every write makes the next search load a view).
            with self._view_lock(ns):
                view, behind = current_view(mem, self.pending if mem is self.memory else mem.partial_views(), ns,
                                            allow_build=self.inline_build)
        try:
            ctx = mem.compile_view(view, query, k=k, question_date=question_date, filters=filters, explain=explain)
        except TransportError:
            self.backend_down_since = self.backend_down_since or time.time()
            raise
        packets = [view.packets_by_id[pid] for pid in ctx.packet_ids]
        for p in packets:
            if p.namespace != ns:  # cannot happen: a view holds one namespace; never let it out
                raise ServiceError(500, "internal", "evidence from another memory was selected")
        scores = selection_scores(ctx, ctx.packet_ids)
        return (ctx, packets, scores), behind, mem

    def _context_json(self, user_id: str, selected, behind: int, *, explain: bool = False) -> dict:
        ctx, packets, scores = selected
        return {
            "user_id": user_id,
            "query": ctx.question,
            "packets": [
                {"id": p.packet_id, "rank": rank, "score": scores.get(p.packet_id), **turn_fields(p),
                 **({"explain": ctx.explanations[p.packet_id].to_dict()} if explain else {})}
                for rank, p in enumerate(packets, start=1)
            ],
            "packet_ids": list(ctx.packet_ids),
            "context": ctx.text,
            "timings_ms": {k: round(v, 3) for k, v in ctx.timings_ms.items()},
            "pending_turns": behind,
        }

    def answer(self, tenant: str, user_id: str, query: Any, *, k: Any = None, preset: Any = None,
               question_date: Any = None, filters: TurnFilter | None = None, explain: Any = False) -> dict:
        """Compile (as ``search``, ``filters`` and ``explain`` included), then answer with the
        configured model (503 when it is unavailable)."""
        query, k, preset, question_date = self._query_args(query, k, preset, question_date)
        explain = _check_explain(explain)
        ns = self._existing(tenant, user_id)
        (ctx, packets, scores), behind, mem = self._compile(ns, query, k=k, preset=preset,
                                                            question_date=question_date, filters=filters,
                                                            explain=explain)
        try:
            client = mem.client  # loads the answer backend on first use
        except Exception as exc:  # a missing extra, model file or server: no answer model to use
            raise ServiceError(503, "backend_unavailable", f"the answer model could not be loaded: {exc}",
                               headers={"Retry-After": "30"}) from exc
        try:
            res = mem.answer_context(ctx, client=client, question_date=question_date)
        except (TransportError, MissingExtraError) as exc:
            self.backend_down_since = self.backend_down_since or time.time()
            raise ServiceError(503, "backend_unavailable", f"the answer model is unavailable: {exc}",
                               headers={"Retry-After": "5"}) from exc
        self.backend_down_since = None
        out = self._context_json(user_id, (ctx, packets, scores), behind, explain=explain)
        out["answer"] = res.text
        out["answer_model"] = res.model
        return out

    def stats(self, tenant: str, user_id: str) -> dict:
        """Counts and build state of one user's memory."""
        ns = self._existing(tenant, user_id)
        s = self.store.stats(ns)["namespaces"][ns]
        behind = pending_turns(self.store, self.memory.extractor().descriptor_set, ns)
        entry = self.queue.entry(ns)
        state = "built" if behind == 0 else ("failing" if entry and entry["last_error"] else "pending")
        return {
            "user_id": user_id,
            "turns": s["packets"],
            "sessions": s["sessions"],
            "extracted_turns": s["packets"] - behind,
            "pending_turns": behind,
            "descriptors": sum(s["descriptors"].values()),
            "build": {"state": state, "queued": entry is not None,
                      "attempts": entry["attempts"] if entry else 0,
                      "last_error": entry["last_error"] if entry else None},
            "tokens": s["tokens"],
        }

    def list_users(self, tenant: str, *, offset: Any = 0, limit: Any = 100) -> dict:
        """The tenant's user ids in order, ``limit`` from ``offset`` (the same paging as ``list_turns``)."""
        limit = self._page_size(limit)
        offset = self._offset(offset)
        prefix = tenant_prefix(tenant)
        users = sorted(u for u in (user_of(tenant, ns) for ns in self.store.namespaces() if ns.startswith(prefix))
                       if u is not None)
        return {"users": users[offset: offset + limit], "total": len(users), "offset": offset,
                "next_offset": offset + limit if offset + limit < len(users) else None}

    @staticmethod
    def _offset(offset: Any) -> int:
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ServiceError(400, "bad_request", "offset must be a non-negative integer", field="offset")
        return offset

    def list_turns(self, tenant: str, user_id: str, *, offset: Any = 0, limit: Any = 100,
                   filters: TurnFilter | None = None) -> dict:
        """Stored turns in dialogue order, ``limit`` from ``offset``; with ``filters`` only the
        matching turns, paged among themselves (``total`` counts them)."""
        limit = self._page_size(limit)
        offset = self._offset(offset)
        ns = self._existing(tenant, user_id)
        packets = self.store.packets(ns)
        if filters is not None:
            packets = filters.select(packets)
        page = packets[offset: offset + limit]
        return {
            "user_id": user_id,
            "total": len(packets),
            "offset": offset,
            "turns": [{"id": p.packet_id, **turn_fields(p), "ordinal": p.ordinal} for p in page],
            "next_offset": offset + limit if offset + limit < len(packets) else None,
        }

    def _page_size(self, limit: Any) -> int:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= self.limits.max_page:
            raise ServiceError(400, "bad_request", f"limit must be an integer from 1 to {self.limits.max_page}",
                               field="limit")
        return limit

    def _wait_for_build_lease(self, ns: str) -> None:
        """Take ``ns``'s build lease, waiting up to 30 s for a running build; 503 ``busy`` after."""
        deadline = time.monotonic() + 30.0
        while not self.queue.acquire(ns, self.owner, lease_s=60.0):
            if time.monotonic() > deadline:
                raise ServiceError(503, "busy", "a build of this memory is running; retry", headers={"Retry-After": "2"})
            time.sleep(0.02)

    def forget(self, tenant: str, user_id: str) -> dict:
        """Erase one user's memory (Memory.forget: deleted, then scrubbed from the file)."""
        ns = self._existing(tenant, user_id)
        self._wait_for_build_lease(ns)  # no build of this user writes while it is erased
        try:
            # Views of the other preset Memories are keyed on the store generation, which
            # forget moves, so only the base Memory's and the pending views are dropped here.
            # Under the view lock: an append in place of this user finishes (or has not begun)
            # first, so it never keeps a view of the erased turns.
            with self._view_lock(ns):
                deleted = self.memory.forget(ns)
                self.appender.forget(ns)
            self.pending.forget(ns)
            with self._presets_lock:
                self._view_locks.pop(ns, None)
        finally:
            self.queue.forget_build_state(ns)  # drops the lease too
        return {"user_id": user_id, "deleted": {k: v for k, v in deleted.items() if v}}

    def delete_turn(self, tenant: str, user_id: str, turn_id: Any) -> dict:
        """Erase one turn and what was derived from it (``Memory.delete_turn``); 404 when absent.

        An update is a delete followed by an append of the new text (with the same ``id`` if
        the client wants to keep it).
        """
        turn_id = check_id(turn_id, "turn_id")
        ns = self._existing(tenant, user_id)
        if self.store.get_packet(ns, turn_id) is None:
            raise ServiceError(404, "not_found", f"user {user_id!r} has no turn {turn_id!r}", field="turn_id")
        self._wait_for_build_lease(ns)
        try:
            with self._view_lock(ns):
                deleted = self.memory.delete_turn(ns, turn_id)
                self.appender.forget(ns)
            self.pending.forget(ns)
        finally:
            self.queue.release(ns, self.owner)
        # The next turn is extracted again and the Cells rebuilt: in the next search's view load
        # (started now) on the model-free path, by the background worker under an LLM extractor.
        if self.store.packet_count(ns):
            if self.inline_build:
                self.schedule_warm(ns)
            else:
                self.queue.enqueue(ns, 1)
        return {"user_id": user_id, "turn_id": turn_id, "deleted": {k: v for k, v in deleted.items() if v}}

    def health(self) -> dict:
        # A store this server can no longer read or commit to is a failed health check (503),
        # not "ok": both connections are checked against the file on disk.
        self.store.verify_file()
        self._probe.verify_file()
        return {"status": "ok", "queue": self.queue.depth(),
                "backend": "down" if self.backend_down_since else "ok",
                "inline_build": self.inline_build}


def turn_fields(p) -> dict:
    """What a response shows of a stored turn besides its id (search hits and listed turns alike)."""
    out = {"speaker": p.speaker, "time": p.session_time, "session_id": p.session_id, "text": p.content,
           "agent_id": p.agent_id, "metadata": json.loads(p.metadata_json) if p.metadata_json else None}
    if p.image_caption:
        out["image_caption"] = p.image_caption
    return out


def current_view(mem: Memory, partial: PartialViews, namespace: str, *, allow_build: bool) -> tuple[MemoryView, int]:
    """(view, turns not yet extracted): ``mem.view`` when nothing waits or building is cheap,
    else the built-so-far view."""
    for attempt in range(3):
        generation = mem.store.generation(namespace)
        behind = pending_turns(mem.store, mem.extractor().descriptor_set, namespace)
        try:
            if behind == 0 or allow_build:
                return mem.view(namespace), 0
            return partial.view(namespace), behind
        except RuntimeError:
            # A view load reads several tables one after another; a build committing in between
            # (another thread or process) can leave it an embedding short. Load again then.
            if attempt == 2 or mem.store.generation(namespace) == generation:
                raise
    raise AssertionError("unreachable")
