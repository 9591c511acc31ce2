"""Validation of what a client sends the memory service: turns, labels, times, queries.

Every check raises :class:`~memcompile_local.service.errors.ServiceError` (400) whose ``field``
is the JSON path of the value at fault (``sessions[1].turns[0].speaker``) and whose message
says what was wrong and where in the string (``U+001B at character 3``), before anything is
written. The codes are typed: ``empty_text``, ``control_character``, ``text_too_long``,
``invalid_time``, ``invalid_id``, ``bad_request`` (shape: a missing field, a wrong type, an
unknown field).

What is refused and why:

* **Text** (a turn's ``text``, ``image_caption``, a query): a string of at most
  ``Limits.max_text_chars`` characters with something other than whitespace, without NUL or
  any other control character except TAB, LF and CR (ESC sequences would reach every
  terminal and log that shows the text).
* **Labels** (``speaker``, session and turn ids, ``agent_id``, ``time``, ``question_date``, the
  filters ``speaker``/``session_id``/``agent_id``): one line, no control character at all (TAB
  and newlines included), no bidirectional control character (U+202A..U+202E, U+2066..U+2069,
  U+200E, U+200F, U+061C), at most 200 characters. A label is shown on one line next to other
  fields (a listing, a context header ``speaker (time):``); an override such as U+202E in
  ``"Mallory\u202e"`` would reorder how those neighbours display.
* **Bidirectional controls in text** are accepted and stored unchanged: right-to-left writing
  uses them (U+200F), and exported chats wrap phone numbers in U+202A..U+202C. Their effect
  ends with the line they are on, and a rendered context puts every line of a turn's text on
  a quoted line of its own (``fence.quote_block``), never into a label.
* **Times** (a session's or a turn's ``time``, ``question_date``, the filters ``from``/``to``):
  a date the package can read (``language.timeparse.parse_session_time``: ISO 8601,
  ``2024-05-08``, ``2024-05-08 13:56``, LoCoMo's ``1:56 pm on 8 May, 2023``, ...).
  ``2024-13-45`` is refused instead of being stored as a string that no time question can
  ever match, and so are ``2025-13-01`` and ``2024-31-12``: digits with the year first are
  year-month-day and nothing else (``timeparse.numeric_date_problem``).
* **Metadata** (a turn's ``metadata``, a search's ``metadata`` filter): a JSON object of at
  most ``Limits.max_metadata_bytes`` bytes (as canonical JSON) and ``data.metadata.MAX_METADATA_DEPTH``
  levels (code ``invalid_metadata``). An ``agent_id`` is an id (``invalid_id``).
* A turn sent without ``time`` (or with ``""``) is given the server's clock (UTC,
  ``YYYY-MM-DD HH:MM:SS``, see :func:`server_time`) and is always stored as a new turn: the
  same words sent again later are a second message, never ``skipped``. A retry of such a
  turn is therefore stored twice; a client that retries sends ``time`` or ``id``.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from ..data.metadata import MAX_METADATA_DEPTH, metadata_json
from ..language.timeparse import numeric_date_problem, parse_session_time
from .errors import ServiceError
from .limits import Limits

TURN_ID_CHARS = "A-Za-z0-9._:@#+-"
_TURN_ID_RE = re.compile(f"[{TURN_ID_CHARS}]+")
MAX_LABEL_CHARS = 200
_LINE_BREAKS = re.compile("[\t\n\r]")
# Bidirectional embeddings, overrides and isolates, and the implicit direction marks.
BIDI_CONTROLS = "\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
_LABEL_REFUSED = re.compile(f"[\t\n\r{BIDI_CONTROLS}]")


@dataclass(frozen=True)
class TurnInput:
    """One validated turn of an append (``where`` names it in errors, e.g. ``sessions[1].turns[0]``).

    ``session_id`` is None for a session the client sent without an id (it is matched by its
    time, as ``Memory.add`` matches one); ``timed`` is False when the server's clock gave the time.
    """

    speaker: str
    text: str
    time: str
    session_id: str | None
    turn_id: str | None
    image_caption: str | None
    where: str
    timed: bool = True
    group: int = 0  # turns with the same group came in the same session object of the request
    agent_id: str | None = None
    metadata_json: str | None = None  # canonical JSON object text


def bad(code: str, message: str, field: str) -> ServiceError:
    return ServiceError(400, code, message, field=field)


def _describe(c: str) -> str:
    name = unicodedata.name(c, "")
    return f"U+{ord(c):04X}" + (f" ({name})" if name else "")


# Unicode category Cc (C0, DEL, C1) but TAB, LF and CR; the line and paragraph separators; surrogates.
_TEXT_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def check_text(value: Any, field: str, *, max_chars: int, nonempty: bool = True) -> str:
    """A text field (see the module doc); returns it unchanged."""
    if not isinstance(value, str):
        raise bad("bad_request", f"{field} must be a string", field)
    if len(value) > max_chars:
        raise bad("text_too_long", f"{field} has {len(value)} characters; at most {max_chars}", field)
    if nonempty and not value.strip():
        raise bad("empty_text", f"{field} must not be empty or only whitespace", field)
    m = _TEXT_REFUSED.search(value)  # one regex pass: texts run to 100,000 characters
    if m is not None:
        i, c = m.start(), m.group()
        if "\ud800" <= c <= "\udfff":
            raise bad("bad_request", f"{field} contains a lone surrogate at character {i} (not valid Unicode "
                      "text)", field)
        raise bad("control_character", f"{field} contains the control character {_describe(c)} "
                  f"at character {i}", field)
    return value


def check_label(value: Any, field: str, *, max_chars: int = MAX_LABEL_CHARS) -> str:
    """A one-line label (speaker, time): non-empty, no control character (newlines and TAB
    included) and no bidirectional control (see the module doc)."""
    value = check_text(value, field, max_chars=max_chars)
    m = _LABEL_REFUSED.search(value)
    if m is not None:
        kind = "control" if m.group() in "\t\n\r" else "bidirectional control"
        raise bad("control_character", f"{field} must be one line without control characters; it has the "
                  f"{kind} character {_describe(m.group())} at character {m.start()}", field)
    return value


def check_time(value: Any, field: str) -> str:
    """A label that reads as a real date or date-time (see the module doc)."""
    value = check_label(value, field, max_chars=100)
    if parse_session_time(value) is None:
        problem = numeric_date_problem(value)
        why = f"is not a real date ({problem})" if problem else "is not a date this server can read"
        raise bad("invalid_time", f"{field} {value!r} {why}; expected, for example, '2024-05-08', "
                  "'2024-05-08 13:56', '2024-05-08T13:56:00Z' or '1:56 pm on 8 May, 2023'", field)
    return value


def check_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 128:
        raise bad("invalid_id", f"{field} must be a string of 1-128 characters", field)
    if _TURN_ID_RE.fullmatch(value) is None:
        bad_at = next(i for i, c in enumerate(value) if _TURN_ID_RE.fullmatch(c) is None)
        raise bad("invalid_id", f"{field} {value!r} is malformed at character {bad_at} ("
                  f"{_describe(value[bad_at])}): expected characters from [{TURN_ID_CHARS}]", field)
    return value


def check_metadata(value: Any, field: str, limits: Limits) -> str:
    """A metadata object (see the module doc); returns its canonical JSON text."""
    try:
        text = metadata_json(value, max_bytes=limits.max_metadata_bytes, max_depth=MAX_METADATA_DEPTH)
    except ValueError as exc:
        raise bad("invalid_metadata", f"{field} {exc}", field) from None
    if text is None:
        raise bad("invalid_metadata", f"{field} must be a JSON object", field)
    return text


def check_k(k: Any, limits: Limits) -> int | None:
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= limits.max_k):
        raise bad("bad_request", f"k must be an integer from 1 to {limits.max_k}", "k")
    return k


def server_time(now: dt.datetime | None = None) -> str:
    """The time given to a turn sent without one: the server's clock in UTC, to the second."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def parse_append(body: Any, limits: Limits, *, now: str | None = None) -> list[TurnInput]:
    """Validate an append body: ``{"sessions": [...]}``, ``{"turns": [...]}`` or one turn."""
    if not isinstance(body, dict):
        raise bad("bad_request", "the body must be a JSON object", "$")
    clock = now or server_time()
    if "sessions" in body:
        extra = sorted(set(body) - {"sessions"})
        sessions = body["sessions"]
        if extra:
            raise bad("bad_request", f"unexpected fields next to 'sessions': {extra}", extra[0])
        if not isinstance(sessions, list) or not sessions:
            raise bad("bad_request", "sessions must be a non-empty list", "sessions")
        located = []
        for i, s in enumerate(sessions):
            w = f"sessions[{i}]"
            if not isinstance(s, dict):
                raise bad("bad_request", f"{w} must be an object with 'time' and 'turns'", w)
            unknown = sorted(set(s) - {"time", "id", "turns"})
            if unknown:
                raise bad("bad_request", f"{w}: unexpected fields {unknown}", f"{w}.{unknown[0]}")
            if "time" not in s:
                raise bad("bad_request", f"{w}.time is required", f"{w}.time")
            time_ = check_time(s["time"], f"{w}.time")
            sid = check_id(s["id"], f"{w}.id") if s.get("id") is not None else None
            turns = s.get("turns")
            if not isinstance(turns, list) or not turns:
                raise bad("bad_request", f"{w}.turns must be a non-empty list", f"{w}.turns")
            for j, t in enumerate(turns):
                located.append((f"{w}.turns[{j}]", t, time_, sid, False, i))
    elif "turns" in body:
        extra = sorted(set(body) - {"turns"})
        if extra:
            raise bad("bad_request", f"unexpected fields next to 'turns': {extra}", extra[0])
        turns = body["turns"]
        if not isinstance(turns, list) or not turns:
            raise bad("bad_request", "turns must be a non-empty list", "turns")
        located = [(f"turns[{j}]", t, None, None, True, -1) for j, t in enumerate(turns)]
    else:
        located = [("$", body, None, None, True, -1)]
    if len(located) > limits.max_turns_per_request:
        raise ServiceError(413, "too_many_turns",
                           f"{len(located)} turns in one request; at most {limits.max_turns_per_request}",
                           field="turns")
    out: list[TurnInput] = []
    for where, t, s_time, s_id, single, group in located:
        if not isinstance(t, dict):
            raise bad("bad_request", f"{where} must be an object with 'speaker' and 'text'", where)
        allowed = ({"speaker", "text", "id", "image_caption", "agent_id", "metadata"}
                   | ({"time", "session_id"} if single else set()))
        unknown = sorted(set(t) - allowed)
        if unknown:
            raise bad("bad_request", f"{where}: unexpected fields {unknown}",
                      f"{where}.{unknown[0]}" if where != "$" else unknown[0])
        pre = "" if where == "$" else f"{where}."
        for req in ("speaker", "text"):
            if req not in t:
                raise bad("bad_request", f"{pre}{req} is required", f"{pre}{req}")
        speaker = check_label(t["speaker"], f"{pre}speaker")
        text = check_text(t["text"], f"{pre}text", max_chars=limits.max_text_chars)
        caption = t.get("image_caption")
        if caption is not None:
            caption = check_text(caption, f"{pre}image_caption", max_chars=limits.max_text_chars)
        timed = True
        if single:
            if t.get("time") is None or t.get("time") == "":
                time_, timed = clock, False
            else:
                time_ = check_time(t["time"], f"{pre}time")
            sid = check_id(t["session_id"], f"{pre}session_id") if t.get("session_id") is not None else "default"
        else:
            time_, sid = s_time, s_id
        tid = check_id(t["id"], f"{pre}id") if t.get("id") is not None else None
        agent = check_id(t["agent_id"], f"{pre}agent_id") if t.get("agent_id") is not None else None
        meta = check_metadata(t["metadata"], f"{pre}metadata", limits) if t.get("metadata") is not None else None
        out.append(TurnInput(speaker, text, time_, sid, tid, caption, where, timed, group, agent, meta))
    return out
