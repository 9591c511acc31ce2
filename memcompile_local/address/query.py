"""Address-plane query serving: lexical channel, Cell routing, and the scored candidate union
K_q (MemCompile paper, Sections 3.2.3-3.2.4, Algorithm 3).

This module stops at descriptor hits. Collapsing them to SourcePackets (U_q, Section 3.3) is
``normalize.normalize_to_packets``, and the dense packet proposals D_q are
``address.dense.dense_proposals``; ``pipeline.compile_context`` calls the three in order.

Candidate order (the positions the normalization boundary sees): r_i descending, then BM25
rank (descriptors the lexical channel did not return come after those it did), then the
descriptor's construction order. Channels are recorded per descriptor as ``"bm25"`` and
``"cell:<id>"`` in the order they reached it (BM25 first, then Cells in opening order); a
descriptor found by both keeps its BM25 contribution b_i.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from ..config import RoutingConfig
from ..errors import ConfigError
from ..types import AddressResult, Candidate, QueryIntent
from .index import AddressIndex
from .layouts import LAYOUTS
from .lexical import tokenize
from .routing import RoutingResult, route_cells
from .scoring import QueryTerms, bm25_bonus, candidate_score

BM25_CHANNEL = "bm25"


def cell_channel(cell_id: int) -> str:
    return f"cell:{cell_id}"


@dataclass(frozen=True)
class LexicalHit:
    position: int  # index into AddressIndex.descriptors
    score: float  # raw BM25


def lexical_channel(index: AddressIndex, intent: QueryIntent, cfg: RoutingConfig) -> list[LexicalHit]:
    """BM25 top ``cfg.bm25_top`` descriptors for the lexical query (positive scores only)."""
    if (cfg.bm25_k1, cfg.bm25_b) != (index.bm25_k1, index.bm25_b):
        raise ConfigError(
            f"routing.bm25_k1/bm25_b = ({cfg.bm25_k1}, {cfg.bm25_b}) differ from the values the index "
            f"was built with ({index.bm25_k1}, {index.bm25_b}); rebuild the AddressIndex"
        )
    hits = index.lexical.top_k(tokenize(intent.lexical_query()), cfg.bm25_top)
    return [LexicalHit(i, s) for i, s in hits]


def route_query(
    index: AddressIndex, query: QueryTerms, hits: Sequence[LexicalHit], cfg: RoutingConfig
) -> RoutingResult:
    """Algorithm 3 over the index's Cells, seeded by the first ``cfg.seeds`` lexical hits."""
    seeds = [index.descriptors[h.position] for h in hits[: max(0, cfg.seeds)]]
    return route_cells(index.cell_features, query.terms, query.people, query.is_temporal, cfg,
                       item_cap=index.item_cap, seeds=seeds)


def score_candidates(
    index: AddressIndex,
    query: QueryTerms,
    hits: Sequence[LexicalHit],
    opened: Sequence[int],
    cfg: RoutingConfig,
) -> list[Candidate]:
    """The union K_q (Eq. 6) scored by r_i (Eq. 7), in candidate order with positions."""
    channels: dict[int, list[str]] = {}
    bm25_rank: dict[int, int] = {}
    raw: dict[int, float] = {}
    # Cell-only (ablation A4): the lexical hits still seed routing, but they are not
    # candidates and give no BM25 contribution.
    lexical_hits = hits if cfg.channels != "cells" else []
    for rank, h in enumerate(lexical_hits):
        channels[h.position] = [BM25_CHANNEL]
        bm25_rank[h.position] = rank
        raw[h.position] = h.score
    for cid in opened:
        for did in index.cell_by_id[cid].descriptor_ids:
            channels.setdefault(index.descriptor_position[did], []).append(cell_channel(cid))
    s_max = lexical_hits[0].score if lexical_hits else 0.0
    no_rank = len(lexical_hits)
    scored = []
    for pos, chans in channels.items():
        r = candidate_score(query, index.descriptor_terms[pos], bm25_bonus(raw.get(pos, 0.0), s_max, cfg.bm25_map_scale), cfg)
        scored.append((-r, bm25_rank.get(pos, no_rank), pos, r, chans))
    scored.sort(key=lambda t: t[:3])
    out = []
    for position, (_, _, pos, r, chans) in enumerate(scored):
        d = index.descriptors[pos]
        out.append(Candidate(d.descriptor_id, d.packet_id, r, position, tuple(chans), raw.get(pos, 0.0)))
    return out


def address_query(
    index: AddressIndex,
    intent: QueryIntent,
    cfg: RoutingConfig = RoutingConfig(),
    *,
    layout: str | None = None,
) -> AddressResult:
    """Run the Address Plane for one query: the scored candidate union K_q (Eqs. 6-7).

    ``layout`` defaults to the index's layout; ``"flat"`` opens no Cells (BM25-only address
    channel) whatever Cells the index holds. ``cfg.channels`` selects the address channels:
    ``"both"`` (Eq. 6), ``"bm25"`` (no routing, ablation A5) or ``"cells"`` (routing seeded by
    BM25 but only Cell descriptors as candidates, ablation A4). ``timings_ms`` has one entry
    per stage (``bm25``, ``routing``, ``scoring``) plus ``total``.
    """
    layout = index.layout if layout is None else layout
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown placement layout {layout!r}; expected one of {list(LAYOUTS)}")
    timings: dict[str, float] = {}
    start = clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = (now - clock) * 1000.0
        clock = now

    query = QueryTerms.from_intent(intent)
    hits = lexical_channel(index, intent, cfg)
    lap("bm25")
    if layout == "flat" or not index.cells or cfg.channels == "bm25":
        routing = route_cells((), query.terms, query.people, query.is_temporal, cfg, item_cap=index.item_cap)
    else:
        routing = route_query(index, query, hits, cfg)
    lap("routing")
    candidates = score_candidates(index, query, hits, routing.opened, cfg)
    lap("scoring")
    timings["total"] = (clock - start) * 1000.0

    bm25 = tuple(
        Candidate(index.descriptors[h.position].descriptor_id, index.descriptors[h.position].packet_id,
                  h.score, rank, (BM25_CHANNEL,), h.score)
        for rank, h in enumerate(hits)
    )
    return AddressResult(
        intent=intent,
        bm25=bm25,
        opened_cells=routing.opened,
        candidates=tuple(candidates),
        timings_ms=timings,
        routing_trace=tuple(step.as_dict() for step in routing.steps),
    )
