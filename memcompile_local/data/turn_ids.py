"""Automatic session and turn ids that stay stable across ``Memory.add`` calls.

An agent writes memory a few turns at a time, for months. Ids that are positions within one
call (``S1:1`` for the first turn of every call) collide from the second call on, so the ids
a caller leaves out are given against what the namespace already stores:

* **Sessions.** An incoming session with an ``id`` is the stored session with that id. One
  without is the stored session with the same ``time``; when several stored sessions share
  that time, the one holding most of the incoming turns (the latest on a tie). Each stored
  session is matched by at most one incoming session per call. A session that matches
  nothing is new: it gets the next session index after the namespace's highest and the id
  ``session_<index>``.
* **Turns.** An incoming turn with an ``id`` keeps it. One without is the stored turn of its
  session with the same speaker, text, image caption, image query, agent and metadata, if
  there is one not yet matched in this call (identical turns match in dialogue order). Otherwise it is new and is
  numbered ``S<session index>:<n>``, continuing after the highest number the session has.

So re-sending a session (whole or in part) adds nothing, sending a session with more turns
adds only those, and a first ``add`` into an empty namespace numbers ``S1:1``, ``S1:2``, ...
as before. One consequence: a turn identical to a stored turn of the same session is taken
to be that turn; to store a repeat ("ok" said twice), give the turns ids.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from .plain import GivenIds
from ..types import Conversation, Session, SourcePacket, Turn

__all__ = ["assign_stable_ids"]


def _turn_content(speaker: str, text: str, caption: str | None, query: str | None,
                  agent_id: str | None = None, metadata_json: str | None = None) -> tuple:
    # The agent and the metadata are part of what a turn is: the same words from another agent,
    # or with other metadata, are another turn (a stored turn's fields never change).
    return (speaker, text, caption, query, agent_id, metadata_json)


def _packet_content(p: SourcePacket) -> tuple:
    return _turn_content(p.speaker, p.content, p.image_caption, p.image_query, p.agent_id, p.metadata_json)


class _StoredSession:
    def __init__(self, index: int, session_id: str, time: str):
        self.index = index
        self.session_id = session_id
        self.time = time
        self.packets: list[SourcePacket] = []
        self.used: set[str] = set()  # packet ids matched by this call
        self._next: int | None = None

    def new_id(self, taken: set[str]) -> str:
        """The next ``S<index>:<n>`` after every number the session has used, not in ``taken``."""
        if self._next is None:
            # Worked out only for sessions that get new turns: a namespace has many sessions.
            pattern = re.compile(rf"S{self.index}:(\d+)")
            numbers = [int(m.group(1)) for p in self.packets if (m := pattern.fullmatch(p.packet_id))]
            self._next = max([len(self.packets), *numbers]) + 1
        pid = f"S{self.index}:{self._next}"
        while pid in taken:
            self._next += 1
            pid = f"S{self.index}:{self._next}"
        self._next += 1
        return pid

    def overlap(self, turns: Sequence[Turn]) -> int:
        have = Counter(_packet_content(p) for p in self.packets)
        want = Counter(_turn_content(t.speaker, t.text, t.image_caption, t.image_query, t.agent_id, t.metadata_json)
                       for t in turns)
        return sum((have & want).values())

    def match(self, turn: Turn, time: str | None = None) -> str | None:
        content = _turn_content(turn.speaker, turn.text, turn.image_caption, turn.image_query, turn.agent_id,
                                 turn.metadata_json)
        for p in self.packets:
            if p.packet_id not in self.used and _packet_content(p) == content and time in (None, p.session_time):
                self.used.add(p.packet_id)
                return p.packet_id
        return None


def assign_stable_ids(conversation: Conversation, given: GivenIds,
                      stored: Sequence[SourcePacket], *, match_time: bool = False,
                      fresh: Collection[tuple[int, int]] = (),
                      indexes: Mapping[str, int] | None = None) -> Conversation:
    """``conversation`` with every id that ``given`` marks as defaulted replaced by a stable one.

    ``stored`` are the namespace's packets in dialogue order (``MemoryStore.packets``). Ids the
    caller wrote are kept as they are; the store then checks them as usual (an id stored with
    other content is an ``ImmutablePacketError``).

    For the memory service, whose turns carry their own times inside one session:
    ``match_time`` makes a turn match a stored turn only when their times are equal too (the
    same words said again later are a new turn); the (session, turn) positions in ``fresh``
    are always new turns (a turn the server's clock dated); ``indexes`` gives the index of a
    session id the caller gave that is not stored yet (reserved by the service's queue).
    """
    sessions: dict[int, _StoredSession] = {}
    for p in stored:
        s = sessions.get(p.session_index)
        if s is None:
            s = sessions[p.session_index] = _StoredSession(p.session_index, p.session_id, p.session_time)
        s.packets.append(p)
    taken_ids = {p.packet_id for p in stored}
    by_id = {s.session_id: s for s in sessions.values()}
    taken_session_ids = set(by_id)
    next_index = max(sessions, default=0) + 1
    matched: set[int] = set()

    out: list[Session] = []
    for si, (session, session_given, turns_given) in enumerate(zip(conversation.sessions, given.sessions,
                                                                   given.turns)):
        target: _StoredSession | None = None
        if session_given:
            target = by_id.get(session.session_id)
        else:
            same_time = [s for s in sessions.values() if s.time == session.time and s.index not in matched]
            if same_time:
                target = max(same_time, key=lambda s: (s.overlap(session.turns), s.index))
        if target is None:
            session_id = session.session_id
            if not session_given:
                session_id = f"session_{next_index}"
                while session_id in taken_session_ids:
                    session_id += "+"
            index = next_index
            if session_given and indexes is not None and session.session_id in indexes:
                index = indexes[session.session_id]
            target = _StoredSession(index, session_id, session.time)
            sessions[index] = target
            by_id.setdefault(session_id, target)
            next_index = max(next_index, index) + 1
        matched.add(target.index)
        taken_session_ids.add(target.session_id)
        turns: list[Turn] = []
        for ti, (turn, turn_given) in enumerate(zip(session.turns, turns_given)):
            if not turn_given:
                pid = None if (si, ti) in fresh else target.match(turn, session.time if match_time else None)
                pid = pid or target.new_id(taken_ids)
                turn = replace(turn, packet_id=pid)
            taken_ids.add(turn.packet_id)
            turns.append(turn)
        out.append(Session(index=target.index, session_id=target.session_id, time=session.time,
                           turns=tuple(turns)))
    return replace(conversation, sessions=tuple(out))
