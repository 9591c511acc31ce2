"""Checking a store file for damage: what ``memcompile-local check --store PATH`` reports.

:func:`check_store` opens the file read-only (it changes nothing, not even the journal mode) and
runs, in order: SQLite's ``integrity_check`` (page structure, indexes), ``foreign_key_check``, the
schema marks, and a decode of every row of the store's tables (each text column must be UTF-8,
each JSON column valid, each column of its type, each packet's content must match its sha256,
each vector must have the size its dimension says). Every problem is reported with its table and
row key, so a user knows which memories are affected.

:func:`damaged_rows` is the row scan alone, also used by the store to name the row behind a read
that failed to decode.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import StoreError
from .codecs import (
    CELL_COLS,
    DESCRIPTOR_COLS,
    PACKET_COLS,
    cell_from_row,
    descriptor_from_row,
    packet_from_row,
    vector_from_blob,
)
from .connection import connect_read_only, probe_sqlite_file
from .schema import OUR_TABLES, inspect_schema

_MAX_PER_TABLE = 50  # problems listed per table; a wholly damaged table is summarised after that


@dataclass(frozen=True)
class Problem:
    """One damaged thing: ``table`` (or ``"file"``), the row's key (``""`` when not row-level), what."""

    table: str
    row: str
    what: str

    def __str__(self) -> str:
        where = "file" if self.table == "file" else f"table {self.table}" + (f", row {self.row}" if self.row else "")
        return f"{where}: {self.what}"


