"""Loader for LongMemEval question files (the S, M and oracle variants share a layout).

The file is a list of questions. Each question carries its own haystack of chat
sessions, so each becomes its own :class:`~memcompile_local.types.Conversation` with
namespace ``"lme-" + question_id`` and exactly one :class:`QAItem`.

Conventions (also written down in ``docs/data-formats.md``):

* Sessions keep the haystack order of the file (the official order);
  ``Session.session_id`` is the haystack session id, ``Session.time`` the matching
  ``haystack_dates`` entry and ``Session.index`` the 1-based position. Sessions with no
  turns are skipped.
* Turn ids are ``f"{session_id}:{position}"`` with a 1-based position in the session;
  the speaker is the ``role`` (``"user"`` / ``"assistant"``). Session ids must be unique
  within a question so that turn ids are. The published S file lists a few haystack
  sessions twice in one question (same id, same turns, another date): the repeat is read
  once, at its first place with its first date, and noted as a ``duplicate_session`` quirk.
  The same id with other turns is an error naming both places.
* ``QAItem.evidence`` lists the ids of turns marked ``has_answer: true`` (in haystack
  order), ``QAItem.evidence_sessions`` the ``answer_session_ids``. ``has_answer`` is
  kept on the turn for scoring only.
* ``category`` is the ``question_type`` string; ``is_abstention`` is true for ids that
  contain ``_abs``. A numeric answer is kept as the text of the number.
* The list fields ``haystack_session_ids``, ``haystack_dates``, ``haystack_sessions``
  (and each session inside it) and ``answer_session_ids`` may also be a string holding
  a Python list literal, as found in some redistributed copies; such strings are read
  with :func:`ast.literal_eval`.
* Session ids, dates, roles and ``question_date`` are single-line labels: a control or
  line-break character in one is an error (they reach one-line headers and prompt lines).
  No string may be longer than ``max_turn_chars``.
* The file may be gzip-compressed (``.json.gz``, as published).
* A malformed question stops the whole file unless a lenient
  :class:`~memcompile_local.data.quirks.QuirkLog` is passed: then it is left out and noted
  (``skipped_question``, with the error), and the other questions are read. A question id
  that repeats an earlier one is such a question.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import DataFormatError
from ..types import Conversation, QAItem, Session, Turn
from .jsonio import DEFAULT_MAX_TURN_CHARS, FieldReader, child, load_json
from .quirks import ANSWER_SESSION_MISSING, DUPLICATE_SESSION, SKIPPED_QUESTION, QuirkLog, error_detail

NAMESPACE_PREFIX = "lme-"
SPEAKERS = ("user", "assistant")


def load_longmemeval(path: str | Path, *, limit: int | None = None,
                     question_ids: Sequence[str] | None = None,
                     max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS,
                     quirks: QuirkLog | None = None) -> list[Conversation]:
    """Read a LongMemEval JSON file (or ``.json.gz``) into one Conversation per question.

    ``question_ids`` selects questions by id (a single string is one id); ``limit`` then
    keeps the first ``limit`` of the selection in file order. The whole file is
    validated either way; ``max_turn_chars`` caps every string (None: no cap). Raises
    :class:`~memcompile_local.errors.DataFormatError` on malformed input or a requested id
    the file does not have. ``quirks``: where to note what was read past (a lenient log
    also skips malformed questions instead of raising); None is a strict log of its own.
    """
    return parse_longmemeval(load_json(path), path, limit=limit, question_ids=question_ids,
                             max_turn_chars=max_turn_chars, quirks=quirks)


def parse_longmemeval(doc: Any, path: str | Path, *, limit: int | None = None,
                      question_ids: Sequence[str] | None = None,
                      max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS,
                      quirks: QuirkLog | None = None) -> list[Conversation]:
    """Convert an already parsed LongMemEval document; ``path`` is used in errors."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
    r = FieldReader(path, max_turn_chars=max_turn_chars)
    log_ = quirks if quirks is not None else QuirkLog(strict=True)
    items = r.as_list(doc, "$", "a list of LongMemEval questions")
    if not items:
        r.fail("$", "a non-empty list of LongMemEval questions", "found an empty list")
    out: list[Conversation] = []
    first_seen: dict[str, int] = {}
    for i, raw in enumerate(items):
        where = f"$[{i}]"
        try:
            conv, qid = _parse_question(r, raw, where, str(path), log_)
            if qid in first_seen:
                r.fail(child(where, "question_id"), "a question_id that is unique in the file",
                       f"{qid!r} is also used at $[{first_seen[qid]}]")
        except DataFormatError as exc:
            log_.note(SKIPPED_QUESTION, exc.path, exc.where, error_detail(exc), error=exc)
            continue
        first_seen[qid] = i
        out.append(conv)
    if not out:
        r.fail("$", "at least one readable LongMemEval question", f"all {len(items)} were skipped")
    if question_ids is not None:
        keep = {NAMESPACE_PREFIX + w for w in r.wanted_ids(question_ids, first_seen, "question_id", "question")}
        out = [c for c in out if c.namespace in keep]
    if limit is not None:
        out = out[:limit]
    return out


