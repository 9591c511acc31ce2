"""Query-time wiring: intent -> Address Plane -> normalization -> Evidence Plane -> reader view.

Each step calls a stage function from its own module; this module decides only which stages
run, following ``PipelineConfig`` (the presets of ``evidence.presets`` are configurations).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .config import PipelineConfig
from .errors import ConfigError
from .types import AddressResult, Descriptor, QueryIntent, SourcePacket


@dataclass(frozen=True)
class Context:
    """The compiled evidence for one question."""

    namespace: str
    question: str
    packet_ids: tuple[str, ...]  # final ordered packet sequence E_q
    anchors: tuple[str, ...]  # A0
    frontier_added: tuple[str, ...]  # Delta_q
    text: str  # the reader view
    view: str
    address: AddressResult
    timings_ms: dict[str, float] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryView:
    """What query time needs of one built namespace (loaded once, reused across questions)."""

    namespace: str
    packets: tuple[SourcePacket, ...]
    packets_by_id: Mapping[str, SourcePacket]
    descriptors_by_packet: Mapping[str, tuple[Descriptor, ...]]
    index: Any  # address.index.AddressIndex
    packet_matrix: np.ndarray | None  # (N, d) in packet order, l2-normalized
    row_of: Mapping[str, int]  # packet id -> row in packet_matrix
    fusion: Any = None  # fused.FusionIndex when the fused selector is configured


def query_intent(question: str, cfg: PipelineConfig, client: Any, view: MemoryView) -> QueryIntent:
    from .address.intent import llm_intent, rule_intent
    from .language.timecues import is_temporal_question

    speakers = sorted({p.speaker for p in view.packets})
    if not cfg.extraction.use_intent:
        return QueryIntent(question=question, is_temporal=is_temporal_question(question))
    if cfg.extraction.intent_source == "rule":
        return rule_intent(question, known_people=speakers)
    if client is None:
        raise ConfigError("the LLM query intent needs a model backend; use intent_source='rule' for the model-free path")
    return llm_intent(client, question, namespace=view.namespace, known_people=speakers)


def _embed_query(embedder: Any, intent: QueryIntent) -> np.ndarray | None:
    if embedder is None:
        return None
    vec = np.asarray(embedder.embed([intent.lexical_query()]), dtype=np.float32)[0]
    return vec


def select_anchors(
    selector: str,
    *,
    question: str,
    address: AddressResult,
    view: MemoryView,
    cfg: PipelineConfig,
    client: Any,
    query_vec: np.ndarray | None,
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A0: the first K0 packets, chosen by the configured selector."""
    k0 = cfg.evidence.k0
    pool_ids = [pc.packet_id for pc in address.pool]
    if selector == "normalized":
        return tuple(pool_ids[:k0]), {}
    if selector == "dense":
        return tuple(pid for pid, _ in address.dense[:k0]), {}
    if selector == "mmr":
        from .normalize import mmr_anchors

        ids = mmr_anchors(address.pool, address.candidates, view.index.descriptor_by_id,
                          view.index.cell_of_descriptor, cfg.routing, k=k0)
        return tuple(ids), {}
    if selector == "llm":
        ids, info = _llm_ordering(question, pool_ids, k0, "schedule", view, cfg, client)
        return tuple(ids), info
    if selector == "fused":
        from .fused import select_fused

        if view.fusion is None:
            raise ConfigError("the fused selector needs its index; build the memory with anchor_selector='fused'")
        return tuple(select_fused(view.fusion, question, query_vec, cfg.fusion, k0)), {}
    if selector == "pursuit":
        ids = _pursuit_order(pool_ids + [p for p, _ in address.dense], query_vec, view, k0, cfg.evidence.pursuit_tau,
                             limit=cfg.evidence.pursuit_pool)
        return tuple(ids), {}
    raise ConfigError(f"unknown anchor selector {selector!r}")


def _llm_ordering(question: str, packet_ids: Sequence[str], k: int, stage: str, view: MemoryView,
                  cfg: PipelineConfig, client: Any) -> tuple[list[str], dict[str, Any]]:
    """A closed-pool listwise ordering of ``packet_ids`` by the model (scheduler or frontier)."""
    from .evidence.scheduler import schedule_packets

    if client is None:
        raise ConfigError(f"the LLM {stage} stage needs a model backend")
    ev = cfg.evidence
    if ev.max_schedule_pool is not None:
        packet_ids = list(packet_ids)[: max(ev.max_schedule_pool, k)]
    res = schedule_packets(client, question, [view.packets_by_id[i] for i in packet_ids], k=k, stage=stage,
                           namespace=view.namespace, max_retries=ev.max_retries,
                           max_content_chars=ev.max_candidate_chars)
    return list(res.packet_ids), {"attempts": res.attempts, "rounds": res.rounds, "repaired": res.repaired}


