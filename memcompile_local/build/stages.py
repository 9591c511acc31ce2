"""Memory construction: descriptors, Cells and packet embeddings for one namespace.

This module only wires stages together (extraction -> placement -> dense packet documents);
each stage lives in the Address Plane. Everything built is stored, so re-running a build on an
unchanged namespace makes zero model calls, and new turns extend the memory incrementally.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..address.cells import PlacementState
from ..address.dense import DENSE_DOCUMENTS, composed_context_matrix, dense_document
from ..address.extract_memo import MemoizedExtractor
from ..address.extract_rule import RuleExtractor
from ..address.layouts import build_layout
from ..address.placement_memo import PlacementMemo
from ..config import PipelineConfig, PlacementConfig
from ..errors import ExtractionError, PacketExtractionError
from ..fused.documents import context_documents, context_fits, fits_window, plain_turn_text
from ..fused.ranker import reads_plain_turns
from .progress import bar
from ..protocols import DescriptorExtractor, Embedder
from ..store.base import Store
from ..types import Cell, Descriptor, SourcePacket

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildResult:
    namespace: str
    descriptor_set: str
    layout_id: str
    packets: int
    extracted_now: int  # packets whose descriptors were extracted by this call
    descriptors: int
    cells: int
    embedded_now: int  # documents embedded by this call (z(p), plus context documents when used)


@dataclass
class BuildOutputs:
    """What one build of a namespace read and wrote, kept so that the namespace's view can be
    made from it without reading the store back (``views/fresh.py``).

    ``packets``: the namespace's packets as the build read them; ``descriptors``: every
    descriptor of ``descriptor_set`` in store order; ``cells``: the Cells of ``layout_id`` as
    stored; ``vectors``: model id -> store key -> vector, for every key the build embedded,
    linked or found stored. A build that fails leaves it partial; only a finished one is used.
    """

    namespace: str = ""
    packets: list[SourcePacket] | None = None
    descriptor_set: str | None = None
    descriptors: list[Descriptor] | None = None
    layout_id: str | None = None
    cells: list[Cell] | None = None
    vectors: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def vector_sink(self, model_id: str) -> dict[str, np.ndarray]:
        return self.vectors.setdefault(model_id, {})


@dataclass(frozen=True)
class DensePlan:
    """What the dense channel embeds for one configuration (``dense_plan``).

    ``document``: the per-packet document kind (``address.dense.DENSE_DOCUMENTS``);
    ``context``: "none" (no context vectors), "embedded" (each neighbour-context document is
    embedded) or "composed" (context vectors summed from the packet vectors, nothing embedded).
    """

    document: str = "packet"
    context: str = "none"
    # With "embedded" context: only context documents of at most this many words get a vector
    # (0: every one). The fused dense channel reads no other (FusionConfig.context_window_words),
    # so on long-turn histories most of them were embedded for nothing.
    context_window_words: int = 0
    # Each turn's plain text also embedded on its own (the learned ranker's raw_cos columns),
    # up to this many words (``fused.documents.plain_turn_fits``; 0: every turn).
    raw_turns: bool = False
    raw_window_words: int = 0

    def __post_init__(self) -> None:
        if self.document not in DENSE_DOCUMENTS or self.context not in ("none", "embedded", "composed"):
            raise ValueError(f"unknown dense plan {self}")


def dense_plan(config: PipelineConfig, context_vectors: bool) -> DensePlan:
    """The dense plan of ``config``; ``context_vectors``: whether the fused selector reads
    context vectors (``Memory.uses_context_embeddings``).

    The shorter documents of ``fusion.dense_document`` serve the fused selector only: when it
    is not the anchor selector (the paper's LLM paths, whose dense proposals D_q read z(p)),
    the document is z(p) whatever the fusion section says.
    """
    fused = config.evidence.anchor_selector == "fused" or config.fusion.schedule_pool == "fused"
    document = config.fusion.dense_document if config.evidence.anchor_selector == "fused" else "packet"
    context = config.fusion.dense_context if context_vectors else "none"
    window = config.fusion.context_window_words if context == "embedded" else 0
    # The plain turns are embedded only for a learned ranker (fusion.ranker "auto" or "learned")
    # whose model file reads their cosine (the shipped ranker-v4 does not; a model trained with
    # those columns does).
    raw = fused and config.fusion.ranker != "weighted" and reads_plain_turns(config.fusion.ranker_model)
    return DensePlan(document, context, context_window_words=window, raw_turns=raw,
                     raw_window_words=config.fusion.context_window_words if raw else 0)


FALLBACK_META_PREFIX = "fallback:"  # meta key of the turns the rule extractor stood in for, per set

RULE_BATCH = 512
"""Packets per extraction transaction for the rule extractor: it is deterministic and fast, so an
interrupted build loses little by redoing a big batch, and each commit costs (40% of storing a
LoCoMo conversation's descriptors at the LLM batch of 16)."""


def _batch_size(extractor: DescriptorExtractor) -> int:
    return RULE_BATCH if isinstance(extractor, (RuleExtractor, MemoizedExtractor)) else 16


# Each store's last placement states (see placement_memo): the next append places only its turn.
PLACEMENTS = PlacementMemo()


def layout_id(descriptor_set: str, placement: PlacementConfig) -> str:
    """Store key of a Cell layout: the descriptor set plus a hash of every placement constant."""
    digest = hashlib.sha256(json.dumps(asdict(placement), sort_keys=True).encode()).hexdigest()[:12]
    return f"{descriptor_set}|{placement.layout}|{digest}"


def embedding_model_id(embedder: Embedder) -> str:
    return hashlib.sha256(json.dumps(embedder.identity(), sort_keys=True).encode()).hexdigest()[:16]


def extract_descriptors(
    store: Store,
    namespace: str,
    extractor: DescriptorExtractor,
    *,
    batch_size: int = 16,
    on_progress: Callable[[int], None] | None = None,
    on_failure: str = "error",
    packets: Sequence[SourcePacket] | None = None,
    saved: dict[str, list[Descriptor]] | None = None,
) -> int:
    """Extract descriptors for every packet not yet extracted by this descriptor set.

    Packets go in dialogue order, each paired with its immediately preceding packet. Each
    batch's results are committed together, so an interrupted build resumes where it stopped.
    When the model fails on some packets of a batch, the packets that succeeded are saved
    first; then ``on_failure="error"`` raises the extraction error (a rerun retries only the
    failed packets), and ``on_failure="rule"`` extracts the failed packets with the rule-based
    extractor instead and records their ids in the namespace's meta (``fallback:<set>``),
    which ``stats`` reports. Returns the number of packets extracted by this call.
    ``packets``: the namespace's packets in dialogue order when the caller has them.
    ``saved``: when given, receives packet id -> the descriptors this call saved for it.
    """
    if packets is None:
        packets = store.packets(namespace)
    done = store.extracted_packet_ids(namespace, extractor.descriptor_set)
    todo: list[tuple[SourcePacket, SourcePacket | None]] = []
    for i, p in enumerate(packets):
        if p.packet_id not in done:
            todo.append((p, packets[i - 1] if i > 0 else None))
    failed: list[str] = []
    first_error: PacketExtractionError | None = None
    extracted = 0
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        try:
            results = extractor.extract(batch)
        except PacketExtractionError as exc:
            partial = exc.partial
            if on_failure != "rule":
                # Keep the packets that worked and go on; the failures are reported at the end.
                for (packet, _), descriptors in zip(batch, partial):
                    if descriptors is None:
                        failed.append(packet.packet_id)
                    else:
                        store.save_extractions(namespace, extractor.descriptor_set, [(packet.packet_id, descriptors)])
                        extracted += 1
                        if saved is not None:
                            saved[packet.packet_id] = list(descriptors)
                first_error = first_error or exc
                if on_progress:
                    on_progress(len(batch))
                continue
            results = _rule_fallback(store, namespace, extractor.descriptor_set, batch, partial, exc)
        if len(results) != len(batch):
            raise RuntimeError(f"extractor returned {len(results)} results for {len(batch)} packets")
        # One transaction per batch: an interrupted build redoes at most this batch.
        store.save_extractions(namespace, extractor.descriptor_set,
                               [(packet.packet_id, descriptors) for (packet, _), descriptors in zip(batch, results)])
        extracted += len(batch)
        if saved is not None:
            saved.update((packet.packet_id, list(descriptors)) for (packet, _), descriptors in zip(batch, results))
        if on_progress:
            on_progress(len(batch))
    if failed:
        raise ExtractionError(namespace, failed, first_error)
    return extracted


def _rule_fallback(store: Store, namespace: str, descriptor_set: str,
                   batch: Sequence[tuple[SourcePacket, SourcePacket | None]],
                   partial: Sequence[list[Descriptor] | None], exc: PacketExtractionError) -> list[list[Descriptor]]:
    """Rule-based descriptors for the packets the model failed on (same id scheme)."""
    failed = [i for i, d in enumerate(partial) if d is None]
    log.warning("%s; extracting %d packet(s) with the rule-based extractor instead", exc, len(failed))
    rule = RuleExtractor().extract([batch[i] for i in failed])
    results = list(partial)
    for i, descriptors in zip(failed, rule):
        results[i] = descriptors
    done = json.loads(store.get_meta(namespace, f"{FALLBACK_META_PREFIX}{descriptor_set}") or "[]")
    done.extend(batch[i][0].packet_id for i in failed)
    store.set_meta(namespace, f"{FALLBACK_META_PREFIX}{descriptor_set}", json.dumps(sorted(set(done))))
    return [list(r) for r in results]


def place_cells(
    store: Store, namespace: str, descriptor_set: str, placement: PlacementConfig,
    *, descriptors: Sequence[Descriptor] | None = None, keep: BuildOutputs | None = None,
    remember: bool = True,
) -> tuple[str, int]:
    """Place descriptors into Cells for the configured layout and store them.

    The bounded layout is incremental: descriptors already in stored Cells stay where they
    are, and the unplaced ones (always a suffix in dialogue order, since extraction runs in
    order) are placed after them, which equals a from-scratch build of the whole sequence.
    The placement state is taken from ``PLACEMENTS`` when the store still holds the Cells it
    produced (else restored from the stored Cells); an unchanged layout is not written again.
    Other layouts are cheap and rebuilt from scratch. ``descriptors``: the namespace's
    descriptors of ``descriptor_set`` in store order when the caller has them (else read here).
    ``keep``: receives the stored Cells. ``remember=False`` leaves the placement state out of
    ``PLACEMENTS`` (a benchmark run builds each namespace once and never appends to it, so a
    state kept there would only hold memory).
    """
    lid = layout_id(descriptor_set, placement)
    if descriptors is None:
        descriptors = store.descriptors(namespace, descriptor_set)
    if placement.layout != "bounded":
        cells = build_layout(placement.layout, descriptors, placement)
        store.save_cells(namespace, lid, cells)
        if keep is not None:
            keep.layout_id, keep.cells = lid, list(cells)
        return lid, len(cells)
    existing = store.cells(namespace, lid)
    known = {d.descriptor_id for d in descriptors}
    if any(x not in known for c in existing for x in c.descriptor_ids):
        # Another writer (a build in another process) saved and placed descriptors after ours
        # were read: read them again, so the stored Cells' members resolve. The store commits
        # descriptors before, or with, the Cells that hold them.
        descriptors = store.descriptors(namespace, descriptor_set)
    # The state the last placement here left, when the store still holds its Cells: then
    # nothing is restored (restoring re-reads every placed descriptor).
    state = PLACEMENTS.take(store, namespace, lid, existing)
    placed = state.placed_ids if state is not None else {d for c in existing for d in c.descriptor_ids}
    order = {d.descriptor_id: i for i, d in enumerate(descriptors)}
    new = [d for d in descriptors if d.descriptor_id not in placed]
    if existing and new and min(order[d.descriptor_id] for d in new) < max(order[x] for x in placed):
        # Unplaced descriptors precede placed ones: serialized order broken, rebuild.
        existing, new, state = [], descriptors, None
    if state is None:
        by_id = {d.descriptor_id: d for d in descriptors}
        state = PlacementState(placement, existing, by_id)
    state.place(new)
    cells = state.cells()
    if cells != existing:  # an up-to-date layout is not written again
        store.save_cells(namespace, lid, cells)
    if remember:
        PLACEMENTS.keep(store, namespace, lid, cells, state)
    if keep is not None:
        keep.layout_id, keep.cells = lid, list(cells)
    return lid, len(cells)


def embed_packets(
    store: Store,
    namespace: str,
    descriptor_set: str,
    embedder: Embedder,
    *,
    batch_size: int = 256,
    on_progress: Callable[[int], None] | None = None,
    packets: Sequence[SourcePacket] | None = None,
    descriptors: Sequence[Descriptor] | None = None,
    document: str = "packet",
    keep: BuildOutputs | None = None,
) -> int:
    """Embed every packet document not yet stored; returns how many were embedded now.

    The key binds the document's text hash, so a changed descriptor set re-embeds only the
    packets whose documents changed. ``packets`` and ``descriptors``: what the caller read
    already (else read here). ``document``: the document kind (``DensePlan.document``).
    """
    keys, docs = packet_document_keys(store, namespace, descriptor_set, packets=packets, descriptors=descriptors,
                                      document=document)
    model_id = embedding_model_id(embedder)
    return _embed_missing(store, namespace, model_id, embedder, keys, docs, batch_size=batch_size,
                          on_progress=on_progress, keep=keep.vector_sink(model_id) if keep is not None else None)


def embed_contexts(
    store: Store,
    namespace: str,
    embedder: Embedder,
    *,
    packets: Sequence[SourcePacket] | None = None,
    batch_size: int = 256,
    on_progress: Callable[[int], None] | None = None,
    window: int = 0,
    keep: BuildOutputs | None = None,
) -> int:
    """Embed every context document (fused selector) not yet stored; returns how many now.

    A turn appended to a session changes the context document of the turn before it; the
    text hash in the key makes exactly that one re-embed. ``window``: documents of more words
    are not embedded (``DensePlan.context_window_words``).
    """
    keys, docs = context_document_keys(store, namespace, packets, window=window)
    model_id = context_model_id(embedder)
    return _embed_missing(store, namespace, model_id, embedder, keys, docs, batch_size=batch_size,
                          on_progress=on_progress, keep=keep.vector_sink(model_id) if keep is not None else None)


def raw_model_id(embedder: Embedder) -> str:
    """Store model id of the plain turn vectors (``raw_document_keys``): kept apart from z(p)."""
    return f"{embedding_model_id(embedder)}|raw-v1"


def raw_document_keys(packets: Sequence[SourcePacket], window: int = 0) -> tuple[list[str], list[str]]:
    """(keys, documents) of each turn's plain text (``fused.documents.plain_turn_text``), in
    packet order (the plain dense baseline embeds the same text). ``window`` (words, 0: no
    limit): a longer turn gets the unread key of its packet and the empty text, as a context
    document past the gate does; its plain vector is its z(p) vector (``FusionIndex.assemble``).
    A turn with no text and no caption gets the unread key too (a zero row)."""
    keys, docs = _keyed(packets, [plain_turn_text(p) for p in packets])
    for i, p in enumerate(packets):  # the rule of fused.documents.plain_turn_fits, on the texts made here
        if not fits_window(docs[i], window) or not docs[i].strip():  # an empty turn: nothing to embed, a zero row
            keys[i], docs[i] = unread_key(p.packet_id), ""
    return keys, docs


def embed_raw_turns(store: Store, namespace: str, embedder: Embedder, *, window: int = 0,
                    packets: Sequence[SourcePacket] | None = None, batch_size: int = 256,
                    on_progress: Callable[[int], None] | None = None, keep: BuildOutputs | None = None) -> int:
    """Embed every turn's plain text (of at most ``window`` words) not yet stored; returns how
    many texts were embedded now."""
    if packets is None:
        packets = store.packets(namespace)
    keys, docs = raw_document_keys(packets, window)
    model_id = raw_model_id(embedder)
    return _embed_missing(store, namespace, model_id, embedder, keys, docs, batch_size=batch_size,
                          on_progress=on_progress, keep=keep.vector_sink(model_id) if keep is not None else None)


def _embed_missing(store: Store, namespace: str, model_id: str, embedder: Embedder, keys: list[str],
                   docs: list[str], *, batch_size: int, on_progress: Callable[[int], None] | None,
                   keep: dict[str, np.ndarray] | None = None) -> int:
    """Give every key a stored vector; returns how many texts were embedded now.

    Vectors are content-addressed (``text_address``) in the embedder's vector space: a text
    another namespace or another document kind already embedded is linked, not embedded again,
    and each distinct missing text is embedded once. ``keep``: receives key -> vector for every
    key (found stored, linked or embedded now), as the store holds it.
    """
    read = [(k, d) for k, d in zip(keys, docs) if not is_unread_key(k)]
    have = store.embeddings(namespace, model_id, [k for k, _ in read])
    if keep is not None:
        keep.update(have)
    missing = [(k, d, text_address(d)) for k, d in read if k not in have]
    if not missing:
        return 0
    space = embedding_model_id(embedder)
    shared = store.vectors_by_content(space, [a for _, _, a in missing])
    linked = [(k, a) for k, _, a in missing if a in shared]
    if linked:
        store.save_embeddings(namespace, model_id, [k for k, _ in linked],
                              np.stack([shared[a] for _, a in linked]), content=[a for _, a in linked], space=space)
        if keep is not None:
            keep.update((k, np.asarray(shared[a], dtype=np.float32)) for k, a in linked)
        if on_progress:
            on_progress(len(linked))
    todo = [(k, d, a) for k, d, a in missing if a not in shared]
    keys_of: dict[str, list[str]] = {}
    text_of: dict[str, str] = {}
    for k, d, a in todo:  # each distinct text once, however many keys name it
        keys_of.setdefault(a, []).append(k)
        text_of[a] = d
    addresses = list(keys_of)
    for start in range(0, len(addresses), batch_size):
        chunk = addresses[start : start + batch_size]
        vecs = np.asarray(embedder.embed([text_of[a] for a in chunk]), dtype=np.float32)
        rows = [(k, i) for i, a in enumerate(chunk) for k in keys_of[a]]
        store.save_embeddings(namespace, model_id, [k for k, _ in rows], vecs[[i for _, i in rows]],
                              content=[chunk[i] for _, i in rows], space=space)
        if keep is not None:
            keep.update((k, vecs[i]) for k, i in rows)
        if on_progress:
            on_progress(len(rows))
    return len(addresses)


def text_address(text: str) -> str:
    """Content address of an embedded text: ``"t:"`` and the sha256 of its UTF-8 bytes."""
    return "t:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def context_model_id(embedder: Embedder) -> str:
    """Store model id of context-document vectors: kept apart from the z(p) vectors."""
    return f"{embedding_model_id(embedder)}|context-v1"


def embedding_key_prefix(packet_id: str) -> str:
    """The prefix every embedding key of ``packet_id``'s documents starts with."""
    return f"{packet_id}|"


def _keyed(packets, docs) -> tuple[list[str], list[str]]:
    """(embedding keys, documents): a key is the packet id and a hash of its document's text."""
    keys = [f"{embedding_key_prefix(p.packet_id)}{hashlib.sha256(d.encode()).hexdigest()[:16]}"
            for p, d in zip(packets, docs)]
    return keys, list(docs)


def packet_document_keys(
    store: Store, namespace: str, descriptor_set: str, *,
    packets: Sequence[SourcePacket] | None = None, descriptors: Sequence[Descriptor] | None = None,
    document: str = "packet",
) -> tuple[list[str], list[str]]:
    """(keys, documents) of the dense packet channel, in packet order.

    ``packets`` and ``descriptors`` (of ``descriptor_set``): what the caller read already.
    ``document``: the document kind (``address.dense.dense_document``; "turn" reads no
    descriptors).
    """
    if packets is None:
        packets = store.packets(namespace)
    if document == "turn":  # the raw turn: no claims needed
        return _keyed(packets, [dense_document(p, (), "turn") for p in packets])
    if descriptors is None:
        descriptors = store.descriptors(namespace, descriptor_set)
    by_packet: dict[str, list[Descriptor]] = {}
    for d in descriptors:
        by_packet.setdefault(d.packet_id, []).append(d)
    return _keyed(packets, [dense_document(p, by_packet.get(p.packet_id, []), document) for p in packets])


def context_document_keys(
    store: Store | None, namespace: str, packets: Sequence[SourcePacket] | None = None, *, window: int = 0,
) -> tuple[list[str], list[str]]:
    """(keys, documents) of the fused selector's context documents, in packet order.

    ``packets``: the namespace's packets when the caller has them already (else read here).
    ``window`` (words, 0: no limit): a longer document gets the unread key of its packet
    (``unread_key``) and the empty text; it is never embedded and loads as a zero row. The
    count is the one the fused index gates the context cosine by (whitespace runs).
    """
    if packets is None:
        assert store is not None
        packets = store.packets(namespace)
    keys, docs = _keyed(packets, context_documents(packets))
    if window:
        for i, (p, fits) in enumerate(zip(packets, context_fits(packets, window))):
            if not fits:
                keys[i], docs[i] = unread_key(p.packet_id), ""
    return keys, docs


UNREAD_SUFFIX = "unread"


def unread_key(packet_id: str) -> str:
    """The key of a packet's context document that the dense channel never reads: no vector
    is stored under it, and it loads as a zero row (a hash key is 16 hex digits, so no
    stored key ends this way)."""
    return f"{embedding_key_prefix(packet_id)}{UNREAD_SUFFIX}"


def is_unread_key(key: str) -> bool:
    return key.endswith("|" + UNREAD_SUFFIX)


def load_packet_matrix(
    store: Store, namespace: str, descriptor_set: str, embedder: Embedder, *, document: str = "packet"
) -> np.ndarray:
    """The (N, d) matrix of packet embeddings in packet order (all must be built)."""
    keys, _ = packet_document_keys(store, namespace, descriptor_set, document=document)
    return _load_matrix(store, namespace, embedding_model_id(embedder), embedder, keys, "packet")


def load_context_matrix(
    store: Store, namespace: str, embedder: Embedder, packets: Sequence[SourcePacket] | None = None,
    *, composed_from: np.ndarray | None = None, window: int = 0,
) -> np.ndarray:
    """The (N, d) matrix of context vectors in packet order (all must be built).

    ``composed_from``: the packet matrix, for the "composed" plan (``composed_contexts``).
    ``window``: as in ``context_document_keys`` (rows of longer documents are zero).
    """
    if composed_from is not None:
        if packets is None:
            packets = store.packets(namespace)
        return composed_contexts(packets, composed_from)
    keys, _ = context_document_keys(store, namespace, packets, window=window)
    return _load_matrix(store, namespace, context_model_id(embedder), embedder, keys, "context")


def load_raw_matrix(store: Store, namespace: str, embedder: Embedder,
                    packets: Sequence[SourcePacket] | None = None, *, window: int = 0) -> np.ndarray:
    """The (N, d) matrix of plain turn vectors in packet order (all must be built; rows of
    turns past ``window`` words are zero)."""
    keys, _ = raw_document_keys(store.packets(namespace) if packets is None else packets, window)
    return _load_matrix(store, namespace, raw_model_id(embedder), embedder, keys, "plain turn")


def composed_contexts(packets: Sequence[SourcePacket], packet_matrix: np.ndarray) -> np.ndarray:
    """Composed context vectors of ``packets`` (dialogue order) from their packet matrix rows:
    each row the normalized sum of its own and its in-session neighbours' rows."""
    return composed_context_matrix([p.session_index for p in packets], packet_matrix)


def _load_matrix(store: Store, namespace: str, model_id: str, embedder: Embedder, keys: list[str],
                 what: str) -> np.ndarray:
    got = store.embeddings(namespace, model_id, [k for k in keys if not is_unread_key(k)])
    missing = [k for k in keys if k not in got and not is_unread_key(k)]
    if missing:
        raise RuntimeError(f"{len(missing)} {what} embeddings missing in {namespace!r}; run the build first")
    if not keys:
        return np.zeros((0, embedder.dim), np.float32)
    dim = len(next(iter(got.values()))) if got else embedder.dim
    out = np.zeros((len(keys), dim), dtype=np.float32)
    for i, k in enumerate(keys):
        if k in got:
            out[i] = got[k]
    return out


def build_memory(
    store: Store,
    namespace: str,
    extractor: DescriptorExtractor,
    placement: PlacementConfig,
    embedder: Embedder | None,
    *,
    progress: bool = False,
    on_failure: str = "error",
    context_embeddings: bool = False,
    dense: DensePlan | None = None,
    keep: BuildOutputs | None = None,
    remember_placement: bool = True,
) -> BuildResult:
    """Run all build stages for one namespace (idempotent and resumable).

    ``dense``: what to embed (``dense_plan``); None is z(p), plus the embedded context
    documents when ``context_embeddings``. ``keep``: receives what the build read and wrote
    (packets, descriptors, Cells, vectors), for a view made without reading them back.
    ``remember_placement``: as ``place_cells``'s ``remember``.
    """
    if dense is None:
        dense = DensePlan("packet", "embedded" if context_embeddings else "none")
    # The namespace is read once (packets) and once after extraction (descriptors); every stage
    # works from these lists, where an append used to re-read everything once per stage.
    packets = store.packets(namespace)
    n_packets = len(packets)
    done = len(store.extracted_packet_ids(namespace, extractor.descriptor_set))
    saved: dict[str, list[Descriptor]] = {}
    with bar(total=n_packets - done, desc=f"extract {namespace}", unit="turn", enabled=progress) as pb:
        extracted = extract_descriptors(store, namespace, extractor, on_progress=pb.update, on_failure=on_failure,
                                        packets=packets, saved=saved, batch_size=_batch_size(extractor))
    if done == 0 and len(saved) == n_packets:
        # A cold build saved every descriptor itself: they are the store's, in the store's order
        # (packet ordinal, then claim index), so they are not read back.
        descriptors = [d for p in packets
                       for d in sorted(saved[p.packet_id], key=lambda d: (d.claim_index, d.descriptor_id))]
    else:
        descriptors = store.descriptors(namespace, extractor.descriptor_set)
    if keep is not None:
        keep.namespace, keep.packets = namespace, packets
        keep.descriptor_set, keep.descriptors = extractor.descriptor_set, descriptors
    extra = {"keep": keep, "remember": remember_placement} if keep is not None or not remember_placement else {}
    lid, n_cells = place_cells(store, namespace, extractor.descriptor_set, placement, descriptors=descriptors,
                               **extra)
    embedded = 0
    if embedder is not None:
        with bar(total=n_packets, desc=f"embed {namespace}", unit="doc", enabled=progress) as pb:
            embedded = embed_packets(store, namespace, extractor.descriptor_set, embedder, on_progress=pb.update,
                                     packets=packets, descriptors=descriptors, document=dense.document, keep=keep)
        if dense.context == "embedded":
            with bar(total=n_packets, desc=f"embed context {namespace}", unit="doc", enabled=progress) as pb:
                embedded += embed_contexts(store, namespace, embedder, packets=packets, on_progress=pb.update,
                                           window=dense.context_window_words, keep=keep)
        if dense.raw_turns:
            with bar(total=n_packets, desc=f"embed turns {namespace}", unit="doc", enabled=progress) as pb:
                embedded += embed_raw_turns(store, namespace, embedder, window=dense.raw_window_words,
                                            packets=packets, on_progress=pb.update, keep=keep)
    return BuildResult(
        namespace=namespace,
        descriptor_set=extractor.descriptor_set,
        layout_id=lid,
        packets=n_packets,
        extracted_now=extracted,
        descriptors=len(descriptors),
        cells=n_cells,
        embedded_now=embedded,
    )
