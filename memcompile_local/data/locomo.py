"""Loader for the LoCoMo benchmark layout (the official ``locomo10.json``).

The file is a list of samples. Each sample has a ``sample_id``, a ``conversation``
object (``speaker_a``, ``speaker_b``, ``session_N`` turn lists and their
``session_N_date_time`` strings) and a ``qa`` list. One sample becomes one
:class:`~memcompile_local.types.Conversation` whose namespace is the ``sample_id``.

Conventions (also written down in ``docs/data-formats.md``):

* Sessions are ordered by the number N in ``session_N`` (numerically, so session_10
  follows session_9); numbers need not be contiguous. ``Session.session_id`` keeps the
  key (``"session_3"``) while ``Session.index`` is the 1-based position among the
  sessions that have turns. A session with an empty turn list is skipped, but its
  ``session_N_date_time`` must still be present and a string. Keys
  ``session_N_date_time`` without a ``session_N`` list (present in the official file)
  are ignored, as are the ``*_observation`` / ``*_summary`` / ``event_summary`` fields.
* Turn ids are the ``dia_id`` values (``"D3:7"``) and must be unique in a sample.
* Question ids are ``f"{sample_id}:q{i}"`` with ``i`` the 0-based position in ``qa``,
  so ``conv-26:q5`` is ``$[0].qa[5]``.
* Numeric answers are kept as the text of the number: ``2022`` becomes ``"2022"``.
* An evidence entry may hold several ids (``"D8:6; D9:17"``); entries are split on
  semicolons, commas and whitespace, and the ids kept in order without duplicates.
* Category 5 (adversarial) items usually have only ``adversarial_answer``; when the
  file also gives an ``answer`` it is kept. Categories 1-4 must have an ``answer``.
* Evidence ids that name no turn are kept as written and logged as a warning: they are
  gold labels for scoring and the official file has a few such slips.
* Speakers, session date_times and dia_ids are single-line labels: a control or line-break
  character in one is an error (they go into one-line headers of the reader views). No
  string may be longer than ``max_turn_chars``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any

from ..types import Conversation, QAItem, Session, Turn
from .jsonio import DEFAULT_MAX_TURN_CHARS, FieldReader, child, load_json

logger = logging.getLogger(__name__)

LOCOMO_CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"session_([0-9]+)\Z")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")


def load_locomo(path: str | Path, *, conversations: Sequence[str] | None = None,
                max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> list[Conversation]:
    """Read a LoCoMo-layout JSON file.

    ``conversations`` optionally selects samples by ``sample_id`` (a single string is
    taken as one id). The whole file is validated even when only some samples are
    returned; results keep file order. ``max_turn_chars`` caps every string (None: no
    cap). Raises :class:`~memcompile_local.errors.DataFormatError` on any malformed input
    or on a requested id the file does not have.
    """
    return parse_locomo(load_json(path), path, conversations=conversations,
                        max_turn_chars=max_turn_chars)


def parse_locomo(doc: Any, path: str | Path, *, conversations: Sequence[str] | None = None,
                 max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS) -> list[Conversation]:
    """Convert an already parsed LoCoMo document; ``path`` is used in error messages."""
    r = FieldReader(path, max_turn_chars=max_turn_chars)

    def sample(raw: Any, where: str) -> tuple[str, Conversation]:
        conv = _parse_sample(r, raw, where, str(path))
        return conv.namespace, conv

    out, first_seen = r.unique_records(doc, "LoCoMo samples", "sample_id", sample)
    if conversations is None:
        return out
    keep = set(r.wanted_ids(conversations, first_seen, "sample_id", "sample"))
    return [c for c in out if c.namespace in keep]


def _parse_sample(r: FieldReader, raw: Any, where: str, source: str) -> Conversation:
    sample = r.as_dict(raw, where, "a LoCoMo sample object")
    sample_id = r.as_namespace(r.require(sample, "sample_id", where), child(where, "sample_id"))
    cw = child(where, "conversation")
    conv = r.as_dict(r.require(sample, "conversation", where), cw)
    speakers = (
        r.label_field(conv, "speaker_a", cw),
        r.label_field(conv, "speaker_b", cw),
    )

    numbered = sorted(
        (int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.match(key))
    )
    sessions: list[Session] = []
    turn_where: dict[str, str] = {}  # dia_id -> where it was first seen, for duplicates
    for _, key in numbered:
        sw = child(cw, key)
        raw_turns = r.as_list(conv[key], sw, "a list of turns")
        # The date is validated even for an empty session so a broken file is reported
        # the same way whether or not that session happens to be empty.
        time = r.label_field(conv, f"{key}_date_time", cw, nonempty=False)
        if not raw_turns:
            continue
        turns = tuple(_parse_turn(r, t, child(sw, j), turn_where) for j, t in enumerate(raw_turns))
        sessions.append(Session(index=len(sessions) + 1, session_id=key, time=time, turns=turns))
    if not sessions:
        r.fail(cw, "at least one non-empty session_N list of turns", "found none")

    questions: tuple[QAItem, ...] = ()
    if "qa" in sample:
        qw = child(where, "qa")
        raw_qa = r.as_list(sample["qa"], qw, "a list of question objects")
        questions = tuple(
            _parse_qa(r, q, child(qw, k), f"{sample_id}:q{k}") for k, q in enumerate(raw_qa)
        )
        warn_unknown_evidence(sample_id, questions, turn_where)

    return Conversation(namespace=sample_id, sessions=tuple(sessions), speakers=speakers,
                        questions=questions, source_path=source)


def _parse_turn(r: FieldReader, raw: Any, where: str, seen: dict[str, str]) -> Turn:
    turn = r.as_dict(raw, where, "a turn object")
    dia_id = r.label_field(turn, "dia_id", where)
    if dia_id in seen:
        r.fail(child(where, "dia_id"), "a turn id that is unique in the conversation",
               f"{dia_id!r} is also used at {seen[dia_id]}")
    seen[dia_id] = child(where, "dia_id")
    return Turn(
        packet_id=dia_id,
        speaker=r.label_field(turn, "speaker", where),
        text=r.str_field(turn, "text", where),
        image_caption=r.opt_str_field(turn, "blip_caption", where),
        image_query=r.opt_str_field(turn, "query", where),
    )


def split_evidence(entries: Sequence[str]) -> tuple[str, ...]:
    """Split LoCoMo evidence strings into single ids, in order, without duplicates.

    >>> split_evidence(["D8:6; D9:17", " D1:2 ", "D8:6"])
    ('D8:6', 'D9:17', 'D1:2')
    """
    out: list[str] = []
    for entry in entries:
        for part in _EVIDENCE_SPLIT.split(entry):
            if part and part not in out:
                out.append(part)
    return tuple(out)


def _parse_qa(r: FieldReader, raw: Any, where: str, question_id: str) -> QAItem:
    qa = r.as_dict(raw, where, "a question object")
    question = r.str_field(qa, "question", where, nonempty=True)
    cat_where = child(where, "category")
    category = r.as_int(r.require(qa, "category", where), cat_where)
    if category not in LOCOMO_CATEGORY_NAMES:
        r.fail(cat_where, "a LoCoMo category id 1-5", f"found {category}")

    answer: str | None = None
    if qa.get("answer") is not None:
        answer = r.as_text_or_number(qa["answer"], child(where, "answer"))
    elif category != 5:
        r.fail(child(where, "answer"), "key 'answer' (a string or number)",
               f"missing in a category {category} question")
    adversarial = None
    if qa.get("adversarial_answer") is not None:
        adversarial = r.as_text_or_number(qa["adversarial_answer"],
                                          child(where, "adversarial_answer"))

    evidence: tuple[str, ...] = ()
    if qa.get("evidence") is not None:
        ew = child(where, "evidence")
        entries = r.as_list(qa["evidence"], ew, "a list of evidence id strings")
        evidence = split_evidence([r.as_str(e, child(ew, n)) for n, e in enumerate(entries)])

    return QAItem(question_id=question_id, question=question, answer=answer,
                  category=category, evidence=evidence, adversarial_answer=adversarial)


def warn_unknown_evidence(name: str, questions: Sequence[QAItem], known: Container[str], *,
                          what: str = "evidence id(s)", level: int = logging.WARNING) -> None:
    """Log, once per conversation, how many evidence ids of ``questions`` name no turn in ``known``
    (they are kept as written; the corpora's runners score recall on the reachable ones)."""
    unknown = [(q.question_id, e) for q in questions for e in q.evidence if e not in known]
    if unknown:
        logger.log(level, "%s: %d %s name no turn, e.g. %s in %s", name, len(unknown), what,
                   unknown[0][1], unknown[0][0])
