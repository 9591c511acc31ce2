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
done, failed), ``turns_written`` of ``turns_total``, conversations done, the error. The status
lives in a small JSON file per job beside the store (``<store>.imports/``), so any server
process on the store answers for a job and it outlasts a restart; a job whose process died
before it finished reads ``failed``. Only the tenant and user that created a job can read it.
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


class ImportStatus:
    """The job status files of one store: ``<dir>/<job id>.json`` (None: held in memory only)."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._held: dict[str, dict] = {}
        self._lock = threading.Lock()

    def write(self, job: dict) -> None:
        with self._lock:
            self._held[job["id"]] = dict(job)
            if self.folder is None:
                return
            self.folder.mkdir(parents=True, exist_ok=True)  # on the first import, not at every start
            target = self.folder / f"{job['id']}.json"
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, target)  # a reader sees the old status or the new one, never half

    def read(self, job_id: str) -> dict | None:
        if not _JOB_ID.match(job_id):
            return None
        if self.folder is None:
            with self._lock:
                job = self._held.get(job_id)
                return dict(job) if job else None
        try:
            return json.loads((self.folder / f"{job_id}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def unfinished(self) -> list[dict]:
        """The stored jobs still queued or running (by any process)."""
        if self.folder is None or not self.folder.is_dir():
            return []
        out = []
        for path in self.folder.glob("*.json"):
            job = self.read(path.stem)
            if job is not None and job.get("state") in ("queued", "running"):
                out.append(job)
        return out


class Importer:
    """Parses uploads and runs import jobs for one ``MemoryService`` (see the module doc)."""

    def __init__(self, service: Any, folder: Path | None, owner_alive: Callable[[str], bool]):
        # ``service``: the MemoryService (core.py) this importer writes through.
        self.service = service
        self.status = ImportStatus(folder)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memcompile-import")
        self._stop = threading.Event()
        for job in self.status.unfinished():
            if not owner_alive(job.get("owner", "")):
                job.update(state="failed", finished_at=_now(),
                           error={"status": 503, "code": "interrupted",
                                  "message": "the server stopped before the import finished; the conversations "
                                             "counted in conversations_done were written, import the file again "
                                             "for the rest"})
                self.status.write(job)

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
        if fmt == "auto" and one_document and _looks_like_turns(doc):
            fmt = "turns"
        if fmt == "turns":
            if not one_document:
                raise ServiceError(400, "bad_json", "a list of turns must be one JSON document", field="$")
            body = {"turns": doc} if isinstance(doc, list) else doc
            # No per-request turn limit here: the upload's size bounds the count.
            limits = replace(self.service.limits, max_turns_per_request=max(1, len(raw)))
            return [Part(turns=tuple(parse_append(body, limits)))]
        with tempfile.TemporaryDirectory(prefix="memcompile-import-") as d:
            # The name decides how load_any reads it: JSONL unless the bytes are one JSON document.
            path = Path(d) / ("upload.json" if one_document else "upload.jsonl")
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
        self.status.write(job)
        first = public(job)  # before the job thread starts changing it
        self._pool.submit(self._run, job, ns, parts)
        return first

    def get(self, tenant: str, user_id: str, job_id: str) -> dict:
        job = self.status.read(job_id)
        if job is None or job.get("tenant") != tenant or job.get("user_id") != user_id:
            raise ServiceError(404, "not_found", f"user {user_id!r} has no import {job_id!r}", field="job_id")
        return public(job)

    # ------------------------------------------------------------------ the job
    def _run(self, job: dict, ns: str, parts: list[Part]) -> None:
        svc = self.service
        job.update(state="running", started_at=_now())
        self.status.write(job)
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
                self.status.write(job)
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
        self.status.write(job)


def public(job: dict) -> dict:
    """What a client sees of a job (not the tenant or the process that runs it)."""
    return {k: v for k, v in job.items() if k not in ("tenant", "owner")}


def _looks_like_turns(doc: Any) -> bool:
    """A list of turn objects, or an append body of turns (not a conversation file)."""
    if isinstance(doc, list):
        return bool(doc) and isinstance(doc[0], dict) and "speaker" in doc[0] and "turns" not in doc[0]
    return isinstance(doc, dict) and "turns" in doc and "sessions" not in doc
