"""Query-time wiring in the order of Algorithm 1 of the MemCompile paper (lines 11-23).

``compile_context`` runs, each as a typed step with its own timing: the query intent, the
query embedding, the Address Plane's candidate union K_q (``address_candidates``), the
normalization boundary that collapses K_q into the packet pool U_q (``normalize_pool``), the
dense packet proposals D_q (``dense_candidates``), the anchors A0, the bounded frontier and
the reader view. Each step calls a stage function from its own module; this module decides
only which steps run, following ``PipelineConfig`` (the presets of ``pipeline.presets`` are
configurations). Anchor selectors and frontier modes are tables (``ANCHOR_SELECTORS``,
``FRONTIER_MODES``): name -> function.

The model-free ``fused`` selector (``fused/``) is a retriever of its own beside the Address
Plane: on that path K_q, U_q and D_q feed nothing but the trace, so they are skipped unless
``address_trace=True`` asks for them (the benchmark's aliasing audit does), the
representative-claim view needs U_q, or a frontier needs D_q.

Every selector also says what each packet it chose is worth (``Scorer``, ``evidence.relevance``):
the final list's scores, monotone and in [0, 1], are ``Context.scores``; with ``explain=True``
``Context.explanations`` holds, per packet, the numbers its selector chose it by.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Mapping, Sequence

import numpy as np

from ..address.dense import dense_proposals
from ..address.intent import llm_intent, rule_intent
from ..address.query import address_query
from ..config import PipelineConfig
from ..errors import ConfigError
from ..evidence.frontier import bounded_frontier, frontier_pool
from ..evidence.pursuit import mem_pursuit
from ..evidence.relevance import (Explanation, Relevance, address_relevance, cosine_relevance, monotone_scores,
                                  rank_relevance)
from ..evidence.scheduler import schedule_packets
from ..evidence.views import render_view
from ..fused.retriever import FusedRetriever, Retrieval, query_vector
from ..language.timecues import is_temporal_question
from ..language.timeparse import parse_session_time
from .mera import mera_anchors
from .normalize import mmr_anchors, normalize_to_packets
from ..protocols import Embedder, ModelClient
from ..types import AddressResult, PacketCandidate, QueryIntent
from ..views.record import MemoryView

DenseProposals = tuple[tuple[str, float], ...]  # D_q: (packet id, cosine), best first


@dataclass(frozen=True)
class Context:
    """The compiled evidence for one question.

    ``address`` is K_q (``AddressResult.skipped`` when the path did not run the Address
    Plane), ``pool`` the normalized packet pool U_q and ``dense`` the dense proposals D_q (both
    empty when not computed). ``timings_ms`` has one entry per step that ran, in run order;
    ``trace["stages"]`` lists those steps. ``scores``: each packet of ``packet_ids`` scored in
    [0, 1], never rising down the list (``evidence.relevance``: what the score means per
    selector). ``explanations``: with ``compile_context(..., explain=True)``, why each packet
    was chosen (empty otherwise).
    """

    namespace: str
    question: str
    packet_ids: tuple[str, ...]  # final ordered packet sequence E_q
    anchors: tuple[str, ...]  # A0
    frontier_added: tuple[str, ...]  # Delta_q
    text: str  # the reader view
    view: str
    address: AddressResult
    pool: tuple[PacketCandidate, ...] = ()
    dense: DenseProposals = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    explanations: Mapping[str, Explanation] = field(default_factory=dict)


def query_intent(question: str, cfg: PipelineConfig, client: ModelClient | None, view: MemoryView) -> QueryIntent:
    """I_q: the query-only intent (Algorithm 1, line 11), by rule or by the model."""
    speakers = sorted({p.speaker for p in view.packets})
    if not cfg.extraction.use_intent:
        return QueryIntent(question=question, is_temporal=is_temporal_question(question))
    if cfg.extraction.intent_source == "rule":
        return rule_intent(question, known_people=speakers)
    if client is None:
        raise ConfigError("the LLM query intent needs a model backend; use intent_source='rule' for the model-free path")
    return llm_intent(client, question, namespace=view.namespace, known_people=speakers)


def _embed_query(embedder: Embedder | None, intent: QueryIntent, texts: list[str] | None = None) -> np.ndarray | None:
    """The query vector: the embedding of ``intent.lexical_query()``, or the mean of the
    embeddings of ``texts``, in one call."""
    if embedder is None:
        return None
    # Embedders trained with query/document prefixes (e5, bge) embed queries on their own path.
    embed = getattr(embedder, "embed_query", None) or embedder.embed
    return query_vector(np.asarray(embed(texts or [intent.lexical_query()]), dtype=np.float32))


def address_candidates(intent: QueryIntent, view: MemoryView, cfg: PipelineConfig) -> AddressResult:
    """K_q: Cell routing and BM25 over the descriptors, scored by r_i (Algorithm 1, line 12)."""
    return address_query(view.index, intent, cfg.routing, layout=cfg.placement.layout)


def normalize_pool(address: AddressResult, view: MemoryView) -> tuple[PacketCandidate, ...]:
    """U_q: K_q collapsed by SourcePacket identity (Algorithm 1, line 13; Eqs. 8-10)."""
    return tuple(normalize_to_packets(address.candidates, view.index.packet_ordinal))


def dense_candidates(query_vec: np.ndarray | None, view: MemoryView, cfg: PipelineConfig,
                     allowed: AbstractSet[str] | None = None) -> DenseProposals:
    """D_q: the K_D packets closest to the embedded q+ (Algorithm 1, line 15); () without an embedder.

    ``allowed``: the K_D are taken among these packets only."""
    if allowed is None:
        return dense_proposals(view.index.dense, query_vec, cfg.evidence.k_dense)
    ranked = dense_proposals(view.index.dense, query_vec, len(view.packets))
    return tuple((pid, s) for pid, s in ranked if pid in allowed)[: cfg.evidence.k_dense]


@dataclass(frozen=True)
class AnchorQuery:
    """What an anchor selector may read for one question (Algorithm 1, line 14)."""

    question: str
    pool: Sequence[PacketCandidate]  # U_q
    address: AddressResult  # K_q
    dense: DenseProposals  # D_q
    view: MemoryView
    cfg: PipelineConfig
    client: ModelClient | None
    query_vec: np.ndarray | None
    retriever: FusedRetriever | None  # the fused retriever of the view, when it has a fused index
    anchor: dt.datetime | None = None  # when the question is asked, for the fused time match
    allowed_rows: np.ndarray | None = None  # the fused index rows a caller's filter lets through


# What a selector's selection is worth: (packet id, 1-based rank in the final list, explain)
# -> the packet's ``Relevance``, or None for a packet the selector did not score.
Scorer = Callable[[str, int, bool], "Relevance | None"]

# An anchor selector: query -> (A0, trace info, its scorer).
AnchorSelector = Callable[[AnchorQuery], "tuple[tuple[str, ...], dict[str, Any], Scorer]"]


def _pool_scorer(q: AnchorQuery, selector: str) -> Scorer:
    """Packets of U_q scored by their address score r_i (``evidence.relevance``)."""
    score_of = {pc.packet_id: pc.score for pc in q.pool}

    def scorer(pid: str, rank: int, explain: bool) -> Relevance | None:
        r = score_of.get(pid)
        return None if r is None else address_relevance(r, q.cfg.routing, selector, explain)
    return scorer


def _cosine_scorer(cosines: Mapping[str, float], selector: str) -> Scorer:
    def scorer(pid: str, rank: int, explain: bool) -> Relevance | None:
        c = cosines.get(pid)
        return None if c is None else cosine_relevance(c, selector, explain)
    return scorer


def _rank_scorer(selector: str) -> Scorer:
    return lambda pid, rank, explain: rank_relevance(rank, selector, explain)


def _retrieval_scorer(found: Retrieval) -> Scorer:
    """The fused retrieval's packets: every packet of the index has its scores there."""
    def scorer(pid: str, rank: int, explain: bool) -> Relevance | None:
        if pid not in found.row_of:
            return None
        return Relevance(found.relevance(pid), found.explanation(pid) if explain else None)
    return scorer


