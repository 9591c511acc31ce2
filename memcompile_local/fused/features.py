"""Per-turn features of the learned ranker (issue 25 item 5): one float row per candidate turn.

``query_features`` turns (FusionIndex, the conversation's packets, one query) into a matrix
with one row per candidate turn and one column per name of ``FEATURE_NAMES``. The candidates
are the ``pool`` turns with the best weighted-sum score (``channels.fused_scores`` under the
package's hand-fit weights): the ranker reorders that head and leaves the tail in fused order,
so a question costs a few hundred tree lookups, not one per turn of a long history.

The columns are what the index already holds or can give cheaply: the channels of
``channels.CHANNELS`` at unit weight (the lexical one at the package's name weight, at full
weight and without the named participant's terms), the two cosines the packet channel takes
the larger of (z(p) and the context document), the weighted sum itself and its rank, BM25
over the raw turn text alone (no claims, no neighbours), the neighbours' raw-turn BM25 and
cosine (an answer is often the reply to the turn that matched), the turn's length, role,
caption and place in the history, four properties of the question, and the cosine with the
turn's plain text embedded alone (the plain dense baseline's document). The training script
(``scripts/train_ranker.py``) calls this same function, so what a model was trained on is
what it reads at query time.

Per-conversation columns (lengths, positions, the raw-turn BM25 index) are computed once per
index and kept on it (``turn_table``), under a lock, so question threads share one table.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..address.lexical_growth import GrowingLexicalIndex
from ..config import FusionConfig
from ..language.stemming import stem_terms
from ..language.listcues import is_list_question
from ..language.timecues import is_temporal_question
from ..types import SourcePacket
from .channels import (FusedQuery, _normalized, answer_type_channel, combine, dense_cosines, lexical_channel,
                       name_weighted, packet_scores, role_channel, score_order, speaker_channel, temporal_channel,
                       time_match_channel)
from .documents import is_assistant, question_speakers, raw_text
from .index import FusionIndex

# Column order of the feature matrix; a model file names these and must match them exactly.
FEATURE_NAMES: tuple[str, ...] = (
    "lexical",  # the package's lexical channel (its name_term_weight and scope)
    "lexical_full",  # the same with the named participant's terms at full weight
    "lexical_unnamed",  # the same without them
    "packet",  # the package's packet channel (z(p) and the gated context vector)
    "cos_z",  # cosine with z(p) alone
    "cos_context",  # cosine with the context document (0 without context vectors)
    "speaker",  # the speaker channel, or the role channel where it fires (1 on that side's turns)
    "temporal", "time_match",
    "fused",  # the hand-fit weighted sum
    "fused_rank",  # log(1 + rank of the turn by that sum)
    "packet_gap",  # packet channel minus the question's best packet score
    "raw_bm25",  # BM25 over the raw turn text, divided by the question's best
    "prev_raw_bm25", "next_raw_bm25",  # the same for the previous / next turn of the session
    "prev_cos_z", "next_cos_z",  # cosine with z(p) of the previous / next turn of the session
    "log_words", "dated", "is_assistant", "has_caption",
    "session_position", "turn_position",  # session index / last one; turn index in its session / its length
    "q_log_words", "q_temporal", "q_names_one", "q_list",
    # Cosine with the turn's plain text alone (fused.documents.plain_turn_text: no speaker, no
    # claims), and that minus the question's best; 0 where the index holds no plain vectors.
    # Added after ranker-v2; the shipped models read the columns above only, and one that reads them makes
    # a build embed each turn's plain text (build.stages.dense_plan).
    "raw_cos", "raw_cos_gap",
)


@dataclass(frozen=True)
class TurnTable:
    """The per-conversation columns of ``FEATURE_NAMES``, aligned with the index's rows."""

    raw_lexical: GrowingLexicalIndex  # BM25 over the raw turn texts; an append grows it
    prev_row: np.ndarray  # (N,) previous row of the same session, -1 where none
    next_row: np.ndarray
    log_words: np.ndarray
    is_assistant: np.ndarray
    has_caption: np.ndarray
    session_position: np.ndarray
    turn_position: np.ndarray
    sessions: np.ndarray  # (N,) session index of each row (int64): the positions are made from it

    @classmethod
    def of(cls, packets: Sequence[SourcePacket], cfg: FusionConfig) -> "TurnTable":
        texts = [raw_text(p) for p in packets]
        # GrowingLexicalIndex scores as LexicalIndex does (to rounding) and builds faster; an
        # append in place grows it instead of stemming every turn again (``grown``).
        raw = GrowingLexicalIndex.from_tokens([stem_terms(t) for t in texts], k1=cfg.bm25_k1, b=cfg.bm25_b)
        return cls._assemble(raw, packets, texts, None)

    def grown(self, packets: Sequence[SourcePacket], n_old: int) -> "TurnTable":
        """The table of ``packets``, this being the table of ``packets[:n_old]``: only the
        appended turns are read; equal to ``TurnTable.of(packets, cfg)`` (tests/test_ranker.py)."""
        if len(self.sessions) != n_old:
            raise ValueError(f"the table has {len(self.sessions)} rows, not the {n_old} old turns")
        new = packets[n_old:]
        texts = [raw_text(p) for p in new]
        return self._assemble(self.raw_lexical.grown({}, [stem_terms(t) for t in texts]), new, texts, self)

    @classmethod
    def _assemble(cls, raw: GrowingLexicalIndex, packets: Sequence[SourcePacket], texts: Sequence[str],
                  base: "TurnTable | None") -> "TurnTable":
        """The table from ``raw`` and the per-turn columns of ``packets`` (the appended ones
        after ``base``'s, or all); the columns that depend on the whole history (neighbours,
        positions) are recomputed from the session indexes in array operations."""
        def column(name: str, values: list) -> np.ndarray:
            got = np.asarray(values, dtype=np.float64)
            return got if base is None else np.concatenate([getattr(base, name), got])

        sessions = np.asarray([p.session_index for p in packets], dtype=np.int64)
        if base is not None:
            sessions = np.concatenate([base.sessions, sessions])
        n = len(sessions)
        rows = np.arange(n, dtype=np.int64)
        # A neighbour is the row before or after in the same session (fused.documents.session_neighbours).
        same = sessions[1:] == sessions[:-1]
        prev_row = np.full(n, -1, dtype=np.int64)
        next_row = np.full(n, -1, dtype=np.int64)
        prev_row[1:][same] = rows[:-1][same]
        next_row[:-1][same] = rows[1:][same]
        s = sessions.astype(np.float64)
        s_lo, s_hi = (float(s.min()), float(s.max())) if n else (0.0, 0.0)
        # A turn's position: its row minus its session's first row, over the session's size - 1.
        _, inv = np.unique(sessions, return_inverse=True)
        first = np.full(int(inv.max()) + 1 if n else 0, n, dtype=np.int64)
        np.minimum.at(first, inv, rows)
        size = np.bincount(inv, minlength=len(first))
        return cls(
            raw_lexical=raw, prev_row=prev_row, next_row=next_row,
            log_words=column("log_words", [math.log1p(len(t.split())) for t in texts]),
            is_assistant=column("is_assistant", [is_assistant(p.speaker) for p in packets]),
            has_caption=column("has_caption", [bool(p.image_caption) for p in packets]),
            session_position=(s - s_lo) / (s_hi - s_lo) if s_hi > s_lo else np.zeros(n),
            turn_position=(rows - first[inv]) / np.maximum(size[inv] - 1, 1),
            sessions=sessions,
        )


