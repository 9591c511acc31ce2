"""The request cache and usage ledger on PostgreSQL: ``store.ledger.RequestLedger``'s semantics
(first write wins, per-run totals over unique entries, waste kept apart) on store-wide tables
that every server sharing the database reads and writes."""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from ...errors import StoreError
from ..codecs import cache_entry, optional_namespace, require_int, require_str, row_error


def _totals(rows: Iterable[tuple]) -> dict[str, dict]:
    return {r[0]: {"prompt": int(r[1]), "completion": int(r[2]), "calls": int(r[3])} for r in rows}


class PgLedger:
    """Cache and ledger methods, mixed into the PostgreSQL store (which provides ``_write``,
    ``_query``, ``path``, ``_psycopg`` and ``_register``)."""

    def cache_get(self, key: str) -> dict | None:
        """The cached response of request ``key`` (``text``, ``parsed``, token counts,
        ``finish_reason``, ``stage``), or ``None``."""
        k = require_str(key, "cache key")
        rows = self._query(  # type: ignore[attr-defined]
            "SELECT stage, response_json, prompt_tokens, completion_tokens FROM request_cache WHERE key = %s",
            (k,), table="request_cache")
        if not rows:
            return None
        stage, response_json, pt, ct = rows[0]
        try:
            out = json.loads(response_json)
        except (TypeError, ValueError) as exc:
            raise row_error("request_cache", repr(k), f"column response_json is not JSON: {exc}") from exc
        if not isinstance(out, dict):
            raise row_error("request_cache", repr(k), "the response has the wrong type")
        out.setdefault("text", "")
        out.setdefault("parsed", None)
        out.setdefault("finish_reason", None)
        out["prompt_tokens"] = int(pt)
        out["completion_tokens"] = int(ct)
        out["stage"] = stage
        return out

    def cache_put(self, key: str, *, namespace: str | None, stage: str, identity_json: str,
                  response: dict) -> bool:
        """Cache ``response`` under ``key``; ``True`` when newly inserted (first write wins)."""
        k, ns, st, body, pt, ct = cache_entry(key, namespace, stage, identity_json, response)
        with self._write() as c:  # type: ignore[attr-defined]
            cur = c.execute(
                "INSERT INTO request_cache (key, namespace, stage, identity_json, response_json, prompt_tokens, "
                "completion_tokens, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (key) DO NOTHING",
                (k, ns, st, identity_json, body, pt, ct, time.time()))
            inserted = self._rowcount(cur) == 1  # type: ignore[attr-defined]
            if inserted and ns is not None:
                self._register(c, ns)  # type: ignore[attr-defined]
        return inserted

    def record_waste(self, *, stage: str, namespace: str | None, prompt_tokens: int, completion_tokens: int,
                     reason: str, run_id: str | None = None) -> None:
        """Log tokens spent on a call whose output was discarded."""
        st = require_str(stage, "stage")
        ns = optional_namespace(namespace)
        pt = require_int(prompt_tokens, "prompt_tokens", minimum=0)
        ct = require_int(completion_tokens, "completion_tokens", minimum=0)
        why = require_str(reason, "reason", allow_empty=True)
        rid = None if run_id is None else require_str(run_id, "run_id")
        with self._write() as c:  # type: ignore[attr-defined]
            c.execute(
                "INSERT INTO waste (run_id, namespace, stage, prompt_tokens, completion_tokens, reason, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)", (rid, ns, st, pt, ct, why, time.time()))

    def mark_used(self, run_id: str, keys: Iterable[str]) -> None:
        """Record that run ``run_id`` used the cache entries ``keys`` (idempotent); an unknown key
        raises :class:`StoreError` and nothing of the call is recorded."""
        rid = require_str(run_id, "run_id")
        ks = list(dict.fromkeys(require_str(k, "cache key") for k in keys))
        if not ks:
            return
        psycopg = self._psycopg  # type: ignore[attr-defined]
        try:
            with self._write() as c:  # type: ignore[attr-defined]
                c.execute(
                    "INSERT INTO run_calls (run_id, key) SELECT %s, k FROM unnest(%s::text[]) AS k "
                    "ON CONFLICT DO NOTHING", (rid, ks))
        except psycopg.errors.ForeignKeyViolation as exc:
            raise StoreError(f"{self.path}: run {rid!r} marks a key that is not in the request cache") from exc  # type: ignore[attr-defined]
        except StoreError as exc:
            if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
                raise StoreError(f"{self.path}: run {rid!r} marks a key that is not in the request cache") from exc  # type: ignore[attr-defined]
            raise

    def token_totals(self, *, run_id: str | None = None, namespace: str | None = None) -> dict[str, dict]:
        """Per stage ``{"prompt", "completion", "calls"}`` over unique cache entries (of ``run_id``
        and/or ``namespace`` when given)."""
        ns = optional_namespace(namespace)
        sql = ("SELECT c.stage, SUM(c.prompt_tokens)::bigint, SUM(c.completion_tokens)::bigint, COUNT(*) "
               "FROM request_cache c")
        params: list[Any] = []
        if run_id is not None:
            sql += " JOIN run_calls r ON r.key = c.key AND r.run_id = %s"
            params.append(require_str(run_id, "run_id"))
        if ns is not None:
            sql += " WHERE c.namespace = %s"
            params.append(ns)
        sql += " GROUP BY c.stage ORDER BY c.stage"
        return _totals(self._query(sql, params, table="request_cache"))  # type: ignore[attr-defined]

    def waste_totals(self, *, run_id: str | None = None) -> dict[str, dict]:
        """Per stage ``{"prompt", "completion", "calls"}`` of wasted calls (of ``run_id`` when given)."""
        sql = "SELECT stage, SUM(prompt_tokens)::bigint, SUM(completion_tokens)::bigint, COUNT(*) FROM waste"
        params: list[Any] = []
        if run_id is not None:
            sql += " WHERE run_id = %s"
            params.append(require_str(run_id, "run_id"))
        sql += " GROUP BY stage ORDER BY stage"
        return _totals(self._query(sql, params, table="waste"))  # type: ignore[attr-defined]