def _normalized_anchors(q: AnchorQuery):
    return tuple(pc.packet_id for pc in q.pool)[: q.cfg.evidence.k0], {}, _pool_scorer(q, "normalized")


def _dense_anchors(q: AnchorQuery):
    return tuple(pid for pid, _ in q.dense[: q.cfg.evidence.k0]), {}, _cosine_scorer(dict(q.dense), "dense")


def _mmr_anchors(q: AnchorQuery):
    ids = mmr_anchors(q.pool, q.address.candidates, q.view.index.descriptor_by_id,
                      q.view.index.cell_of_descriptor, q.cfg.routing, k=q.cfg.evidence.k0)
    return tuple(ids), {}, _pool_scorer(q, "mmr")


def _llm_anchors(q: AnchorQuery):
    pool_ids = [pc.packet_id for pc in q.pool]
    if q.cfg.fusion.schedule_pool == "fused":  # A0-fused-pool: the scheduler sees the fused top-N
        if q.retriever is None:
            raise ConfigError("schedule_pool='fused' needs the fused index; build the memory with it set")
        pool_ids = q.retriever.ranking(q.question, q.query_vec, q.cfg.fusion.schedule_pool_size, anchor=q.anchor,
                                       allowed=q.allowed_rows)
    ids, info = _llm_ordering(q.question, pool_ids, q.cfg.evidence.k0, "schedule", q.view, q.cfg, q.client)
    return tuple(ids), info, _rank_scorer("llm")


