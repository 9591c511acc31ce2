"""Candidate score r_i of an address hit (MemCompile paper, Eq. 7 and Appendix B.3).

    r_i = alpha_f J(Term_q, Term_i) + alpha_k J(Term_q, Key_i) + alpha_p J(Per_q, Per_i)
          + alpha_t 1_t(i, q) + alpha_b b_i

Sets, all built with ``text``:

* ``Term_q``: ``term_set`` of the lexical query (question plus intent people, keywords, time;
  ``QueryIntent.lexical_query``) - the same text BM25 searches with.
* ``Term_i``: ``term_set`` of the claim text.
* ``Key_i``: the content terms of the descriptor's keyword phrases (``phrase_terms``), so that
  it is comparable with the query's terms.
* ``Per_q``, ``Per_i``: normalized person names (``normalize_name``).
* ``1_t(i, q)``: the query is temporal and the descriptor has a (non-empty) normalized event time.
* ``b_i = BM25_MAP_SCALE * log(1 + s_i) / log(1 + s_max)`` for descriptors the lexical channel
  returned, with ``s_max`` the best raw score among them; 0 for the rest and when s_max <= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import RoutingConfig
from ..types import Descriptor, QueryIntent
from ..language.tokens import jaccard, normalize_name, phrase_terms, term_set

# The factor 2 of the raw-BM25 mapping 2 log(1+s_i)/log(1+s_max) (Appendix B.3). It has no
# RoutingConfig field yet, so it is named here.
BM25_MAP_SCALE = 2.0


def normalized_people(names) -> frozenset[str]:
    return frozenset(n for n in (normalize_name(p) for p in names) if n)


@dataclass(frozen=True)
class QueryTerms:
    """The query side of Eq. 7 (and of routing, Eq. 22)."""

    terms: frozenset[str]
    people: frozenset[str]
    is_temporal: bool

    @classmethod
    def from_intent(cls, intent: QueryIntent) -> "QueryTerms":
        return cls(term_set(intent.lexical_query()), normalized_people(intent.people), bool(intent.is_temporal))


@dataclass(frozen=True)
class DescriptorTerms:
    """The descriptor side of Eq. 7, precomputed once per descriptor."""

    terms: frozenset[str]
    keyword_terms: frozenset[str]
    people: frozenset[str]
    has_event_time: bool

    @classmethod
    def of(cls, d: Descriptor) -> "DescriptorTerms":
        return cls(
            terms=term_set(d.text),
            keyword_terms=phrase_terms(d.keywords),
            people=normalized_people(d.people),
            has_event_time=bool((d.event_time or "").strip()),
        )


def bm25_bonus(raw: float, s_max: float, scale: float = BM25_MAP_SCALE) -> float:
    """b_i for a lexically returned descriptor with raw score ``raw``; 0 when s_max <= 0."""
    if s_max <= 0 or raw <= 0:
        return 0.0
    return scale * math.log1p(raw) / math.log1p(s_max)


def candidate_score(q: QueryTerms, d: DescriptorTerms, bonus: float, cfg: RoutingConfig = RoutingConfig()) -> float:
    """r_i (Eq. 7) given the already mapped BM25 bonus b_i."""
    temporal = 1.0 if (q.is_temporal and d.has_event_time) else 0.0
    return (
        cfg.alpha_f * jaccard(q.terms, d.terms)
        + cfg.alpha_k * jaccard(q.terms, d.keyword_terms)
        + cfg.alpha_p * jaccard(q.people, d.people)
        + cfg.alpha_t * temporal
        + cfg.alpha_b * bonus
    )
