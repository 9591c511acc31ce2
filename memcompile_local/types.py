"""Typed records that flow between the stages of the pipeline.

Every stage is a function from some of these records to others. They are frozen so
that a stage cannot mutate what another stage produced; collections are tuples.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def content_sha256(text: str, image_caption: str | None = None) -> str:
    """Hash of the exact bytes of a turn (text plus optional caption).

    The caption is part of the identity because it is part of what the reader sees.
    """
    h = hashlib.sha256()
    h.update(text.encode("utf-8", errors="strict"))
    h.update(b"\x00")
    h.update((image_caption or "").encode("utf-8", errors="strict"))
    return h.hexdigest()


def canonical_metadata_json(value: object) -> str | None:
    """The canonical text (sorted keys, no spaces) of ``value``: None, or the text of one JSON
    object. Equal metadata then compares equal wherever turns are compared. ValueError otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"must be the text of a JSON object or None, got {type(value).__name__}")
    try:
        obj = json.loads(value)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"must be a JSON object, got {type(obj).__name__}")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Turn:
    """One dialogue turn as read from a dataset file, before it enters the store."""

    packet_id: str  # stable id, e.g. "D3:7" (LoCoMo) or "<session_id>:<index>" (LongMemEval)
    speaker: str
    text: str
    image_caption: str | None = None
    image_query: str | None = None
    has_answer: bool | None = None  # LongMemEval turn-level evidence label; never shown to the pipeline
    agent_id: str | None = None  # the agent that took part (a scope beside the user), if the caller names one
    metadata_json: str | None = None  # the caller's small JSON object, canonical text (sorted keys)


@dataclass(frozen=True)
class Session:
    """An ordered list of turns that happened at one recorded time."""

    index: int  # 1-based session index in dialogue order
    session_id: str  # "session_3" for LoCoMo, the haystack id for LongMemEval
    time: str  # recorded session time as written in the source file
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class QAItem:
    """A benchmark question. Gold fields are for scoring only, never pipeline inputs."""

    question_id: str
    question: str
    answer: str | None  # None for LoCoMo category 5 (adversarial)
    category: int | str  # LoCoMo: int 1..5; LongMemEval: question_type string
    evidence: tuple[str, ...] = ()  # gold packet ids (LoCoMo) or has_answer turn ids (LongMemEval)
    evidence_sessions: tuple[str, ...] = ()  # LongMemEval answer_session_ids
    question_date: str | None = None
    adversarial_answer: str | None = None
    is_abstention: bool = False


@dataclass(frozen=True)
class Conversation:
    """One memory's worth of dialogue plus (for benchmarks) its questions."""

    namespace: str
    sessions: tuple[Session, ...]
    speakers: tuple[str, ...] = ()
    questions: tuple[QAItem, ...] = ()
    source_path: str | None = None

    def iter_turns(self):
        """Yield (session, turn) pairs in dialogue order."""
        for s in self.sessions:
            for t in s.turns:
                yield s, t


@dataclass(frozen=True)
class SourcePacket:
    """An immutable dialogue turn as stored: the unit of the evidence budget."""

    namespace: str
    packet_id: str
    ordinal: int  # position in dialogue order within the namespace (0-based)
    session_index: int
    session_id: str
    session_time: str
    speaker: str
    content: str
    image_caption: str | None
    sha256: str
    image_query: str | None = None
    agent_id: str | None = None
    metadata_json: str | None = None  # canonical JSON object text; never part of the content hash


@dataclass(frozen=True)
class EventFields:
    """Event-role fields of a descriptor (MemCompile paper, Appendix F metadata schema)."""

    subject_people: tuple[str, ...] = ()
    predicate: str = ""
    focus_terms: tuple[str, ...] = ()
    goal_context_terms: tuple[str, ...] = ()
    event_type: str = "occurrence"  # occurrence | plan | state | preference | relationship
    event_time: str = ""
    polarity: str = "unknown"  # positive | negative | neutral | unknown
    confidence: float = 0.0


