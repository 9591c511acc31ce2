"""Scores a client can read: every selected packet's relevance in [0, 1], and why it was chosen.

Each anchor selector says what one packet of its selection is worth on its own scale
(``Relevance``: a score in [0, 1] and, on request, an ``Explanation`` of the numbers behind
it), and ``monotone_scores`` turns those into the scores a search returns: down the final list
each score is capped by the one above it, so the scores never rise down the list and a
threshold on them keeps a prefix of it. The list is in score order except where a stage
composes it otherwise (MemPursuit's complementary picks, an MMR or LLM ordering, a frontier or
MERA round), and there the cap is what keeps the scores monotone.

What the score means per selector:

* ``fused`` (weighted sum): the weighted channel sum divided by the largest sum the channels
  computed for the query can reach (``fused.channels.FusedScores``): a fixed scale of the
  configuration and the memory, so a threshold means the same for every question;
* ``learned``: the calibrated probability that the turn is gold evidence for the question
  (``fused.ranker``); 0 for a turn outside the ranker's pool;
* ``normalized`` and ``mmr``: the packet's address score r_i (Eq. 7) divided by the largest r_i
  Eq. 7 can give under the routing weights (``address_score_scale``);
* ``dense`` and ``pursuit``: the cosine between the query and the packet document z(p), below 0
  read as 0;
* ``llm``: the model orders the pool without scoring it, so the score is 1 / rank (1, 0.5,
  0.33, ...): a threshold on it is a cut at a rank.

A packet a selector did not score (one a frontier or a MERA round added from outside what the
selector read) takes the score of the hit above it (0 when it is first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import RoutingConfig


@dataclass(frozen=True)
class ChannelValue:
    """One channel of an explanation: its value for the packet and what it added to the
    selector's raw score (None when the selector is not a weighted sum)."""

    name: str
    value: float
    contribution: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "contribution": self.contribution}


@dataclass(frozen=True)
class Explanation:
    """Why one packet was chosen: the selector, its own score before the mapping to [0, 1]
    (None when it has none) and the channels it read, as the selector computed them."""

    selector: str
    raw: float | None
    channels: tuple[ChannelValue, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"selector": self.selector, "raw": self.raw, "channels": [c.to_dict() for c in self.channels]}


@dataclass(frozen=True)
class Relevance:
    """A selector's score of one packet in [0, 1] (before ``monotone_scores``) and, when asked
    for, its explanation."""

    score: float
    explanation: Explanation | None = None


def clamp(x: float) -> float:
    """``x`` clipped to [0, 1]."""
    return min(1.0, max(0.0, float(x)))


def monotone_scores(scores: Sequence[float | None]) -> list[float]:
    """The scores of a ranked list as a search returns them: each in [0, 1] and at most the
    one above it; a missing score (None) takes the one above it, 0 at the top."""
    out: list[float] = []
    for s in scores:
        cap = out[-1] if out else None
        value = (cap if cap is not None else 0.0) if s is None else clamp(s)
        out.append(value if cap is None else min(cap, value))
    return out


def address_score_scale(cfg: RoutingConfig) -> float:
    """The largest address score r_i of Eq. 7 under ``cfg``: each Jaccard term is at most 1,
    the temporal indicator 1, and the BM25 bonus b_i at most ``bm25_map_scale``."""
    return cfg.alpha_f + cfg.alpha_k + cfg.alpha_p + cfg.alpha_t + cfg.alpha_b * cfg.bm25_map_scale


def address_relevance(score: float, cfg: RoutingConfig, selector: str, explain: bool) -> Relevance:
    """A packet of the normalized pool U_q scored r_i: r_i over ``address_score_scale``."""
    scale = address_score_scale(cfg)
    value = clamp(score / scale) if scale > 0 else 0.0
    return Relevance(value, Explanation(selector, float(score), (ChannelValue("address", float(score), None),))
                     if explain else None)


def cosine_relevance(cosine: float, selector: str, explain: bool) -> Relevance:
    """A packet scored by its cosine with the query: the cosine, below 0 read as 0."""
    return Relevance(clamp(cosine), Explanation(selector, float(cosine), (ChannelValue("dense_turn", float(cosine),
                                                                                       None),))
                     if explain else None)


def rank_relevance(rank: int, selector: str, explain: bool) -> Relevance:
    """A packet an ordering placed at 1-based ``rank`` without a score: 1 / rank."""
    return Relevance(1.0 / rank, Explanation(selector, None) if explain else None)
