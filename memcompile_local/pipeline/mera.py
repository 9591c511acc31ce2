"""Wiring of MERA's rounds (evidence/mera.py) into the query path.

``mera_anchors`` takes the anchors A0 a selector chose and returns the anchors after the
rounds, with the trace. The follow-up queries search the whole memory: on a view with the
fused index through the fused score (each query's own embedding when an embedder is
there), otherwise through the Address Plane (rule intent, normalization to packets) followed
by the dense proposals. The planner and verifier follow ``cfg.mera``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..address.dense import dense_proposals
from ..address.intent import rule_intent
from ..address.query import address_query
from ..config import PipelineConfig
from ..errors import ConfigError
from ..evidence.mera import LLMPlanner, LLMVerifier, MeraResult, RulePlanner, RuleVerifier, run_mera
from ..fused.channels import score_order
from ..fused.retriever import FusedRetriever, query_vector
from ..protocols import Embedder, ModelClient
from ..views.record import MemoryView
from .normalize import normalize_to_packets

__all__ = ["memory_search", "mera_parts", "mera_anchors"]


def _qvec(embedder: Embedder | None, texts: list[str]) -> np.ndarray | None:
    if embedder is None:
        return None
    embed = getattr(embedder, "embed_query", None) or embedder.embed
    return query_vector(np.asarray(embed(texts), dtype=np.float32))


def memory_search(view: MemoryView, cfg: PipelineConfig, embedder: Embedder | None, depth: int):
    """``query -> [(packet id, score), ...]`` over every packet of ``view``, best first."""
    speakers = sorted({p.speaker for p in view.packets})
    retriever = FusedRetriever(view.fusion, cfg.fusion, view.packets) if view.fusion is not None else None

    def search(query: str) -> list[tuple[str, float]]:
        intent = rule_intent(query, known_people=speakers)
        if retriever is not None:
            vec = retriever.query_vector(embedder, query, intent.lexical_query())
            total = retriever.scores(query, vec).total
            return [(view.fusion.packet_ids[i], float(total[i])) for i in score_order(total)[:depth]]
        pool = normalize_to_packets(address_query(view.index, intent, cfg.routing, layout=cfg.placement.layout)
                                    .candidates, view.index.packet_ordinal)
        out = {pc.packet_id: float(pc.score) for pc in pool[:depth]}
        top = max(out.values(), default=1.0) or 1.0
        vec = _qvec(embedder, [intent.lexical_query()])
        for pid, cos in dense_proposals(view.index.dense, vec, depth) if vec is not None else ():
            out.setdefault(pid, float(cos) * top)  # a dense-only hit, on the lexical scale
        return sorted(out.items(), key=lambda kv: (-kv[1], view.index.packet_ordinal.get(kv[0], 0)))[:depth]

    return search


def mera_parts(view: MemoryView, cfg: PipelineConfig, client: ModelClient | None):
    """The (planner, verifier) that ``cfg.mera`` names."""
    m = cfg.mera
    by_packet = view.descriptors_by_packet
    rule_planner = RulePlanner(by_packet, queries=m.queries_per_round, read=m.read)
    rule_verifier = RuleVerifier(by_packet, threshold=m.verify_threshold)
    if "llm" in (m.planner, m.verifier) and client is None:
        raise ConfigError("MERA's LLM planner or verifier needs a model backend; use mera.planner/verifier='rule'")
    planner = LLMPlanner(client, rule_planner, queries=m.queries_per_round, read=m.read) \
        if m.planner == "llm" else rule_planner
    verifier = LLMVerifier(client, rule_verifier) if m.verifier == "llm" else rule_verifier
    return planner, verifier


def mera_anchors(question: str, anchors: Sequence[str], view: MemoryView, cfg: PipelineConfig, *,
                 client: ModelClient | None, embedder: Embedder | None) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A0 after MERA's rounds (same size as ``anchors``) and the rounds' trace."""
    m = cfg.mera
    planner, verifier = mera_parts(view, cfg, client)
    search = memory_search(view, cfg, embedder, depth=max(m.hits_per_query, 10))
    res: MeraResult = run_mera(question, anchors, search, view.packets_by_id, planner, verifier,
                               k=len(anchors), max_rounds=m.max_rounds, hits_per_query=m.hits_per_query,
                               final_slots=m.final_slots, max_tokens=m.max_tokens, namespace=view.namespace)
    return res.packet_ids, res.trace()
