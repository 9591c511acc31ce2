"""Fencing stored user content inside prompts, so that content can never imitate structure.

Every prompt that shows conversation text mixes two things: structure this package writes
(block headers such as ``[1] dia_id=D3:7 | recorded: ... | speaker: Ana``, field names,
the ``Question:`` line) and content a user stored (turn text, image captions, extracted
claims, speaker names, session times). The rules here keep the two apart:

* **Content is quoted line by line.** :func:`quote_block` splits a text on every character
  a tokenizer may read as a line break (``\\n``, ``\\r``, ``\\v``, ``\\f``, U+001C..U+001E,
  U+0085, U+2028, U+2029) and starts each resulting line with ``"> "``. Other control
  characters are written as visible ``\\uXXXX`` escapes. Structure lines never start with
  ``>``, so no stored text can produce a header, a ``Question:`` line or a fake system
  block at the start of a line.
* **Header fields are single-line labels.** :func:`header_value` shows a label bare when it
  is plain (one line, no control character, no leading or trailing space, none of the
  field separators or quote characters), and otherwise as a JSON string with every control,
  line-break and bidirectional control character escaped, so a header is always exactly one
  line whose fields cannot be forged or reordered on screen. Data loaders reject labels that are not single-line
  (:func:`label_problem`), so in practice the quoted form only shows for packets built by
  hand.
* **JSON-quoted content** (:func:`json_quote`) is ``json.dumps`` plus escapes for the line
  breaks JSON leaves raw (U+0085, U+2028, U+2029) and the other C0/C1 controls.

Inputs and outputs are plain strings; nothing here depends on the rest of the package.
"""

from __future__ import annotations

import json
import re
import unicodedata

__all__ = [
    "QUOTE_PREFIX",
    "HEADER_MAX_CHARS",
    "BIDI_CONTROLS",
    "label_problem",
    "header_value",
    "escape_controls",
    "json_quote",
    "quote_block",
    "split_lines",
]

QUOTE_PREFIX = "> "
# A header label longer than this is cut (labels are names and dates; a huge one is an attack
# or an accident, and the header must stay small whatever the data).
HEADER_MAX_CHARS = 200

# The characters str.splitlines() treats as line ends; tokenizers and models do the same.
_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def _escape_char(ch: str) -> str:
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    return f"\\u{ord(ch):04x}"


# Bidirectional embeddings, overrides and isolates, and the implicit direction marks: format
# characters (Cf) that reorder how the characters after them display.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def label_problem(value: str) -> str | None:
    """Why ``value`` is not a single-line label, or None when it is one.

    A label (speaker, session time, turn or session id) may hold any printable character,
    including spaces and format characters such as a zero-width joiner inside an emoji,
    but no control character (category Cc: newline, tab, escape, DEL, ...), no line or
    paragraph separator (Zl, Zp) and no bidirectional control (:data:`BIDI_CONTROLS`): a
    label shares its line with other fields, and ``"Mallory\u202e"`` would reorder them.
    Turn text may hold bidirectional controls (right-to-left writing needs them); it is
    quoted line by line, so their effect ends with the text's own line.
    """
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            return f"control or line-break character U+{ord(ch):04X} at character {i}"
        if ch in BIDI_CONTROLS:
            return f"bidirectional control character U+{ord(ch):04X} at character {i}"
    return None


def escape_controls(text: str, *, keep_tabs: bool = True) -> str:
    """``text`` with every control and line-break character written as a visible escape."""
    if text.isprintable():
        # No character of category C* or Z* (but the space), so none to escape: the common
        # case, and a rendered context quotes long turns line by line.
        return text
    out = []
    for ch in text:
        if ch == "\t" and keep_tabs:
            out.append(ch)
        elif unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            out.append(_escape_char(ch))
        else:
            out.append(ch)
    return "".join(out)


def json_quote(text: str) -> str:
    """``text`` as a one-line JSON string literal, with every control character escaped."""
    return escape_controls(json.dumps(text, ensure_ascii=False), keep_tabs=False)


def _label_quote(text: str) -> str:
    """:func:`json_quote` of a label, its bidirectional controls escaped as well."""
    quoted = json_quote(text)
    if any(ch in BIDI_CONTROLS for ch in quoted):
        quoted = "".join(_escape_char(ch) if ch in BIDI_CONTROLS else ch for ch in quoted)
    return quoted


def _is_plain(value: str, separators: str) -> bool:
    if not value or value != value.strip() or label_problem(value) is not None:
        return False
    if value.startswith(QUOTE_PREFIX.strip()):
        return False
    return not any(ch in value for ch in separators + '"\\')


def header_value(value: str | None, *, separators: str = "|") -> str:
    """A header field: bare when plain, else a JSON string; always one short line.

    ``separators``: characters that separate fields in the header being built (``|`` in the
    reader views, ``=`` in the scheduler's candidate lines); a value holding one is quoted so
    it cannot pose as a further field. The result is at most :data:`HEADER_MAX_CHARS`
    characters; a longer value is cut, ending in ``…``. None and ``""`` render as ``""``.
    """
    text = value or ""
    if len(text) > HEADER_MAX_CHARS:
        text = text[: HEADER_MAX_CHARS - 1] + "…"
    if _is_plain(text, separators):
        return text
    quoted = _label_quote(text)
    keep = len(text)
    while len(quoted) > HEADER_MAX_CHARS and keep > 0:
        # Escapes can make the quoted form up to six times longer: shorten the raw text.
        keep = min(keep - 1, keep * HEADER_MAX_CHARS // len(quoted))
        quoted = _label_quote(text[:keep] + "…")
    return quoted


def split_lines(text: str) -> list[str]:
    """``text`` split on every line-break character (see the module docstring)."""
    return _LINE_BREAK.split(text)


def quote_block(text: str) -> list[str]:
    """The lines of ``text`` (stripped), each starting with ``"> "``; an empty text gives [].

    Empty lines inside the text become a bare ``">"`` so that a blank line, which separates
    evidence blocks, never appears inside one.
    """
    text = (text or "").strip()
    if not text:
        return []
    lines = []
    for line in split_lines(text):
        line = escape_controls(line.rstrip())
        lines.append(QUOTE_PREFIX + line if line else QUOTE_PREFIX.rstrip())
    return lines