def _fused_anchors(q: AnchorQuery):
    if q.retriever is None:
        raise ConfigError("the fused selector needs its index; build the memory with anchor_selector='fused'")
    found = q.retriever.retrieve(q.question, q.query_vec, q.cfg.evidence.k0, anchor=q.anchor,
                                 allowed=q.allowed_rows)
    return found.packet_ids, {}, _retrieval_scorer(found)


def _pursuit_anchors(q: AnchorQuery):
    ids, cosines = _pursuit_order([pc.packet_id for pc in q.pool] + [p for p, _ in q.dense], q.query_vec, q.view,
                                  q.cfg.evidence.k0, q.cfg.evidence.pursuit_tau, limit=q.cfg.evidence.pursuit_pool)
    return tuple(ids), {}, _cosine_scorer(cosines, "pursuit")


ANCHOR_SELECTORS: dict[str, AnchorSelector] = {
    "normalized": _normalized_anchors,
    "dense": _dense_anchors,
    "mmr": _mmr_anchors,
    "llm": _llm_anchors,
    "fused": _fused_anchors,
    "pursuit": _pursuit_anchors,
}


def select_anchors(
    selector: str,
    *,
    question: str,
    pool: Sequence[PacketCandidate],
    address: AddressResult,
    dense: DenseProposals,
    view: MemoryView,
    cfg: PipelineConfig,
    client: ModelClient | None,
    query_vec: np.ndarray | None,
    retriever: FusedRetriever | None = None,
    anchor: dt.datetime | None = None,
    allowed: AbstractSet[str] | None = None,
) -> tuple[tuple[str, ...], dict[str, Any], Scorer]:
    """A0: the first K0 packets, chosen by the configured selector (Algorithm 1, line 14),
    the trace info, and the selector's ``Scorer`` of the packets it chose.

    ``anchor``: the date the question is asked, for the fused scores' time match. ``allowed``:
    the packets a caller's filter lets through; the fused selector chooses among them (the
    other selectors read U_q and D_q, which the caller restricted already)."""
    choose = ANCHOR_SELECTORS.get(selector)
    if choose is None:
        raise ConfigError(f"unknown anchor selector {selector!r}; known: {', '.join(ANCHOR_SELECTORS)}")
    if retriever is None and view.fusion is not None:
        retriever = FusedRetriever(view.fusion, cfg.fusion, view.packets)
    rows = None
    if allowed is not None and retriever is not None:
        ids = retriever.index.packet_ids
        rows = np.fromiter((pid in allowed for pid in ids), dtype=bool, count=len(ids))
    return choose(AnchorQuery(question, pool, address, dense, view, cfg, client, query_vec, retriever, anchor, rows))


def _llm_ordering(question: str, packet_ids: Sequence[str], k: int, stage: str, view: MemoryView,
                  cfg: PipelineConfig, client: ModelClient | None) -> tuple[list[str], dict[str, Any]]:
    """A closed-pool listwise ordering of ``packet_ids`` by the model (scheduler or frontier)."""
    if client is None:
        raise ConfigError(f"the LLM {stage} stage needs a model backend")
    ev = cfg.evidence
    if ev.max_schedule_pool is not None:
        packet_ids = list(packet_ids)[: max(ev.max_schedule_pool, k)]
    res = schedule_packets(client, question, [view.packets_by_id[i] for i in packet_ids], k=k, stage=stage,
                           namespace=view.namespace, max_retries=ev.max_retries,
                           max_content_chars=ev.max_candidate_chars)
    return list(res.packet_ids), {"attempts": res.attempts, "rounds": res.rounds, "repaired": res.repaired}


