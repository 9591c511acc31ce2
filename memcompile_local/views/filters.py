"""Which stored turns a search or a listing may return: ``TurnFilter``.

A filter narrows one namespace's packets by what the caller stored with them: the speaker, the
session, the agent (``SourcePacket.agent_id``), top-level metadata keys (exact match, all must
match) and a time range on the session time. It is applied to packets already loaded (a view's
``packets`` or a page read from the store), so views stay one per namespace and the view cache
and in-place appends are unaffected: a search hands the matching ids to ``compile_context`` as
its candidate pool, and the top-k cut is taken among them.

Time bounds are read with ``parse_session_time`` (the reader every stored time went through);
both ends are inclusive, and a ``time_to`` written as a bare date (``2024-05-08``) covers that
whole day. A packet whose session time cannot be read never matches a time range.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..language.timeparse import parse_session_time
from ..types import SourcePacket

_BARE_DATE = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")


def _canonical(value: Any) -> str:
    # JSON text of one value, so 1 and true (equal in Python) stay different, as in JSON.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=8192)
def _metadata_values(metadata_json: str) -> dict[str, str]:
    """Top-level key -> canonical JSON text of its value, of one stored metadata object."""
    return {k: _canonical(v) for k, v in json.loads(metadata_json).items()}


@functools.lru_cache(maxsize=8192)
def _session_instant(session_time: str) -> dt.datetime | None:
    return parse_session_time(session_time)


def time_bound(value: str, *, end: bool) -> dt.datetime:
    """A time-range bound read like a session time; ValueError when it cannot be read.

    ``end=True``: a bare date means the end of that day (the range is inclusive)."""
    parsed = parse_session_time(value)
    if parsed is None:
        raise ValueError(f"{value!r} is not a date that can be read")
    if end and _BARE_DATE.match(value):
        parsed = parsed.replace(hour=23, minute=59, second=59, microsecond=999999)
    return parsed


@dataclass(frozen=True)
class TurnFilter:
    """Conditions a packet must all meet (None: no condition on that field).

    ``metadata`` holds (key, canonical JSON text of the wanted value) pairs; build one with
    :meth:`make` from plain values.
    """

    speaker: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    time_from: dt.datetime | None = None
    time_to: dt.datetime | None = None

    @classmethod
    def make(cls, *, speaker: str | None = None, session_id: str | None = None, agent_id: str | None = None,
             metadata: Mapping[str, Any] | None = None, time_from: str | dt.datetime | None = None,
             time_to: str | dt.datetime | None = None) -> "TurnFilter":
        """A filter from plain values: ``metadata`` a dict of top-level keys and the exact values
        wanted, ``time_from``/``time_to`` datetimes or time strings (see the module doc)."""
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ValueError("metadata must be a mapping of top-level keys to the values wanted")
        start = time_bound(time_from, end=False) if isinstance(time_from, str) else time_from
        stop = time_bound(time_to, end=True) if isinstance(time_to, str) else time_to
        if start is not None and stop is not None and start > stop:
            raise ValueError("the time range ends before it starts")
        meta = tuple(sorted((str(k), _canonical(v)) for k, v in (metadata or {}).items()))
        return cls(speaker=speaker, session_id=session_id, agent_id=agent_id, metadata=meta,
                   time_from=start, time_to=stop)

    @property
    def empty(self) -> bool:
        """True when the filter lets every packet through."""
        return (self.speaker is None and self.session_id is None and self.agent_id is None and not self.metadata
                and self.time_from is None and self.time_to is None)

    def matches(self, p: SourcePacket) -> bool:
        if self.speaker is not None and p.speaker != self.speaker:
            return False
        if self.session_id is not None and p.session_id != self.session_id:
            return False
        if self.agent_id is not None and p.agent_id != self.agent_id:
            return False
        if self.metadata:
            if p.metadata_json is None:
                return False
            have = _metadata_values(p.metadata_json)
            if any(have.get(k) != v for k, v in self.metadata):
                return False
        if self.time_from is not None or self.time_to is not None:
            when = _session_instant(p.session_time)
            if when is None:
                return False
            if self.time_from is not None and when < self.time_from:
                return False
            if self.time_to is not None and when > self.time_to:
                return False
        return True

    def select(self, packets: Iterable[SourcePacket]) -> list[SourcePacket]:
        """The packets that match, in the order given."""
        return [p for p in packets if self.matches(p)]

    def allowed_ids(self, packets: Iterable[SourcePacket]) -> frozenset[str] | None:
        """The ids of the matching packets, or None when the filter is empty (no restriction)."""
        if self.empty:
            return None
        return frozenset(p.packet_id for p in packets if self.matches(p))