def _pursuit_order(candidate_ids: Sequence[str], query_vec, view: MemoryView, k: int, tau: float,
                   limit: int | None = None) -> list[str]:
    """MemPursuit over the first ``limit`` distinct candidates (P), in the given order."""
    from .evidence.pursuit import mem_pursuit

    if query_vec is None or view.packet_matrix is None:
        raise ConfigError("MemPursuit needs packet embeddings and an embedder")
    seen: dict[str, None] = {}
    for pid in candidate_ids:
        seen.setdefault(pid, None)
    ids = list(seen)[:limit]
    if not ids:
        return []
    X = view.packet_matrix[[view.row_of[i] for i in ids]]
    res = mem_pursuit(query_vec, X, k=min(k, len(ids)), tau=tau)
    return [ids[i] for i in res.indices]


def run_frontier(
    mode: str,
    *,
    question: str,
    anchors: Sequence[str],
    address: AddressResult,
    view: MemoryView,
    cfg: PipelineConfig,
    client: Any,
    query_vec: np.ndarray | None,
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Delta_q: at most K_Delta packets appended from the first K_R of an ordering of W_q."""
    from .evidence.frontier import bounded_frontier, frontier_pool

    if mode == "none":
        return (), {}
    ev = cfg.evidence
    pool = frontier_pool(anchors, [pid for pid, _ in address.dense[: ev.k_dense]])
    if mode == "llm":
        # Only the first K_R positions of the ordering are read, so only K_R labels are requested.
        ordering, info = _llm_ordering(question, pool, min(ev.k_rank, len(pool)), "frontier", view, cfg, client)
    elif mode == "pursuit":
        ordering = _pursuit_order(pool, query_vec, view, ev.k_rank, ev.pursuit_tau)
        info = {}
    else:
        raise ConfigError(f"unknown frontier mode {mode!r}")
    final = bounded_frontier(anchors, ordering, k_rank=ev.k_rank, k_append=ev.k_append)
    return tuple(final[len(anchors):]), {"ordering": ordering, **info}


def render(view_name: str, packet_ids: Sequence[str], view: MemoryView, address: AddressResult) -> str:
    from .evidence.views import render_view

    packets = [view.packets_by_id[i] for i in packet_ids]
    representative = {pc.packet_id: pc.representative for pc in address.pool}
    return render_view(view_name, packets, view.descriptors_by_packet, representative)


def compile_context(
    question: str,
    view: MemoryView,
    cfg: PipelineConfig,
    *,
    client: Any = None,
    embedder: Any = None,
) -> Context:
    """Compile the reader context for one question over one built memory."""
    from .address.query import address_query

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    intent = query_intent(question, cfg, client, view)
    t1 = time.perf_counter()
    timings["intent"] = (t1 - t0) * 1000
    query_vec = _embed_query(embedder, intent)
    t2 = time.perf_counter()
    timings["embed_query"] = (t2 - t1) * 1000
    address = address_query(view.index, intent, cfg.routing, query_embedding=query_vec,
                            k_dense=cfg.evidence.k_dense, layout=cfg.placement.layout)
    t3 = time.perf_counter()
    timings["address"] = (t3 - t2) * 1000
    anchors, a_info = select_anchors(cfg.evidence.anchor_selector, question=question, address=address,
                                     view=view, cfg=cfg, client=client, query_vec=query_vec)
    t4 = time.perf_counter()
    timings["anchors"] = (t4 - t3) * 1000
    added, f_info = run_frontier(cfg.evidence.frontier, question=question, anchors=anchors, address=address,
                                 view=view, cfg=cfg, client=client, query_vec=query_vec)
    t5 = time.perf_counter()
    timings["frontier"] = (t5 - t4) * 1000
    final = tuple(anchors) + tuple(added)
    text = render(cfg.evidence.view, final, view, address)
    timings["render"] = (time.perf_counter() - t5) * 1000
    return Context(
        namespace=view.namespace, question=question, packet_ids=final, anchors=tuple(anchors),
        frontier_added=tuple(added), text=text, view=cfg.evidence.view, address=address,
        timings_ms=timings, trace={"anchors": a_info, "frontier": f_info, "address": address.timings_ms},
    )