@dataclass
class CheckReport:
    """Outcome of :func:`check_store`: ``ok`` when nothing is damaged; ``rows_checked`` per table."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    rows_checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """Human-readable report lines."""
        if self.ok:
            total = sum(self.rows_checked.values())
            return [f"{self.path}: ok ({total} rows in {len(self.rows_checked)} tables checked)"]
        return [f"{self.path}: {len(self.problems)} problem(s)"] + [f"  {p}" for p in self.problems]


# ------------------------------------------------------------------------------ row decoding

# Per table: the columns to select (in the codec's order), the key columns, and the decoder.
# A decoder takes the row with its text already decoded and raises StoreError when it is damaged.
def _decode_packet(r: tuple) -> None:
    packet_from_row(r, verify=True)


def _decode_descriptor(r: tuple) -> None:
    descriptor_from_row(r[:-1], r[-1])


def _decode_cell(r: tuple) -> None:
    cell_from_row(r[2:], r[0], r[1])


def _decode_vector(r: tuple) -> None:
    vector_from_blob(r[4], r[3], f"{r[1]!r}/{r[2]!r}")


def _decode_json_columns(*positions: int) -> Callable[[tuple], None]:
    def decode(r: tuple) -> None:
        for i in positions:
            try:
                json.loads(r[i])
            except (TypeError, ValueError) as exc:
                raise StoreError(f"column {i} is not JSON ({exc})") from exc

    return decode


TABLE_SCANS: dict[str, tuple[str, tuple[int, ...], Callable[[tuple], None] | None]] = {
    "packets": (PACKET_COLS, (0, 1), _decode_packet),
    "descriptors": (DESCRIPTOR_COLS.replace("d.", "") + ", descriptor_set", (1, 16, 0), _decode_descriptor),
    "cells": ("namespace, layout_id, " + CELL_COLS, (0, 1, 2), _decode_cell),
    "embeddings": ("namespace, model_id, key, vector_id", (0, 1, 2), None),
    "vectors": ("id, space, content, dim, vector", (0,), _decode_vector),
    "request_cache": ("key, namespace, stage, identity_json, response_json, prompt_tokens, completion_tokens",
                      (0,), _decode_json_columns(3, 4)),
    "run_calls": ("run_id, key", (0, 1), None),
    "waste": ("id, run_id, namespace, stage, reason", (0,), None),
    "namespaces": ("namespace, created_at", (0,), None),
    "extraction_markers": ("namespace, descriptor_set, packet_id, n_descriptors", (0, 1, 2), None),
    "meta": ("namespace, key, value", (0, 1), None),
    "capsules": ("namespace, capsule_id, writer, budget, body", (0, 1), _decode_json_columns(4)),
    "generations": ("namespace, generation", (0,), None),
    "changes": ("namespace, generation, previous, kind, detail, first_ordinal, last_ordinal", (0, 1, 3, 4), None),
    "counters": ("name, value", (0,), None),
}


def _key(raw: tuple, positions: tuple[int, ...]) -> str:
    parts = []
    for i in positions:
        v = raw[i]
        if isinstance(v, bytes):
            v = v.decode("utf-8", errors="replace")
        parts.append(repr(v))
    return "/".join(parts)


def damaged_rows(conn: sqlite3.Connection, table: str, *, limit: int = _MAX_PER_TABLE) -> Iterator[Problem]:
    """Yield a :class:`Problem` for each row of ``table`` that does not decode (at most ``limit``).

    Reads with a cursor whose text comes back as bytes, so a row that is not UTF-8 is found and
    named instead of stopping the scan. A page too damaged to read ends the scan with one problem.
    """
    cols, key_positions, decode = TABLE_SCANS[table]
    names = [c.strip() for c in cols.split(",")]
    old_factory = conn.text_factory
    conn.text_factory = bytes
    found = 0
    try:
        cur = conn.execute(f"SELECT {cols} FROM {table}")
        while found < limit:
            try:
                raw = cur.fetchone()
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                yield Problem(table, "", f"rows cannot be read further ({exc})")
                return
            if raw is None:
                return
            problem = row_problem(table, raw, names, key_positions, decode)
            if problem is not None:
                found += 1
                yield problem
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        yield Problem(table, "", f"cannot be read ({exc})")
    finally:
        conn.text_factory = old_factory


def row_problem(table: str, raw: tuple, names: list[str], key_positions: tuple[int, ...],
                 decode: Callable[[tuple], None] | None) -> Problem | None:
    key = _key(raw, key_positions)
    row: list[Any] = []
    for name, value in zip(names, raw):
        if isinstance(value, bytes) and name != "vector":
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as exc:
                return Problem(table, key, f"column {name} is not UTF-8 text ({exc.reason} at byte {exc.start})")
        row.append(value)
    if decode is None:
        return None
    try:
        decode(tuple(row))
    except StoreError as exc:
        return Problem(table, key, _short(str(exc)))
    except Exception as exc:  # a decoder meeting a value of a shape nobody writes
        return Problem(table, key, f"{type(exc).__name__}: {exc}")
    return None


def _short(message: str) -> str:
    # The codecs' messages name table and row themselves and end with the hint to run check.
    detail = message.split("stored data is damaged (", 1)[-1]
    return detail.split("); run `memcompile-local check", 1)[0]


def count_rows(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


# ------------------------------------------------------------------------------ the whole check


def check_store(path: str | Path) -> CheckReport:
    """Check the store file at ``path`` for damage; never raises for a damaged file.

    Raises :class:`StoreError` only when there is no file at ``path``. The file is opened
    read-only, so the check can run on a read-only mount and beside a running writer.
    """
    p = Path(path)
    report = CheckReport(str(p))
    if not p.is_file():
        raise StoreError(f"{p}: no store file at this path")
    # Through SQLite, never open(): closing a descriptor of the file would drop the locks of any
    # connection this process holds on it (see probe_sqlite_file).
    verdict = probe_sqlite_file(p, timeout_s=5.0)
    if verdict:
        report.problems.append(Problem("file", "", verdict))
        return report
    try:
        conn = connect_read_only(p, timeout_s=5.0)
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        report.problems.append(Problem("file", "", f"cannot be opened ({exc})"))
        return report
    # Names and messages read from a damaged file may not be UTF-8; show them, do not fail on them.
    conn.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    try:
        _check_open_file(conn, report)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        report.problems.append(Problem("file", "", f"cannot be read ({exc})"))
    finally:
        conn.close()
    return report


def _check_open_file(conn: sqlite3.Connection, report: CheckReport) -> None:
    problems = report.problems
    try:
        messages = [r[0] for r in conn.execute("PRAGMA integrity_check(100)")]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        problems.append(Problem("file", "", f"integrity_check could not run ({exc})"))
        return
    if messages != ["ok"]:
        problems.extend(Problem("file", "", f"integrity_check: {m}") for m in messages)
    try:
        for table, rowid, parent, _fk in conn.execute("PRAGMA foreign_key_check"):
            problems.append(Problem(table, str(rowid), f"refers to a missing row of {parent}"))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        problems.append(Problem("file", "", f"foreign_key_check could not run ({exc})"))
    try:
        inspect_schema(conn, report.path)
    except StoreError as exc:
        problems.append(Problem("file", "", str(exc).split(": ", 1)[-1]))
        return
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        problems.append(Problem("file", "", f"the schema cannot be read ({exc})"))
        return
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in sorted(OUR_TABLES & tables):
        try:
            report.rows_checked[table] = count_rows(conn, table)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            problems.append(Problem(table, "", f"cannot be counted ({exc})"))
        problems.extend(damaged_rows(conn, table))
