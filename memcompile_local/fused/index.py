"""The fused index of one namespace: BM25 over the lexical documents, the dense matrices,
speakers, dated periods and expansion terms, built once per view and grown by appends."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

import numpy as np

from ..address.lexical import LexicalIndex
from ..address.lexical_growth import GrowingLexicalIndex
from ..config import FusionConfig
from ..language.answertype import names_entity
from ..language.stemming import stem_terms
from ..types import Descriptor, SourcePacket
from .documents import (
    Period,
    canonical_names,
    context_fits,
    has_assistant,
    lexical_documents,
    packet_periods,
    period_key,
    period_matches,
    plain_turn_fits,
    question_periods,
)


def lexical_texts(packets: Sequence[SourcePacket], descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
                  cfg: FusionConfig, participants: Sequence[str]) -> list[str]:
    """The text of each packet's BM25 document: ``lexical_documents`` with, under
    ``tolerant_names``, the names made canonical."""
    docs = lexical_documents(packets, descriptors_by_packet, group_bursts=cfg.bursts)
    if cfg.tolerant_names:
        docs = [canonical_names(d, participants) for d in docs]
    return docs


def expansion_words(descriptors: Sequence[Descriptor]) -> str:
    """What a packet's expansion terms are computed from: its claims' keywords and people."""
    return " ".join(w for d in descriptors for w in (*d.keywords, *d.people))


def expansion_of(words: str) -> tuple[str, ...]:
    """The distinct stemmed expansion terms of ``expansion_words``' text, in order."""
    return tuple(dict.fromkeys(stem_terms(words)))


def plain_turn_rows(base: "FusionIndex | None", packets: Sequence[SourcePacket], n_old: int,
                    raw_matrix: np.ndarray, packet_matrix: np.ndarray, window: int) -> np.ndarray:
    """``FusionIndex.raw_matrix`` of ``packets``: their stored plain-turn rows, where a turn past
    ``window`` words (not embedded as plain text, a zero row) reads its z(p) row, which holds the
    same first window of its text (``fused.documents.plain_turn_fits``). The rows of ``base``
    (the index of ``packets[:n_old]``) are kept for the old turns: a turn's plain text is its own."""
    old = base.raw_matrix if base is not None else None
    start = n_old if old is not None and len(old) == n_old else 0
    long = start + np.flatnonzero(~np.asarray(plain_turn_fits(packets[start:], window), dtype=bool))
    if not start and not long.size:
        return raw_matrix
    out = raw_matrix.copy()
    if start:
        out[:start] = old
    out[long] = packet_matrix[long]
    return out


def grown_context_rows(base: "FusionIndex | None", packets: Sequence[SourcePacket], n_old: int,
                       window: int) -> np.ndarray:
    """``FusionIndex.context_rows`` (``fused.documents.context_fits``) of ``packets``, taking the
    rows of ``base`` (the index of ``packets[:n_old]``) for the old turns whose context document
    cannot have changed: a context document quotes the turns beside it in its session, so of
    the old turns only the last can gain a neighbour."""
    old = base.context_rows if base is not None else None
    if old is None or len(old) != n_old or n_old == 0:
        return np.asarray(context_fits(packets, window), dtype=bool)
    near = max(0, n_old - 2)  # the last old turn's neighbours are in packets[near:]
    tail = np.asarray(context_fits(packets[near:], window), dtype=bool)
    return np.concatenate([old[:n_old - 1], tail[n_old - 1 - near:]])


@dataclass
class FusionParts:
    """Per-text results of one ``FusionIndex.build_reusing``, keyed by what each was computed
    from. A build only reads the ``previous`` parts it is given and fills a new object, so
    parts handed to concurrent builds are never changed."""

    participants: tuple[str, ...] = ()  # the participants ``tokens`` were made canonical against
    tokens: dict[str, list[str]] = field(default_factory=dict)  # lexical document -> stemmed tokens
    periods: dict[tuple, frozenset] = field(default_factory=dict)  # (session time, event times) -> periods
    expansion: dict[str, tuple[str, ...]] = field(default_factory=dict)  # claim names/keywords -> terms


