"""The Python API an agent calls: ``Memory(store, config)``.

``add`` ingests turns, ``build`` makes descriptors/Cells/embeddings, ``compile`` returns the
reader context for a question, ``answer`` answers it, ``forget`` erases a namespace.
Models load lazily on first use, so a model-free configuration never imports one.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from os import PathLike
from typing import Any, Iterable, Mapping, Sequence

from .build import BuildResult, build_memory, layout_id, load_context_matrix, load_packet_matrix
from .config import PipelineConfig, config_needs_llm
from .errors import ConfigError
from .llm.registry import backend_kwargs, embedder_kwargs
from .pipeline import Context, MemoryView, compile_context
from .store import IngestResult, MemoryStore
from .types import Conversation, Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    text: str
    context: Context
    prompt_version: str = ""


def turns_to_conversation(namespace: str, data: Any) -> Conversation:
    """Accept a Conversation, a sequence of Sessions, or a list of plain dict sessions/turns."""
    if isinstance(data, Conversation):
        if data.namespace != namespace:
            data = Conversation(namespace=namespace, sessions=data.sessions, speakers=data.speakers,
                                questions=data.questions, source_path=data.source_path)
        return data
    items = list(data)
    if items and all(isinstance(s, Session) for s in items):
        return Conversation(namespace=namespace, sessions=tuple(items))
    if items and all(isinstance(s, Mapping) and "turns" in s for s in items):
        from .data.plain import conversation_from_obj

        return conversation_from_obj({"namespace": namespace, "sessions": items}, source="<add>")
    raise ConfigError("Memory.add expects a Conversation, Sessions, or a list of {'time', 'turns'} dicts")


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

    # -- models -------------------------------------------------------------------------
    @property
    def client(self):
        """The LLM client (cache + ledger over the store); loads the backend on first use."""
        with self._lock:
            if self._client is None:
                from .llm.client import LLMClient
                from .llm.registry import load_backend

                backend = self._backend or load_backend(self.config.model.backend, **backend_kwargs(self.config.model))
                self._client = LLMClient(backend, self.store, run_id=self.run_id)
            return self._client

    @property
    def embedder(self):
        with self._lock:
            if self._embedder is None:
                from .llm.registry import load_embedder

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
            from .address.extract_rule import RuleExtractor

            return RuleExtractor(c)
        from .address.extract_llm import LLMExtractor

        return LLMExtractor(client or self.client, combined=c.combined_call, config=c,
                            max_tokens=self.config.model.max_tokens)

    # -- write side ---------------------------------------------------------------------------
    def add(self, namespace: str, data: Conversation | Sequence[Session] | Iterable[Mapping]) -> IngestResult:
        """Ingest turns (all-or-nothing); identical turns already present are skipped."""
        return self.store.ingest(turns_to_conversation(namespace, data))

    def build(self, namespace: str, *, client: Any = None) -> BuildResult:
        """Extract, place and embed whatever is not built yet (no model call when up to date)."""
        return build_memory(self.store, namespace, self.extractor(client), self.config.placement,
                            self.embedder, progress=self.progress,
                            on_failure=self.config.extraction.on_failure,
                            context_embeddings=self.uses_context_embeddings())

    def forget(self, namespace: str) -> dict[str, int]:
        with self._lock:
            self._views = {k: v for k, v in self._views.items() if k[0] != namespace}
        return self.store.forget(namespace)

    # -- read side ----------------------------------------------------------------------------
    def view(self, namespace: str) -> MemoryView:
        """Load (and cache) the query-time structures of a namespace, building it if needed."""
        from .address.index import AddressIndex

        extractor = self.extractor()
        dset = extractor.descriptor_set
        lid = layout_id(dset, self.config.placement)
        # Asked on every compile: the store's generation of the namespace changes on every write
        # and on forget, in any process, so a cached view is used only while it is current.
        generation = self.store.generation(namespace)
        if not self.store.packet_count(namespace):
            raise ConfigError(f"namespace {namespace!r} has no turns in {self.store.path}")
        key = (namespace, dset, lid, generation, self.config.model.embedder, self.config.model.embed_model)
        with self._lock:
            if key in self._views:
                return self._views[key]
        packets = self.store.packets(namespace)
        done = self.store.extracted_packet_ids(namespace, dset)
        if len(done) < len(packets) or not self.store.cells(namespace, lid) and self.config.placement.layout != "flat":
            self.build(namespace)
        else:
            from .build import embed_contexts, embed_packets

            embed_packets(self.store, namespace, dset, self.embedder)
            if self.uses_context_embeddings():
                embed_contexts(self.store, namespace, self.embedder, packets=packets)
        # The steps above may have written; key the view on the generation its data is read at
        # (read the packets again then, so that none of them is older than the key).
        after = self.store.generation(namespace)
        if after != generation:
            key = key[:3] + (after,) + key[4:]
            packets = self.store.packets(namespace)
        descriptors = self.store.descriptors(namespace, dset)
        cells = self.store.cells(namespace, lid)
        matrix = load_packet_matrix(self.store, namespace, dset, self.embedder)
        by_packet: dict[str, list] = {}
        for d in descriptors:
            by_packet.setdefault(d.packet_id, []).append(d)
        fusion = None
        if self.uses_fusion():
            from .fused import FusionIndex

            context = (load_context_matrix(self.store, namespace, self.embedder, packets)
                       if self.uses_context_embeddings() else None)
            fusion = FusionIndex.build(packets, {k: tuple(v) for k, v in by_packet.items()}, self.config.fusion,
                                       packet_matrix=matrix, context_matrix=context)
        index = AddressIndex.build(packets, descriptors, cells if self.config.placement.layout != "flat" else [],
                                   matrix, layout=self.config.placement.layout,
                                   placement=self.config.placement, routing=self.config.routing)
        view = MemoryView(
            namespace=namespace,
            packets=tuple(packets),
            packets_by_id={p.packet_id: p for p in packets},
            descriptors_by_packet={k: tuple(v) for k, v in by_packet.items()},
            index=index,
            packet_matrix=matrix,
            row_of={p.packet_id: i for i, p in enumerate(packets)},
            fusion=fusion,
        )
        with self._lock:
            # Only the newest view of a namespace can be current: drop the older generations so a
            # long-running server that appends all day does not keep every view it ever built.
            self._views = {k: v for k, v in self._views.items() if k[0] != namespace}
            self._views[key] = view
        return view

    def compile(self, namespace: str, question: str, *, client: Any = None,
                address_trace: bool = False) -> Context:
        """Select and render the evidence for ``question`` (ids, rendered text, per-stage trace).

        ``address_trace=True`` fills ``Context.address``/``pool`` on the fused path too (see
        ``pipeline.compile_context``).
        """
        view = self.view(namespace)
        if client is None and self.needs_llm():
            client = self.client
        return compile_context(question, view, self.config, client=client, embedder=self.embedder,
                               address_trace=address_trace)

    def answer(self, namespace: str, question: str, *, client: Any = None,
               question_date: str | None = None) -> Answer:
        """Compile the context, then answer from it with the answer prompt."""
        from .evidence.answer import answer_question, use_temporal_prompt

        client = client or self.client
        ctx = self.compile(namespace, question, client=client)
        res = answer_question(client, question, ctx.text, temporal=use_temporal_prompt(question),
                              namespace=namespace, max_tokens=self.config.model.max_tokens,
                              question_date=question_date)
        return Answer(text=res.text, context=ctx, prompt_version=res.prompt_version)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
