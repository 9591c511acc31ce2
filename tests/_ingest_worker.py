"""Helper process for the store's kill and concurrency tests (not a test module itself).

Usage: python _ingest_worker.py DB NAMESPACE START STOP BATCH_SIZE

Ingests batches START..STOP-1 into DB, one Store.ingest call (one transaction) per batch.
After each committed batch it prints ``ACK <batch> <packet ids comma-separated> <added> <skipped>``
and flushes, so a parent that kills this process knows exactly which batches were acknowledged.
Prints ``READY`` once the store is open and ``DONE`` at the end. When the environment variable
``MEMSTORE_WORKER_GO`` names a file, the worker waits after READY until that file exists.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

# Run as a script from the tests folder: make the package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memcompile_local.store import open_store  # noqa: E402
from memcompile_local.types import Conversation, Session, Turn  # noqa: E402


def turn_text(namespace: str, batch: int, i: int) -> str:
    """Deterministic text of turn ``i`` of ``batch``; a few hundred bytes to a few KB long."""
    seed = hashlib.sha256(f"{namespace}/{batch}/{i}".encode()).hexdigest()
    filler = (seed + " ") * (2 + int(seed[:2], 16) % 40)
    return f"batch {batch} turn {i} of {namespace}: {filler}"


def packet_ids(batch: int, size: int) -> list[str]:
    return [f"D{batch}:{i}" for i in range(1, size + 1)]


def batch_conversation(namespace: str, batch: int, size: int) -> Conversation:
    turns = tuple(
        Turn(packet_id=pid, speaker="Ann" if i % 2 else "Bo", text=turn_text(namespace, batch, i))
        for i, pid in enumerate(packet_ids(batch, size), start=1)
    )
    session = Session(index=batch + 1, session_id=f"session_{batch + 1}", time=f"day {batch}", turns=turns)
    return Conversation(namespace=namespace, sessions=(session,))


def main(argv: list[str]) -> int:
    db, namespace, start, stop, size = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    with open_store(db) as store:
        print("READY", flush=True)
        go = os.environ.get("MEMSTORE_WORKER_GO")
        if go:  # let a parent line several workers up so that their writes overlap
            while not os.path.exists(go):
                time.sleep(0.001)
        for b in range(start, stop):
            r = store.ingest(batch_conversation(namespace, b, size))
            print(f"ACK {b} {','.join(packet_ids(b, size))} {r.added} {r.skipped}", flush=True)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
