"""The request cache and usage ledger: model responses stored under their full identity, and the
tokens each run used or wasted.

One cache row per successful deterministic request (first write wins), with its token counts; a
run's totals are the sum over the rows that run marked used (``run_calls``), so a hit never counts
twice and a resumed run reports what an uninterrupted one would. Failed calls go to ``waste``.

:class:`RequestLedger` holds the logic and runs on any :class:`~.connection.StoreConnection`
whose file has the three tables of :data:`LEDGER_SCHEMA_SQL`: the durable store is one, and
:class:`InMemoryLedger` (a private in-memory SQLite database with only these tables) is the
other, so an LLM client without a store keeps exactly the same semantics.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Iterable

from ..errors import StoreError
from .codecs import cache_entry, optional_namespace, require_int, require_str, row_error
from .connection import StoreConnection

LEDGER_SCHEMA_SQL = """
CREATE TABLE request_cache (
    key                TEXT PRIMARY KEY,
    namespace          TEXT,
    stage              TEXT NOT NULL,
    identity_json      TEXT NOT NULL,
    response_json      TEXT NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    created_at         REAL NOT NULL
);
CREATE INDEX request_cache_by_namespace ON request_cache (namespace, stage);

CREATE TABLE run_calls (
    run_id  TEXT NOT NULL,
    key     TEXT NOT NULL REFERENCES request_cache (key) ON DELETE CASCADE,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_calls_by_key ON run_calls (key);

CREATE TABLE waste (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id             TEXT,
    namespace          TEXT,
    stage              TEXT NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reason             TEXT NOT NULL,
    created_at         REAL NOT NULL
);
CREATE INDEX waste_by_run ON waste (run_id, stage);
CREATE INDEX waste_by_namespace ON waste (namespace);
"""

LEDGER_TABLES = ("request_cache", "run_calls", "waste")


def _totals(rows: Iterable[tuple]) -> dict[str, dict]:
    return {r[0]: {"prompt": int(r[1]), "completion": int(r[2]), "calls": int(r[3])} for r in rows}


class RequestLedger:
    """Cache and ledger methods; mixed into a :class:`StoreConnection` subclass.

    The host provides ``_write()``, ``_query()``, ``path`` and ``_register(c, namespace)`` (what
    to record when a namespaced entry is first cached).
    """

    def _register(self, c: sqlite3.Connection, namespace: str) -> None:  # pragma: no cover - overridden
        pass

    def cache_get(self, key: str) -> dict | None:
        """The cached response of request ``key`` or ``None``.

        The dict holds ``text``, ``parsed``, ``prompt_tokens``, ``completion_tokens``,
        ``finish_reason`` and ``stage`` (plus any other keys the response was stored with).
        """
        k = require_str(key, "cache key")
        rows = self._query(  # type: ignore[attr-defined]
            "SELECT stage, response_json, prompt_tokens, completion_tokens FROM request_cache WHERE key = ?",
            (k,),
            table="request_cache",
        )
        if not rows:
            return None
        stage, response_json, pt, ct = rows[0]
        try:
            out = json.loads(response_json)
        except (TypeError, ValueError) as exc:
            raise row_error("request_cache", repr(k), f"column response_json is not JSON: {exc}") from exc
        if not isinstance(out, dict) or not isinstance(pt, int) or not isinstance(ct, int):
            raise row_error("request_cache", repr(k), "the response or its token counts have the wrong type")
        out.setdefault("text", "")
        out.setdefault("parsed", None)
        out.setdefault("finish_reason", None)
        out["prompt_tokens"] = pt
        out["completion_tokens"] = ct
        out["stage"] = stage
        return out

    def cache_put(
        self, key: str, *, namespace: str | None, stage: str, identity_json: str, response: dict
    ) -> bool:
        """Cache ``response`` under ``key``; ``True`` when newly inserted.

        First write wins: an existing key is left unchanged and ``False`` is returned. ``namespace``
        may be ``None`` for requests not tied to one memory (e.g. judging); when given it is
        validated and ``forget`` removes the entry. ``identity_json`` must be JSON (the canonical
        request identity, kept for audits); ``response`` must be a JSON-serialisable dict whose
        ``prompt_tokens``/``completion_tokens`` (default 0) feed :meth:`token_totals`.
        """
        k, ns, st, body, pt, ct = cache_entry(key, namespace, stage, identity_json, response)
        with self._write() as c:  # type: ignore[attr-defined]
            cur = c.execute(
                "INSERT OR IGNORE INTO request_cache (key, namespace, stage, identity_json, response_json, "
                "prompt_tokens, completion_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (k, ns, st, identity_json, body, pt, ct, time.time()),
            )
            inserted = cur.rowcount == 1
            if inserted and ns is not None:
                self._register(c, ns)
        return inserted

    def record_waste(
        self,
        *,
        stage: str,
        namespace: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        reason: str,
        run_id: str | None = None,
    ) -> None:
        """Log tokens spent on a call whose output was discarded (invalid output, retry, ...)."""
        st = require_str(stage, "stage")
        ns = optional_namespace(namespace)
        pt = require_int(prompt_tokens, "prompt_tokens", minimum=0)
        ct = require_int(completion_tokens, "completion_tokens", minimum=0)
        why = require_str(reason, "reason", allow_empty=True)
        rid = None if run_id is None else require_str(run_id, "run_id")
        with self._write() as c:  # type: ignore[attr-defined]
            c.execute(
                "INSERT INTO waste (run_id, namespace, stage, prompt_tokens, completion_tokens, reason, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (rid, ns, st, pt, ct, why, time.time()),
            )

    def mark_used(self, run_id: str, keys: Iterable[str]) -> None:
        """Record that run ``run_id`` used the cache entries ``keys`` (idempotent).

        Every key must already be in the cache; an unknown key raises :class:`StoreError` and
        nothing of the call is recorded.
        """
        rid = require_str(run_id, "run_id")
        ks = list(dict.fromkeys(require_str(k, "cache key") for k in keys))
        if not ks:
            return
        with self._write() as c:  # type: ignore[attr-defined]
            try:
                c.executemany(
                    "INSERT OR IGNORE INTO run_calls (run_id, key) VALUES (?, ?)", ((rid, k) for k in ks)
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(
                    f"{self.path}: run {rid!r} marks a key that is not in the request cache ({exc})"  # type: ignore[attr-defined]
                ) from exc

    def token_totals(
        self, *, run_id: str | None = None, namespace: str | None = None
    ) -> dict[str, dict]:
        """Per stage ``{"prompt", "completion", "calls"}`` over unique cache entries.

        With ``run_id``: only entries that run marked used. With ``namespace``: only entries cached
        under that namespace. With both: both restrictions. With neither: the whole cache.
        """
        ns = optional_namespace(namespace)
        sql = "SELECT c.stage, SUM(c.prompt_tokens), SUM(c.completion_tokens), COUNT(*) FROM request_cache c"
        params: list[Any] = []
        if run_id is not None:
            sql += " JOIN run_calls r ON r.key = c.key AND r.run_id = ?"
            params.append(require_str(run_id, "run_id"))
        if ns is not None:
            sql += " WHERE c.namespace = ?"
            params.append(ns)
        sql += " GROUP BY c.stage ORDER BY c.stage"
        return _totals(self._query(sql, params, table="request_cache"))  # type: ignore[attr-defined]

    def waste_totals(self, *, run_id: str | None = None) -> dict[str, dict]:
        """Per stage ``{"prompt", "completion", "calls"}`` of wasted calls (of ``run_id`` when given)."""
        sql = "SELECT stage, SUM(prompt_tokens), SUM(completion_tokens), COUNT(*) FROM waste"
        params: list[Any] = []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            params.append(require_str(run_id, "run_id"))
        sql += " GROUP BY stage ORDER BY stage"
        return _totals(self._query(sql, params, table="waste"))  # type: ignore[attr-defined]


class InMemoryLedger(StoreConnection, RequestLedger):
    """The request cache and ledger for the life of one object, with no file behind it.

    Used by an LLM client that has no store; the same SQL as the store's ledger, so hits, first
    write wins, per-run totals and waste behave identically. Thread-safe like the store.
    """

    def __init__(self) -> None:
        super().__init__(":memory:")
        with self._write() as c:
            for stmt in LEDGER_SCHEMA_SQL.split(";"):
                if stmt.strip():
                    c.execute(stmt)

    def __repr__(self) -> str:
        return "InMemoryLedger()"
