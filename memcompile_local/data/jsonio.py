"""Reading JSON and JSONL files with errors that point at the offending place.

Every loader in :mod:`memcompile_local.data` goes through this module, so that any
malformed input ends in a :class:`~memcompile_local.errors.DataFormatError` naming the
file, a location (a JSON path such as ``$[0].conversation.session_3[2].text``, or
``line L, column C`` for syntax errors) and what was expected there.

Text is never normalised: strings come back exactly as decoded from the file (no
Unicode normalisation, no stripping), so that what the store hashes is what the user
wrote. The checks on string content are:

* the file is valid UTF-8 and no string holds a lone surrogate (possible through a
  ``\\ud800`` escape), because such a string cannot be written back as UTF-8 later;
* no string is longer than the reader's ``max_turn_chars`` (default
  :data:`DEFAULT_MAX_TURN_CHARS`; None turns the cap off), so one huge turn cannot make a
  build take hours or a compiled context megabytes;
* labels, the fields that reader views and prompts put into one-line headers (speaker
  names, session times, turn and session ids), hold no control or line-break character
  (:meth:`FieldReader.as_label`). Such a label is **rejected**, not normalised: a rewritten
  speaker name or date would silently change what the user stored, and a located error
  lets them fix the file.
"""

from __future__ import annotations

import ast
import gzip
import json
import zlib
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from ..errors import DataFormatError, NamespaceError
from ..fence import label_problem

_T = TypeVar("_T")

_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"

# Longest string a loader accepts by default (about 25,000 tokens): far above any turn of
# the benchmarks (LongMemEval's longest assistant turns are a few thousand characters),
# far below the multi-megabyte turns that make a build run for minutes.
DEFAULT_MAX_TURN_CHARS = 100_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_max_turn_chars(value: Any) -> int | None:
    """``value`` when it is a positive integer or None, else ``ValueError`` (a bad argument)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_turn_chars must be a positive integer or None, got {value!r}")
    return value


def child(where: str, key: str | int) -> str:
    """Extend the JSON path ``where`` by an object key or a list index.

    Keys that are plain identifiers use dot notation (``$.sessions``); others are quoted
    (``$["odd key"]``) so the path stays unambiguous.
    """
    if isinstance(key, int):
        return f"{where}[{key}]"
    if _IDENT.match(key):
        return f"{where}.{key}"
    return f"{where}[{json.dumps(key, ensure_ascii=False)}]"


def _type_name(value: Any) -> str:
    """A JSON-flavoured name for the type of a parsed value, for error details."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def read_text(path: str | Path) -> str:
    """Return the content of ``path`` decoded as strict UTF-8.

    A gzip-compressed file (``.json.gz``, as some benchmark files are published; recognised by
    its leading bytes, whatever its name) is decompressed first. A leading byte-order mark is
    dropped. Invalid bytes raise :class:`DataFormatError` giving the byte offset in the file
    (counting the BOM, so it matches a hex editor; in the decompressed bytes for a gzip file).
    A missing or unreadable file, or a truncated gzip stream, also raises ``DataFormatError``
    rather than ``OSError`` so that a CLI can report every input problem the same way.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise DataFormatError(str(p), "$", "an existing file", "file not found") from None
    except IsADirectoryError:
        raise DataFormatError(str(p), "$", "a file", "path is a directory") from None
    except OSError as exc:
        raise DataFormatError(str(p), "$", "a readable file", str(exc)) from None
    where = "byte"
    if raw.startswith(_GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataFormatError(str(p), "$", "a complete gzip file", str(exc) or type(exc).__name__) from None
        where = "decompressed byte"
    skip = len(_BOM) if raw.startswith(_BOM) else 0
    try:
        return raw[skip:].decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        offset = exc.start + skip
        bad = raw[offset : offset + 1].hex()
        raise DataFormatError(
            str(p), f"{where} {offset}", "UTF-8 text", f"{exc.reason}: byte 0x{bad}"
        ) from None


def _decode_error(path: str, where_prefix: str, exc: json.JSONDecodeError,
                  line: int | None = None) -> DataFormatError:
    lineno = exc.lineno if line is None else line
    return DataFormatError(
        path, f"{where_prefix}line {lineno}, column {exc.colno}", "valid JSON", exc.msg
    )


def load_json(path: str | Path) -> Any:
    """Parse a whole JSON file; syntax errors are reported as ``line L, column C``."""
    text = read_text(path)
    if not text.strip():
        raise DataFormatError(str(path), "$", "a JSON document", "file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _decode_error(str(path), "", exc) from None
    except RecursionError:
        raise DataFormatError(str(path), "$", "valid JSON", "nesting too deep") from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every non-blank line of a JSONL file.

    Line numbers are 1-based and count blank lines, so they match an editor. An
    entirely blank file raises :class:`DataFormatError`; the whole file is decoded
    before the first value is yielded so encoding problems are found up front.
    """
    text = read_text(path)
    if not text.strip():
        raise DataFormatError(str(path), "$", "at least one JSON line", "file is empty")
    # splitlines() would also split on U+2028 and similar characters that may legally
    # appear inside JSON strings; JSONL lines are separated by \n only.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _decode_error(str(path), "", exc, line=number) from None
        except RecursionError:
            raise DataFormatError(str(path), f"line {number}", "valid JSON",
                                  "nesting too deep") from None
        yield number, value