_TABLE_LOCK = threading.Lock()


def grow_turn_table(base: FusionIndex, index: FusionIndex, packets: Sequence[SourcePacket], n_old: int) -> None:
    """Give ``index`` (``base`` grown by ``packets[n_old:]``, not yet shared with any thread) the
    base's turn table grown by the appended turns, when the base has one: the first question
    on the new view then reads the table instead of stemming the whole history again."""
    table = base.__dict__.get("_ranker_turn_table")
    if table is not None and len(table.sessions) == n_old and len(index.packet_ids) == len(packets):
        object.__setattr__(index, "_ranker_turn_table", table.grown(packets, n_old))


def turn_table(index: FusionIndex, packets: Sequence[SourcePacket], cfg: FusionConfig) -> TurnTable:
    """The index's ``TurnTable``, built on first use and kept on the index (an index is never
    changed after it is made; an append makes a new one, which gets its own table)."""
    table = index.__dict__.get("_ranker_turn_table")
    if table is not None:
        return table
    if len(packets) != len(index.packet_ids) or any(p.packet_id != pid for p, pid in zip(packets, index.packet_ids)):
        raise ValueError("the packets given for the ranker's turn table are not the index's packets")
    with _TABLE_LOCK:
        table = index.__dict__.get("_ranker_turn_table")
        if table is None:
            table = TurnTable.of(packets, cfg)
            object.__setattr__(index, "_ranker_turn_table", table)  # frozen dataclass: a cache, as cached_property
    return table


