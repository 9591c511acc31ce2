"""The channels of the fused score, as a table, and their weighted sum.

Each channel scores every packet of a ``FusionIndex`` for one query, normalized to a
comparable range; ``fused_scores`` adds them up, each times its ``FusionConfig`` weight
(``<name>_weight``). Scores are fused by value, not by rank: a channel that is confident (one
very high BM25 score) keeps that confidence. A channel whose weight is 0 is not computed.

- lexical: BM25 (Snowball-stemmed terms) over the lexical documents, divided by the query's
  best score, so it lies in [0, 1]; with ``name_term_weight`` below 1, the terms of the one
  participant the question names count that much (the speaker channel already says who; a
  first-person turn rewritten to "Nora ..." matches "Nora" in every claim, so a question whose
  other terms match nothing would rank that speaker's shortest turns first); with
  ``name_term_scope="alone"`` only when no other term of the question matches any turn;
- packet: the cosine between the query vector and the packet document z(p); with
  ``dense_neighbor_context`` the larger of that and the cosine with the packet's context
  document, so the dense channel sees the neighbourhood the lexical one does (with
  ``context_window_words``, only for packets whose context document has at most that many
  words: a longer one is cut to its first window, mostly the previous turn); with
  ``passage_words``, a turn longer than that scores by its passages' pooled cosine;
- speaker: 1 for packets spoken by the one participant the question names (questions about a
  person are mostly answered by that person's own turns);
- temporal: for a question that asks about time, 1 for packets with a claim whose event time
  was resolved;
- time_match: for a question that names a period ("in June", "August 2023"), 1 for packets
  whose session date or a resolved event time falls in it.

A new channel is one function in ``CHANNELS`` and one ``<name>_weight`` field of FusionConfig.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ..address.passages import best_passage_scores
from ..config import FusionConfig
from ..language.answertype import asks_for_entity
from ..language.stemming import stem_terms
from ..language.timecues import is_temporal_question
from .documents import has_assistant, named_participants, role_side
from .index import FusionIndex


@dataclass(frozen=True)
class FusedQuery:
    """What the channels read of one query: the question as asked, its query vector and the
    date it is asked (``anchor``; its relative times resolve against it)."""

    question: str
    vector: np.ndarray | None
    anchor: dt.datetime | None = None
    name_term_weight: float = 1.0  # FusionConfig.name_term_weight
    name_term_scope: str = "always"  # FusionConfig.name_term_scope


@dataclass(frozen=True)
class FusedScores:
    total: np.ndarray  # the fused score of every packet, aligned with the index's packet ids
    channels: dict[str, np.ndarray]  # each computed channel's scores, before weighting


def _normalized(s: np.ndarray) -> np.ndarray:
    top = float(s.max()) if s.size else 0.0
    return s / top if top > 0 else np.zeros(len(s))


def lexical_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    terms = index.query_terms(query.question)
    if query.name_term_weight == 1.0:
        return _normalized(index.lexical.scores(terms))
    named = named_participants(query.question, index.participants, tolerant=index.tolerant_names)
    name_terms = set(stem_terms(named[0])) if len(named) == 1 else set()
    own = [t for t in terms if t in name_terms]
    if not own:
        return _normalized(index.lexical.scores(terms))
    rest = index.lexical.scores([t for t in terms if t not in name_terms])
    if query.name_term_scope == "alone" and rest.max() > 0:
        return _normalized(index.lexical.scores(terms))
    name = index.lexical.scores(own)
    # Divided by the best score of all terms at full weight, so a name-only match stays small
    # instead of being scaled back up to 1.
    top = float((rest + name).max())
    return (rest + query.name_term_weight * name) / top if top > 0 else np.zeros(len(rest))


def name_weighted(full: np.ndarray, unnamed: np.ndarray, weight: float, scope: str) -> np.ndarray:
    """:func:`lexical_channel` at name weight ``weight`` and ``scope``, from the same channel at
    weight 1 (``full``) and at weight 0 (``unnamed``): the channel is linear in the weight, and
    under "alone" the weight applies only where no other term matched (``unnamed`` all zero).
    What an ablation uses to score many weights from two computed channels."""
    if scope == "alone" and unnamed.any():
        return full
    return weight * full + (1.0 - weight) * unnamed


def packet_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray | None:
    """None (no channel) without a query vector or packet embeddings."""
    if query.vector is None or index.packet_matrix is None:
        return None
    return packet_scores(index, query.vector, *dense_cosines(index, query.vector))


def dense_cosines(index: FusionIndex, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The cosine of ``vector`` with every packet's z(p) and with its context document (None
    without context vectors), float64; the index must have packet embeddings."""
    cos = (index.packet_matrix @ vector).astype(np.float64)
    ctx = (index.context_matrix @ vector).astype(np.float64) if index.context_matrix is not None else None
    return cos, ctx


