"""Checking a PostgreSQL store for damage: what ``memcompile-local check --store postgresql://...``
reports.

The server keeps its own pages consistent (checksums, WAL), so what is checked here is the
store's content: the schema version, every row of every table decoded by the same codecs as a
read (each JSON column valid, each packet's content matching its sha256, each vector of the
size its dimension says), and the references the schema does not enforce (descriptors of a
layout's cells, generations of namespaces that are gone). Problems are reported by table and
row key, in the report type of the SQLite check.
"""

from __future__ import annotations

from typing import Any

from ...errors import StoreError
from ..check import TABLE_SCANS, CheckReport, Problem, row_problem
from .schema import read_version

_MAX_PER_TABLE = 50


def check_database(store: Any) -> CheckReport:
    """Check the database of ``store`` (a ``PostgresStore``); never raises for damaged rows."""
    report = CheckReport(store.path)
    try:
        with store._read() as c:
            try:
                read_version(c, store.path)
            except StoreError as exc:
                report.problems.append(Problem("file", "", str(exc).split(": ", 1)[-1]))
                return report
            for table in sorted(TABLE_SCANS):
                cols, keys, decode = TABLE_SCANS[table]
                names = [x.strip() for x in cols.split(",")]
                found = checked = 0
                for raw in c.execute(f"SELECT {cols} FROM {table}"):
                    checked += 1
                    raw = tuple(bytes(v) if isinstance(v, memoryview) else v for v in raw)
                    problem = row_problem(table, raw, names, keys, decode)
                    if problem is not None and found < _MAX_PER_TABLE:
                        found += 1
                        report.problems.append(problem)
                report.rows_checked[table] = checked
            for (ns,) in c.execute("SELECT g.namespace FROM generations g LEFT JOIN namespaces n "
                                   "ON n.namespace = g.namespace WHERE n.namespace IS NULL"):
                report.problems.append(Problem("generations", repr(ns), "names a namespace that is not stored"))
            for ns, pid in c.execute("SELECT p.namespace, p.packet_id FROM packets p LEFT JOIN namespaces n "
                                     "ON n.namespace = p.namespace WHERE n.namespace IS NULL LIMIT 50"):
                report.problems.append(Problem("packets", f"{ns!r}/{pid!r}", "belongs to no registered namespace"))
    except StoreError as exc:
        report.problems.append(Problem("file", "", f"the database cannot be read ({exc})"))
    return report