class FieldReader:
    """Type-checked access to parsed JSON values, raising located errors.

    One reader is made per file; every accessor takes the JSON path of the value it
    looks at, so the error it raises can say exactly where the problem is.
    ``max_turn_chars`` caps the length of every string read (None: no cap).
    """

    def __init__(self, path: str | Path, *, max_turn_chars: int | None = DEFAULT_MAX_TURN_CHARS):
        self.path = str(path)
        self.max_turn_chars = check_max_turn_chars(max_turn_chars)

    def fail(self, where: str, expected: str, detail: str | None = None) -> NoReturn:
        """Raise a :class:`DataFormatError` for this file."""
        raise DataFormatError(self.path, where, expected, detail)

    # --- containers -------------------------------------------------------------

    # Mappings and tuples are accepted besides dict and list so that the same checks serve
    # Python objects handed over in memory (parsed JSON only ever has dicts and lists).

    def as_dict(self, value: Any, where: str, what: str = "an object") -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(where, what, f"found {_type_name(value)}")
        return value

    def as_list(self, value: Any, where: str, what: str = "a list") -> list[Any] | tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            self.fail(where, what, f"found {_type_name(value)}")
        return value

    def as_list_or_literal(self, value: Any, where: str, what: str = "a list") -> list[Any]:
        """Accept a list, or a string holding a Python list literal.

        Some redistributed copies of benchmark files (for example ones round-tripped
        through a dataframe) store list columns as their Python ``repr``; such a string
        is evaluated with :func:`ast.literal_eval`, which evaluates literals only and
        never runs code.
        """
        if isinstance(value, str):
            stripped = value.strip()
            if stripped.startswith("[") and stripped.endswith("]"):
                try:
                    parsed = ast.literal_eval(stripped)
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
                    self.fail(where, what, f"string is not a valid Python list literal: {exc}")
                if isinstance(parsed, list):
                    return parsed
        return self.as_list(value, where, what)

    def unique_records(self, doc: Any, what: str, id_field: str,
                       parse: Callable[[Any, str], tuple[str, _T]]) -> tuple[list[_T], dict[str, int]]:
        """The records of a benchmark file: ``doc`` must be a non-empty list of ``what``, each
        item read by ``parse(raw, where) -> (id, record)``; ids must be unique in the file.

        Returns the records in file order and ``{id: position}``.
        """
        items = self.as_list(doc, "$", f"a list of {what}")
        if not items:
            self.fail("$", f"a non-empty list of {what}", "found an empty list")
        records: list[_T] = []
        first_seen: dict[str, int] = {}
        for i, raw in enumerate(items):
            key, record = parse(raw, f"$[{i}]")
            if key in first_seen:
                self.fail(f"$[{i}].{id_field}", f"a {id_field} that is unique in the file",
                          f"{key!r} is also used at $[{first_seen[key]}]")
            first_seen[key] = i
            records.append(record)
        return records, first_seen

    def wanted_ids(self, wanted: str | Sequence[str], first_seen: Mapping[str, int], id_field: str,
                   what: str) -> list[str]:
        """The ids a caller asked for (one string is one id), each checked to be in the file;
        a missing one fails naming ``what`` ("sample", "question") and the file's first ids."""
        ids = [wanted] if isinstance(wanted, str) else list(wanted)
        missing = [w for w in ids if w not in first_seen]
        if missing:
            shown = ", ".join(list(first_seen)[:10]) + (" ..." if len(first_seen) > 10 else "")
            self.fail(f"$[*].{id_field}", f"a {what} with {id_field} {missing[0]!r}", f"the file has: {shown}")
        return ids

    def require(self, obj: Mapping[str, Any], key: str, where: str) -> Any:
        """Return ``obj[key]``; a missing key is reported at ``where`` (the object's path)."""
        if key not in obj:
            self.fail(child(where, key), f"key {key!r}", f"missing in the object at {where}")
        return obj[key]

    # --- scalars -----------------------------------------------------------------

    def check_text(self, value: str, where: str) -> str:
        """Reject strings over ``max_turn_chars`` or holding a lone surrogate (not UTF-8)."""
        if self.max_turn_chars is not None and len(value) > self.max_turn_chars:
            self.fail(where, f"a string of at most {self.max_turn_chars} characters "
                      "(the loaders' max_turn_chars limit; --max-turn-chars N raises it)",
                      f"found {len(value)} characters")
        try:
            value.encode("utf-8", errors="strict")
        except UnicodeEncodeError as exc:
            code = ord(value[exc.start])
            self.fail(where, "a string of Unicode characters",
                      f"lone surrogate U+{code:04X} at character {exc.start}")
        return value

    def as_str(self, value: Any, where: str, *, nonempty: bool = False) -> str:
        if not isinstance(value, str):
            self.fail(where, "a non-empty string" if nonempty else "a string",
                      f"found {_type_name(value)}")
        if nonempty and not value.strip():
            self.fail(where, "a non-empty string", "found an empty string")
        return self.check_text(value, where)

    def as_label(self, value: Any, where: str, *, nonempty: bool = True) -> str:
        """A single-line label (speaker, session time, id): a string with no control or
        line-break character, since reader views put it into a one-line header."""
        text = self.as_str(value, where, nonempty=nonempty)
        problem = label_problem(text)
        if problem is not None:
            self.fail(where, "a single-line string without control characters", problem)
        return text

    def as_namespace(self, value: Any, where: str, detail_prefix: str = "") -> str:
        """A string that the store accepts as a namespace id (checked at load time so a
        bad id is reported before anything is ingested)."""
        # Imported here: the store package pulls in sqlite3 and numpy, which plain
        # parsing does not need.
        from ..store.namespace import validate_namespace

        text = self.as_str(value, where, nonempty=True)
        try:
            return validate_namespace(text)
        except NamespaceError as exc:
            self.fail(where, "a valid namespace id", detail_prefix + str(exc))

    def as_int(self, value: Any, where: str) -> int:
        # bool is a subclass of int in Python but true/false is not a number in JSON.
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, "an integer", f"found {_type_name(value)}")
        return value

    def as_bool(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(where, "true or false", f"found {_type_name(value)}")
        return value

    def as_text_or_number(self, value: Any, where: str) -> str:
        """Return a string as is, or a JSON number as text (``2022`` -> ``"2022"``).

        Integers are written in decimal; floats as Python's shortest round-trip form
        (``2.5`` -> ``"2.5"``, ``2.0`` -> ``"2.0"``). NaN and infinities are refused.
        """
        if isinstance(value, str):
            return self.check_text(value, where)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, "a string or a number", f"found {_type_name(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(where, "a string or a finite number", f"found {value!r}")
        return str(value)

    # --- keyed shortcuts -----------------------------------------------------------

    def str_field(self, obj: Mapping[str, Any], key: str, where: str, *,
                  nonempty: bool = False) -> str:
        return self.as_str(self.require(obj, key, where), child(where, key), nonempty=nonempty)

    def label_field(self, obj: Mapping[str, Any], key: str, where: str, *,
                    nonempty: bool = True) -> str:
        """``obj[key]`` as a single-line label (see :meth:`as_label`)."""
        return self.as_label(self.require(obj, key, where), child(where, key), nonempty=nonempty)

    def opt_str_field(self, obj: Mapping[str, Any], key: str, where: str) -> str | None:
        """``obj[key]`` as a string, or None when the key is absent or null."""
        value = obj.get(key)
        if value is None:
            return None
        return self.as_str(value, child(where, key))
