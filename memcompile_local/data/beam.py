"""Loader for BEAM chats in their authors' layout: one folder per chat.

A chat folder holds ``chat.json`` and ``probing_questions/probing_questions.json``; a size
folder (``100K/``) holds numbered chat folders. One chat folder becomes one
:class:`~memcompile_local.types.Conversation`, namespace ``beam-<size>-<chat>`` (for
example ``beam-100K-3``; ``beam-<chat>`` when the parent folder is not a size).

``chat.json`` is a list of batches. Each batch has ``batch_number``, ``time_anchor`` (null in
the released files) and ``turns``: a list of groups (lists) of messages, each message with
``role`` (``user`` or ``assistant``), ``id`` (an integer, unique in the chat: the chat id the
questions cite) and ``content``; the first user message of a batch carries the batch's
``time_anchor`` (``March-15-2024``), and user messages also carry ``index`` and
``question_type``, the authors' generation bookkeeping.

Conventions (also written down in ``docs/data-formats.md``):

* A batch is a dated session: ``session_id`` ``batch_<n>``, its time the batch's own
  ``time_anchor`` or else the first message ``time_anchor`` of the batch, read exactly as
  ``Month-DD-YYYY`` and stored as ISO 8601 (``2024-03-15``); a batch without any anchor gets an
  empty time. Groups are flattened in file order. Batch numbers must be unique.
* A turn's id is its chat id as text (``"58"``), its speaker the role.
* ``probing_questions.json`` maps each of the ten question types (:data:`BEAM_CATEGORIES`)
  to a list of questions; the type is the question's category. The gold answer is the
  first of ``answer``, ``ideal_answer``, ``ideal_response``, ``ideal_summary`` and
  ``expected_compliance`` that the question has.
* ``source_chat_ids`` is the evidence: a list of chat ids (a nested list is flattened), or an
  object of such lists (``{"original_info": [86], "updated_info": [114]}``, read in key
  order). Abstention questions have none (``is_abstention``): they are kept for answer
  scoring and left out of recall, as is any question with an empty list. A chat id that
  names no turn is kept, logged, and left out of recall by the benchmark runner.
  Question ids are ``f"{namespace}:{type}:{k}"``.
* Without ``source_chat_ids``, ``conversation_sessions`` is read in its place when it is a
  list of chat ids (the released files' summarization questions carry it, usually as the same
  list; one question of a 1M chat carries only it): noted as an
  ``evidence_from_conversation_sessions`` quirk. When it is a plain integer (a count, as in
  some 100K questions) or absent too, the question has no usable evidence: it is kept with no
  evidence (answered and judged, left out of recall) and noted as ``no_evidence``; a strict
  load refuses it instead.
* One assistant reply of the released 100K chats is 348,853 characters long, above the
  default ``max_turn_chars`` (100,000): loading that chat fails naming the limit unless a
  larger ``max_turn_chars`` (or None) is passed. Under a lenient
  :class:`~memcompile_local.data.quirks.QuirkLog` that chat is left out instead (a
  ``skipped_chat`` quirk counting its questions) and the other chats are read; a malformed
  question is likewise left out (``skipped_question``) with the rest of its chat read.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import DataFormatError
from ..types import Conversation, QAItem, Session, Turn
from .jsonio import DEFAULT_MAX_TURN_CHARS, FieldReader, child, load_json
from .locomo import warn_unknown_evidence
from .quirks import (EVIDENCE_FROM_SESSIONS, NO_EVIDENCE, SKIPPED_CHAT, SKIPPED_QUESTION, QuirkLog,
                     error_detail)


BEAM_CATEGORIES: tuple[str, ...] = (
    "abstention",
    "contradiction_resolution",
    "event_ordering",
    "information_extraction",
    "instruction_following",
    "knowledge_update",
    "multi_session_reasoning",
    "preference_following",
    "summarization",
    "temporal_reasoning",
)
ABSTENTION = "abstention"
ROLES = ("user", "assistant")
CHAT_FILE = "chat.json"
QUESTIONS_FILE = Path("probing_questions") / "probing_questions.json"
ANSWER_KEYS = ("answer", "ideal_answer", "ideal_response", "ideal_summary", "expected_compliance")

_SIZE = re.compile(r"[0-9]+[KM]\Z")
_ANCHOR_FORMAT = "%B-%d-%Y"


def _folder_key(p: Path) -> tuple[int, int, str]:
    return (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name)


def beam_chat_folders(source: str | Path) -> list[Path]:
    """The chat folders a ``--data`` value names: the folder itself when it holds
    ``chat.json``, else its subfolders that do (numerically by name)."""
    p = Path(source)
    if not p.is_dir():
        raise DataFormatError(str(p), "$", "a BEAM chat folder (holding chat.json) or a size folder of chat folders",
                              "not a folder" if p.exists() else "not found")
    if (p / CHAT_FILE).exists():
        return [p]
    found = sorted((f for f in p.iterdir() if f.is_dir() and (f / CHAT_FILE).exists()), key=_folder_key)
    if not found:
        raise DataFormatError(str(p), "$", "a BEAM chat folder (holding chat.json) or a size folder of chat folders",
                              "no chat.json in it or in its subfolders")
    return found


def beam_files(source: str | Path) -> list[Path]:
    """Every file :func:`load_beam` reads for ``source``, in reading order."""
    return [f for d in beam_chat_folders(source) for f in (d / CHAT_FILE, d / QUESTIONS_FILE)]


def beam_namespace(folder: Path) -> str:
    """``beam-<size>-<chat>`` when the parent folder is a size (``100K``), else ``beam-<chat>``."""
    folder = Path(folder)
    parent = folder.resolve().parent.name
    return f"beam-{parent}-{folder.name}" if _SIZE.match(parent) else f"beam-{folder.name}"


def load_beam(source: str | Path, *, max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS,
              quirks: QuirkLog | None = None) -> list[Conversation]:
    """Read one BEAM chat folder or every chat folder of a size folder.

    Both files of every chat are validated in full. Raises
    :class:`~memcompile_local.errors.DataFormatError` naming the file, the JSON path and what
    was expected on any malformed input (a turn above ``max_turn_chars`` included).
    ``quirks``: where to note what was read past; a lenient log also leaves out an unreadable
    chat or question instead of raising (the load fails only when no chat is left). None is a
    strict log of its own.
    """
    log_ = quirks if quirks is not None else QuirkLog(strict=True)
    out = []
    first_error: DataFormatError | None = None
    for folder in beam_chat_folders(source):
        chat_path, q_path = folder / CHAT_FILE, folder / QUESTIONS_FILE
        try:
            # The questions first: a chat left out for its chat.json still counts its questions.
            questions_doc = load_json(q_path)
            out.append(parse_beam(load_json(chat_path), questions_doc, chat_path, q_path,
                                  namespace=beam_namespace(folder), max_turn_chars=max_turn_chars, quirks=log_))
        except DataFormatError as exc:
            first_error = first_error or exc
            log_.note(SKIPPED_CHAT, exc.path, exc.where,
                      f"chat {beam_namespace(folder)} left out: {error_detail(exc)}",
                      error=exc, questions=_question_count(q_path))
    if not out and first_error is not None:
        raise first_error
    return out


def _question_count(q_path: Path) -> int:
    """How many questions a chat's question file lists (0 when it cannot be read)."""
    try:
        doc = load_json(q_path)
    except DataFormatError:
        return 0
    if not isinstance(doc, dict):
        return 0
    return sum(len(v) for v in doc.values() if isinstance(v, list))


