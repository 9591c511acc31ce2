"""The files of a run folder: append-only JSON lines that survive a kill, atomic rewrites.

``answers.jsonl``, ``judgments.jsonl`` and ``question_attempts.jsonl`` grow one line per
item, flushed and fsynced, so an interrupted run loses at most the line being written; the
reader cuts such a torn last line off. ``predictions.jsonl``, ``metrics.json``,
``config.json``, ``report.md`` and ``attempts.jsonl`` (``bench/attempts.py``) are rewritten
whole through a synced temporary file and a rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

__all__ = ["JsonlAppender", "atomic_write", "file_sha256", "read_jsonl"]


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_jsonl(path: Path) -> list[dict]:
    """Read complete lines; a torn last line (killed mid-write) is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
        data = data[:end]
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


class JsonlAppender:
    """Appends one JSON object per line, flushed and fsynced, from several threads."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def append(self, obj: dict) -> None:
        line = json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old file or the new one.

    The new bytes are synced before the rename and the rename after it, so that a crash of
    the machine, not only of the process, leaves one of the two whole.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders (Windows): the rename stands as is
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
