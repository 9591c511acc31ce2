"""Loader for the plain memory format, meant for a user's own conversations.

Two spellings of the same content are accepted (full description with examples in
``docs/data-formats.md``):

JSON::

    {"namespace": "me", "speakers": ["Ana", "Ben"],
     "sessions": [{"time": "2024-05-01 10:00", "id": "s1",
                   "turns": [{"speaker": "Ana", "text": "...", "id": "t1",
                              "image_caption": "...", "agent_id": "planner",
                              "metadata": {"topic": "travel"}}]}]}

(a bare list of session objects is also accepted), or JSONL with one session object
per line, optionally preceded by a header line ``{"namespace": ..., "speakers": [...]}``.

Only ``sessions[].time``, ``sessions[].turns``, ``turns[].speaker`` and ``turns[].text``
are required. ``agent_id`` names the agent that took part in a turn and ``metadata`` is a small
JSON object of the caller's (``data.metadata``); both are stored with the turn.
Defaults: session ids ``session_N`` and turn ids ``SN:M`` where N is the
1-based position of the session in the file and M the 1-based position of the turn.
Sessions with no turns are skipped (but still count for N, so ids do not move when a
session is emptied). When ``speakers`` is given every turn's speaker must be one of
them; otherwise the speakers are collected in order of first appearance. The namespace
is the ``namespace`` argument, else the file's ``namespace``, else the file name stem.

These positional defaults describe one file. ``Memory.add`` gives turns without ids ids that
stay stable across calls instead (see ``memcompile_local.data.turn_ids``); it learns which ids a
document wrote itself from :func:`parse_plain_given_ids`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataFormatError, NamespaceError
from ..language.timeparse import numeric_date_problem
from ..store.namespace import validate_namespace
from ..types import Conversation, Session, Turn
from .jsonio import DEFAULT_MAX_TURN_CHARS, FieldReader, child, iter_jsonl, load_json, read_text
from .metadata import metadata_json

_HEADER_KEYS = ("namespace", "speakers")


@dataclass(frozen=True)
class GivenIds:
    """Which ids a plain document wrote itself (True) and which were filled in by default.

    ``sessions[i]`` is about ``conversation.sessions[i]`` (empty sessions are not listed) and
    ``turns[i][j]`` about its j-th turn.
    """

    sessions: tuple[bool, ...]
    turns: tuple[tuple[bool, ...], ...]


def load_plain(path: str | Path, *, namespace: str | None = None,
               max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> Conversation:
    """Read a plain-format JSON or JSONL file into one Conversation.

    A ``.jsonl`` file is read line by line; any other file is read as JSON, falling back
    to JSONL when the file holds several JSON values one after another. ``max_turn_chars``
    caps every string (None: no cap). Raises
    :class:`~memcompile_local.errors.DataFormatError` on malformed input.
    """
    return load_plain_given_ids(path, namespace=namespace, max_turn_chars=max_turn_chars)[0]


def load_plain_given_ids(path: str | Path, *, namespace: str | None = None,
                         max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> tuple[Conversation, GivenIds]:
    """Like :func:`load_plain`, also saying which session and turn ids the file gave."""
    given: list[tuple[bool, tuple[bool, ...]]] = []
    if Path(path).suffix.lower() == ".jsonl":
        conv = _parse_jsonl(iter_jsonl(path), path, namespace, given, max_turn_chars)
    else:
        try:
            return parse_plain_given_ids(load_json(path), path, namespace=namespace,
                                         max_turn_chars=max_turn_chars)
        except DataFormatError as exc:
            if not looks_like_jsonl(exc, path):
                raise
            conv = _parse_jsonl(iter_jsonl(path), path, namespace, given, max_turn_chars)
    return conv, GivenIds(sessions=tuple(g[0] for g in given), turns=tuple(g[1] for g in given))


def looks_like_jsonl(exc: DataFormatError, path: str | Path) -> bool:
    """True when a JSON syntax error is really a JSONL file under another suffix.

    That is: the parser stopped on "Extra data" and the first line alone is a JSON
    object. Anything else keeps the original, better located JSON error.
    """
    if exc.expected != "valid JSON" or exc.detail != "Extra data":
        return False
    first = read_text(path).lstrip().split("\n", 1)[0]
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


def parse_plain(doc: Any, path: str | Path, *, namespace: str | None = None,
                max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> Conversation:
    """Convert an already parsed plain-format JSON document (object or list of sessions)."""
    return parse_plain_given_ids(doc, path, namespace=namespace, max_turn_chars=max_turn_chars)[0]


def parse_plain_given_ids(doc: Any, path: str | Path, *, namespace: str | None = None,
                          max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> tuple[Conversation, GivenIds]:
    """Like :func:`parse_plain`, also saying which session and turn ids the document gave."""
    r = FieldReader(path, max_turn_chars=max_turn_chars)
    if isinstance(doc, (list, tuple)):
        header: Mapping[str, Any] = {}
        sessions_where = "$"
        raw_sessions = doc
    else:
        header = r.as_dict(doc, "$", "an object with 'sessions', or a list of sessions")
        sessions_where = "$.sessions"
        raw_sessions = r.as_list(r.require(header, "sessions", "$"), sessions_where,
                                 "a list of session objects")
    located = [(child(sessions_where, i), s) for i, s in enumerate(raw_sessions)]
    given: list[tuple[bool, tuple[bool, ...]]] = []
    conv = _build(r, header, "$", located, path, namespace, given)
    return conv, GivenIds(sessions=tuple(g[0] for g in given), turns=tuple(g[1] for g in given))


def conversation_from_obj(obj: Any, source: str = "<memory>", *,
                          namespace: str | None = None) -> Conversation:
    """Build a Conversation from an in-memory plain-format object.

    ``obj`` has the shape of a plain JSON document (a mapping with ``sessions``, or a list
    of session mappings); ``source`` stands in for the file name in error messages.
    Without a namespace in ``obj`` or as argument, a :class:`NamespaceError` is raised
    (there is no file name to fall back on).
    """
    has_ns = isinstance(obj, Mapping) and obj.get("namespace") is not None
    if namespace is None and not has_ns:
        raise NamespaceError(f"{source}: a namespace is required (none given and none in the data)")
    return parse_plain(obj, source, namespace=namespace)


def parse_plain_jsonl(lines: Iterable[tuple[int, Any]], path: str | Path, *,
                      namespace: str | None = None,
                      max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> Conversation:
    """Convert ``(line_number, value)`` pairs of a plain-format JSONL file.

    The first value is a header when it has no ``turns`` key; every other value must be
    a session object. Locations in errors read ``line L, $.turns[2].text``.
    """
    return _parse_jsonl(lines, path, namespace, None, max_turn_chars)


def _parse_jsonl(lines: Iterable[tuple[int, Any]], path: str | Path, namespace: str | None,
                 given: list | None, max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> Conversation:
    r = FieldReader(path, max_turn_chars=max_turn_chars)
    header: Mapping[str, Any] = {}
    header_where = "$"
    located: list[tuple[str, Any]] = []
    for position, (number, value) in enumerate(lines):
        where = f"line {number}, $"
        obj = r.as_dict(value, where, "a JSON object (a session, or a header on the first line)")
        if position == 0 and "turns" not in obj:
            if not any(k in obj for k in _HEADER_KEYS):
                r.fail(where, "a session object with 'turns', or a header with "
                       "'namespace' and/or 'speakers'", "found neither")
            header, header_where = obj, where
            continue
        located.append((where, obj))
    return _build(r, header, header_where, located, path, namespace, given)


def _build(r: FieldReader, header: Mapping[str, Any], header_where: str,
           located: list[tuple[str, Any]], path: str | Path,
           namespace: str | None, given: list | None = None) -> Conversation:
    """The Conversation of validated sessions; ``given`` (when a list) receives one
    ``(session id given, (turn id given, ...))`` pair per kept session."""
    declared: tuple[str, ...] | None = None
    if header.get("speakers") is not None:
        spw = child(header_where, "speakers")
        values = r.as_list(header["speakers"], spw, "a list of speaker names")
        names = [r.as_label(v, child(spw, n)) for n, v in enumerate(values)]
        for n, name in enumerate(names):
            if name in names[:n]:
                r.fail(child(spw, n), "speaker names without repeats", f"{name!r} repeats")
        declared = tuple(names)

    if namespace is not None:
        validate_namespace(namespace)  # raises NamespaceError: a bad argument, not bad data
    elif header.get("namespace") is not None:
        namespace = r.as_namespace(header["namespace"], child(header_where, "namespace"))
    else:
        namespace = r.as_namespace(
            Path(path).stem, "$",
            "no namespace field or argument, and the file name does not make one: ")

    if not located:
        r.fail(header_where if header else "$", "at least one session", "found none")

    sessions: list[Session] = []
    seen_sessions: dict[str, str] = {}
    seen_turns: dict[str, str] = {}
    speakers: list[str] = list(declared or ())
    for n, (where, raw) in enumerate(located, start=1):
        obj = r.as_dict(raw, where, "a session object with 'time' and 'turns'")
        time = r.label_field(obj, "time", where, nonempty=False)
        problem = numeric_date_problem(time)
        if problem is not None:  # a misread date would be worse than none: no time question could match it
            r.fail(child(where, "time"), "a real date (digits with the year first are year-month-day, "
                   "with the year last month/day/year)", problem)
        if obj.get("id") is not None:
            session_id = r.as_label(obj["id"], child(where, "id"))
        else:
            session_id = f"session_{n}"
        if session_id in seen_sessions:
            r.fail(child(where, "id"), "a session id that is unique in the file",
                   f"{session_id!r} is also used at {seen_sessions[session_id]}")
        seen_sessions[session_id] = child(where, "id")

        tw = child(where, "turns")
        raw_turns = r.as_list(r.require(obj, "turns", where), tw, "a list of turn objects")
        turns: list[Turn] = []
        for m, raw_turn in enumerate(raw_turns, start=1):
            w = child(tw, m - 1)
            turn = r.as_dict(raw_turn, w, "a turn object with 'speaker' and 'text'")
            speaker = r.label_field(turn, "speaker", w)
            if declared is not None and speaker not in declared:
                r.fail(child(w, "speaker"), "one of the declared speakers "
                       + json.dumps(list(declared), ensure_ascii=False), f"found {speaker!r}")
            if speaker not in speakers:
                speakers.append(speaker)
            if turn.get("id") is not None:
                turn_id = r.as_label(turn["id"], child(w, "id"))
            else:
                turn_id = f"S{n}:{m}"
            if turn_id in seen_turns:
                r.fail(child(w, "id") if "id" in turn else w,
                       "a turn id that is unique in the conversation",
                       f"{turn_id!r} is also used at {seen_turns[turn_id]}")
            seen_turns[turn_id] = w
            agent = turn.get("agent_id")
            try:
                meta = metadata_json(turn.get("metadata"))
            except ValueError as exc:
                r.fail(child(w, "metadata"), "a small JSON object", str(exc))
            turns.append(Turn(packet_id=turn_id, speaker=speaker,
                              text=r.str_field(turn, "text", w),
                              image_caption=r.opt_str_field(turn, "image_caption", w),
                              image_query=r.opt_str_field(turn, "image_query", w),
                              agent_id=None if agent is None else r.as_label(agent, child(w, "agent_id")),
                              metadata_json=meta))
        if turns:
            sessions.append(Session(index=len(sessions) + 1, session_id=session_id,
                                    time=time, turns=tuple(turns)))
            if given is not None:
                given.append((obj.get("id") is not None,
                              tuple(isinstance(t, Mapping) and t.get("id") is not None for t in raw_turns)))
    if not sessions:
        r.fail(header_where if header else "$", "at least one session with turns",
               "every session is empty")
    return Conversation(namespace=namespace, sessions=tuple(sessions),
                        speakers=tuple(speakers), source_path=str(path))
