"""Batch imports of large histories: an uploaded file becomes a background job with a status.

``POST /v1/memories/{user_id}/imports`` takes a conversation file in a format the CLI's
``ingest`` reads (the plain memory format as JSON or JSONL, a LoCoMo or a LongMemEval file) or a
JSON list of turns (the append body: ``{"turns": [...]}``, ``{"sessions": [...]}``, or a bare
list of turn objects), with no per-request turn limit. The upload is read and validated in the
request (a malformed file is a 400 naming the place, before anything is queued), then the job
is queued and the request answers 202 with the job's status.

A job runs in the accepting process's import thread, one job at a time: each conversation of
the file is written in one store transaction (all of it or none of it, as ``ingest`` writes a
file), then the memory is built (model-free: in the job; under an LLM extractor the user is
queued for the build worker). A conversation that fails (a stored turn id with other content,
say) stops the job: state ``failed`` with the error, the conversations before it stay written,
nothing of it is. Importing the same file again adds only what is missing.

``GET /v1/memories/{user_id}/imports/{job_id}`` reads the status: ``state`` (queued, running,
done, failed), ``turns_written`` of ``turns_total``, conversations done, the error. Any server
process on the store answers for a job, and the status outlasts a restart: on a store file it
is a small JSON file per job beside it (``<store>.imports/``, which every process on that
machine reads); on a database it is a row of the store (``service_import_jobs``), which every
replica on any machine reads. A job whose process died before it finished reads ``failed``
(code ``interrupted``): the reader sees that the owner's process is gone (one on this machine),
or that its heartbeat, renewed every few seconds while a job of it is unfinished, has stopped
(any machine, database stores). Only the tenant and user that created a job can read it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..data import load_any
from ..data.plain import GivenIds, load_plain_given_ids
from ..errors import ConfigError, DataFormatError, NamespaceError
from ..types import Conversation
from .errors import ServiceError, from_exception
from .validate import TurnInput, parse_append

log = logging.getLogger(__name__)

FORMATS = ("auto", "plain", "locomo", "longmemeval", "turns")
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Part:
    """One all-or-nothing unit of an import: a conversation of the file (``given``: which of its
    ids the file wrote, None when all of them are its own), or a list of validated turns (named
    like an append's when the job runs)."""

    conversation: Conversation | None = None
    given: GivenIds | None = None
    turns: tuple[TurnInput, ...] = ()

    @property
    def turn_count(self) -> int:
        if self.turns:
            return len(self.turns)
        assert self.conversation is not None
        return sum(len(s.turns) for s in self.conversation.sessions)


HEARTBEAT_S = 5.0
"""How often a process renews the heartbeat of its unfinished jobs on a database store."""

STALE_S = 60.0
"""An unfinished job whose heartbeat is older than this has lost its process (on whichever
machine): it reads failed. Many heartbeats long, so a busy or briefly cut-off owner is not
declared dead."""


class FileStatus:
    """Job status files of a store file: ``<dir>/<job id>.json``, read by every process of this
    machine."""

    heartbeats = False  # a file's reader judges the owner by its process id

    def __init__(self, folder: Path):
        self.folder = folder
        self._lock = threading.Lock()

    def write(self, ns: str, job: dict) -> None:
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)  # on the first import, not at every start
            target = self.folder / f"{job['id']}.json"
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, target)  # a reader sees the old status or the new one, never half

    def end(self, ns: str, job: dict) -> bool:
        self.write(ns, job)
        return True

    def read(self, ns: str, job_id: str) -> tuple[dict, float | None] | None:
        try:
            return json.loads((self.folder / f"{job_id}.json").read_text(encoding="utf-8")), None
        except (OSError, ValueError):
            return None

    def unfinished(self) -> list[tuple[str, dict, float | None]]:
        """The stored jobs still queued or running (by any process)."""
        if not self.folder.is_dir():
            return []
        out = []
        for path in self.folder.glob("*.json"):
            found = self.read("", path.stem)
            if found is not None and found[0].get("state") in UNFINISHED:
                out.append(("", found[0], None))
        return out

    def touch(self, owner: str) -> None:
        pass


