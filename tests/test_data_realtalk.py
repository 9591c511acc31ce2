"""The REALTALK loader: the authors' layout read from fixtures of our own writing, every
malformed shape refused with its file and place, evidence ids that name no turn kept (and
split off as unreachable by the runner), and the four dev chats when ../shared/data is there."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from memcompile_local.bench.corpora import split_reachable
from memcompile_local.data import REALTALK_CATEGORY_NAMES, count_dataset, load_realtalk
from memcompile_local.data.realtalk import realtalk_files, split_realtalk_evidence
from memcompile_local.errors import DataFormatError

from _data_paths import REALTALK_DEV, REALTALK_MINI, require_dev

CHAT1 = REALTALK_MINI / "Chat_1_Ines_Tomas.json"


def doc() -> dict:
    return json.loads(CHAT1.read_text(encoding="utf-8"))


def write(tmp_path: Path, obj, name: str = "Chat_7_X_Y.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def refused(path: Path, **kw) -> DataFormatError:
    with pytest.raises(DataFormatError) as err:
        load_realtalk(path, **kw)
    e = err.value
    assert e.path == str(path) and str(e).startswith(f"{path}: at {e.where}: expected {e.expected}")
    return e


def test_a_chat_becomes_a_conversation_with_dated_sessions_and_captions():
    (conv,) = load_realtalk(CHAT1)
    assert conv.namespace == "Chat_1_Ines_Tomas" and conv.speakers == ("Ines", "Tomas")
    # session_3 is empty and skipped; times are the authors' day-first times in ISO form
    assert [(s.index, s.session_id, s.time) for s in conv.sessions] == [
        (1, "session_1", "2024-02-03 18:04:10"), (2, "session_2", "2024-02-10 21:30:00")]
    turns = [t for _, t in conv.iter_turns()]
    assert [t.packet_id for t in turns][:5] == ["D1:1", "D1:2", "D1:3", "D1:4", "D1:5"]
    photo = turns[3]
    assert photo.speaker == "Tomas" and photo.image_caption == "a red and white lighthouse on a rocky coast"
    assert turns[0].image_caption is None


def test_questions_categories_and_evidence_as_written():
    (conv,) = load_realtalk(CHAT1)
    qs = conv.questions
    assert [q.question_id for q in qs] == [f"Chat_1_Ines_Tomas:q{k}" for k in range(4)]
    assert [q.category for q in qs] == [1, 2, 1, 3]
    assert {REALTALK_CATEGORY_NAMES[q.category] for q in qs} == {"multi-hop", "temporal", "open-domain"}
    assert qs[1].evidence == ("D1:5", "D1:6")  # one entry joined by ". "
    assert qs[2].evidence == ("D2:2", "D7:40")  # D7:40 names no turn: kept as written


def test_unreachable_evidence_is_split_off():
    (conv,) = load_realtalk(CHAT1)
    known = {t.packet_id for _, t in conv.iter_turns()}
    kept = [split_reachable(q.evidence, known) for q in conv.questions]
    assert kept[2] == (["D2:2"], ["D7:40"])
    assert kept[3] == ([], ["D9:99"])  # no reachable gold: left out of recall
    assert sum(len(d) for _, d in kept) == 2


def test_split_evidence():
    assert split_realtalk_evidence(["D3:1; D3:2", "D3:2,D4:1", " D5:5. "]) == ("D3:1", "D3:2", "D4:1", "D5:5")


def test_a_folder_reads_its_chat_files_by_number(tmp_path):
    for f in REALTALK_MINI.iterdir():
        shutil.copy(f, tmp_path / f.name)
    shutil.copy(CHAT1, tmp_path / "Chat_10_Late_Chat.json")
    (tmp_path / "notes.txt").write_text("not a chat")
    names = [p.name for p in realtalk_files(tmp_path)]
    assert names == ["Chat_1_Ines_Tomas.json", "Chat_2_Ines_Malik.json", "Chat_10_Late_Chat.json"]
    convs = load_realtalk(tmp_path)
    assert count_dataset(convs).questions == 10
    # several files, in the order given; a file named twice is read once
    two = load_realtalk([REALTALK_MINI / "Chat_2_Ines_Malik.json", CHAT1, CHAT1])
    assert [c.namespace for c in two] == ["Chat_2_Ines_Malik", "Chat_1_Ines_Tomas"]


def test_an_empty_folder_and_a_missing_file_are_refused(tmp_path):
    e = refused(tmp_path)
    assert "Chat_<n>" in e.expected
    e = refused(tmp_path / "Chat_1_nope.json")
    assert e.detail == "file not found"


def _bad(mutate):
    d = doc()
    mutate(d)
    return d


@pytest.mark.parametrize("mutate, where, expected", [
    (lambda d: d.pop("name"), "$.name", "key 'name'"),
    (lambda d: d["name"].pop("speaker_2"), "$.name.speaker_2", "key 'speaker_2'"),
    (lambda d: d.__setitem__("session_2", {"a": 1}), "$.session_2", "a list of messages"),
    (lambda d: d.pop("session_2_date_time"), "$.session_2_date_time", "key 'session_2_date_time'"),
    (lambda d: d.__setitem__("session_1_date_time", "2024-02-03 18:04"), "$.session_1_date_time", "DD.MM.YYYY"),
    (lambda d: d["session_1"][1].__setitem__("date_time", "31.02.2024, 10:00:00"), "$.session_1[1].date_time",
     "DD.MM.YYYY"),
    (lambda d: d["session_1"][0].pop("clean_text"), "$.session_1[0].clean_text", "key 'clean_text'"),
    (lambda d: d["session_1"][0].__setitem__("clean_text", 7), "$.session_1[0].clean_text", "a string"),
    (lambda d: d["session_2"][0].__setitem__("speaker", "Ines\nTomas"), "$.session_2[0].speaker", "single-line"),
    (lambda d: d["session_1"][3].__setitem__("blip_caption", ["x"]), "$.session_1[3].blip_caption", "a string"),
    (lambda d: d["session_1"][0].__setitem__("img_file", "a.jpg"), "$.session_1[0].img_file", "a list"),
    (lambda d: d["session_2"][3].__setitem__("dia_id", "D1:2"), "$.session_2[3].dia_id", "unique in the chat"),
    (lambda d: d.__setitem__("qa", {}), "$.qa", "a list of question objects"),
    (lambda d: d["qa"][2].__setitem__("category", 4), "$.qa[2].category", "category id 1-3"),
    (lambda d: d["qa"][0].__setitem__("category", "1"), "$.qa[0].category", "an integer"),
    (lambda d: d["qa"][1].pop("answer"), "$.qa[1].answer", "key 'answer'"),
    (lambda d: d["qa"][1].__setitem__("evidence", "D1:5"), "$.qa[1].evidence", "a list of dia_id strings"),
    (lambda d: d["qa"][1]["evidence"].append(5), "$.qa[1].evidence[1]", "a string"),
    (lambda d: d["qa"][0].__setitem__("question", " "), "$.qa[0].question", "a non-empty string"),
])
def test_malformed_chats_are_refused_with_the_place(tmp_path, mutate, where, expected):
    e = refused(write(tmp_path, _bad(mutate)))
    assert e.where == where and expected in e.expected


def test_no_sessions_and_not_an_object(tmp_path):
    d = {k: v for k, v in doc().items() if not k.startswith("session_")}
    assert "non-empty session_N" in refused(write(tmp_path, d)).expected
    assert refused(write(tmp_path, [doc()])).where == "$"


def test_a_bad_namespace_and_two_chats_with_one_name(tmp_path):
    assert refused(write(tmp_path, doc(), "Chat 1 with spaces.json")).where == "$"
    a = write(tmp_path, doc(), "Chat_1_A.json")
    sub = tmp_path / "other"
    sub.mkdir()
    b = write(sub, doc(), "Chat_1_A.json")
    with pytest.raises(DataFormatError, match="namespace 'Chat_1_A'"):
        load_realtalk([a, b])


def test_string_cap(tmp_path):
    d = doc()
    d["session_1"][0]["clean_text"] = "x" * 5001
    path = write(tmp_path, d)
    e = refused(path, max_turn_chars=5000)
    assert e.where == "$.session_1[0].clean_text" and "at most 5000" in e.expected
    assert load_realtalk(path, max_turn_chars=5001)[0].sessions[0].turns[0].text == "x" * 5001


def test_the_fixture_is_left_unchanged_by_loading():
    before = CHAT1.read_bytes()
    copy.deepcopy(load_realtalk(CHAT1))
    assert CHAT1.read_bytes() == before


# ----------------------------------------------------------------------------- the dev chats

def test_the_four_dev_chats():
    folder = require_dev(REALTALK_DEV)
    convs = load_realtalk(folder)
    c = count_dataset(convs)
    assert (c.conversations, c.turns, c.questions) == (4, 1761, 284)
    assert dict(c.questions_by_category) == {1: 120, 2: 121, 3: 43}
    dropped = total = 0
    for conv in convs:
        known = {t.packet_id for _, t in conv.iter_turns()}
        for q in conv.questions:
            kept, lost = split_reachable(q.evidence, known)
            total += len(q.evidence)
            dropped += len(lost)
    assert total == 643 and dropped == 34  # one id in about nineteen names no turn of its chat
    captions = sum(t.image_caption is not None for conv in convs for _, t in conv.iter_turns())
    assert captions == 127
    for conv in convs:
        times = [s.time for s in conv.sessions]
        assert times == sorted(times)  # day-first times read correctly are in order