def parse_beam(chat_doc: Any, questions_doc: Any, chat_path: str | Path, questions_path: str | Path, *,
               namespace: str, max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS,
               quirks: QuirkLog | None = None) -> Conversation:
    """Convert one parsed chat and its parsed questions; the paths name them in errors.
    ``quirks`` as in :func:`load_beam` (here a malformed question is left out under a lenient log)."""
    log_ = quirks if quirks is not None else QuirkLog(strict=True)
    r = FieldReader(chat_path, max_turn_chars=max_turn_chars)
    ns = r.as_namespace(namespace, "$", "the chat's namespace is not valid: ")
    batches = r.as_list(chat_doc, "$", "a list of batch objects")
    if not batches:
        r.fail("$", "a non-empty list of batch objects", "found an empty list")
    sessions: list[Session] = []
    seen_ids: dict[int, str] = {}
    seen_batches: dict[int, str] = {}
    for b, raw in enumerate(batches):
        bw = child("$", b)
        batch = r.as_dict(raw, bw, "a batch object with batch_number and turns")
        number = r.as_int(r.require(batch, "batch_number", bw), child(bw, "batch_number"))
        if number in seen_batches:
            r.fail(child(bw, "batch_number"), "a batch_number that is unique in the chat",
                   f"{number} is also used at {seen_batches[number]}")
        seen_batches[number] = bw
        time = _anchor(r, batch.get("time_anchor"), child(bw, "time_anchor"))
        tw = child(bw, "turns")
        groups = r.as_list(r.require(batch, "turns", bw), tw, "a list of message groups (lists)")
        turns: list[Turn] = []
        for g, raw_group in enumerate(groups):
            gw = child(tw, g)
            for m, raw_msg in enumerate(r.as_list(raw_group, gw, "a list of message objects")):
                turn, anchor = _parse_message(r, raw_msg, child(gw, m), seen_ids)
                if not time and anchor:
                    time = anchor
                turns.append(turn)
        if turns:
            sessions.append(Session(index=len(sessions) + 1, session_id=f"batch_{number}", time=time,
                                    turns=tuple(turns)))
    if not sessions:
        r.fail("$", "at least one batch with messages", "found none")
    questions = _parse_questions(FieldReader(questions_path, max_turn_chars=max_turn_chars), questions_doc, ns,
                                 log_)
    warn_unknown_evidence(ns, questions, {str(i) for i in seen_ids}, what="source chat id(s)")
    return Conversation(namespace=ns, sessions=tuple(sessions), speakers=ROLES, questions=questions,
                        source_path=str(chat_path))


