"""Loader for REALTALK chats in their authors' layout (one ``Chat_<n>_<A>_<B>.json`` per chat).

A chat file is one JSON object: ``name`` (``speaker_1``, ``speaker_2``), ``session_N`` lists
of messages, their ``session_N_date_time`` strings, ``events_session_N`` annotations and a
``qa`` list. One file becomes one :class:`~memcompile_local.types.Conversation` whose
namespace is the file name without ``.json``.

Conventions (also written down in ``docs/data-formats.md``):

* Sessions are ordered by the number N in ``session_N`` (numerically); ``Session.session_id``
  keeps the key and ``Session.index`` is the 1-based position among non-empty sessions.
* Times are written by the authors as ``DD.MM.YYYY, HH:MM:SS`` (day first). General date
  parsers read ``06.01.2024`` as the first of June, so the loader reads the authors' format
  exactly and stores the session time as ISO 8601 (``2024-01-06 19:13:14``); a time in any
  other shape is an error. Every message's ``date_time`` is checked the same way.
* A message's ``clean_text`` is the turn text and its ``blip_caption`` (present on messages
  that carry a photo) the turn's image caption: both are part of the turn, as in LoCoMo.
  ``img_file`` and ``img_url`` must be lists of strings; they are not stored.
* Turn ids are the ``dia_id`` values and must be unique in a chat. The authors' numbering
  does not follow the session keys (``session_4`` may continue ``D3:``); ids are kept as
  written.
* ``qa`` items have ``question``, ``answer`` (text or number), ``category`` (1 multi-hop,
  2 temporal, 3 open-domain) and ``evidence`` (a list of ``dia_id`` strings; one entry may
  hold several ids separated by ``;``, ``,``, whitespace or ``". "``). About one evidence id in
  ten names no turn of the chat: such ids are kept in ``QAItem.evidence`` as written,
  logged, and left out of recall by the benchmark runner, which counts them. Question ids are ``f"{namespace}:q{k}"``.
* ``events_session_N`` (the authors' event annotations) are not pipeline inputs and are not
  read.
* Speakers, ids and times are single-line labels; no string may be longer than
  ``max_turn_chars``.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataFormatError
from ..types import Conversation, QAItem, Session, Turn
from .jsonio import DEFAULT_MAX_TURN_CHARS, FieldReader, child, load_json
from .locomo import split_evidence, warn_unknown_evidence

logger = logging.getLogger(__name__)

REALTALK_CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain"}

_SESSION_KEY = re.compile(r"session_([0-9]+)\Z")
_TIME_FORMAT = "%d.%m.%Y, %H:%M:%S"
_CHAT_FILE = re.compile(r"Chat_([0-9]+)(?:_.*)?\.json\Z")


def realtalk_files(source: str | Path | Sequence[str | Path]) -> list[Path]:
    """The chat files a ``--data`` value names: a folder (its ``Chat_<n>_*.json`` files, by
    chat number), one file, or several files and folders (in the order given)."""
    items = [source] if isinstance(source, (str, Path)) else list(source)
    if not items:
        raise DataFormatError("<realtalk>", "--data", "at least one chat file or folder", "none given")
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted((int(m.group(1)), f.name, f) for f in p.iterdir()
                           if f.is_file() and (m := _CHAT_FILE.match(f.name)))
            if not found:
                raise DataFormatError(str(p), "$", "a folder holding REALTALK chat files (Chat_<n>_*.json)",
                                      "found none")
            out += [f for _, _, f in found]
        else:
            out.append(p)  # a missing file is reported by the reader, with its path
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def load_realtalk(source: str | Path | Sequence[str | Path], *,
                  max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> list[Conversation]:
    """Read REALTALK chats (see :func:`realtalk_files` for what ``source`` may be).

    Every file is validated in full; namespaces (file stems) must be distinct. Raises
    :class:`~memcompile_local.errors.DataFormatError` naming the file, the JSON path and
    what was expected on any malformed input.
    """
    convs: list[Conversation] = []
    first: dict[str, str] = {}
    for path in realtalk_files(source):
        conv = parse_realtalk(load_json(path), path, max_turn_chars=max_turn_chars)
        if conv.namespace in first:
            raise DataFormatError(str(path), "$", "a chat whose file name differs from the other chats'",
                                  f"namespace {conv.namespace!r} is also {first[conv.namespace]}")
        first[conv.namespace] = str(path)
        convs.append(conv)
    return convs


def parse_realtalk(doc: Any, path: str | Path, *, namespace: str | None = None,
                   max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> Conversation:
    """Convert one parsed chat document; ``path`` names it in errors and gives the default
    namespace (its stem)."""
    r = FieldReader(path, max_turn_chars=max_turn_chars)
    chat = r.as_dict(doc, "$", "a REALTALK chat object (with 'name', 'session_N' lists and 'qa')")
    ns = r.as_namespace(namespace if namespace is not None else Path(path).stem, "$",
                        "the chat's namespace (its file name without .json) is not valid: ")
    names_w = "$.name"
    names = r.as_dict(r.require(chat, "name", "$"), names_w, "an object with speaker_1 and speaker_2")
    speakers = (r.label_field(names, "speaker_1", names_w), r.label_field(names, "speaker_2", names_w))

    numbered = sorted((int(m.group(1)), key) for key in chat if (m := _SESSION_KEY.match(key)))
    sessions: list[Session] = []
    seen: dict[str, str] = {}
    for _, key in numbered:
        sw = child("$", key)
        raw_turns = r.as_list(chat[key], sw, "a list of messages")
        time_key = f"{key}_date_time"
        time = _time(r, r.require(chat, time_key, "$"), child("$", time_key))
        if not raw_turns:
            continue
        turns = tuple(_parse_turn(r, t, child(sw, j), seen) for j, t in enumerate(raw_turns))
        sessions.append(Session(index=len(sessions) + 1, session_id=key, time=time, turns=turns))
    if not sessions:
        r.fail("$", "at least one non-empty session_N list of messages", "found none")
    unknown = sorted({t.speaker for s in sessions for t in s.turns} - set(speakers))
    if unknown:
        logger.warning("%s: speaker(s) %s are not in $.name", path, ", ".join(unknown))

    qw = "$.qa"
    raw_qa = r.as_list(r.require(chat, "qa", "$"), qw, "a list of question objects")
    questions = tuple(_parse_qa(r, q, child(qw, k), f"{ns}:q{k}") for k, q in enumerate(raw_qa))
    warn_unknown_evidence(ns, questions, seen, level=logging.INFO)
    return Conversation(namespace=ns, sessions=tuple(sessions), speakers=speakers, questions=questions,
                        source_path=str(path))


def _time(r: FieldReader, value: Any, where: str) -> str:
    """An authors' ``DD.MM.YYYY, HH:MM:SS`` time as ISO 8601 (``YYYY-MM-DD HH:MM:SS``)."""
    text = r.as_label(value, where)
    try:
        return dt.datetime.strptime(text, _TIME_FORMAT).isoformat(sep=" ")
    except ValueError:
        r.fail(where, "a time written DD.MM.YYYY, HH:MM:SS (day first, as the REALTALK files do)",
               f"found {text!r}")


