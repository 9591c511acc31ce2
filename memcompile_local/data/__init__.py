"""Dataset loaders: LoCoMo, LongMemEval, REALTALK, BEAM and the plain memory format.

Every loader is pure: it reads one file, validates all of it and returns frozen
:class:`~memcompile_local.types.Conversation` records, or raises
:class:`~memcompile_local.errors.DataFormatError` naming the file, the place in it and
what was expected. Nothing is written anywhere, so a caller that loads before it
ingests never leaves a half-ingested store behind on bad input.

File layouts and conventions are described in ``docs/data-formats.md``.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError, DataFormatError
from ..types import Conversation
from .jsonio import DEFAULT_MAX_TURN_CHARS, load_json
from .beam import BEAM_CATEGORIES, load_beam
from .locomo import LOCOMO_CATEGORY_NAMES, load_locomo, parse_locomo, split_evidence
from .longmemeval import load_longmemeval, parse_longmemeval
from .plain import load_plain, looks_like_jsonl, parse_plain
from .quirks import QuirkLog
from .realtalk import REALTALK_CATEGORY_NAMES, load_realtalk

__all__ = [
    "BEAM_CATEGORIES",
    "DEFAULT_MAX_TURN_CHARS",
    "LOCOMO_CATEGORY_NAMES",
    "REALTALK_CATEGORY_NAMES",
    "DatasetCounts",
    "QuirkLog",
    "count_dataset",
    "counts",
    "detect_format",
    "example_conversation_path",
    "load_any",
    "load_beam",
    "load_locomo",
    "load_longmemeval",
    "load_plain",
    "load_realtalk",
    "split_evidence",
]

Format = Literal["auto", "locomo", "longmemeval", "plain"]
FORMATS: tuple[str, ...] = ("auto", "locomo", "longmemeval", "plain")

_EXAMPLE = "example_conversation.json"


def example_conversation_path() -> Path:
    """Path of the small LoCoMo-layout example conversation shipped with the package.

    Works for regular (unzipped) installs, which is how pip installs this package.
    """
    return Path(str(importlib.resources.files(__package__).joinpath(_EXAMPLE)))


def detect_format(doc: Any) -> str | None:
    """Guess the layout of a parsed JSON document from its first record.

    Returns ``"locomo"``, ``"longmemeval"``, ``"plain"`` or None when nothing fits.
    Only the shape of the first record is looked at; the chosen loader then validates
    the whole document.
    """
    if isinstance(doc, dict):
        return "plain" if "sessions" in doc else None
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        first = doc[0]
        if "sample_id" in first and "conversation" in first:
            return "locomo"
        if "question_id" in first and "haystack_sessions" in first:
            return "longmemeval"
        if "turns" in first:
            return "plain"
    return None


_OPTIONS: dict[str, frozenset[str]] = {
    "locomo": frozenset({"conversations", "max_turn_chars"}),
    "longmemeval": frozenset({"limit", "question_ids", "max_turn_chars", "quirks"}),
    "plain": frozenset({"namespace", "max_turn_chars"}),
}


def _check_options(fmt: str, path: str | Path, kw: dict[str, Any]) -> None:
    bad = sorted(set(kw) - _OPTIONS[fmt])
    if bad:
        allowed = ", ".join(sorted(_OPTIONS[fmt]))
        raise ConfigError(f"{path}: option(s) {', '.join(bad)} do not apply to a {fmt} file "
                         f"(it takes: {allowed})")


def load_any(path: str | Path, fmt: Format = "auto", **kw: Any) -> list[Conversation]:
    """Load any supported file as a list of Conversations.

    ``fmt="auto"`` reads ``.jsonl`` files as plain JSONL and otherwise looks at the
    parsed JSON (see :func:`detect_format`). Extra keyword arguments go to the chosen
    loader (``conversations=`` for LoCoMo, ``limit=`` / ``question_ids=`` / ``quirks=`` for
    LongMemEval, ``namespace=`` for plain, ``max_turn_chars=`` for every format, default
    ``DEFAULT_MAX_TURN_CHARS``); one that does not apply to the file's
    format raises ``ConfigError`` naming it. A plain file gives a one-element list.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if fmt == "locomo":
        _check_options(fmt, path, kw)
        return load_locomo(path, **kw)
    if fmt == "longmemeval":
        _check_options(fmt, path, kw)
        return load_longmemeval(path, **kw)
    if fmt == "plain" or Path(path).suffix.lower() == ".jsonl":
        _check_options("plain", path, kw)
        return [load_plain(path, **kw)]
    try:
        doc = load_json(path)
    except DataFormatError as exc:
        if looks_like_jsonl(exc, path):
            _check_options("plain", path, kw)
            return [load_plain(path, **kw)]
        raise
    found = detect_format(doc)
    if found is not None:
        _check_options(found, path, kw)
    if found == "locomo":
        return parse_locomo(doc, path, **kw)
    if found == "longmemeval":
        return parse_longmemeval(doc, path, **kw)
    if found == "plain":
        return [parse_plain(doc, path, **kw)]
    raise DataFormatError(
        str(path), "$",
        "a known format: LoCoMo (list of objects with 'sample_id' and 'conversation'), "
        "LongMemEval (list of objects with 'question_id' and 'haystack_sessions') or "
        "plain (object with 'sessions', list of sessions with 'turns', or JSONL)",
        "could not recognise the layout; pass the format explicitly to get a detailed error",
    )


def _category_key(cat: int | str) -> tuple[int, int, str]:
    # LoCoMo ids are ints, LongMemEval types are strings: ints first, then by name.
    return (0, cat, "") if isinstance(cat, int) else (1, 0, str(cat))


@dataclass(frozen=True)
class DatasetCounts:
    """Sizes of a loaded dataset, as printed by the CLI."""

    conversations: int
    sessions: int
    turns: int
    questions: int
    questions_by_category: tuple[tuple[int | str, int], ...]  # sorted by category
    abstention_questions: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict; category keys stay ints for LoCoMo."""
        return {
            "conversations": self.conversations,
            "sessions": self.sessions,
            "turns": self.turns,
            "questions": self.questions,
            "questions_by_category": dict(self.questions_by_category),
            "abstention_questions": self.abstention_questions,
        }


def count_dataset(convs: Iterable[Conversation]) -> DatasetCounts:
    """Count conversations, sessions, turns and questions (total and per category)."""
    n_conv = n_sess = n_turns = n_q = n_abs = 0
    per_cat: dict[int | str, int] = {}
    for conv in convs:
        n_conv += 1
        n_sess += len(conv.sessions)
        n_turns += sum(len(s.turns) for s in conv.sessions)
        for q in conv.questions:
            n_q += 1
            n_abs += int(q.is_abstention)
            per_cat[q.category] = per_cat.get(q.category, 0) + 1
    ordered = tuple(sorted(per_cat.items(), key=lambda kv: _category_key(kv[0])))
    return DatasetCounts(n_conv, n_sess, n_turns, n_q, ordered, n_abs)


def counts(convs: Iterable[Conversation]) -> dict[str, Any]:
    """:func:`count_dataset` as a plain dict (see :meth:`DatasetCounts.as_dict`)."""
    return count_dataset(convs).as_dict()