def _anchor(r: FieldReader, value: Any, where: str) -> str:
    """A ``Month-DD-YYYY`` time anchor as an ISO date; "" for an absent or null one."""
    if value is None:
        return ""
    text = r.as_label(value, where)
    try:
        return dt.datetime.strptime(text, _ANCHOR_FORMAT).date().isoformat()
    except ValueError:
        r.fail(where, "a time anchor written Month-DD-YYYY (March-15-2024)", f"found {text!r}")


def _parse_message(r: FieldReader, raw: Any, where: str, seen: dict[int, str]) -> tuple[Turn, str]:
    msg = r.as_dict(raw, where, "a message object with role, id and content")
    iw = child(where, "id")
    chat_id = r.as_int(r.require(msg, "id", where), iw)
    if chat_id in seen:
        r.fail(iw, "a chat id that is unique in the chat", f"{chat_id} is also used at {seen[chat_id]}")
    seen[chat_id] = iw
    role = r.label_field(msg, "role", where)
    if role not in ROLES:
        r.fail(child(where, "role"), "'user' or 'assistant'", f"found {role!r}")
    for key in ("index", "question_type"):
        if msg.get(key) is not None:
            r.as_str(msg[key], child(where, key))
    anchor = _anchor(r, msg.get("time_anchor"), child(where, "time_anchor"))
    return Turn(packet_id=str(chat_id), speaker=role, text=r.str_field(msg, "content", where)), anchor


def _flat_ids(r: FieldReader, value: Any, where: str) -> list[int]:
    """Chat ids of a list that may nest lists of ids (the released files nest one)."""
    out: list[int] = []
    for n, item in enumerate(r.as_list(value, where, "a list of chat ids (integers)")):
        if isinstance(item, (list, tuple)):
            out += _flat_ids(r, item, child(where, n))
        else:
            out.append(r.as_int(item, child(where, n)))
    return out


def _source_ids(r: FieldReader, value: Any, where: str) -> list[int]:
    if isinstance(value, dict):
        return [i for key in value for i in _flat_ids(r, value[key], child(where, key))]
    return _flat_ids(r, value, where)


