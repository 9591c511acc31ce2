"""The service's batch-import job status on PostgreSQL, so that every replica answers for a job.

One row per job, keyed by namespace then job id: the owner (the server process running it), the
state, the status document as JSON text, and a heartbeat from the database's clock that the
owner renews while the job is unfinished. A reader judges an unfinished job by its owner and its
heartbeat (``service.imports``); the rows go with the namespace's other service state on forget.
"""

from __future__ import annotations

from typing import Any

from ..codecs import require_str
from ..namespace import validate_namespace

_NOW = "extract(epoch from clock_timestamp())"
_UNFINISHED = "('queued', 'running')"


class PgImportJobs:
    """Import job rows, mixed into the PostgreSQL store (which provides ``_write``/``_query``)."""

    def put_import_job(self, namespace: str, job_id: str, owner: str, state: str, body: str) -> None:
        """Insert or replace the status of job ``job_id`` of ``namespace`` (heartbeat: now)."""
        ns = validate_namespace(namespace)
        with self._write() as c:  # type: ignore[attr-defined]
            c.execute(
                "INSERT INTO service_import_jobs (namespace, job_id, owner, state, body, heartbeat_at) "
                f"VALUES (%s, %s, %s, %s, %s, {_NOW}) ON CONFLICT (namespace, job_id) DO UPDATE SET "
                "owner = EXCLUDED.owner, state = EXCLUDED.state, body = EXCLUDED.body, "
                "heartbeat_at = EXCLUDED.heartbeat_at",
                (ns, require_str(job_id, "job id"), require_str(owner, "job owner"), require_str(state, "job state"),
                 require_str(body, "job status")))

    def import_job(self, namespace: str, job_id: str) -> tuple[str, float] | None:
        """(status JSON, seconds since its owner's last heartbeat) of one job, or None."""
        rows = self._query(  # type: ignore[attr-defined]
            f"SELECT body, {_NOW} - heartbeat_at FROM service_import_jobs WHERE namespace = %s AND job_id = %s",
            (validate_namespace(namespace), require_str(job_id, "job id")), table="service_import_jobs")
        return (rows[0][0], float(rows[0][1])) if rows else None

    def unfinished_import_jobs(self) -> list[tuple[str, str, float]]:
        """(namespace, status JSON, heartbeat age in seconds) of every queued or running job."""
        return [(r[0], r[1], float(r[2])) for r in self._query(  # type: ignore[attr-defined]
            f"SELECT namespace, body, {_NOW} - heartbeat_at FROM service_import_jobs "
            f"WHERE state IN {_UNFINISHED} ORDER BY namespace, job_id", table="service_import_jobs")]

    def touch_import_jobs(self, owner: str) -> int:
        """Renew the heartbeat of ``owner``'s unfinished jobs; returns how many."""
        with self._write() as c:  # type: ignore[attr-defined]
            return self._rowcount(c.execute(  # type: ignore[attr-defined]
                f"UPDATE service_import_jobs SET heartbeat_at = {_NOW} WHERE owner = %s AND state IN {_UNFINISHED}",
                (require_str(owner, "job owner"),)))

    def end_import_job(self, namespace: str, job_id: str, owner: str, state: str, body: str) -> bool:
        """Replace the status of a job only while it is still unfinished and ``owner``'s (a reader
        that found the owner gone); False when the job moved on meanwhile."""
        with self._write() as c:  # type: ignore[attr-defined]
            cur: Any = c.execute(
                "UPDATE service_import_jobs SET state = %s, body = %s WHERE namespace = %s AND job_id = %s "
                f"AND owner = %s AND state IN {_UNFINISHED}",
                (require_str(state, "job state"), require_str(body, "job status"), validate_namespace(namespace),
                 require_str(job_id, "job id"), require_str(owner, "job owner")))
            return self._rowcount(cur) == 1  # type: ignore[attr-defined]