def _memo(new: dict, old: Mapping, key, compute):
    """``new[key]``, taken from ``old`` or computed once."""
    if key not in new:
        new[key] = old[key] if key in old else compute()
    return new[key]


def add_packet_rows(packets: Sequence[SourcePacket], start: int, by_packet: Mapping[str, Sequence[Descriptor]],
                    parts: FusionParts, old: FusionParts, period_rows: dict[Period, list[int]],
                    expansion_terms: list[tuple[str, ...]], dated: list[float]) -> None:
    """Add the rows of ``packets[start:]`` to ``period_rows`` (period -> rows dated then),
    ``expansion_terms`` and ``dated`` (1.0 where a claim has a resolved event time). Periods
    and expansion terms are kept in ``parts`` by what they are computed from, taken from
    ``old`` or ``parts`` itself when already there."""
    for i in range(start, len(packets)):
        p = packets[i]
        descs = by_packet.get(p.packet_id, ())
        for period in _memo(parts.periods, old.periods, period_key(p, descs),
                            lambda p=p, descs=descs: frozenset(packet_periods(p, descs))):
            period_rows.setdefault(period, []).append(i)
        words = expansion_words(descs)
        expansion_terms.append(_memo(parts.expansion, old.expansion, words, lambda words=words: expansion_of(words)))
        dated.append(float(any(d.event_time for d in descs)))


def entity_rows(packets: Sequence[SourcePacket], participants: Sequence[str]) -> np.ndarray | None:
    """(N,) 1.0 where a packet's turn names a person, place or title (``names_entity``), the
    answer-type channel's turns; None on a user-assistant history, where every assistant reply
    capitalizes something (BEAM: 100% of replies "name an entity" by this cue, against 7% of
    LoCoMo's turns)."""
    if has_assistant(participants):
        return None
    return np.asarray([float(names_entity(p.content, participants)) for p in packets])


def grown_participants(base: "FusionIndex", packets: Sequence[SourcePacket], n_old: int) -> tuple[str, ...]:
    """The distinct speakers of ``packets`` in order of first turn, from ``base`` (the index of
    ``packets[:n_old]``): its participants, then the new speakers of the appended turns."""
    return tuple(dict.fromkeys([*base.participants, *(p.speaker for p in packets[n_old:])]))


def grown_entity_rows(base: "FusionIndex", packets: Sequence[SourcePacket], n_old: int) -> np.ndarray | None:
    """``entity_rows(packets, ...)`` from ``base`` (the index of ``packets[:n_old]``): only the
    appended turns are read when the participants are unchanged (the cue of a turn depends
    only on its text and the participants); every turn otherwise."""
    participants = grown_participants(base, packets, n_old)
    if participants != base.participants or base.entity_rows is None:
        return entity_rows(packets, participants)
    grown = entity_rows(packets[n_old:], participants)
    return None if grown is None else np.concatenate([base.entity_rows, grown])


def speaker_runs(packets: Sequence[SourcePacket]) -> int:
    """How many of ``packets`` (in dialogue order) are spoken by the same participant as the
    packet just before them in the same session."""
    return sum(1 for a, b in zip(packets, packets[1:]) if a.session_id == b.session_id and a.speaker == b.speaker)


def speaker_run_share(packets: Sequence[SourcePacket]) -> float:
    """The share of ``packets`` counted by ``speaker_runs``: 0 for strictly alternating
    dialogue, about a third or more for messaging-app chats, where one person often sends
    several messages in a row."""
    return speaker_runs(packets) / len(packets) if packets else 0.0


