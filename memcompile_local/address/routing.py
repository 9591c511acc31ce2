"""Diminishing-benefit Cell routing (MemCompile paper, Section 3.2.3, Eqs. 5, 22-23, Algorithm 3).

Base relevance of Cell c for query q (Eq. 22):

    u(c, q) = w_keywords J(Q, K_c) + w_people J(P, P_c) + w_title J(Q, Tok(title_c))
              + T_q(c) + w_density log(1 + |c|) / log(1 + M_C)

``Q`` is a term set, so ``K_c`` is taken as the content terms of the Cell's keyword phrases
and ``Tok(title_c)`` as the term set of its title; ``P``/``P_c`` are normalized names.
``T_q(c) = temporal_bonus`` when the query is temporal and the Cell holds a descriptor with an
event time. Cells with u below ``admission`` are dropped; the pool is the first
``max(pool_floor, pool_per_cell * cell_budget)`` Cells by u (ties: smaller Cell id first).

The pool is walked in that order (Algorithm 3 fixes the order up front; it does not re-rank by
gain). For each Cell, with ``O`` the Cells opened so far,

    R   = J(M_c, union of M over O), M_c = the Cell's people and keyword phrases
    adj = u (1 - redundancy R)
    g   = adj - open_cost (1 + |O|) - token_cost Tok(c)          (Eq. 23)

Once ``min_cells`` Cells are open, the walk stops at the first Cell with ``g < 0`` or with
``adj < relative_floor * u_best`` (u_best = u of the first pool Cell). After opening a Cell
it stops when ``cell_budget`` Cells are open, or when the opened ``adj`` values sum to at
least ``cumulative_top_p`` of the positive pool utility, defined as the sum of
``max(0, u)`` over the pool Cells (all of them are positive whenever admission > 0).

Seeds. The first ``seeds`` lexical hits seed Cell scoring as pseudo-relevance feedback: the
content terms of their keyword phrases are added to Q before u is computed; P stays the
query's own people. Reason: questions and extracted keywords often use different words for
the same thing, and the best lexical hits show which keywords the memory actually uses, so the
Cells around those hits rank high - that is what seeding asks for - while every Cell is still
scored by Eq. 22 unchanged. People are not expanded: with w_people the largest weight, the
seeds' people would turn a question that names nobody (or one person) into a routing by
whoever the lexical hits happen to mention. ``seeds = 0`` turns the expansion off.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Sequence

from ..config import RoutingConfig
from ..types import Cell, Descriptor
from ..language.tokens import jaccard, phrase_terms, term_set


@dataclass(frozen=True)
class CellFeatures:
    """What routing reads from one Cell, precomputed once per index."""

    cell_id: int
    keyword_terms: frozenset[str]  # K_c as terms
    people: frozenset[str]  # P_c
    title_terms: frozenset[str]  # Tok(title_c)
    markers: frozenset[str]  # M_c: people and keyword phrases (redundancy)
    size: int
    tokens: int
    has_time: bool

    @classmethod
    def of(cls, cell: Cell) -> "CellFeatures":
        return cls(
            cell_id=cell.cell_id,
            keyword_terms=phrase_terms(cell.keywords),
            people=frozenset(cell.people),
            title_terms=term_set(cell.title),
            markers=frozenset(cell.people) | frozenset(cell.keywords),
            size=len(cell.descriptor_ids),
            tokens=cell.tokens,
            has_time=cell.has_time,
        )


def cell_utility(
    f: CellFeatures,
    query_terms: frozenset[str],
    query_people: frozenset[str],
    is_temporal: bool,
    cfg: RoutingConfig,
    item_cap: int,
) -> float:
    """u(c, q), Eq. 22."""
    temporal = cfg.temporal_bonus if (is_temporal and f.has_time) else 0.0
    density = math.log(1 + f.size) / math.log(1 + item_cap) if item_cap > 0 else 0.0
    return (
        cfg.w_keywords * jaccard(query_terms, f.keyword_terms)
        + cfg.w_people * jaccard(query_people, f.people)
        + cfg.w_title * jaccard(query_terms, f.title_terms)
        + temporal
        + cfg.w_density * density
    )


def seed_expansion(seeds: Sequence[Descriptor], query_terms: frozenset[str]) -> frozenset[str]:
    """Q used for u: the query's terms plus the keyword terms of the seed descriptors."""
    q = set(query_terms)
    for d in seeds:
        q.update(phrase_terms(d.keywords))
    return frozenset(q)


@dataclass(frozen=True)
class PoolEntry:
    """A Cell admitted to the routing pool with its base relevance."""

    cell_id: int
    u: float
    markers: frozenset[str]
    tokens: int