def packet_scores(index: FusionIndex, vector: np.ndarray, cos: np.ndarray, ctx: np.ndarray | None) -> np.ndarray:
    """The packet channel from ``dense_cosines``: long turns by their passages, then the larger
    of that and the context cosine where the context gate lets it count."""
    out = cos.copy()
    if index.passage_matrix is not None:
        # A long turn scores by its passages (the turn's own vector read only its first window).
        rows = np.unique(index.passage_owner)
        pooled = best_passage_scores((index.passage_matrix @ vector).astype(np.float64), index.passage_owner,
                                     len(out), pool=index.passage_pool)
        out[rows] = pooled[rows]
    if ctx is not None:
        out = np.maximum(out, ctx) if index.context_rows is None else np.where(index.context_rows,
                                                                               np.maximum(out, ctx), out)
    return out


def speaker_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    return _own_turns(index, named_participants(query.question, index.participants, tolerant=index.tolerant_names))


def role_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray | None:
    """1.0 on the turns of the side a question that names nobody points at with its pronouns
    (documents.role_side); None on a history without an assistant, so the sum there
    is exactly what it was."""
    if not has_assistant(index.participants):
        return None
    if named_participants(query.question, index.participants, tolerant=index.tolerant_names):
        return np.zeros(len(index.packet_ids))  # the speaker channel has it
    return _own_turns(index, role_side(query.question, index.participants))


def _own_turns(index: FusionIndex, named: Sequence[str]) -> np.ndarray:
    """1.0 on the turns of the one participant in ``named`` (all 0 unless exactly one)."""
    bonus = np.zeros(len(index.packet_ids))
    if len(named) == 1:
        bonus[[i for i, s in enumerate(index.speakers) if s == named[0]]] = 1.0
    return bonus


def temporal_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    return index.dated if is_temporal_question(query.question) else np.zeros(len(index.packet_ids))


def time_match_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    return index.time_match(query.question, query.anchor)


def answer_type_channel(index: FusionIndex, query: FusedQuery) -> np.ndarray:
    """For a question asking for a person, place or title: 1 for turns that name one (of the
    one participant the question names, where it names one)."""
    n = len(index.packet_ids)
    if index.entity_rows is None or not asks_for_entity(query.question):
        return np.zeros(n)
    named = named_participants(query.question, index.participants, tolerant=index.tolerant_names)
    if len(named) == 1:
        return index.entity_rows * _own_turns(index, named)
    return index.entity_rows.copy()


Channel = Callable[[FusionIndex, FusedQuery], "np.ndarray | None"]

# name -> score function; the weight of channel ``name`` is ``FusionConfig.<name>_weight``.
# The order is the order of the sum.
CHANNELS: dict[str, Channel] = {
    "lexical": lexical_channel,
    "packet": packet_channel,
    "speaker": speaker_channel,
    "temporal": temporal_channel,
    "time_match": time_match_channel,
    "answer_type": answer_type_channel,
    "role": role_channel,
}


def channel_weights(cfg: FusionConfig) -> dict[str, float]:
    """The weight of each channel of ``CHANNELS`` under ``cfg``."""
    return {name: getattr(cfg, f"{name}_weight") for name in CHANNELS}


def fused_scores(index: FusionIndex, question: str, query_vec: np.ndarray | None, cfg: FusionConfig, *,
                 anchor: dt.datetime | None = None) -> FusedScores:
    """The fused score of every packet (aligned with ``index.packet_ids``) and its channels;
    ``anchor`` is the date the question is asked (its relative time expressions resolve against it)."""
    query = FusedQuery(question, query_vec, anchor, cfg.name_term_weight, cfg.name_term_scope)
    channels: dict[str, np.ndarray] = {}
    for name, weight in channel_weights(cfg).items():
        if weight:
            values = CHANNELS[name](index, query)
            if values is not None:
                channels[name] = values
    return FusedScores(total=combine(channels, cfg, len(index.packet_ids)), channels=channels)


def combine(channels: Mapping[str, np.ndarray], cfg: FusionConfig, n: int | None = None) -> np.ndarray:
    """The weighted sum of ``fused_scores`` channels under ``cfg``."""
    weights = channel_weights(cfg)
    total = np.zeros(n if n is not None else len(next(iter(channels.values()))))
    for name, values in channels.items():
        total += weights[name] * values
    return total


def score_order(total: np.ndarray) -> np.ndarray:
    """Row indices by descending score, ties by dialogue order."""
    return np.lexsort((np.arange(len(total)), -total))
