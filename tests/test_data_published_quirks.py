"""Benchmark files as their authors publish them: every quirk is read, counted, and never stops
the other questions (fixtures of our own writing copy each quirk), a strict load refuses what
a lenient one leaves out, and the shared dev files load whole with the counts they have."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from memcompile_local.data import QuirkLog, count_dataset, load_any, load_beam, load_longmemeval
from memcompile_local.data.quirks import (DUPLICATE_SESSION, EVIDENCE_FROM_SESSIONS, NO_EVIDENCE, SKIPPED_CHAT,
                                          SKIPPED_QUESTION)
from memcompile_local.errors import DataFormatError

from _data_paths import (BEAM_DEV, BEAM_QUIRKS, LONGMEMEVAL_ORACLE_DEV100, LONGMEMEVAL_QUIRKS,
                         LONGMEMEVAL_S_DEV100, require_dev)


def lme_fixture() -> list[dict]:
    return json.loads(LONGMEMEVAL_QUIRKS.read_text(encoding="utf-8"))


def write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


# ------------------------------------------------------------------------- LongMemEval

def test_a_session_listed_twice_with_the_same_turns_is_read_once_at_its_first_place(tmp_path):
    dup = lme_fixture()[0]
    path = write(tmp_path / "dup.json", [dup])
    log = QuirkLog()
    (conv,) = load_longmemeval(path, quirks=log)
    assert [s.session_id for s in conv.sessions] == ["bread_1", "answer_kayak", "chess_1"]
    assert [s.index for s in conv.sessions] == [1, 2, 3]
    assert conv.sessions[0].time == dup["haystack_dates"][0]  # the first place's date
    turn_ids = [t.packet_id for _, t in conv.iter_turns()]
    assert len(turn_ids) == len(set(turn_ids)) == 6
    assert conv.questions[0].evidence == ("answer_kayak:1",)
    assert log.counts() == {DUPLICATE_SESSION: 1}
    (quirk,) = log.examples(DUPLICATE_SESSION)
    assert quirk.where == "$[0].haystack_sessions[3]" and "index 0" in quirk.detail
    assert log.questions_left_out == 0
    # Read as intended, so a strict load (the library default) reads it too.
    assert load_longmemeval(path) == [conv]
    assert load_longmemeval(path, quirks=QuirkLog(strict=True)) == [conv]


def test_a_session_id_repeated_with_other_turns_is_an_error_naming_both_places(tmp_path):
    path = write(tmp_path / "conflict.json", [lme_fixture()[1]])
    with pytest.raises(DataFormatError) as err:
        load_longmemeval(path)
    e = err.value
    assert e.where == "$[0].haystack_sessions[2]"
    assert "$[0].haystack_sessions[0]" in e.expected and "'bread_1'" in e.expected
    assert e.detail == "the turns differ"


def test_one_odd_question_among_good_ones_is_skipped_and_counted_unless_strict(tmp_path):
    path = write(tmp_path / "all.json", lme_fixture())
    log = QuirkLog()
    convs = load_longmemeval(path, quirks=log)
    assert [c.namespace for c in convs] == ["lme-quirk-dup", "lme-plain-ok"]
    assert log.counts() == {SKIPPED_QUESTION: 2, DUPLICATE_SESSION: 1}
    assert log.questions_left_out == 2
    conflict, malformed = log.examples(SKIPPED_QUESTION)
    assert conflict.where == "$[1].haystack_sessions[2]" and "$[1].haystack_sessions[0]" in conflict.detail
    assert malformed.where == "$[2].haystack_sessions[0][0].content"
    doc = log.as_dict()
    assert doc["counts"] == {SKIPPED_QUESTION: 2, DUPLICATE_SESSION: 1} and doc["questions_left_out"] == 2
    assert "2 malformed question(s) skipped" in log.summary()
    # Strict: the first odd question refuses the whole file, as before.
    with pytest.raises(DataFormatError) as err:
        load_longmemeval(path, quirks=QuirkLog(strict=True))
    assert err.value.where == "$[1].haystack_sessions[2]"
    with pytest.raises(DataFormatError):
        load_longmemeval(path)
    # load_any passes the log on.
    log2 = QuirkLog()
    assert load_any(path, quirks=log2) == convs and log2.counts() == log.counts()


def test_a_repeated_question_id_is_skipped_when_lenient(tmp_path):
    ok = lme_fixture()[3]
    path = write(tmp_path / "twice.json", [ok, ok])
    log = QuirkLog()
    assert [c.namespace for c in load_longmemeval(path, quirks=log)] == ["lme-plain-ok"]
    (q,) = log.examples(SKIPPED_QUESTION)
    assert q.where == "$[1].question_id" and "$[0]" in q.detail


def test_a_file_with_no_readable_question_is_refused(tmp_path):
    path = write(tmp_path / "bad.json", [lme_fixture()[2]])
    with pytest.raises(DataFormatError) as err:
        load_longmemeval(path, quirks=QuirkLog())
    assert err.value.where == "$" and "all 1 were skipped" in err.value.detail


def test_a_gzipped_file_reads_as_the_plain_one(tmp_path):
    plain = write(tmp_path / "q.json", lme_fixture())
    packed = tmp_path / "q.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = QuirkLog(), QuirkLog()
    got, expected = load_longmemeval(packed, quirks=a), load_longmemeval(plain, quirks=b)
    assert [(c.namespace, c.sessions, c.questions) for c in got] == [
        (c.namespace, c.sessions, c.questions) for c in expected]
    assert a.counts() == b.counts() == {SKIPPED_QUESTION: 2, DUPLICATE_SESSION: 1}
    assert load_any(packed, quirks=QuirkLog())[0].namespace == "lme-quirk-dup"
    # Recognised by its bytes, not its name.
    renamed = tmp_path / "q_gz.json"
    shutil.copy(packed, renamed)
    assert [c.namespace for c in load_longmemeval(renamed, quirks=QuirkLog())] == ["lme-quirk-dup", "lme-plain-ok"]


def test_a_truncated_or_badly_encoded_gzip_file_is_a_located_error(tmp_path):
    data = gzip.compress(json.dumps(lme_fixture()).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError) as err:
        load_longmemeval(cut)
    assert err.value.expected == "a complete gzip file"
    latin = tmp_path / "latin.json.gz"
    latin.write_bytes(gzip.compress(b'[{"question": "caf\xe9"}]'))
    with pytest.raises(DataFormatError) as err:
        load_longmemeval(latin)
    assert err.value.where == "decompressed byte 18" and err.value.expected == "UTF-8 text"


# ------------------------------------------------------------------------------- BEAM

def by_id(conv) -> dict:
    return {q.question_id: q for q in conv.questions}


def test_beam_evidence_from_conversation_sessions_and_questions_without_usable_evidence():
    log = QuirkLog()
    (conv,) = load_beam(BEAM_QUIRKS, quirks=log)
    qs = by_id(conv)
    ns = "beam-1M-1"
    # Only conversation_sessions, as a list of chat ids: read as the evidence.
    assert qs[f"{ns}:summarization:0"].evidence == ("0", "4", "6")
    # Only an integer count: no usable evidence, kept (answered, judged, out of recall).
    assert qs[f"{ns}:summarization:1"].evidence == () and not qs[f"{ns}:summarization:1"].is_abstention
    # source_chat_ids wins over a count in conversation_sessions, with nothing to note.
    assert qs[f"{ns}:summarization:2"].evidence == ("3", "4")
    # Neither field: kept without evidence.
    assert qs[f"{ns}:temporal_reasoning:0"].evidence == ()
    # A malformed question (no answer of any kind) is left out; the next one of its type is read.
    assert f"{ns}:multi_session_reasoning:0" not in qs and qs[f"{ns}:multi_session_reasoning:1"].evidence == ("6",)
    assert log.counts() == {SKIPPED_QUESTION: 1, NO_EVIDENCE: 2, EVIDENCE_FROM_SESSIONS: 1}
    assert log.questions_left_out == 1
    assert [q.where for q in log.examples(NO_EVIDENCE)] == ["$.summarization[1].source_chat_ids",
                                                            "$.temporal_reasoning[0].source_chat_ids"]


def test_beam_strict_refuses_what_a_lenient_load_leaves_out(tmp_path):
    with pytest.raises(DataFormatError) as err:
        load_beam(BEAM_QUIRKS)  # no log: strict
    assert err.value.where == "$.multi_session_reasoning[0].answer"
    chat = tmp_path / "1M" / "1"
    shutil.copytree(BEAM_QUIRKS / "1", chat)
    qpath = chat / "probing_questions" / "probing_questions.json"
    doc = json.loads(qpath.read_text(encoding="utf-8"))
    del doc["multi_session_reasoning"][0]
    write(qpath, doc)
    with pytest.raises(DataFormatError) as err:
        load_beam(chat, quirks=QuirkLog(strict=True))
    e = err.value
    assert e.where == "$.summarization[1].source_chat_ids" and "conversation_sessions is 2" in e.detail
    # Evidence read from conversation_sessions is not a refusal.
    del doc["summarization"][1]
    del doc["temporal_reasoning"]
    write(qpath, doc)
    strict = QuirkLog(strict=True)
    (conv,) = load_beam(chat, quirks=strict)
    assert strict.counts() == {EVIDENCE_FROM_SESSIONS: 1}


def test_beam_an_unreadable_chat_is_left_out_of_a_size_folder_with_its_questions_counted(tmp_path):
    size = tmp_path / "1M"
    for name in ("1", "2"):
        shutil.copytree(BEAM_QUIRKS / "1", size / name)
    chat2 = size / "2" / "chat.json"
    doc = json.loads(chat2.read_text(encoding="utf-8"))
    doc[1]["turns"][0][1]["content"] = "copper " * 40
    write(chat2, doc)
    log = QuirkLog()
    convs = load_beam(size, quirks=log, max_turn_chars=200)
    assert [c.namespace for c in convs] == ["beam-1M-1"]
    (q,) = log.examples(SKIPPED_CHAT)
    assert q.path.endswith("2/chat.json") and q.where == "$[1].turns[0][1].content"
    assert "--max-turn-chars" in q.detail
    # The left-out chat's 8 questions, and chat 1's malformed one.
    assert log.questions_left_out == 9
    assert log.counts()[SKIPPED_CHAT] == 1
    with pytest.raises(DataFormatError) as err:
        load_beam(size, quirks=QuirkLog(strict=True), max_turn_chars=200)
    assert err.value.where == "$.multi_session_reasoning[0].answer"  # chat 1's odd question comes first


# ------------------------------------------------------------------- the shared dev files

def test_longmemeval_s_dev100_as_published():
    path = require_dev(LONGMEMEVAL_S_DEV100)
    log = QuirkLog()
    convs = load_longmemeval(path, quirks=log)
    c = count_dataset(convs)
    assert (c.conversations, c.questions, c.abstention_questions) == (100, 100, 9)
    # 4,730 haystack slots, 4 of them a repeat read once; 49,112 turns in the file, 76 in the repeats.
    assert (c.sessions, c.turns) == (4726, 49036)
    assert dict(c.questions_by_category) == {
        "knowledge-update": 16, "multi-session": 27, "single-session-assistant": 11,
        "single-session-preference": 6, "single-session-user": 14, "temporal-reasoning": 26}
    assert log.counts() == {DUPLICATE_SESSION: 4} and log.questions_left_out == 0
    assert sorted(q.detail.split(":")[0] for q in log.examples(DUPLICATE_SESSION)) == [
        "question 078150f1", "question 91b15a6e", "question d23cf73b", "question gpt4_c27434e8_abs"]
    # The strict library default reads it as well (duplicates lose nothing).
    assert len(load_longmemeval(path, limit=3)) == 3


def test_longmemeval_oracle_dev100_as_published():
    path = require_dev(LONGMEMEVAL_ORACLE_DEV100)
    log = QuirkLog()
    convs = load_longmemeval(path, quirks=log)
    c = count_dataset(convs)
    assert (c.conversations, c.sessions, c.turns, c.questions) == (100, 195, 2246, 100)
    assert len(log) == 0
    s_ids = {c.namespace for c in load_longmemeval(require_dev(LONGMEMEVAL_S_DEV100), quirks=QuirkLog())}
    assert {c.namespace for c in convs} == s_ids


def test_beam_100k_dev_folder_whole():
    folder = require_dev(BEAM_DEV)
    log = QuirkLog()
    convs = load_beam(folder, quirks=log)  # the default limit: chat 4's 348,853-character reply
    assert [c.namespace for c in convs] == [f"beam-100K-{n}" for n in (1, 2, 3, 5, 6, 7, 8, 9, 10)]
    assert log.counts() == {SKIPPED_CHAT: 1} and log.questions_left_out == 20
    log = QuirkLog()
    convs = load_beam(folder, quirks=log, max_turn_chars=400_000)
    c = count_dataset(convs)
    assert (c.conversations, c.sessions, c.turns, c.questions) == (10, 40, 2432, 200)
    # Every 100K question names source_chat_ids; three summarization questions' conversation_sessions
    # is a count, read past because source_chat_ids is there.
    assert len(log) == 0
