"""The attempts of a run folder: every start of ``eval`` on it, and every question each one began.

Two files, both readable after a ``kill -9`` at any instant:

``attempts.jsonl``
    One line per attempt. The line is written when the attempt starts (``state``
    ``"running"``), rewritten every few seconds while it works (``last_seen_unix``, so that a
    killed attempt still has a time), and rewritten once more when it ends: ``"completed"``, or
    ``"stopped"`` (Ctrl-C, SIGTERM, an error). The file is replaced whole through a synced
    temporary file, so a reader sees the old lines or the new ones. A line that an attempt left
    ``"running"`` belongs to a process that was killed; the next attempt marks it ``"killed"``.
    Lines written before this format (no ``attempt`` field) each stand for one finished attempt.
``question_attempts.jsonl``
    Append-only, synced per line: ``{"attempt", "question_id", "event": "started"}`` before a
    question's first model call, then ``"completed"`` or ``"failed"`` (with the error) when it
    ends. A question started in an attempt that then stopped or was killed, and never ended in
    it, was cut off; the rerun asks it again and the count of its attempts grows.

:func:`summarize_attempts` turns both files into the counts ``metrics.json`` and ``report.md``
give: attempts by how they ended, the wall time of all of them (a killed attempt counts up to its
last record), and how many attempts each question took.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .runfiles import JsonlAppender, atomic_write, read_jsonl

__all__ = ["AttemptLog", "ATTEMPTS_FILE", "QUESTION_ATTEMPTS_FILE", "read_attempts", "summarize_attempts"]

ATTEMPTS_FILE = "attempts.jsonl"
QUESTION_ATTEMPTS_FILE = "question_attempts.jsonl"
HEARTBEAT_S = 5.0
"""How often a running attempt refreshes its line: the most time a killed attempt can lose."""

_ENDED = ("completed", "stopped", "killed")


def _line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"


def read_attempts(out: Path) -> list[dict[str, Any]]:
    """The attempt lines of ``out`` in the current form: legacy lines get their number (their
    place in the file) and a ``state`` from their ``completed`` flag."""
    records = []
    for i, raw in enumerate(read_jsonl(Path(out) / ATTEMPTS_FILE), 1):
        rec = dict(raw)
        rec.setdefault("attempt", i)
        if "state" not in rec:
            rec["state"] = "completed" if rec.get("completed") else "stopped"
        records.append(rec)
    return records


def _seconds(rec: Mapping[str, Any], last_event_unix: float | None = None) -> float:
    """An attempt's seconds: measured when it ended; for a killed one, up to its last record
    (its own line's last refresh, or the last question event it wrote, whichever is later);
    a line already marked killed holds the seconds worked out when it was marked."""
    if rec.get("state") in _ENDED or "last_seen_unix" not in rec:
        return float(rec.get("total_s", 0.0))
    last = max(float(rec["last_seen_unix"]), last_event_unix or 0.0)
    return max(0.0, last - float(rec.get("started_unix", last)))


def _last_question_events(out: Path) -> dict[int, float]:
    """The time of each attempt's last question event."""
    last: dict[int, float] = {}
    for row in read_jsonl(Path(out) / QUESTION_ATTEMPTS_FILE):
        if isinstance(row.get("unix"), (int, float)):
            number = int(row.get("attempt", 0))
            last[number] = max(last.get(number, 0.0), float(row["unix"]))
    return last


class AttemptLog:
    """Records one attempt of a run in ``out`` (see the module docstring); safe from threads.

    ``start`` writes the attempt's line; ``question_started``/``question_ended`` bracket each
    question; ``heartbeat`` refreshes the line (at most every ``heartbeat_s``); ``finish``
    writes how the attempt ended. ``finish`` without ``start`` records a whole attempt at once.
    """

    def __init__(self, out: Path, *, heartbeat_s: float = HEARTBEAT_S, clock: Callable[[], float] = time.time):
        self.out = Path(out)
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self._lock = threading.Lock()
        self._earlier: list[dict[str, Any]] = []
        self._record: dict[str, Any] | None = None
        self._written_at = 0.0
        self._questions = JsonlAppender(self.out / QUESTION_ATTEMPTS_FILE)

    @property
    def number(self) -> int | None:
        """This attempt's number (1 for a folder's first), once started."""
        return self._record["attempt"] if self._record else None

    @property
    def earlier(self) -> list[dict[str, Any]]:
        """The attempts before this one, as read when it started (killed ones marked)."""
        return list(self._earlier)

    def start(self, started_unix: float | None = None) -> int:
        """Write this attempt's line (``"running"``); earlier lines left running become ``"killed"``."""
        with self._lock:
            if self._record is not None:
                return self._record["attempt"]
            now = self._clock()
            earlier = read_attempts(self.out)
            if any(rec["state"] not in _ENDED for rec in earlier):
                last_events = _last_question_events(self.out)
                for rec in earlier:
                    if rec["state"] not in _ENDED:  # its process died without a word
                        rec["total_s"] = round(_seconds(rec, last_events.get(int(rec["attempt"]))), 3)
                        rec["state"] = "killed"
                        rec["completed"] = False
            self._earlier = earlier
            started = now if started_unix is None else started_unix
            self._record = {"attempt": max((r["attempt"] for r in earlier), default=0) + 1, "state": "running",
                            "completed": False, "started_unix": round(started, 3),
                            "last_seen_unix": round(now, 3), "total_s": round(now - started, 3),
                            "questions_started": 0, "questions_completed": 0, "questions_failed": 0}
            self._write(now)
            return self._record["attempt"]

    def question_started(self, question_id: str) -> None:
        """Record, durably, that this attempt begins ``question_id``."""
        number = self.start()
        self._questions.append({"attempt": number, "question_id": question_id, "event": "started",
                                "unix": round(self._clock(), 3)})
        with self._lock:
            self._record["questions_started"] += 1

    def question_ended(self, question_id: str, *, failed: bool = False, error: str | None = None) -> None:
        """Record that ``question_id`` ended: completed (its answer line written) or failed."""
        number = self.start()
        row: dict[str, Any] = {"attempt": number, "question_id": question_id,
                               "event": "failed" if failed else "completed", "unix": round(self._clock(), 3)}
        if error is not None:
            row["error"] = error
        self._questions.append(row)
        with self._lock:
            self._record["questions_failed" if failed else "questions_completed"] += 1
        self.heartbeat()

    def heartbeat(self) -> None:
        """Refresh the attempt's line when ``heartbeat_s`` have passed since it was last written."""
        with self._lock:
            if self._record is None:
                return
            now = self._clock()
            if now - self._written_at < self.heartbeat_s:
                return
            self._record["last_seen_unix"] = round(now, 3)
            self._record["total_s"] = round(now - self._record["started_unix"], 3)
            self._write(now)

    def finish(self, completed: bool, phases: Mapping[str, float]) -> None:
        """Write how the attempt ended, with its phase seconds (``total_s`` among them)."""
        started = self._clock() - float(phases.get("total_s", 0.0))
        self.start(started_unix=started)
        with self._lock:
            now = self._clock()
            rec = self._record
            rec.update({k: round(float(v), 3) for k, v in phases.items()})
            rec.update(state="completed" if completed else "stopped", completed=completed,
                       last_seen_unix=round(now, 3))
            self._write(now)

    def _write(self, now: float) -> None:
        # Under self._lock. The whole file again: the earlier lines as read at the start, then ours.
        atomic_write(self.out / ATTEMPTS_FILE, "".join(_line(r) for r in [*self._earlier, self._record]))
        self._written_at = now


def summarize_attempts(out: Path, *, current: int | None = None, current_s: float = 0.0,
                       questions: Iterable[str] | None = None) -> dict[str, Any]:
    """What the attempts of ``out`` came to, for ``metrics.json`` and ``report.md``.

    ``current``: the number of the attempt now finishing (counted as completed, with
    ``current_s`` seconds, whatever its line says yet). ``questions``: the question ids to count
    attempts for (None: every one recorded). Returns ``{"attempts", "completed", "stopped",
    "killed", "wall_s", "questions": {...}}``; ``questions`` holds ``question_attempts`` (every
    start), ``completed``, ``failed`` and ``cut_off`` (started, never ended: the attempt was
    killed or stopped while it ran), ``with_several`` (how many questions took more than one
    attempt), ``most`` (the most any took) and ``several`` (question id -> attempts, for those).
    """
    out = Path(out)
    by_state: Counter[str] = Counter()
    wall = 0.0
    last_events = _last_question_events(out)
    for rec in read_attempts(out):
        number = int(rec["attempt"])
        if number == current:
            continue
        state = rec["state"] if rec["state"] in _ENDED else "killed"
        by_state[state] += 1
        wall += _seconds(rec, last_events.get(number))
    if current is not None:
        by_state["completed"] += 1
        wall += current_s
    wanted = set(questions) if questions is not None else None
    started: dict[tuple[int, str], bool] = {}  # (attempt, question) -> ended
    outcome: Counter[str] = Counter()
    for row in read_jsonl(out / QUESTION_ATTEMPTS_FILE):
        qid = str(row.get("question_id"))
        if wanted is not None and qid not in wanted:
            continue
        key = (int(row.get("attempt", 0)), qid)
        if row.get("event") == "started":
            started.setdefault(key, False)
        elif row.get("event") in ("completed", "failed"):
            started[key] = True
            outcome[row["event"]] += 1
    per_question: Counter[str] = Counter(qid for _, qid in started)
    # A question still open in the attempt now finishing is not cut off (it cannot be, once the
    # attempt finishes, but an exception path may call this first).
    cut_off = sum(1 for (number, _), ended in started.items() if not ended and number != current)
    several = {qid: n for qid, n in sorted(per_question.items()) if n > 1}
    return {
        "attempts": sum(by_state.values()),
        "completed": by_state["completed"], "stopped": by_state["stopped"], "killed": by_state["killed"],
        "wall_s": round(wall, 2),
        "questions": {"question_attempts": sum(per_question.values()), "completed": outcome["completed"],
                      "failed": outcome["failed"], "cut_off": cut_off, "with_several": len(several),
                      "most": max(per_question.values(), default=0), "several": several},
    }
