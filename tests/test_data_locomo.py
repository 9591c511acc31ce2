"""LoCoMo loader: counts and details of the shipped fixture (and of the dev file when
../shared/data is present), layout conventions and the packaged example."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from memcompile_local.data import (
    LOCOMO_CATEGORY_NAMES,
    count_dataset,
    counts,
    example_conversation_path,
    load_any,
    load_locomo,
    split_evidence,
)
from memcompile_local.errors import DataFormatError

from _data_paths import LOCOMO_MINI


def write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def turn(dia_id: str, speaker: str = "A", text: str = "hello", **extra) -> dict:
    return {"dia_id": dia_id, "speaker": speaker, "text": text, **extra}


def sample(sample_id: str = "s1", conversation: dict | None = None, qa=None) -> dict:
    conv = conversation if conversation is not None else {
        "speaker_a": "A", "speaker_b": "B",
        "session_1_date_time": "1:00 pm on 1 May, 2023",
        "session_1": [turn("D1:1"), turn("D1:2", "B")],
    }
    out = {"sample_id": sample_id, "conversation": conv}
    if qa is not None:
        out["qa"] = qa
    return out


# --- the shipped fixture ---------------------------------------------------------------


def test_fixture_counts():
    convs = load_locomo(LOCOMO_MINI)
    assert [c.namespace for c in convs] == ["mini-1", "mini-2"]
    assert [len(c.sessions) for c in convs] == [3, 2]
    assert [sum(len(s.turns) for s in c.sessions) for c in convs] == [36, 24]
    assert counts(convs) == {
        "conversations": 2, "sessions": 5, "turns": 60, "questions": 21,
        "questions_by_category": {1: 5, 2: 5, 3: 2, 4: 6, 5: 3}, "abstention_questions": 0,
    }
    assert counts(load_any(LOCOMO_MINI)) == counts(convs)  # auto-detected as LoCoMo


def test_fixture_details():
    mini1 = load_locomo(LOCOMO_MINI, conversations=["mini-1"])[0]
    assert mini1.speakers == ("Priya", "Tomas") and mini1.source_path == str(LOCOMO_MINI)
    # The file lists session_3 first; sessions come back in numeric order with their dates.
    assert [s.session_id for s in mini1.sessions] == ["session_1", "session_2", "session_3"]
    assert [s.index for s in mini1.sessions] == [1, 2, 3]
    assert mini1.sessions[0].time == "10:15 am on 4 March, 2023"
    first = mini1.sessions[0].turns[0]
    assert (first.packet_id, first.speaker, first.image_caption) == ("D1:1", "Priya", None)
    bowl = mini1.sessions[0].turns[3]
    assert bowl.packet_id == "D1:4"
    assert bowl.image_caption == "a photo of an unfired clay bowl on a potter's wheel"
    assert bowl.image_query == "clay bowl pottery wheel"
    q = {x.question_id: x for x in mini1.questions}
    assert q["mini-1:q1"].answer == "1 April 2023" and q["mini-1:q1"].category == 2
    assert q["mini-1:q4"].answer == "2019"  # stored as the JSON number 2019
    assert q["mini-1:q7"].evidence == ("D1:2", "D3:9")  # from the one string "D1:2; D3:9"
    adversarial = [x for x in mini1.questions if x.category == 5]
    assert [x.question_id for x in adversarial] == ["mini-1:q5", "mini-1:q11"]
    assert all(x.adversarial_answer for x in adversarial)
    assert [x.answer for x in adversarial] == [None, "She did not"]  # one item also carries an answer


def test_fixture_selection_by_sample_id():
    assert [c.namespace for c in load_locomo(LOCOMO_MINI, conversations="mini-2")] == ["mini-2"]
    both = load_locomo(LOCOMO_MINI, conversations=["mini-2", "mini-1"])
    assert [c.namespace for c in both] == ["mini-1", "mini-2"]  # file order, whatever the request order
    with pytest.raises(DataFormatError) as err:
        load_locomo(LOCOMO_MINI, conversations=["mini-9"])
    assert "mini-9" in str(err.value) and "mini-1, mini-2" in str(err.value)


# --- the dev file (../shared/data; skipped locally without it, failing in CI) ---------


def test_dev_file_counts(dev_locomo):
    DEV = dev_locomo
    convs = load_locomo(DEV)
    assert [c.namespace for c in convs] == ["conv-26", "conv-30"]
    assert [len(c.sessions) for c in convs] == [19, 19]
    assert [sum(len(s.turns) for s in c.sessions) for c in convs] == [419, 369]
    assert [len(c.questions) for c in convs] == [199, 105]
    assert counts(convs) == {
        "conversations": 2,
        "sessions": 38,
        "turns": 788,
        "questions": 304,
        "questions_by_category": {1: 43, 2: 63, 3: 13, 4: 114, 5: 71},
        "abstention_questions": 0,
    }
    # Categories are ordered ints, not strings.
    assert [k for k, _ in count_dataset(convs).questions_by_category] == [1, 2, 3, 4, 5]


def test_dev_file_details(dev_locomo):
    DEV = dev_locomo
    conv26 = load_locomo(DEV, conversations=["conv-26"])[0]
    assert conv26.speakers == ("Caroline", "Melanie")
    assert conv26.source_path == str(DEV)
    # Numeric order: session_10 comes after session_9, not after session_1.
    assert [s.session_id for s in conv26.sessions] == [f"session_{n}" for n in range(1, 20)]
    assert [s.index for s in conv26.sessions] == list(range(1, 20))
    assert conv26.sessions[0].time == "1:56 pm on 8 May, 2023"
    first = conv26.sessions[0].turns[0]
    assert (first.packet_id, first.speaker) == ("D1:1", "Caroline")
    assert first.image_caption is None and first.image_query is None
    pic = conv26.sessions[0].turns[4]
    assert pic.packet_id == "D1:5"
    assert pic.image_caption == "a photo of a dog walking past a wall with a painting of a woman"
    assert pic.image_query == "transgender pride flag mural"

    q = {x.question_id: x for x in conv26.questions}
    assert q["conv-26:q0"].answer == "7 May 2023" and q["conv-26:q0"].category == 2
    assert q["conv-26:q1"].answer == "2022"  # stored as the JSON number 2022
    assert q["conv-26:q37"].evidence == ("D8:6", "D9:17")  # from the one string "D8:6; D9:17"
    adversarial = [x for x in conv26.questions if x.category == 5]
    assert len(adversarial) == 47
    assert all(x.adversarial_answer for x in adversarial)
    assert sum(x.answer is None for x in adversarial) == 45  # two items also carry an answer


def test_selection_by_sample_id(dev_locomo):
    DEV = dev_locomo
    assert [c.namespace for c in load_locomo(DEV, conversations="conv-30")] == ["conv-30"]
    # File order is kept whatever the order of the request.
    both = load_locomo(DEV, conversations=["conv-30", "conv-26"])
    assert [c.namespace for c in both] == ["conv-26", "conv-30"]
    with pytest.raises(DataFormatError) as err:
        load_locomo(DEV, conversations=["conv-99"])
    assert "conv-99" in str(err.value) and "conv-26, conv-30" in str(err.value)


def test_auto_detects_locomo(dev_locomo):
    DEV = dev_locomo
    assert counts(load_any(DEV))["questions"] == 304


# --- conventions on small synthetic files ---------------------------------------------


def test_sessions_sorted_numerically_and_empty_skipped(tmp_path):
    conv = {
        "speaker_a": "A", "speaker_b": "B",
        "session_10": [turn("D10:1")], "session_10_date_time": "t10",
        "session_3": [turn("D3:1"), turn("D3:2")], "session_3_date_time": "t3",
        "session_2": [], "session_2_date_time": "t2",
        "session_1": [turn("D1:1")], "session_1_date_time": "t1",
        "session_7_date_time": "date without a session",
        "session_1_summary": "ignored",
    }
    (c,) = load_locomo(write(tmp_path / "x.json", [sample("s", conv)]))
    assert [(s.index, s.session_id, s.time) for s in c.sessions] == [
        (1, "session_1", "t1"), (2, "session_3", "t3"), (3, "session_10", "t10")]
    assert [t.packet_id for _, t in c.iter_turns()] == ["D1:1", "D3:1", "D3:2", "D10:1"]


def test_empty_session_still_needs_its_date(tmp_path):
    conv = {"speaker_a": "A", "speaker_b": "B", "session_1": [turn("D1:1")],
            "session_1_date_time": "t1", "session_2": []}
    with pytest.raises(DataFormatError) as err:
        load_locomo(write(tmp_path / "x.json", [sample("s", conv)]))
    assert err.value.where == "$[0].conversation.session_2_date_time"
    assert "session_2_date_time" in err.value.expected


def test_split_evidence():
    assert split_evidence(["D8:6; D9:17"]) == ("D8:6", "D9:17")
    assert split_evidence([" D1:2 ", "D1:3,D1:4", "D1:2", "D5:1  D5:2", ""]) == (
        "D1:2", "D1:3", "D1:4", "D5:1", "D5:2")
    assert split_evidence([]) == ()


def test_answers_and_categories(tmp_path):
    qa = [
        {"question": "int?", "answer": 2022, "evidence": ["D1:1"], "category": 2},
        {"question": "float?", "answer": 2.5, "evidence": [], "category": 4},
        {"question": "adv?", "adversarial_answer": "no", "evidence": ["D1:2; D1:1"],
         "category": 5},
        {"question": "no evidence key", "answer": "x", "category": 3},
    ]
    (c,) = load_locomo(write(tmp_path / "x.json", [sample("s", qa=qa)]))
    q0, q1, q2, q3 = c.questions
    assert [q.question_id for q in c.questions] == ["s:q0", "s:q1", "s:q2", "s:q3"]
    assert (q0.answer, q0.category) == ("2022", 2)
    assert q1.answer == "2.5"
    assert (q2.answer, q2.adversarial_answer, q2.evidence) == (None, "no", ("D1:2", "D1:1"))
    assert q3.evidence == ()
    assert LOCOMO_CATEGORY_NAMES[q2.category] == "adversarial"


@pytest.mark.parametrize(
    "item, where, expected",
    [
        ({"question": "q", "evidence": [], "category": 4}, "$[0].qa[0].answer", "'answer'"),
        ({"question": "q", "answer": True, "category": 4}, "$[0].qa[0].answer",
         "a string or a number"),
        ({"question": "q", "answer": "a", "category": 6}, "$[0].qa[0].category", "1-5"),
        ({"question": "q", "answer": "a", "category": "2"}, "$[0].qa[0].category",
         "an integer"),
        ({"question": "q", "answer": "a"}, "$[0].qa[0].category", "'category'"),
        ({"question": "q", "answer": "a", "category": 1, "evidence": "D1:1"},
         "$[0].qa[0].evidence", "a list"),
        ({"question": "q", "answer": "a", "category": 1, "evidence": ["D1:1", 7]},
         "$[0].qa[0].evidence[1]", "a string"),
        ({"question": "", "answer": "a", "category": 1}, "$[0].qa[0].question",
         "a non-empty string"),
    ],
)
def test_bad_qa_items(tmp_path, item, where, expected):
    with pytest.raises(DataFormatError) as err:
        load_locomo(write(tmp_path / "x.json", [sample("s", qa=[item])]))
    assert err.value.where == where
    assert expected in err.value.expected


def test_duplicate_sample_id(tmp_path):
    with pytest.raises(DataFormatError) as err:
        load_locomo(write(tmp_path / "x.json", [sample("s"), sample("t"), sample("s")]))
    assert err.value.where == "$[2].sample_id"
    assert "$[0]" in err.value.detail


def test_unknown_evidence_is_kept_and_logged(tmp_path, caplog):
    qa = [{"question": "q", "answer": "a", "evidence": ["D1:1", "D9:9"], "category": 4}]
    with caplog.at_level(logging.WARNING, logger="memcompile_local.data.locomo"):
        (c,) = load_locomo(write(tmp_path / "x.json", [sample("s", qa=qa)]))
    assert c.questions[0].evidence == ("D1:1", "D9:9")
    assert "D9:9" in caplog.text


# --- the packaged example ------------------------------------------------------------


def test_example_conversation():
    path = example_conversation_path()
    assert path.is_file() and path.name == "example_conversation.json"
    (c,) = load_locomo(path)
    assert c.namespace == "example-1"
    assert c.speakers == ("Nadia", "Owen")
    assert len(c.sessions) == 4
    assert sum(len(s.turns) for s in c.sessions) == 40
    for s in c.sessions:  # LoCoMo-style times, e.g. "1:56 pm on 8 May, 2023"
        assert re.fullmatch(r"\d{1,2}:\d\d [ap]m on \d{1,2} [A-Z][a-z]+, \d{4}", s.time)
    ids = {t.packet_id for _, t in c.iter_turns()}
    assert 8 <= len(c.questions) <= 10
    for q in c.questions:
        assert q.answer and q.evidence, q.question_id
        assert set(q.evidence) <= ids, q.question_id
    cats = {q.category for q in c.questions}
    assert cats <= {1, 2, 3, 4} and {1, 2} <= cats
    assert any(len(q.evidence) > 1 for q in c.questions if q.category == 1)
    assert any(t.image_caption for _, t in c.iter_turns())
    assert load_any(path) == [c]