def _parse_question(r: FieldReader, raw: Any, where: str, source: str, quirks: QuirkLog
                    ) -> tuple[Conversation, str]:
    item = r.as_dict(raw, where, "a LongMemEval question object")
    qid = r.str_field(item, "question_id", where, nonempty=True)
    r.as_namespace(NAMESPACE_PREFIX + qid, child(where, "question_id"),
                   f"the namespace {NAMESPACE_PREFIX}<question_id> is not valid: ")
    qtype = r.str_field(item, "question_type", where, nonempty=True)
    question = r.str_field(item, "question", where, nonempty=True)
    answer = r.as_text_or_number(r.require(item, "answer", where), child(where, "answer"))
    question_date = r.label_field(item, "question_date", where, nonempty=False)

    def str_list(key: str) -> list[str]:
        w = child(where, key)
        values = r.as_list_or_literal(r.require(item, key, where), w, "a list of strings")
        return [r.as_label(v, child(w, n)) for n, v in enumerate(values)]

    session_ids = str_list("haystack_session_ids")
    dates_w = child(where, "haystack_dates")
    dates = [r.as_label(v, child(dates_w, n), nonempty=False) for n, v in enumerate(
        r.as_list_or_literal(r.require(item, "haystack_dates", where), dates_w,
                             "a list of date strings"))]
    answer_sessions = str_list("answer_session_ids")
    hw = child(where, "haystack_sessions")
    haystack = r.as_list_or_literal(r.require(item, "haystack_sessions", where), hw,
                                    "a list of sessions")
    n = len(session_ids)
    if len(dates) != n:
        r.fail(dates_w, f"{n} dates, one per haystack_session_ids entry",
               f"found {len(dates)}")
    if len(haystack) != n:
        r.fail(hw, f"{n} sessions, one per haystack_session_ids entry",
               f"found {len(haystack)}")

    # Each id's first index and its turns as read, to tell a repeat with the same turns (read
    # once) from a conflicting one (an error naming both places).
    seen_sessions: dict[str, tuple[int, tuple[Turn, ...]]] = {}
    repeats: list[tuple[int, str, int, str]] = []
    sessions: list[Session] = []
    evidence: list[str] = []
    for k, (sid, time, raw_session) in enumerate(zip(session_ids, dates, haystack)):
        sw = child(hw, k)
        raw_turns = r.as_list_or_literal(raw_session, sw, "a list of turns")
        turns: list[Turn] = []
        for j, raw_turn in enumerate(raw_turns):
            tw = child(sw, j)
            turn = r.as_dict(raw_turn, tw, "a turn object with 'role' and 'content'")
            has_answer = None
            if turn.get("has_answer") is not None:
                has_answer = r.as_bool(turn["has_answer"], child(tw, "has_answer"))
            turns.append(Turn(packet_id=f"{sid}:{j + 1}",
                              speaker=r.label_field(turn, "role", tw),
                              text=r.str_field(turn, "content", tw),
                              has_answer=has_answer))
        if sid in seen_sessions:
            first, first_turns = seen_sessions[sid]
            if tuple(turns) != first_turns:
                r.fail(sw, f"the same turns as {child(hw, first)} (session id {sid!r} is listed at "
                       f"haystack index {first} and {k})", "the turns differ")
            repeats.append((k, sid, first, time))
            continue
        seen_sessions[sid] = (k, tuple(turns))
        evidence.extend(t.packet_id for t in turns if t.has_answer)
        if turns:
            sessions.append(Session(index=len(sessions) + 1, session_id=sid, time=time,
                                    turns=tuple(turns)))
    if not sessions:
        r.fail(hw, "at least one session with turns", "found none")
    # Noted once the question is known to be readable, so that a skipped question's repeats
    # are not counted as well.
    for k, sid, first, time in repeats:
        quirks.note(DUPLICATE_SESSION, r.path, child(hw, k),
                    f"question {qid}: session {sid!r} repeats haystack index {first} with the same turns; "
                    f"read once, at index {first} (this repeat's date {time!r} is not used)")
    absent = [s for s in answer_sessions if s not in seen_sessions]
    if absent:
        quirks.note(ANSWER_SESSION_MISSING, r.path, child(where, "answer_session_ids"),
                    f"question {qid}: answer_session_ids not in the haystack: {', '.join(absent)}")
    qa = QAItem(question_id=qid, question=question, answer=answer, category=qtype,
                evidence=tuple(evidence), evidence_sessions=tuple(answer_sessions),
                question_date=question_date, is_abstention="_abs" in qid)
    conv = Conversation(namespace=NAMESPACE_PREFIX + qid, sessions=tuple(sessions),
                        speakers=SPEAKERS, questions=(qa,), source_path=source)
    return conv, qid
