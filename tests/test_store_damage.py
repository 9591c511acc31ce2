"""Damaged store files (issue 15.3): every failure is a typed StoreError naming table and row, a
changed turn is caught by its sha256, and ``check`` reports what is damaged."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from memcompile_local.cli import main
from memcompile_local.data import example_conversation_path
from memcompile_local.errors import StoreError
from memcompile_local.store import MemoryStore
from memcompile_local.store.check import check_store

MF = ["--preset", "model-free", "--embedder", "hash"]
NS = "example-1"


@pytest.fixture(scope="module")
def built_store(tmp_path_factory) -> Path:
    """A store with the shipped example conversation ingested and built (model-free, hash embedder)."""
    path = tmp_path_factory.mktemp("built") / "built.sqlite"
    assert main(["ingest", str(example_conversation_path()), "--build", "--store", str(path), "--quiet", *MF]) == 0
    with MemoryStore(path) as s:  # everything into the main file, so a copy is the whole store
        s._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert check_store(path).ok
    return path


def read_everything(path: Path) -> None:
    """Every read the store offers, over every namespace; raises whatever the store raises."""
    with MemoryStore(path, read_only=True) as s:
        s.stats()
        for ns in s.namespaces():
            s.generation(ns)
            packets = s.packets(ns)
            for dset in s.stats(ns)["namespaces"][ns]["descriptors"]:
                s.descriptors(ns, dset)
                s.extracted_packet_ids(ns, dset)
            for lid in s.stats(ns)["namespaces"][ns]["cells"]:
                s.cells(ns, lid)
            for mid in s.stats(ns)["namespaces"][ns]["embeddings"]:
                s.embeddings(ns, mid, [p.packet_id for p in packets])
        s.token_totals()
        s.waste_totals()


def flip_bytes(src: Path, dst: Path, rng: random.Random, n: int) -> None:
    data = bytearray(src.read_bytes())
    for _ in range(n):
        i = rng.randrange(100, len(data))  # past the 100-byte header: damage the content pages
        data[i] ^= rng.randrange(1, 256)
    dst.write_bytes(bytes(data))


def test_flipped_bytes_give_typed_errors_and_check_reports_them(built_store, tmp_path, capsys):
    rng = random.Random(15_3)
    failed_reads = flagged = 0
    for k in range(10):
        copy = tmp_path / f"copy{k}.sqlite"
        flip_bytes(built_store, copy, rng, 50)
        try:
            read_everything(copy)
        except StoreError:
            failed_reads += 1
        # anything else (sqlite3.DatabaseError, UnicodeDecodeError, JSONDecodeError) fails the test
        report = check_store(copy)  # never raises for a damaged file
        flagged += not report.ok
        # The CLI reports instead of printing a traceback.
        rc_stats = main(["stats", "--store", str(copy)])
        rc_check = main(["check", "--store", str(copy)])
        assert rc_stats in (0, 2) and rc_check == (0 if report.ok else 1)
        rc_ask = main(["ask", NS, "What is the name of Nadia's cat?", "--no-answer", "--store", str(copy),
                       "--quiet", *MF])
        assert rc_ask in (0, 2)
    capsys.readouterr()
    assert failed_reads >= 5 and flagged >= failed_reads, (failed_reads, flagged)


def test_one_changed_letter_in_a_turn_is_caught_by_its_hash(built_store, tmp_path, capsys):
    copy = tmp_path / "letter.sqlite"
    shutil.copy(built_store, copy)
    with MemoryStore(copy, read_only=True) as s:
        target = s.packets(NS)[3]
    data = bytearray(copy.read_bytes())
    needle = target.content.encode()
    at = data.find(needle)
    assert at > 0 and data.find(needle, at + 1) == -1
    # Change one ASCII letter to another (same length, still UTF-8, still a valid page).
    j = next(i for i, ch in enumerate(needle) if chr(ch).isalpha())
    data[at + j] = ord("q") if data[at + j] != ord("q") else ord("z")
    copy.write_bytes(bytes(data))
    raw = sqlite3.connect(copy)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # SQLite sees nothing wrong
    raw.close()
    with MemoryStore(copy, read_only=True) as s:
        with pytest.raises(StoreError, match=rf"table packets, row '{NS}'/'{target.packet_id}'.*sha256"):
            s.packets(NS)
        with pytest.raises(StoreError, match="sha256"):
            s.get_packet(NS, target.packet_id)
    report = check_store(copy)
    assert [(p.table, p.row) for p in report.problems] == [("packets", f"'{NS}'/'{target.packet_id}'")]
    assert main(["check", "--store", str(copy)]) == 1
    out = capsys.readouterr().out
    assert target.packet_id in out and "sha256" in out
    assert main(["ask", NS, "What is the name of Nadia's cat?", "--no-answer", "--store", str(copy),
                 "--quiet", *MF]) == 2
    assert "sha256" in capsys.readouterr().err


def test_text_that_is_not_utf8_is_named_by_table_and_row(built_store, tmp_path):
    copy = tmp_path / "utf8.sqlite"
    shutil.copy(built_store, copy)
    raw = sqlite3.connect(copy, isolation_level=None)
    raw.execute("UPDATE packets SET speaker = CAST(X'ff41fe' AS TEXT) WHERE packet_id = 'D1:2'")
    raw.execute("UPDATE cells SET people_json = '[\"unterminated' WHERE cell_id = 0")
    raw.close()
    with MemoryStore(copy, read_only=True) as s:
        with pytest.raises(StoreError, match=r"table packets.*'D1:2'.*speaker is not UTF-8"):
            s.packets(NS)
        lid = next(iter(s.stats(NS)["namespaces"][NS]["cells"]))
        with pytest.raises(StoreError, match=r"table cells, row .*/0: .*people_json is not JSON"):
            s.cells(NS, lid)
    problems = {(p.table, p.row.split("/")[-1]) for p in check_store(copy).problems}
    assert ("packets", "'D1:2'") in problems and ("cells", "0") in problems


def test_check_of_a_healthy_store_and_of_a_missing_file(built_store, tmp_path, capsys):
    assert main(["check", "--store", str(built_store)]) == 0
    assert "ok (" in capsys.readouterr().out
    assert main(["check", "--store", str(tmp_path / "nope.sqlite")]) == 2
    assert not (tmp_path / "nope.sqlite").exists()


def test_a_schema_that_is_not_utf8_is_a_typed_error_and_a_reported_problem(built_store, tmp_path, capsys):
    # SQLite quotes the damaged schema text in its error message, which Python cannot decode.
    copy = tmp_path / "schema.sqlite"
    data = bytearray(built_store.read_bytes())
    at = data.find(b"CREATE TABLE meta")
    assert at > 0
    data[at + 7] = 0xFF  # inside the word TABLE
    copy.write_bytes(bytes(data))
    for kw in ({}, {"read_only": True}):
        with pytest.raises(StoreError, match=str(copy)):
            MemoryStore(copy, **kw)
    report = check_store(copy)
    assert not report.ok and report.problems[0].table == "file"
    assert main(["stats", "--store", str(copy)]) == 2
    assert main(["check", "--store", str(copy)]) == 1
    capsys.readouterr()
