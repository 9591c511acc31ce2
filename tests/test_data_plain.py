"""Plain memory format: JSON and JSONL, defaults, round trips and exact Unicode."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest

from memcompile_local.data import (
    counts,
    example_conversation_path,
    load_any,
    load_locomo,
    load_plain,
)
from memcompile_local.errors import DataFormatError, NamespaceError
from memcompile_local.types import Conversation

EXAMPLE_JSONL = Path(__file__).resolve().parent.parent / "examples" / "private_memory.jsonl"


def write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def to_plain(conv: Conversation) -> dict:
    """Independent writer of the plain format with every id spelled out."""
    sessions = []
    for s in conv.sessions:
        turns = []
        for t in s.turns:
            d = {"id": t.packet_id, "speaker": t.speaker, "text": t.text}
            if t.image_caption is not None:
                d["image_caption"] = t.image_caption
            if t.image_query is not None:
                d["image_query"] = t.image_query
            turns.append(d)
        sessions.append({"id": s.session_id, "time": s.time, "turns": turns})
    return {"namespace": conv.namespace, "speakers": list(conv.speakers), "sessions": sessions}


DOC = {
    "sessions": [
        {"time": "2024-05-01 10:00", "turns": [
            {"speaker": "Ana", "text": "I moved to Porto."},
            {"speaker": "Ben", "text": "Exciting!"},
        ]},
        {"time": "2024-05-09 18:30", "id": "dinner", "turns": [
            {"speaker": "Ben", "text": "How is the flat?", "id": "custom"},
            {"speaker": "Ana", "text": "Sunny.", "image_caption": "a balcony with plants"},
        ]},
    ]
}


def test_defaults(tmp_path):
    c = load_plain(write(tmp_path / "notes.json", DOC))
    assert c.namespace == "notes"  # file stem when neither argument nor field is given
    assert c.speakers == ("Ana", "Ben")  # order of first appearance
    assert c.questions == ()
    assert [(s.index, s.session_id, s.time) for s in c.sessions] == [
        (1, "session_1", "2024-05-01 10:00"), (2, "dinner", "2024-05-09 18:30")]
    assert [t.packet_id for _, t in c.iter_turns()] == ["S1:1", "S1:2", "custom", "S2:2"]
    last = c.sessions[1].turns[1]
    assert (last.speaker, last.text) == ("Ana", "Sunny.")
    assert last.image_caption == "a balcony with plants"
    assert c.source_path == str(tmp_path / "notes.json")


def test_namespace_precedence(tmp_path):
    path = write(tmp_path / "notes.json", {"namespace": "from-file", **DOC})
    assert load_plain(path).namespace == "from-file"
    assert load_plain(path, namespace="from-arg").namespace == "from-arg"
    with pytest.raises(NamespaceError):
        load_plain(path, namespace="  ")


def test_bare_list_of_sessions(tmp_path):
    a = load_plain(write(tmp_path / "a.json", DOC))
    b = load_plain(write(tmp_path / "b.json", DOC["sessions"]), namespace="a")
    assert b.sessions == a.sessions and b.speakers == a.speakers


def test_jsonl_matches_json(tmp_path):
    ref = load_plain(write(tmp_path / "m.json", {"namespace": "m", **DOC}))
    with_header = write_jsonl(tmp_path / "m.jsonl", [{"namespace": "m"}, *DOC["sessions"]])
    assert replace(load_plain(with_header), source_path=None) == replace(ref, source_path=None)
    no_header = write_jsonl(tmp_path / "m2.jsonl", DOC["sessions"])
    assert load_plain(no_header, namespace="m").sessions == ref.sessions
    # JSONL content under a .json name is recognised as well.
    disguised = write_jsonl(tmp_path / "m3.json", [{"namespace": "m"}, *DOC["sessions"]])
    assert load_plain(disguised).sessions == ref.sessions
    assert load_any(disguised)[0].sessions == ref.sessions
    # Blank lines (and CRLF endings) are fine; line numbers still count them.
    text = with_header.read_text(encoding="utf-8").replace("\n", "\r\n\r\n")
    (tmp_path / "m4.jsonl").write_text(text, encoding="utf-8", newline="")
    assert load_plain(tmp_path / "m4.jsonl").sessions == ref.sessions


def test_empty_session_keeps_ids_stable(tmp_path):
    doc = {"sessions": [{"time": "t1", "turns": []}, *DOC["sessions"]]}
    c = load_plain(write(tmp_path / "x.json", doc))
    assert [(s.index, s.session_id) for s in c.sessions] == [(1, "session_2"), (2, "dinner")]
    assert [t.packet_id for t in c.sessions[0].turns] == ["S2:1", "S2:2"]


def test_declared_speakers_are_enforced(tmp_path):
    ok = load_plain(write(tmp_path / "a.json", {"speakers": ["Ben", "Ana", "Cy"], **DOC}))
    assert ok.speakers == ("Ben", "Ana", "Cy")  # declared order, unused names kept
    with pytest.raises(DataFormatError) as err:
        load_plain(write(tmp_path / "b.json", {"speakers": ["Ana"], **DOC}))
    assert err.value.where == "$.sessions[0].turns[1].speaker"
    assert "Ana" in err.value.expected and "'Ben'" in err.value.detail


def test_round_trip_of_the_example_conversation(tmp_path):
    (src,) = load_locomo(example_conversation_path())
    path = write(tmp_path / "roundtrip.json", to_plain(src))
    back = load_plain(path)
    assert back == replace(src, questions=(), source_path=str(path))
    rows = [{"namespace": src.namespace, "speakers": list(src.speakers)},
            *to_plain(src)["sessions"]]
    back_l = load_plain(write_jsonl(tmp_path / "roundtrip.jsonl", rows))
    assert back_l.sessions == src.sessions


def test_shipped_jsonl_example():
    c = load_plain(EXAMPLE_JSONL)
    assert c.namespace == "my-assistant"
    assert c.speakers == ("me", "assistant")
    assert counts([c])["sessions"] == 3 and counts([c])["turns"] == 8
    assert c.sessions[0].session_id == "kickoff"
    assert c.sessions[1].turns[2].image_caption is not None
    assert load_any(EXAMPLE_JSONL) == [c]


# --- exact text -------------------------------------------------------------------------

NFC = unicodedata.normalize("NFC", "Café Zoë")
NFD = unicodedata.normalize("NFD", "Café Zoë")
SAMPLES = [
    NFC,
    NFD,
    "emoji 😀👩‍👩‍👧 and flags 🇵🇹",
    "مرحبا بالعالم",  # Arabic, right-to-left
    "שלום עולם",  # Hebrew, right-to-left
    "中文 日本語 한국어",
    "  leading and trailing space\t\n",
    "zero\u200bwidth and \u2028 line separator",
]


@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_unicode_is_kept_exactly(tmp_path, ensure_ascii):
    assert NFC != NFD  # the test means something only if the two spellings differ
    doc = {"sessions": [{"time": "t", "turns": [
        {"speaker": "ünï", "text": text} for text in SAMPLES]}]}
    path = tmp_path / "u.json"
    path.write_text(json.dumps(doc, ensure_ascii=ensure_ascii), encoding="utf-8")
    c = load_plain(path)
    got = [t.text for t in c.sessions[0].turns]
    assert got == SAMPLES
    assert [t.encode("utf-8") for t in got] == [s.encode("utf-8") for s in SAMPLES]
    assert got[0] != got[1]
    assert c.speakers == ("ünï",)
    # Same for JSONL (where U+2028 must not be taken as a line break).
    jl = tmp_path / "u.jsonl"
    jl.write_text(json.dumps(doc["sessions"][0], ensure_ascii=ensure_ascii) + "\n",
                  encoding="utf-8")
    assert [t.text for t in load_plain(jl).sessions[0].turns] == SAMPLES


def test_escaped_surrogate_pair_is_one_character(tmp_path):
    path = tmp_path / "e.json"
    path.write_text('{"sessions": [{"time": "t", "turns": '
                    '[{"speaker": "a", "text": "\\ud83d\\ude00"}]}]}', encoding="utf-8")
    assert load_plain(path).sessions[0].turns[0].text == "\U0001F600"


def test_byte_order_mark_is_tolerated(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(DOC, ensure_ascii=False).encode("utf-8"))
    assert load_plain(path).sessions == load_plain(write(tmp_path / "nobom.json", DOC)).sessions


def test_conversation_from_in_memory_objects():
    from types import MappingProxyType

    from memcompile_local.data.plain import conversation_from_obj

    sessions = [MappingProxyType({"time": "t", "turns": ({"speaker": "a", "text": "x"},)})]
    c = conversation_from_obj({"namespace": "mem", "sessions": sessions}, source="<add>")
    assert (c.namespace, c.source_path) == ("mem", "<add>")
    assert [t.packet_id for _, t in c.iter_turns()] == ["S1:1"]
    assert conversation_from_obj(sessions, namespace="n2").namespace == "n2"
    with pytest.raises(NamespaceError):
        conversation_from_obj(sessions)
    with pytest.raises(DataFormatError) as err:
        conversation_from_obj({"namespace": "m", "sessions": [{"time": 1, "turns": []}]},
                              source="<add>")
    assert (err.value.path, err.value.where) == ("<add>", "$.sessions[0].time")


def test_plain_files_take_a_turn_length_cap(tmp_path):
    """Regression: load_plain and load_any on a plain file refused max_turn_chars, so only the
    benchmark loaders could change the cap."""
    doc = {"namespace": "cap", "sessions": [{"time": "2024-01-01", "turns": [{"speaker": "Ana", "text": "x" * 30}]}]}
    json_path = write(tmp_path / "cap.json", doc)
    jsonl_path = write_jsonl(tmp_path / "cap.jsonl", doc["sessions"])
    for path in (json_path, jsonl_path):
        assert load_plain(path).sessions[0].turns[0].text == "x" * 30  # the default cap is far above
        with pytest.raises(DataFormatError, match="at most 20 characters"):
            load_plain(path, max_turn_chars=20)
        with pytest.raises(DataFormatError, match="at most 20 characters"):
            load_any(path, max_turn_chars=20)
        assert load_any(path, "plain", max_turn_chars=30)[0].sessions[0].turns[0].text == "x" * 30
    huge = write(tmp_path / "huge.json", {"namespace": "h", "sessions": [
        {"time": "t", "turns": [{"speaker": "Ana", "text": "y" * 100_001}]}]})
    with pytest.raises(DataFormatError):
        load_plain(huge)
    assert len(load_plain(huge, max_turn_chars=None).sessions[0].turns[0].text) == 100_001