def _parse_questions(r: FieldReader, doc: Any, ns: str, quirks: QuirkLog) -> tuple[QAItem, ...]:
    by_type = r.as_dict(doc, "$", "an object mapping question types to lists of questions")
    for key in by_type:
        if key not in BEAM_CATEGORIES:
            qs = by_type[key]
            err = DataFormatError(r.path, child("$", key),
                                  f"one of the BEAM question types ({', '.join(BEAM_CATEGORIES)})", f"found {key!r}")
            n = len(qs) if isinstance(qs, list) else 1
            quirks.note(SKIPPED_QUESTION, r.path, err.where, f"{ns}: {error_detail(err)} ({n} question(s) left out)",
                        error=err, questions=max(0, n - 1))
    out: list[QAItem] = []
    for qtype in BEAM_CATEGORIES:  # a fixed order, whatever the file's key order
        if qtype not in by_type:
            continue
        lw = child("$", qtype)
        for k, raw in enumerate(r.as_list(by_type[qtype], lw, "a list of question objects")):
            qw = child(lw, k)
            try:
                out.append(_parse_question(r, raw, qw, ns, qtype, k, quirks))
            except DataFormatError as exc:
                quirks.note(SKIPPED_QUESTION, exc.path, exc.where, f"{ns}: {error_detail(exc)}", error=exc)
    return tuple(out)


def _parse_question(r: FieldReader, raw: Any, qw: str, ns: str, qtype: str, k: int, quirks: QuirkLog) -> QAItem:
    q = r.as_dict(raw, qw, "a question object")
    question = r.str_field(q, "question", qw, nonempty=True)
    key = next((a for a in ANSWER_KEYS if q.get(a) is not None), None)
    if key is None:
        r.fail(child(qw, "answer"), f"one of the keys {', '.join(ANSWER_KEYS)} (the gold answer)",
               "none present")
    answer = r.as_text_or_number(q[key], child(qw, key))
    qid = f"{ns}:{qtype}:{k}"
    sw = child(qw, "source_chat_ids")
    raw_ids = q.get("source_chat_ids")
    if qtype == ABSTENTION:
        if raw_ids:
            r.fail(sw, "no source chat ids on an abstention question", f"found {raw_ids!r}")
        ids: list[int] = []
    elif raw_ids is not None:
        ids = _source_ids(r, raw_ids, sw)
    else:
        ids = _session_evidence(r, q, qw, qid, qtype, quirks)
    evidence = tuple(dict.fromkeys(str(i) for i in ids))
    return QAItem(question_id=qid, question=question, answer=answer,
                  category=qtype, evidence=evidence, is_abstention=qtype == ABSTENTION)


def _session_evidence(r: FieldReader, q: Any, qw: str, qid: str, qtype: str, quirks: QuirkLog) -> list[int]:
    """The evidence of a question without ``source_chat_ids``: its ``conversation_sessions``
    when that is a list of chat ids (noted), else none (noted as ``no_evidence``; refused by a
    strict log, as a missing ``source_chat_ids`` always was)."""
    cw = child(qw, "conversation_sessions")
    value = q.get("conversation_sessions")
    if isinstance(value, (list, tuple, dict)):
        ids = _source_ids(r, value, cw)
        quirks.note(EVIDENCE_FROM_SESSIONS, r.path, cw,
                    f"{qid}: no source_chat_ids; {len(ids)} chat id(s) read from conversation_sessions")
        return ids
    found = "absent" if value is None else f"conversation_sessions is {value!r}, not a list of chat ids"
    err = DataFormatError(r.path, child(qw, "source_chat_ids"),
                          "key 'source_chat_ids' (a list of chat ids or an object of such lists), or "
                          "'conversation_sessions' as a list of chat ids",
                          f"missing in a {qtype} question; {found}")
    quirks.note(NO_EVIDENCE, r.path, err.where,
                f"{qid}: no usable evidence ({found}); answered and judged, left out of recall", error=err)
    return []