class HeldStatus:
    """Job status held by this process only: a store in memory has no other reader."""

    heartbeats = False

    def __init__(self):
        self._held: dict[str, dict] = {}
        self._lock = threading.Lock()

    def write(self, ns: str, job: dict) -> None:
        with self._lock:
            self._held[job["id"]] = dict(job)

    def end(self, ns: str, job: dict) -> bool:
        self.write(ns, job)
        return True

    def read(self, ns: str, job_id: str) -> tuple[dict, float | None] | None:
        with self._lock:
            job = self._held.get(job_id)
            return (dict(job), None) if job else None

    def unfinished(self) -> list[tuple[str, dict, float | None]]:
        return []

    def touch(self, owner: str) -> None:
        pass


class StoreStatus:
    """Job status rows of a database store (``PgImportJobs``), read by every replica."""

    heartbeats = True

    def __init__(self, store: Any):
        for name in ("put_import_job", "import_job", "unfinished_import_jobs", "touch_import_jobs",
                     "end_import_job"):
            if not callable(getattr(store, name, None)):
                raise ConfigError(f"{store.path}: this store keeps no import job status ({name} is missing)")
        self.store = store

    def write(self, ns: str, job: dict) -> None:
        self.store.put_import_job(ns, job["id"], job["owner"], job["state"], json.dumps(job, ensure_ascii=False))

    def end(self, ns: str, job: dict) -> bool:
        """Write ``job`` (a final state) only if its stored status is still unfinished."""
        return self.store.end_import_job(ns, job["id"], job["owner"], job["state"],
                                         json.dumps(job, ensure_ascii=False))

    def read(self, ns: str, job_id: str) -> tuple[dict, float | None] | None:
        found = self.store.import_job(ns, job_id)
        if found is None:
            return None
        try:
            return json.loads(found[0]), found[1]
        except ValueError:
            log.warning("import %s of %s: the stored status is not JSON", job_id, ns)
            return None

    def unfinished(self) -> list[tuple[str, dict, float | None]]:
        out = []
        for ns, body, age in self.store.unfinished_import_jobs():
            try:
                out.append((ns, json.loads(body), age))
            except ValueError:
                continue
        return out

    def touch(self, owner: str) -> None:
        self.store.touch_import_jobs(owner)


UNFINISHED = ("queued", "running")


def interrupted(job: dict) -> dict:
    """``job`` as it reads once its process is gone."""
    return {**job, "state": "failed", "finished_at": _now(),
            "error": {"status": 503, "code": "interrupted",
                      "message": "the server stopped before the import finished; the conversations counted in "
                                 "conversations_done were written, import the file again for the rest"}}


