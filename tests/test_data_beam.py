"""The BEAM loader: chat folders and size folders from fixtures of our own writing, batches as
dated sessions, the ten question types as categories, ``source_chat_ids`` as evidence (lists,
nested lists, objects of lists), located errors on malformed files, the turn-length limit,
and the ten dev chats when ../shared/data is there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memcompile_local.data import BEAM_CATEGORIES, count_dataset, load_beam
from memcompile_local.data.beam import beam_files, beam_namespace
from memcompile_local.errors import DataFormatError

from _data_paths import BEAM_DEV, BEAM_MINI, require_dev

CHAT1 = BEAM_MINI / "1"


def copy_chat(tmp_path: Path, src: Path = CHAT1, size: str = "100K", name: str = "1") -> Path:
    dst = tmp_path / size / name
    shutil.copytree(src, dst)
    return dst


def edit(path: Path, mutate) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    mutate(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")


def refused(source: Path, **kw) -> DataFormatError:
    with pytest.raises(DataFormatError) as err:
        load_beam(source, **kw)
    e = err.value
    assert str(e).startswith(f"{e.path}: at {e.where}: expected {e.expected}")
    return e


def test_batches_are_dated_sessions_of_user_and_assistant_turns():
    (conv,) = load_beam(CHAT1)
    assert conv.namespace == "beam-100K-1" and conv.speakers == ("user", "assistant")
    assert [(s.index, s.session_id, s.time, len(s.turns)) for s in conv.sessions] == [
        (1, "batch_1", "2024-01-08", 8), (2, "batch_2", "2024-02-12", 4)]
    turns = [t for _, t in conv.iter_turns()]
    assert [t.packet_id for t in turns] == [str(i) for i in range(12)]
    assert [t.speaker for t in turns[:4]] == ["user", "assistant", "user", "assistant"]
    assert turns[5].text.endswith("rated for 10 amps.")


def test_question_types_are_categories_and_source_ids_are_evidence():
    (conv,) = load_beam(CHAT1)
    by_type = {q.category: q for q in conv.questions}
    assert set(by_type) <= set(BEAM_CATEGORIES)
    # file order does not matter: questions come in the fixed order of the ten types
    assert [q.category for q in conv.questions] == [c for c in BEAM_CATEGORIES if c in by_type]
    ab = by_type["abstention"]
    assert ab.is_abstention and ab.evidence == () and ab.answer == "The chat does not say."
    assert by_type["information_extraction"].evidence == ("2",)
    assert by_type["knowledge_update"].evidence == ("0", "8")  # an object of lists, in key order
    assert by_type["event_ordering"].evidence == ("2", "10")  # a nested list is flattened
    assert by_type["summarization"].answer == "Pi, then watering, then ESP32."  # ideal_summary
    assert by_type["preference_following"].evidence == () and not by_type["preference_following"].is_abstention
    assert by_type["knowledge_update"].question_id == "beam-100K-1:knowledge_update:0"


def test_a_size_folder_reads_every_chat_by_number(tmp_path):
    copy_chat(tmp_path, CHAT1, name="2")
    copy_chat(tmp_path, BEAM_MINI / "2", name="10")
    copy_chat(tmp_path, BEAM_MINI / "2", name="1")
    convs = load_beam(tmp_path / "100K")
    assert [c.namespace for c in convs] == ["beam-100K-1", "beam-100K-2", "beam-100K-10"]
    assert [f.relative_to(tmp_path).as_posix() for f in beam_files(tmp_path / "100K")][:2] == [
        "100K/1/chat.json", "100K/1/probing_questions/probing_questions.json"]
    assert beam_namespace(tmp_path / "100K" / "1") == "beam-100K-1"
    other = tmp_path / "mine" / "chatA"
    shutil.copytree(CHAT1, other)
    assert load_beam(other)[0].namespace == "beam-chatA"


def test_unknown_source_ids_are_kept_for_the_runner_to_drop():
    (conv,) = load_beam(BEAM_MINI / "2")
    temporal = [q for q in conv.questions if q.category == "temporal_reasoning"][0]
    assert temporal.evidence == ("0", "7")  # chat 2 has no turn 7


def test_folders_that_are_not_beam(tmp_path):
    assert refused(tmp_path / "nope").detail == "not found"
    assert "no chat.json" in refused(tmp_path).detail
    chat = copy_chat(tmp_path)
    (chat / "probing_questions" / "probing_questions.json").unlink()
    e = refused(chat)
    assert e.path.endswith("probing_questions.json") and e.detail == "file not found"


CHAT_CASES = [
    (lambda d: d.clear(), "$", "a non-empty list of batch objects"),
    (lambda d: d.__setitem__(0, []), "$[0]", "a batch object"),
    (lambda d: d[0].pop("turns"), "$[0].turns", "key 'turns'"),
    (lambda d: d[1].__setitem__("batch_number", 1), "$[1].batch_number", "unique in the chat"),
    (lambda d: d[0]["turns"].__setitem__(0, {"role": "user"}), "$[0].turns[0]", "a list of message objects"),
    (lambda d: d[0]["turns"][1][0].__setitem__("role", "system"), "$[0].turns[1][0].role", "'user' or 'assistant'"),
    (lambda d: d[0]["turns"][1][0].__setitem__("id", "2"), "$[0].turns[1][0].id", "an integer"),
    (lambda d: d[1]["turns"][0][1].__setitem__("id", 3), "$[1].turns[0][1].id", "unique in the chat"),
    (lambda d: d[0]["turns"][2][1].pop("content"), "$[0].turns[2][1].content", "key 'content'"),
    (lambda d: d[0]["turns"][0][0].__setitem__("time_anchor", "2024-01-08"), "$[0].turns[0][0].time_anchor",
     "Month-DD-YYYY"),
    (lambda d: d[1].__setitem__("time_anchor", "Febtober-01-2024"), "$[1].time_anchor", "Month-DD-YYYY"),
    (lambda d: d[0]["turns"][0][0].__setitem__("index", 1), "$[0].turns[0][0].index", "a string"),
]


@pytest.mark.parametrize("mutate, where, expected", CHAT_CASES)
def test_malformed_chats_are_refused_with_the_place(tmp_path, mutate, where, expected):
    chat = copy_chat(tmp_path)
    edit(chat / "chat.json", mutate)
    e = refused(chat)
    assert e.path == str(chat / "chat.json") and e.where == where and expected in e.expected


QUESTION_CASES = [
    (lambda d: d.__setitem__("trivia", []), '$.trivia', "one of the BEAM question types"),
    (lambda d: d.__setitem__("abstention", {}), "$.abstention", "a list of question objects"),
    (lambda d: d["information_extraction"][0].pop("question"), "$.information_extraction[0].question",
     "key 'question'"),
    (lambda d: d["information_extraction"][0].pop("answer"), "$.information_extraction[0].answer",
     "one of the keys answer"),
    (lambda d: d["information_extraction"][0].pop("source_chat_ids"),
     "$.information_extraction[0].source_chat_ids", "key 'source_chat_ids'"),
    (lambda d: d["information_extraction"][0].__setitem__("source_chat_ids", ["2"]),
     "$.information_extraction[0].source_chat_ids[0]", "an integer"),
    (lambda d: d["knowledge_update"][0]["source_chat_ids"].__setitem__("updated_info", 8),
     "$.knowledge_update[0].source_chat_ids.updated_info", "a list of chat ids"),
    (lambda d: d["abstention"][0].__setitem__("source_chat_ids", [3]), "$.abstention[0].source_chat_ids",
     "no source chat ids"),
]


@pytest.mark.parametrize("mutate, where, expected", QUESTION_CASES)
def test_malformed_questions_are_refused_with_the_place(tmp_path, mutate, where, expected):
    chat = copy_chat(tmp_path)
    path = chat / "probing_questions" / "probing_questions.json"
    edit(path, mutate)
    e = refused(chat)
    assert e.path == str(path) and e.where == where and expected in e.expected


def test_a_reply_above_the_limit_is_refused_naming_the_limit_and_accepted_when_raised(tmp_path):
    chat = copy_chat(tmp_path)
    edit(chat / "chat.json", lambda d: d[0]["turns"][2][1].__setitem__("content", "pump " * 30_000))
    e = refused(chat)
    assert e.where == "$[0].turns[2][1].content"
    assert "at most 100000 characters" in e.expected and "--max-turn-chars" in e.expected
    assert e.detail == "found 150000 characters"
    (conv,) = load_beam(chat, max_turn_chars=150_000)
    assert len(conv.sessions[0].turns[5].text) == 150_000
    assert load_beam(chat, max_turn_chars=None)[0].namespace == "beam-100K-1"


# ----------------------------------------------------------------------------- the dev chats

def test_the_ten_dev_chats():
    folder = require_dev(BEAM_DEV)
    e = refused(folder)
    assert e.path.endswith("4/chat.json") and e.detail == "found 348853 characters"
    convs = load_beam(folder, max_turn_chars=400_000)
    c = count_dataset(convs)
    assert (c.conversations, c.sessions, c.turns, c.questions, c.abstention_questions) == (10, 40, 2432, 200, 20)
    assert dict(c.questions_by_category) == {t: 20 for t in BEAM_CATEGORIES}
    assert all(s.time for conv in convs for s in conv.sessions)
    with_gold = [q for conv in convs for q in conv.questions if q.evidence]
    assert len(with_gold) == 179  # 20 abstention and one question with an empty list have none
    for conv in convs:
        known = {t.packet_id for _, t in conv.iter_turns()}
        assert all(e in known for q in conv.questions for e in q.evidence)
