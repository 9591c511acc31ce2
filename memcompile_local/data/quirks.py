"""What a loader read past in a benchmark file as its authors publish it.

Published benchmark files have quirks: LongMemEval-S lists a few haystack sessions twice,
BEAM names one question's evidence in another field, and a file may hold one malformed
question among hundreds of good ones. A loader handed a :class:`QuirkLog` notes each such
place (a kind, the file, the JSON path, what it did) instead of stopping, so that a run over
a whole file or folder goes on and its report can say what was read past and how often.

Two sorts of quirk:

* **Read as intended** (``duplicate_session``, ``evidence_from_conversation_sessions``,
  ``answer_session_not_in_haystack``): nothing is lost; they are counted in every mode.
* **Something left out** (``skipped_question``, ``skipped_chat``, ``no_evidence``): a question
  (or a whole BEAM chat) is left out, or kept without gold evidence (answered and judged, left
  out of recall). A *strict* log refuses these: the loader raises the
  :class:`~memcompile_local.errors.DataFormatError` it would otherwise have noted, which is
  the behaviour of ``eval --strict`` and of the library loaders called without a log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..errors import DataFormatError

log = logging.getLogger(__name__)

DUPLICATE_SESSION = "duplicate_session"
"""A session id listed twice in one LongMemEval haystack with the same turns: read once."""
EVIDENCE_FROM_SESSIONS = "evidence_from_conversation_sessions"
"""A BEAM question without ``source_chat_ids`` whose ``conversation_sessions`` lists chat ids."""
ANSWER_SESSION_MISSING = "answer_session_not_in_haystack"
"""A LongMemEval ``answer_session_ids`` entry that names no haystack session."""
SKIPPED_QUESTION = "skipped_question"
"""A malformed question, left out of the run."""
SKIPPED_CHAT = "skipped_chat"
"""A BEAM chat whose ``chat.json`` could not be read: its questions are left out."""
NO_EVIDENCE = "no_evidence"
"""A BEAM question (not an abstention) with no usable gold evidence: answered and judged,
left out of recall."""

LOSSY = frozenset({SKIPPED_QUESTION, SKIPPED_CHAT, NO_EVIDENCE})
"""The kinds a strict log refuses."""

KIND_ORDER = (SKIPPED_CHAT, SKIPPED_QUESTION, NO_EVIDENCE, DUPLICATE_SESSION, EVIDENCE_FROM_SESSIONS,
              ANSWER_SESSION_MISSING)

MAX_EXAMPLES = 20
"""Places kept per kind for the report (the counts are always complete)."""


@dataclass(frozen=True)
class Quirk:
    """One place a loader read past: its kind, the file, the JSON path and what was done."""

    kind: str
    path: str
    where: str
    detail: str
    questions: int = 0  # questions left out with it (a skipped chat's), beside the quirk itself

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "where": self.where, "detail": self.detail}


class QuirkLog:
    """The quirks of one load (not thread-safe: loaders are single-threaded).

    ``strict``: refuse the quirks that leave something out (:data:`LOSSY`) by raising the
    error that describes them; the others are noted in either mode.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._counts: dict[str, int] = {}
        self._examples: dict[str, list[Quirk]] = {}
        self.questions_left_out = 0

    def note(self, kind: str, path: str, where: str, detail: str, *, error: DataFormatError | None = None,
             questions: int = 0) -> None:
        """Record one quirk (logged: a warning for a lossy kind). Under ``strict`` a lossy kind raises ``error``
        (or a ``DataFormatError`` made of the place and detail) instead."""
        if self.strict and kind in LOSSY:
            if error is not None:
                raise error
            raise DataFormatError(path, where, "a question the loader can read whole (strict mode)", detail)
        self._counts[kind] = self._counts.get(kind, 0) + 1
        examples = self._examples.setdefault(kind, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(Quirk(kind, path, where, detail, questions))
        if kind == SKIPPED_QUESTION:
            self.questions_left_out += 1
        self.questions_left_out += questions
        # What is left out is a warning; what is read as intended only informs.
        log.log(logging.WARNING if kind in LOSSY else logging.INFO, "%s: at %s: %s (%s)", path, where, detail,
                kind.replace("_", " "))

    def counts(self) -> dict[str, int]:
        """``{kind: count}`` in report order (kinds that did not occur are absent)."""
        order = {k: i for i, k in enumerate(KIND_ORDER)}
        return {k: self._counts[k] for k in sorted(self._counts, key=lambda k: (order.get(k, len(order)), k))}

    def examples(self, kind: str) -> list[Quirk]:
        return list(self._examples.get(kind, ()))

    def __len__(self) -> int:
        return sum(self._counts.values())

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly: ``{"strict", "counts", "questions_left_out", "examples": {kind: [...]}}``."""
        return {
            "strict": self.strict,
            "counts": self.counts(),
            "questions_left_out": self.questions_left_out,
            "examples": {k: [q.as_dict() for q in self._examples[k]] for k in self.counts()},
        }

    def summary(self) -> str:
        """One line: ``"data quirks: 4 duplicate session (read once), ..."``; "" when none."""
        if not self._counts:
            return ""
        parts = [f"{n} {_LABELS.get(k, k.replace('_', ' '))}" for k, n in self.counts().items()]
        return "data quirks: " + ", ".join(parts)


_LABELS = {
    DUPLICATE_SESSION: "haystack session(s) listed twice with the same turns (read once)",
    EVIDENCE_FROM_SESSIONS: "question(s) with evidence read from conversation_sessions",
    ANSWER_SESSION_MISSING: "answer session id(s) not in the haystack",
    SKIPPED_QUESTION: "malformed question(s) skipped",
    SKIPPED_CHAT: "chat(s) skipped (their questions left out)",
    NO_EVIDENCE: "question(s) without usable evidence (answered and judged, left out of recall)",
}


def error_detail(exc: DataFormatError) -> str:
    """What a located error says, without its file and place (a quirk names those itself)."""
    return f"expected {exc.expected}" + (f" ({exc.detail})" if exc.detail else "")


def describe_kind(kind: str) -> str:
    """The report's words for ``kind``."""
    return _LABELS.get(kind, kind.replace("_", " "))
