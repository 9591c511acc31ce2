"""Evidence capsules: what budgeted pre-query retention (EMBER) keeps.

A capsule is a verbatim source excerpt (a whole turn, a contiguous span of its sentences, or
for the per-session summary baseline a few sentences of several turns) with the ids of the
turns it was cut from, its speaker and time, its retrieval keys (claims, names, keywords,
dates) and its update metadata (the id of a later capsule that supersedes it). Its size is
the number of retained source-evidence tokens it costs (``count_tokens`` of the excerpt).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..language.tokens import count_tokens
from ..types import Conversation, Session, Turn

__all__ = ["Capsule", "RetentionResult", "capsules_conversation", "covered_sources"]


@dataclass(frozen=True)
class Capsule:
    capsule_id: str  # the turn id for a turn or span capsule; "<session id>:summary" for a summary
    sources: tuple[str, ...]  # the packet ids the excerpt was cut from, dialogue order
    session_index: int
    session_id: str
    session_time: str
    speaker: str
    text: str  # verbatim excerpt (sentences of a summary are joined, each prefixed by its speaker)
    claims: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    dates: tuple[str, ...] = ()
    superseded_by: str | None = None
    value: float = 0.0  # the writer's retention value when written (higher: kept longer)
    ordinal: int = 0  # dialogue position of the first source
    span: str = "turn"  # "turn", "sentences" or "summary"
    piece: int = 0  # a turn cut into several capsules: 1, 2, ... in the turn's order; else 0
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def tokens(self) -> int:
        return count_tokens(self.text)

    def superseded(self, by: str) -> "Capsule":
        return replace(self, superseded_by=by)

    def to_dict(self) -> dict[str, Any]:
        return {"capsule_id": self.capsule_id, "sources": list(self.sources), "session_index": self.session_index,
                "session_id": self.session_id, "session_time": self.session_time, "speaker": self.speaker,
                "text": self.text, "claims": list(self.claims), "names": list(self.names),
                "keywords": list(self.keywords), "dates": list(self.dates), "superseded_by": self.superseded_by,
                "value": self.value, "ordinal": self.ordinal, "span": self.span, "piece": self.piece}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Capsule":
        return cls(capsule_id=d["capsule_id"], sources=tuple(d["sources"]), session_index=int(d["session_index"]),
                   session_id=d["session_id"], session_time=d["session_time"], speaker=d["speaker"], text=d["text"],
                   claims=tuple(d.get("claims", ())), names=tuple(d.get("names", ())),
                   keywords=tuple(d.get("keywords", ())), dates=tuple(d.get("dates", ())),
                   superseded_by=d.get("superseded_by"), value=float(d.get("value", 0.0)),
                   ordinal=int(d.get("ordinal", 0)), span=d.get("span", "turn"),
                   piece=int(d.get("piece", 0)))


@dataclass(frozen=True)
class RetentionResult:
    """The capsules a writer kept for one namespace (dialogue order), the budget and what was spent."""

    writer: str
    budget: int
    capsules: tuple[Capsule, ...]
    source_tokens: int  # tokens of the whole stream the writer saw
    calls: int = 0  # model calls (LLM writer)

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.capsules)

    def retained_sources(self) -> set[str]:
        return covered_sources(self.capsules)


def covered_sources(capsules: Sequence[Capsule]) -> set[str]:
    return {s for c in capsules for s in c.sources}


def capsules_conversation(namespace: str, capsules: Sequence[Capsule], speakers: Sequence[str] = ()) -> Conversation:
    """The capsules as a conversation the normal query path reads: one turn per capsule (its id
    the capsule id, its text the excerpt), grouped into the sessions they came from."""
    by_session: dict[tuple[int, str, str], list[Turn]] = {}
    for c in sorted(capsules, key=lambda c: (c.session_index, c.ordinal, c.piece, c.capsule_id)):
        by_session.setdefault((c.session_index, c.session_id, c.session_time), []).append(
            Turn(packet_id=c.capsule_id, speaker=c.speaker, text=c.text))
    sessions = tuple(Session(index=i + 1, session_id=sid, time=t, turns=tuple(turns))
                     for i, ((_, sid, t), turns) in enumerate(sorted(by_session.items())))
    return Conversation(namespace=namespace, sessions=sessions, speakers=tuple(speakers))