@dataclass(frozen=True)
class QueryFeatures:
    """What ``query_features`` computed for one question."""

    rows: np.ndarray  # (P,) index rows of the candidates, in fused order
    matrix: np.ndarray  # (P, len(FEATURE_NAMES)) float64
    fused: np.ndarray  # (N,) the weighted-sum score of every row
    order: np.ndarray  # (N,) every row by fused score (ties in dialogue order)


def _neighbour(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(len(rows))
    have = rows >= 0
    out[have] = values[rows[have]]
    return out


def query_features(index: FusionIndex, packets: Sequence[SourcePacket], question: str, query_vec: np.ndarray | None,
                   cfg: FusionConfig, pool: int, *, anchor=None) -> QueryFeatures:
    """The feature rows of the ``pool`` best turns by the weighted sum (see the module docstring)."""
    table = turn_table(index, packets, cfg)
    n = len(index.packet_ids)
    full = lexical_channel(index, FusedQuery(question, None))
    unnamed = lexical_channel(index, FusedQuery(question, None, name_term_weight=0.0))
    lexical = name_weighted(full, unnamed, cfg.name_term_weight, cfg.name_term_scope)
    q = FusedQuery(question, query_vec, anchor, cfg.name_term_weight, cfg.name_term_scope)
    zeros = np.zeros(n)
    raw_cos = (index.raw_matrix @ query_vec).astype(np.float64) \
        if query_vec is not None and index.raw_matrix is not None else zeros
    if query_vec is not None and index.packet_matrix is not None:
        cos_z, ctx = dense_cosines(index, query_vec)
        packet = packet_scores(index, cos_z, ctx)
        cos_ctx = ctx if ctx is not None else zeros
    else:
        packet, cos_z, cos_ctx = zeros, zeros, zeros
    channels = {"lexical": lexical, "packet": packet, "speaker": speaker_channel(index, q),
                "temporal": temporal_channel(index, q), "time_match": time_match_channel(index, q)}
    if cfg.answer_type_weight:  # the weighted sum the ranker reorders (and its "fused" column) takes it in
        channels["answer_type"] = answer_type_channel(index, q)
    role = role_channel(index, q) if cfg.role_weight else None
    if role is not None:
        channels["role"] = role
    weighted = {k: v for k, v in channels.items() if getattr(cfg, f"{k}_weight")}
    fused = combine(weighted, cfg, n)
    order = score_order(fused)
    rows = order[:pool]
    rank = np.empty(n)
    rank[order] = np.arange(n)
    raw = _normalized(table.raw_lexical.scores(index.query_terms(question)))
    # The speaker columns count the side the pronouns point at as the participant named (role channel).
    named = question_speakers(question, index.participants, tolerant=index.tolerant_names, roles=bool(cfg.role_weight))
    question_cols = (math.log1p(len(question.split())), float(is_temporal_question(question)),
                     float(len(named) == 1), float(is_list_question(question)))
    cols = [
        lexical[rows], full[rows], unnamed[rows], packet[rows], cos_z[rows], cos_ctx[rows],
        np.maximum(channels["speaker"], role)[rows] if role is not None else channels["speaker"][rows],
        channels["temporal"][rows], channels["time_match"][rows],
        fused[rows], np.log1p(rank[rows]), packet[rows] - (float(packet.max()) if n else 0.0),
        raw[rows], _neighbour(raw, table.prev_row[rows]), _neighbour(raw, table.next_row[rows]),
        _neighbour(cos_z, table.prev_row[rows]), _neighbour(cos_z, table.next_row[rows]),
        table.log_words[rows], index.dated[rows], table.is_assistant[rows], table.has_caption[rows],
        table.session_position[rows], table.turn_position[rows],
        *(np.full(len(rows), v) for v in question_cols),
        raw_cos[rows], raw_cos[rows] - (float(raw_cos.max()) if n else 0.0),
    ]
    matrix = np.stack(cols, axis=1) if len(rows) else np.zeros((0, len(FEATURE_NAMES)))
    return QueryFeatures(rows=rows, matrix=matrix, fused=fused, order=order)