def _pursuit_order(candidate_ids: Sequence[str], query_vec: np.ndarray | None, view: MemoryView, k: int,
                   tau: float, limit: int | None = None) -> tuple[list[str], dict[str, float]]:
    """MemPursuit over the first ``limit`` distinct candidates (P), in the given order; with
    each candidate's cosine with the query (the correlations pursuit starts from)."""
    if query_vec is None or view.packet_matrix is None:
        raise ConfigError("MemPursuit needs packet embeddings and an embedder")
    seen: dict[str, None] = {}
    for pid in candidate_ids:
        seen.setdefault(pid, None)
    ids = list(seen)[:limit]
    if not ids:
        return [], {}
    X = view.packet_matrix[[view.row_of[i] for i in ids]]
    res = mem_pursuit(query_vec, X, k=min(k, len(ids)), tau=tau)
    cosines = (X @ query_vec).astype(np.float64)
    return [ids[i] for i in res.indices], {pid: float(c) for pid, c in zip(ids, cosines)}


def _llm_frontier(question: str, pool: list[str], view: MemoryView, cfg: PipelineConfig,
                  client: ModelClient | None, query_vec: np.ndarray | None) -> tuple[list[str], dict[str, Any]]:
    # Only the first K_R positions of the ordering are read, so only K_R labels are requested.
    return _llm_ordering(question, pool, min(cfg.evidence.k_rank, len(pool)), "frontier", view, cfg, client)


def _pursuit_frontier(question: str, pool: list[str], view: MemoryView, cfg: PipelineConfig,
                      client: ModelClient | None, query_vec: np.ndarray | None) -> tuple[list[str], dict[str, Any]]:
    return _pursuit_order(pool, query_vec, view, cfg.evidence.k_rank, cfg.evidence.pursuit_tau)[0], {}


# A frontier mode orders W_q = A0 u D_q: (question, W_q, view, cfg, client, query vector) -> (ordering, info).
FRONTIER_MODES: dict[str, Callable[..., tuple[list[str], dict[str, Any]]]] = {
    "llm": _llm_frontier,
    "pursuit": _pursuit_frontier,
}