@dataclass(frozen=True)
class FusionIndex:
    """Query-time structures of the fused selector for one namespace."""

    packet_ids: tuple[str, ...]
    speakers: tuple[str, ...]  # speaker of each packet
    participants: tuple[str, ...]  # distinct speakers of the conversation
    lexical: LexicalIndex
    packet_matrix: np.ndarray | None  # (N, d) l2-normalized z(p) embeddings
    context_matrix: np.ndarray | None  # (N, d) l2-normalized context-document embeddings
    dated: np.ndarray  # (N,) 1.0 where a claim of the packet has a resolved event time
    period_rows: Mapping[Period, np.ndarray]  # (year, month, day) -> rows of packets dated then
    expansion_terms: tuple[tuple[str, ...], ...]  # stemmed names/keywords of each packet's claims
    tolerant_names: bool = False
    # (N,) True where the context vector counts (FusionConfig.context_window_words); None: everywhere.
    context_rows: np.ndarray | None = None
    # Share of packets spoken by the same participant as the packet before them in their session
    # (``speaker_run_share``): how bursty the history is; ``ranker: auto`` reads it.
    burst_share: float = 0.0
    # (N,) 1.0 where the turn names a person, place or title (language/answertype.names_entity).
    entity_rows: np.ndarray | None = None
    # (N, d) l2-normalized vectors of each turn's plain text (fused.documents.plain_turn_text),
    # z(p)'s row for a turn past context_window_words; read only by the learned ranker's raw_cos
    # columns; None when the plan embeds none.
    raw_matrix: np.ndarray | None = None

    @cached_property
    def row_of(self) -> dict[str, int]:
        """Packet id -> row of the index's arrays (computed once per index)."""
        return {pid: i for i, pid in enumerate(self.packet_ids)}

    @classmethod
    def build(
        cls,
        packets: Sequence[SourcePacket],
        descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
        cfg: FusionConfig,
        *,
        packet_matrix: np.ndarray | None = None,
        context_matrix: np.ndarray | None = None,
        raw_matrix: np.ndarray | None = None,
    ) -> "FusionIndex":
        return cls.build_reusing(packets, descriptors_by_packet, cfg, packet_matrix=packet_matrix,
                                 context_matrix=context_matrix, raw_matrix=raw_matrix)[0]

    @classmethod
    def build_reusing(
        cls,
        packets: Sequence[SourcePacket],
        descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
        cfg: FusionConfig,
        *,
        packet_matrix: np.ndarray | None = None,
        context_matrix: np.ndarray | None = None,
        previous: "FusionParts | None" = None,
        raw_matrix: np.ndarray | None = None,
    ) -> "tuple[FusionIndex, FusionParts]":
        """``build``, taking each per-text result (stemmed document, dated periods, expansion
        terms) from ``previous`` where its input is unchanged; returns the index and the parts
        to hand to the next build (a view reload after an append recomputes only new turns).
        ``raw_matrix``: the plain turn vectors (``FusionIndex.raw_matrix``), or None."""
        old = previous or FusionParts()
        participants = tuple(dict.fromkeys(p.speaker for p in packets))
        docs = lexical_texts(packets, descriptors_by_packet, cfg, participants)
        # Canonical names depend on the participants: tokens made against others are not reused.
        old_tokens = old.tokens if old.participants == participants or not cfg.tolerant_names else {}
        parts = FusionParts(participants=participants)
        corpus = [_memo(parts.tokens, old_tokens, d, lambda d=d: stem_terms(d)) for d in docs]
        # The growing index (same scores as LexicalIndex to rounding, built a few times faster
        # than bm25s walks the corpus): an append in place then grows the index a load made.
        lexical = GrowingLexicalIndex.from_tokens(corpus, k1=cfg.bm25_k1, b=cfg.bm25_b)
        rows: dict[Period, list[int]] = {}
        expansion: list[tuple[str, ...]] = []
        dated: list[float] = []
        add_packet_rows(packets, 0, descriptors_by_packet, parts, old, rows, expansion, dated)
        index = cls.assemble(packets, lexical, cfg, packet_matrix=packet_matrix, context_matrix=context_matrix,
                             period_rows=rows, expansion_terms=expansion, dated=dated, raw_matrix=raw_matrix)
        return index, parts

    @classmethod
    def assemble(
        cls,
        packets: Sequence[SourcePacket],
        lexical: LexicalIndex,
        cfg: FusionConfig,
        *,
        packet_matrix: np.ndarray | None,
        context_matrix: np.ndarray | None,
        period_rows: Mapping[Period, Sequence[int]],
        expansion_terms: Sequence[tuple[str, ...]],
        dated: Sequence[float],
        entity: np.ndarray | None = None,
        raw_matrix: np.ndarray | None = None,
        grown_from: "tuple[FusionIndex, int] | None" = None,
    ) -> "FusionIndex":
        """The index of ``packets`` from its computed parts (a build, or an append in place).
        ``entity``: the answer-type channel's rows when already known (``grown_entity_rows``),
        else computed here (at once None on a user-assistant history). ``grown_from``: (the
        index of ``packets[:n_old]``, ``n_old``) on an append in place, whose plain-turn rows and
        context gate are kept for the old turns that cannot have changed, so an append counts
        the words of its new turns only (``plain_turn_rows``, ``grown_context_rows``)."""
        for name, m in (("packet_matrix", packet_matrix), ("context_matrix", context_matrix),
                        ("raw_matrix", raw_matrix)):
            if m is not None and m.shape[0] != len(packets):
                raise ValueError(f"{name} has {m.shape[0]} rows for {len(packets)} packets")
        base, n_old = grown_from if grown_from is not None else (None, 0)
        if base is not None and len(base.packet_ids) == n_old:
            # An append in place: the old turns' ids, speakers and runs are the base's.
            new = packets[n_old:]
            packet_ids = base.packet_ids + tuple(p.packet_id for p in new)
            speakers = base.speakers + tuple(p.speaker for p in new)
            participants = grown_participants(base, packets, n_old)
            # burst_share * n_old is the base's run count up to float rounding (far below 0.5).
            runs = round(base.burst_share * n_old) + speaker_runs(packets[max(0, n_old - 1):])
        else:
            packet_ids = tuple(p.packet_id for p in packets)
            speakers = tuple(p.speaker for p in packets)
            participants = tuple(dict.fromkeys(speakers))
            runs = speaker_runs(packets)
        if raw_matrix is not None and packet_matrix is not None and cfg.context_window_words:
            raw_matrix = plain_turn_rows(base, packets, n_old, raw_matrix, packet_matrix, cfg.context_window_words)
        context_rows = None
        if context_matrix is not None and cfg.context_window_words:
            context_rows = grown_context_rows(base, packets, n_old, cfg.context_window_words)
        index = cls(
            packet_ids=packet_ids,
            speakers=speakers,
            participants=participants,
            lexical=lexical,
            packet_matrix=packet_matrix,
            context_matrix=context_matrix,
            dated=np.asarray(dated, dtype=np.float64),
            period_rows={k: np.asarray(v, dtype=np.int64) for k, v in period_rows.items()},
            expansion_terms=tuple(expansion_terms),
            tolerant_names=cfg.tolerant_names,
            context_rows=context_rows,
            burst_share=runs / len(packets) if packets else 0.0,
            entity_rows=None if not cfg.answer_type_weight else
            entity if entity is not None else entity_rows(packets, participants),
            raw_matrix=raw_matrix,
        )
        if base is not None and "row_of" in base.__dict__ and len(base.packet_ids) == n_old:
            # row_of (a cached_property) extended from the base's: a copy, not a rebuild.
            row_of = dict(base.row_of)
            row_of.update((pid, n_old + i) for i, pid in enumerate(packet_ids[n_old:]))
            index.__dict__["row_of"] = row_of
        return index

    def query_terms(self, question: str) -> list[str]:
        """The question's lexical terms, names made canonical when the index is tolerant."""
        return stem_terms(canonical_names(question, self.participants) if self.tolerant_names else question)

    def time_match(self, question: str, anchor: dt.datetime | None = None) -> np.ndarray:
        """1.0 for packets dated in a period the question names, else 0 (all 0 when it names none).

        A named day matches that day; when no packet is dated that day, its month does
        (a question's date may be off by the days between an event and its telling). ``anchor``
        is the date the question is asked: its relative times ("last month") resolve from it."""
        out = np.zeros(len(self.packet_ids))
        for asked in question_periods(question, anchor):
            for attempt in (asked, asked[:2] + (None,)):
                hit = [rows for have, rows in self.period_rows.items() if period_matches(attempt, have)]
                for rows in hit:
                    out[rows] = 1.0
                if hit or attempt[2] is None:
                    break
        return out