class Importer:
    """Parses uploads and runs import jobs for one ``MemoryService`` (see the module doc)."""

    def __init__(self, service: Any, status: FileStatus | HeldStatus | StoreStatus,
                 owner_alive: Callable[[str], bool]):
        # ``service``: the MemoryService (core.py) this importer writes through.
        self.service = service
        self.status = status
        self.owner_alive = owner_alive
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memcompile-import")
        self._stop = threading.Event()
        self._mine: set[str] = set()  # ids of this process's unfinished jobs (their heartbeat)
        self._mine_lock = threading.Lock()
        for ns, job, age in self.status.unfinished():
            self._judge(ns, job, age)
        self._heart = None
        if status.heartbeats:
            self._heart = threading.Thread(target=self._beat, name="memcompile-import-heartbeat", daemon=True)
            self._heart.start()

    def _judge(self, ns: str, job: dict, age: float | None) -> dict:
        """``job`` as a reader must see it: an unfinished job of a process that is gone (by its
        process id on this machine, or by its stopped heartbeat) reads failed, and is stored so."""
        owner = job.get("owner", "")
        if job.get("state") not in UNFINISHED or owner == self.service.owner:
            return job
        if self.owner_alive(owner) and (age is None or age <= STALE_S):
            return job
        ended = interrupted(job)
        if self.status.end(ns, ended):
            return ended
        found = self.status.read(ns, job["id"])  # it moved on meanwhile: what it is now
        return found[0] if found is not None else ended

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._mine_lock:
                busy = bool(self._mine)
            if not busy:
                continue
            try:
                self.status.touch(self.service.owner)
            except Exception as exc:  # the database is down: the next beat tries again
                log.warning("import heartbeat failed: %s", exc)

    def close(self, timeout: float = 30.0) -> None:
        """Let a running job finish its current conversation, then stop (queued jobs fail)."""
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for t in list(getattr(self._pool, "_threads", ())):
            t.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ request side
    def parse(self, ns: str, raw: bytes, fmt: str, conversation: int | None) -> list[Part]:
        """The parts of an upload, validated: conversations (with the ids their file gave) or one
        list of turns (see ``Part``)."""
        if fmt not in FORMATS:
            raise ServiceError(400, "bad_request", f"format must be one of {', '.join(FORMATS)}", field="format")
        try:
            doc: Any = json.loads(raw.decode("utf-8"))
            one_document = True
        except (UnicodeDecodeError, ValueError, RecursionError):
            doc, one_document = None, False  # JSONL, perhaps: the plain loader says
        # One plain-format session object (a JSONL file of one line, as ``ingest`` reads it)
        # is not an append body, which has nothing next to its 'turns'.
        session_line = one_document and _looks_like_session(doc)
        if fmt == "auto" and one_document and not session_line and _looks_like_turns(doc):
            fmt = "turns"
        if fmt == "turns":
            if not one_document:
                raise ServiceError(400, "bad_json", "a list of turns must be one JSON document", field="$")
            body = {"turns": doc} if isinstance(doc, list) else doc
            # No per-request turn limit here: the upload's size bounds the count.
            limits = replace(self.service.limits, max_turns_per_request=max(1, len(raw)))
            try:
                return [Part(turns=tuple(parse_append(body, limits)))]
            except ServiceError as exc:
                if not session_line:
                    raise
                raise ServiceError(exc.status, exc.code, f"{exc.message} (the upload is a plain-format session "
                                   "object: import it with format=plain or auto)", field=exc.field) from None
        with tempfile.TemporaryDirectory(prefix="memcompile-import-") as d:
            # The name decides how load_any reads it: JSONL unless the bytes are one JSON
            # document other than a lone session object (a JSONL file of one line).
            path = Path(d) / ("upload.json" if one_document and not session_line else "upload.jsonl")
            path.write_bytes(raw)
            kw: dict[str, Any] = {"max_turn_chars": self.service.limits.max_text_chars}
            try:
                convs = load_any(path, fmt, **kw)
                given = None
                if len(convs) == 1 and not convs[0].questions and fmt in ("auto", "plain"):
                    try:
                        plain, given = load_plain_given_ids(path, **kw)
                        if plain != convs[0]:
                            given = None
                    except DataFormatError:
                        given = None
            except (DataFormatError, NamespaceError, ConfigError, ValueError) as exc:
                field = getattr(exc, "where", None)
                raise ServiceError(400, "bad_request", str(exc).replace(str(path), "the upload"),
                                   field=field) from None
        if conversation is not None:
            if not 0 <= conversation < len(convs):
                raise ServiceError(400, "bad_request", f"the file has {len(convs)} conversations; conversation "
                                   f"must be from 0 to {len(convs) - 1}", field="conversation")
            given = given if len(convs) == 1 else None
            convs = [convs[conversation]]
        return [Part(conversation=Conversation(namespace=ns, sessions=c.sessions, speakers=c.speakers), given=given)
                for c in convs]

    def submit(self, tenant: str, user_id: str, ns: str, parts: list[Part], fmt: str) -> dict:
        """Queue a job for parsed parts; returns its first status."""
        job = {"id": uuid.uuid4().hex, "user_id": user_id, "tenant": tenant, "owner": self.service.owner,
               "state": "queued", "format": fmt, "turns_total": sum(p.turn_count for p in parts),
               "turns_written": 0, "turns_skipped": 0, "conversations_total": len(parts), "conversations_done": 0,
               "built": False, "error": None, "created_at": _now(), "started_at": None, "finished_at": None}
        self.status.write(ns, job)
        first = public(job)  # before the job thread starts changing it
        with self._mine_lock:
            self._mine.add(job["id"])
        self._pool.submit(self._run, job, ns, parts)
        return first

    def get(self, tenant: str, user_id: str, job_id: str) -> dict:
        found = self.status.read(self.service.namespace(tenant, user_id), job_id) if _JOB_ID.match(job_id) else None
        job = None if found is None else found[0]
        if job is None or job.get("tenant") != tenant or job.get("user_id") != user_id:
            raise ServiceError(404, "not_found", f"user {user_id!r} has no import {job_id!r}", field="job_id")
        return public(self._judge(self.service.namespace(tenant, user_id), job, found[1]))

    # ------------------------------------------------------------------ the job
    def _run(self, job: dict, ns: str, parts: list[Part]) -> None:
        try:
            self._run_job(job, ns, parts)
        except Exception:  # the status could not be stored; readers see the job end by its heartbeat
            log.exception("import %s: its status could not be written", job["id"])
        finally:
            with self._mine_lock:
                self._mine.discard(job["id"])

    def _run_job(self, job: dict, ns: str, parts: list[Part]) -> None:
        svc = self.service
        job.update(state="running", started_at=_now())
        self.status.write(ns, job)
        added = 0
        try:
            for part in parts:
                if self._stop.is_set():
                    raise ServiceError(503, "interrupted", "the server stopped during the import; the conversations "
                                       "counted in conversations_done were written")
                # Under the user's lock, as an append picks its ids: one transaction per part.
                with svc.view_lock(ns):
                    if part.turns:
                        res = svc.memory.add(ns, svc.turns_conversation(ns, part.turns), in_place=False)
                    else:
                        res = svc.memory.add(ns, part.conversation, given_ids=part.given, in_place=False)
                added += res.added
                job.update(turns_written=job["turns_written"] + res.added,
                           turns_skipped=job["turns_skipped"] + res.skipped,
                           conversations_done=job["conversations_done"] + 1)
                self.status.write(ns, job)
            if added:
                built = svc.inline_build and svc.build_now(ns, wait_s=60.0)
                if built:
                    svc.schedule_warm(ns)
                else:
                    svc.queue.enqueue(ns, added)
                job["built"] = bool(built)
            else:
                job["built"] = True
            job.update(state="done", finished_at=_now())
        except Exception as exc:
            err = from_exception(exc).redacted(paths=(str(svc.store.path),))
            if err.status >= 500 and err.code == "internal":
                log.exception("import %s failed", job["id"])
            job.update(state="failed", finished_at=_now(), error=err.body()["error"])
        self.status.write(ns, job)


def public(job: dict) -> dict:
    """What a client sees of a job (not the tenant or the process that runs it)."""
    return {k: v for k, v in job.items() if k not in ("tenant", "owner")}


def _looks_like_session(doc: Any) -> bool:
    """One plain-format session object (``{"time": ..., "turns": [...]}``): 'turns' with a
    session's 'time' or 'id' beside it, where an append body has nothing."""
    return isinstance(doc, dict) and "turns" in doc and "sessions" not in doc and ("time" in doc or "id" in doc)


def _looks_like_turns(doc: Any) -> bool:
    """A list of turn objects, or an append body of turns (not a conversation file)."""
    if isinstance(doc, list):
        return bool(doc) and isinstance(doc[0], dict) and "speaker" in doc[0] and "turns" not in doc[0]
    return isinstance(doc, dict) and "turns" in doc and "sessions" not in doc