def descriptor_id(namespace: str, packet_id: str, claim_index: int) -> str:
    """The stable descriptor id ``"<namespace>:<packet_id>:<claim_index>"`` (every extractor's)."""
    return f"{namespace}:{packet_id}:{claim_index}"


@dataclass(frozen=True)
class Descriptor:
    """A source-linked atomic claim x_i (Eq. 2): claim text plus metadata plus packet key."""

    descriptor_id: str  # "<namespace>:<packet_id>:<claim index>"
    namespace: str
    packet_id: str  # foreign key pi_i to the SourcePacket
    claim_index: int  # extraction order within the packet
    text: str  # f_i
    speaker: str  # s_i
    session_index: int  # j_i
    session_time: str  # t_i
    people: tuple[str, ...] = ()  # Per_i
    keywords: tuple[str, ...] = ()  # Key_i (at most five)
    event_time: str = ""  # tau_i, normalized where supported
    interaction_time: str = ""  # bar tau_i
    n_tokens: int = 0  # n_i
    needs_profile: bool = False
    event: EventFields = field(default_factory=EventFields)
    negated: bool = False  # has a negation marker (used by the placement inconsistency term)


@dataclass(frozen=True)
class Cell:
    """A capacity-bounded routing container over descriptors (Appendix B.2)."""

    cell_id: int
    descriptor_ids: tuple[str, ...]
    tokens: int
    people: frozenset[str]
    keywords: frozenset[str]
    session_min: int
    session_max: int
    title: str = ""
    has_time: bool = False


JsonDict = dict[str, Any]


@dataclass(frozen=True)
class Candidate:
    """One address hit (a descriptor) with its candidate score r_i (Eq. 7).

    ``channels`` records every channel that reached it ("bm25", "cell:<id>") before normalization.
    ``position`` is its rank in the address candidate order (0 = best).
    """

    descriptor_id: str
    packet_id: str
    score: float
    position: int
    channels: tuple[str, ...] = ()
    bm25_raw: float = 0.0


@dataclass(frozen=True)
class PacketCandidate:
    """A SourcePacket after the normalization boundary (Eqs. 8-10).

    ``score`` = max r_i over its hits; ``first_position`` = earliest hit position;
    ``representative`` = descriptor id of the best-scoring hit (earliest on ties).
    """

    packet_id: str
    score: float
    first_position: int
    representative: str
    n_hits: int = 1
    channels: tuple[str, ...] = ()
    support: float = 0.0  # sum of max(0, r_i) over same-packet hits (used by the MMR anchors)


@dataclass(frozen=True)
class QueryIntent:
    """Query-only retrieval intent (people, keywords, time constraint, need_attribute)."""

    question: str
    people: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    time: str | None = None
    need_attribute: bool = False
    is_temporal: bool = False

    def lexical_query(self) -> str:
        """The question plus the intent fields: the text BM25 and term sets are computed on."""
        parts = [self.question, *self.people, *self.keywords]
        if self.time:
            parts.append(self.time)
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class AddressResult:
    """What the Address Plane found for one query: the candidate union K_q and how it was reached.

    It holds descriptor hits only; the packet pool U_q (normalization) and the dense proposals
    D_q are separate steps (``pipeline.compile_context`` keeps them on the ``Context``).
    ``ran`` is False for the empty result of a path that skipped the Address Plane
    (``AddressResult.skipped``), so a reader can tell "no hits" from "not run".
    """

    intent: QueryIntent
    bm25: tuple[Candidate, ...]  # lexical channel, top-96 in BM25 order
    opened_cells: tuple[int, ...]  # Cell ids opened by routing, in opening order
    candidates: tuple[Candidate, ...]  # the union K_q reordered by r_i
    timings_ms: dict[str, float] = field(default_factory=dict)
    routing_trace: tuple[dict, ...] = ()
    ran: bool = True

    @classmethod
    def skipped(cls, intent: QueryIntent) -> "AddressResult":
        """The empty result of a query whose path did not run the Address Plane."""
        return cls(intent=intent, bm25=(), opened_cells=(), candidates=(), ran=False)