def run_frontier(
    mode: str,
    *,
    question: str,
    anchors: Sequence[str],
    dense: DenseProposals,
    view: MemoryView,
    cfg: PipelineConfig,
    client: ModelClient | None,
    query_vec: np.ndarray | None,
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Delta_q: at most K_Delta packets appended from the first K_R of an ordering of W_q = A0 u D_q."""
    if mode == "none":
        return (), {}
    order = FRONTIER_MODES.get(mode)
    if order is None:
        raise ConfigError(f"unknown frontier mode {mode!r}; known: none, {', '.join(FRONTIER_MODES)}")
    ev = cfg.evidence
    pool = frontier_pool(anchors, [pid for pid, _ in dense[: ev.k_dense]])
    ordering, info = order(question, pool, view, cfg, client, query_vec)
    final = bounded_frontier(anchors, ordering, k_rank=ev.k_rank, k_append=ev.k_append)
    return tuple(final[len(anchors):]), {"ordering": ordering, **info}


def render(view_name: str, packet_ids: Sequence[str], view: MemoryView, pool: Sequence[PacketCandidate],
           max_block_chars: int | None = None) -> str:
    """X_q: the reader view of the final packet sequence (Algorithm 1, lines 19-22)."""
    packets = [view.packets_by_id[i] for i in packet_ids]
    representative = {pc.packet_id: pc.representative for pc in pool}
    return render_view(view_name, packets, view.descriptors_by_packet, representative,
                       max_block_chars=max_block_chars)


def planned_steps(cfg: PipelineConfig, *, address_trace: bool = False) -> tuple[bool, bool]:
    """Whether (the Address Plane with normalization, the dense proposals) run under ``cfg``.

    Every selector but ``fused`` reads U_q or D_q, so both run. The fused selector reads
    neither: the Address Plane runs only for a trace or audit (``address_trace``) or for the
    representative-claim view, which shows each packet's representative from U_q; D_q runs
    for a trace or when a frontier reads it.
    """
    ev = cfg.evidence
    if ev.anchor_selector != "fused" or address_trace:
        return True, True
    return ev.view == "representative_claim", ev.frontier != "none"


def compile_context(
    question: str,
    view: MemoryView,
    cfg: PipelineConfig,
    *,
    client: ModelClient | None = None,
    embedder: Embedder | None = None,
    address_trace: bool = False,
    question_date: str | None = None,
    allowed: AbstractSet[str] | None = None,
    explain: bool = False,
) -> Context:
    """Compile the reader context for one question over one built memory.

    ``allowed``: the packet ids a caller's filter lets through (``views.filters``), or None for
    all. The fused ranking and D_q rank every allowed packet before their cut, so on the fused
    path (the service's model-free default) K0 packets come back whenever K0 of them match. U_q
    is the Address Plane's bounded candidate set with the others taken out, so a selector that
    reads U_q alone may return fewer; packets a MERA round or a frontier adds outside the filter
    are dropped.

    ``question_date`` (a session-time string, e.g. ``2024-06-01``): when the question is
    asked; the fused selector resolves the question's relative times ("last month") against it.

    ``address_trace=True`` runs the Address Plane (K_q, U_q) and the dense proposals even on
    the fused path, where they only fill ``Context.address``/``pool``/``dense`` for a trace
    or the source-aliasing audit; the other paths always run them.

    ``explain=True`` fills ``Context.explanations`` from the numbers the selector ranked by.
    """
    run_address, run_dense = planned_steps(cfg, address_trace=address_trace)
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[step] = (now - clock) * 1000
        clock = now

    intent = query_intent(question, cfg, client, view)
    lap("intent")
    retriever = FusedRetriever(view.fusion, cfg.fusion, view.packets) if view.fusion is not None else None
    if cfg.evidence.anchor_selector == "fused" and retriever is not None:
        # The fused retriever makes its own query vector (FusionConfig.dense_query may embed the
        # question beside the intent text); the dense proposals and a frontier read it too.
        query_vec = retriever.query_vector(embedder, question, intent.lexical_query())
    else:
        query_vec = _embed_query(embedder, intent)
    if query_vec is not None:
        lap("embed_query")
    address = AddressResult.skipped(intent)
    pool: tuple[PacketCandidate, ...] = ()
    if run_address:
        address = address_candidates(intent, view, cfg)
        lap("address")
        pool = normalize_pool(address, view)
        if allowed is not None:
            pool = tuple(pc for pc in pool if pc.packet_id in allowed)
        lap("normalization")
    dense: DenseProposals = ()
    if run_dense:
        dense = dense_candidates(query_vec, view, cfg, allowed)
        lap("dense")
    anchors, a_info, scorer = select_anchors(cfg.evidence.anchor_selector, question=question, pool=pool,
                                                address=address, dense=dense, view=view, cfg=cfg, client=client,
                                                query_vec=query_vec, retriever=retriever,
                                                anchor=parse_session_time(question_date) if question_date else None,
                                                allowed=allowed)
    lap("anchors")
    if cfg.mera.enabled:  # MERA's rounds refine A0 within its size (pipeline/mera.py)
        anchors, m_info = mera_anchors(question, anchors, view, cfg, client=client, embedder=embedder)
        a_info = {**a_info, "mera": m_info}
        lap("mera")
    added, f_info = run_frontier(cfg.evidence.frontier, question=question, anchors=anchors, dense=dense,
                                 view=view, cfg=cfg, client=client, query_vec=query_vec)
    if cfg.evidence.frontier != "none":
        lap("frontier")
    if allowed is not None:  # MERA's rounds and an LLM's ordering read the whole view
        anchors = tuple(pid for pid in anchors if pid in allowed)
        added = tuple(pid for pid in added if pid in allowed)
    final = tuple(anchors) + tuple(added)
    text = render(cfg.evidence.view, final, view, pool, cfg.evidence.max_block_chars)
    lap("render")
    scored = [scorer(pid, rank, explain) for rank, pid in enumerate(final, start=1)]
    scores = monotone_scores([None if r is None else r.score for r in scored])
    return Context(
        namespace=view.namespace, question=question, packet_ids=final, anchors=tuple(anchors),
        frontier_added=tuple(added), text=text, view=cfg.evidence.view, address=address, pool=pool,
        dense=dense, timings_ms=timings,
        trace={"stages": list(timings), "anchors": a_info, "frontier": f_info, "address": address.timings_ms},
        scores=dict(zip(final, scores)),
        explanations={pid: (r.explanation if r is not None and r.explanation is not None
                            else Explanation(cfg.evidence.frontier if pid in added else cfg.evidence.anchor_selector,
                                             None))
                      for pid, r in zip(final, scored)} if explain else {},
    )