@dataclass(frozen=True)
class RoutingStep:
    """One examined pool Cell: its numbers and what the walk did with it."""

    cell_id: int
    u: float
    redundancy: float  # R
    adjusted: float  # u (1 - lambda_R R)
    gain: float  # g, Eq. 23
    decision: str  # "open" or "stop"
    reason: str = ""  # why the walk stopped at or right after this Cell ("" while it continues)

    def as_dict(self) -> dict:
        return asdict(self)


STOP_GAIN = "gain_below_zero"
STOP_RELATIVE = "below_relative_floor"
STOP_CAP = "cell_budget"
STOP_CUMULATIVE = "cumulative_utility"
STOP_EXHAUSTED = "pool_exhausted"
STOP_EMPTY = "empty_pool"


@dataclass(frozen=True)
class RoutingResult:
    opened: tuple[int, ...]  # Cell ids in opening order
    steps: tuple[RoutingStep, ...]
    pool: tuple[PoolEntry, ...]
    stop_reason: str
    pool_utility: float  # sum of max(0, u) over the pool
    query_terms: frozenset[str]  # Q after seed expansion
    query_people: frozenset[str]  # P


def pool_size(cfg: RoutingConfig) -> int:
    return max(cfg.pool_floor, cfg.pool_per_cell * cfg.cell_budget)


def score_pool(
    features: Sequence[CellFeatures],
    query_terms: frozenset[str],
    query_people: frozenset[str],
    is_temporal: bool,
    cfg: RoutingConfig,
    item_cap: int,
) -> list[PoolEntry]:
    """Admitted Cells (u >= admission) by u descending then id, cut to the pool size."""
    scored = []
    for f in features:
        u = cell_utility(f, query_terms, query_people, is_temporal, cfg, item_cap)
        if u >= cfg.admission:
            scored.append(PoolEntry(f.cell_id, u, f.markers, f.tokens))
    scored.sort(key=lambda e: (-e.u, e.cell_id))
    return scored[: pool_size(cfg)]


def open_cells(pool: Sequence[PoolEntry], cfg: RoutingConfig) -> tuple[list[int], list[RoutingStep], str]:
    """Walk the pool in order and open Cells under the stopping rules of Algorithm 3."""
    if not pool:
        return [], [], STOP_EMPTY
    target = cfg.cumulative_top_p * sum(max(0.0, e.u) for e in pool)
    best_u = pool[0].u
    opened: list[int] = []
    steps: list[RoutingStep] = []
    covered: set[str] = set()
    cumulative = 0.0
    for e in pool:
        r = jaccard(e.markers, covered)
        adjusted = e.u * (1 - cfg.redundancy * r)
        gain = adjusted - cfg.open_cost * (1 + len(opened)) - cfg.token_cost * e.tokens
        if len(opened) >= cfg.min_cells:
            reason = ""
            if gain < 0:
                reason = STOP_GAIN
            elif adjusted < cfg.relative_floor * best_u:
                reason = STOP_RELATIVE
            if reason:
                steps.append(RoutingStep(e.cell_id, e.u, r, adjusted, gain, "stop", reason))
                return opened, steps, reason
        opened.append(e.cell_id)
        covered |= e.markers
        cumulative += adjusted
        reason = ""
        if len(opened) >= cfg.cell_budget:
            reason = STOP_CAP
        elif cumulative >= target:
            reason = STOP_CUMULATIVE
        steps.append(RoutingStep(e.cell_id, e.u, r, adjusted, gain, "open", reason))
        if reason:
            return opened, steps, reason
    # The walk ran out of pool Cells: record that on the last step too.
    steps[-1] = replace(steps[-1], reason=STOP_EXHAUSTED)
    return opened, steps, STOP_EXHAUSTED


def route_cells(
    features: Sequence[CellFeatures],
    query_terms: frozenset[str],
    query_people: frozenset[str],
    is_temporal: bool,
    cfg: RoutingConfig,
    *,
    item_cap: int,
    seeds: Sequence[Descriptor] = (),
) -> RoutingResult:
    """Algorithm 3 over precomputed Cell features; ``seeds`` are the top lexical descriptors."""
    q = seed_expansion(seeds[: max(0, cfg.seeds)], query_terms)
    pool = score_pool(features, q, query_people, is_temporal, cfg, item_cap)
    opened, steps, reason = open_cells(pool, cfg)
    return RoutingResult(
        opened=tuple(opened),
        steps=tuple(steps),
        pool=tuple(pool),
        stop_reason=reason,
        pool_utility=sum(max(0.0, e.u) for e in pool),
        query_terms=q,
        query_people=query_people,
    )