def _parse_turn(r: FieldReader, raw: Any, where: str, seen: dict[str, str]) -> Turn:
    msg = r.as_dict(raw, where, "a message object")
    dia_id = r.label_field(msg, "dia_id", where)
    if dia_id in seen:
        r.fail(child(where, "dia_id"), "a dia_id that is unique in the chat", f"{dia_id!r} is also used at {seen[dia_id]}")
    seen[dia_id] = child(where, "dia_id")
    _time(r, r.require(msg, "date_time", where), child(where, "date_time"))
    for key in ("img_file", "img_url"):
        if msg.get(key) is not None:
            kw = child(where, key)
            for n, item in enumerate(r.as_list(msg[key], kw, "a list of file names or URLs")):
                r.as_str(item, child(kw, n))
    return Turn(packet_id=dia_id, speaker=r.label_field(msg, "speaker", where),
                text=r.str_field(msg, "clean_text", where),
                image_caption=r.opt_str_field(msg, "blip_caption", where))


def split_realtalk_evidence(entries: Iterable[str]) -> tuple[str, ...]:
    """Single ids, in order, without duplicates; an entry may join several with ``;``, ``,``,
    whitespace or a period and a space.

    >>> split_realtalk_evidence(["D13:4. D14:4", "D2:7", "D13:4"])
    ('D13:4', 'D14:4', 'D2:7')
    """
    # LoCoMo's split, then the period that joins two ids ("D13:4. D14:4") comes off each.
    return tuple(dict.fromkeys(part for part in (p.rstrip(".") for p in split_evidence(entries)) if part))


def _parse_qa(r: FieldReader, raw: Any, where: str, question_id: str) -> QAItem:
    qa = r.as_dict(raw, where, "a question object")
    question = r.str_field(qa, "question", where, nonempty=True)
    cw = child(where, "category")
    category = r.as_int(r.require(qa, "category", where), cw)
    if category not in REALTALK_CATEGORY_NAMES:
        r.fail(cw, "a REALTALK category id 1-3 (multi-hop, temporal, open-domain)", f"found {category}")
    answer = r.as_text_or_number(r.require(qa, "answer", where), child(where, "answer"))
    ew = child(where, "evidence")
    entries = r.as_list(r.require(qa, "evidence", where), ew, "a list of dia_id strings")
    evidence = split_realtalk_evidence([r.as_str(e, child(ew, n)) for n, e in enumerate(entries)])
    return QAItem(question_id=question_id, question=question, answer=answer, category=category,
                  evidence=evidence)

