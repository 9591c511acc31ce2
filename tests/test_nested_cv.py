"""The nested cross-validation protocol (research/nested_cv.py, scripts/dev_corpora.py): the fold
plan, the rule the procedure applies, and the selection components it measures. Research code:
marked ``research``, run in CI like the rest."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from memcompile_local.types import Conversation, QAItem, Session, Turn

pytestmark = pytest.mark.research
ROOT = Path(__file__).resolve().parents[1]


def _modules():
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "research"))
    import dev_corpora
    import nested_cv
    return dev_corpora, nested_cv


def _conv(ns: str, qtypes: list[tuple[str, str, bool]]) -> Conversation:
    session = Session(index=1, session_id="s1", time="2024-01-02", turns=(Turn(packet_id="s1:1", speaker="user",
                                                                                  text="I adopted a cat."),))
    qs = tuple(QAItem(question_id=qid, question="What did I adopt?", answer="a cat", category=cat,
                      evidence=("s1:1",), is_abstention=abst) for qid, cat, abst in qtypes)
    return Conversation(namespace=ns, sessions=(session,), questions=qs)


def test_fold_plan_holds_every_conversation_out_once_and_stratifies_longmemeval_by_type():
    dc, _ = _modules()
    convs = [_conv(f"c{i}", [(f"q{i}", "1", False)]) for i in range(10)]
    plan = dc.fold_plan(dc.Corpus("beam", convs, {}), 4)
    assert [plan(c, c.questions[0]) for c in convs] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    # LongMemEval: one question per haystack; positions counted within each type, abstention not counted.
    spec = [("a1", "update", False), ("b1", "multi", False), ("a2", "update", False), ("x", "update", True),
            ("a3", "update", False), ("b2", "multi", False), ("a4", "update", False), ("a5", "update", False)]
    lme = [_conv(f"lme-{qid}", [(qid, cat, abst)]) for qid, cat, abst in spec]
    plan = dc.fold_plan(dc.Corpus("longmemeval", lme, {}), 4)
    got = {c.questions[0].question_id: plan(c, c.questions[0]) for c in lme if not c.questions[0].is_abstention}
    assert got == {"a1": 0, "a2": 1, "a3": 2, "a4": 3, "a5": 0, "b1": 0, "b2": 1}


def test_the_rule_takes_a_component_that_falls_nowhere_and_rises_on_two():
    _, ncv = _modules()
    ref = {"locomo": 83.0, "realtalk": 70.0, "beam": 63.0, "longmemeval": 90.0}
    assert ncv.rule({**ref, "realtalk": 70.4, "beam": 64.0}, ref)
    assert not ncv.rule({**ref, "beam": 64.0}, ref)  # rises on one only
    assert not ncv.rule({**ref, "realtalk": 71.0, "beam": 65.0, "longmemeval": 89.9}, ref)  # falls on one
    assert not ncv.rule(dict(ref), ref)  # no change anywhere


def _view(texts_sessions: list[tuple[str, int]]):
    packets = [SimpleNamespace(content=t, image_caption=None, session_index=s) for t, s in texts_sessions]
    return SimpleNamespace(packets=packets)


def test_distinct_order_moves_repeated_texts_behind_the_rest():
    _, ncv = _modules()
    view = _view([("Thanks!", 1), ("The bus leaves at 9.", 1), ("thanks! ", 2), ("Pier 4.", 2), ("THANKS!", 3)])
    assert ncv.distinct_order(view, np.arange(5)).tolist() == [0, 1, 3, 2, 4]


def test_session_cap_takes_at_most_two_turns_of_a_session_while_others_remain():
    _, ncv = _modules()
    view = _view([("a", 1), ("b", 1), ("c", 1), ("d", 2), ("e", 3), ("f", 1)])
    got = ncv.session_capped(view, np.arange(6), 4).tolist()
    assert got[:4] == [0, 1, 3, 4] and sorted(got) == list(range(6))


def test_recency_columns_compare_each_candidate_with_later_and_earlier_sessions():
    _, ncv = _modules()
    E = np.asarray([[1, 0], [0.8, 0.6], [0, 1]], dtype=np.float32)
    view = SimpleNamespace(packet_matrix=E, packets=[SimpleNamespace(session_index=s) for s in (1, 2, 2)])
    cols = ncv.recency_columns(view, np.asarray([0, 1, 2]), 3)
    # Row 0 (session 1): later candidates 1 and 2, best cosine 0.8; nothing earlier.
    assert np.allclose(cols[0], [0.8, 0.0]) and np.allclose(cols[1], [0.0, 0.8]) and np.allclose(cols[2], [0.0, 0.0])
    # Rows past the pool (gold a training set appends) are compared with the pool only, and no
    # pool row is compared with them.
    cols = ncv.recency_columns(view, np.asarray([0, 1, 2]), 1)
    assert np.allclose(cols[:, 0], 0.0) and np.allclose(cols[1], [0.0, 0.8]) and np.allclose(cols[2], [0.0, 0.0])


def _chat(turns: list[tuple[str, str]]):
    packets = [SimpleNamespace(speaker=sp, content=t, image_caption=None, session_index=1) for sp, t in turns]
    return SimpleNamespace(packets=packets)


def test_assistant_first_moves_the_assistants_turns_ahead_each_side_in_its_order():
    _, ncv = _modules()
    view = _chat([("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"), ("user", "e")])
    assert ncv.assistant_first(view, np.asarray([4, 3, 2, 1, 0])).tolist() == [3, 1, 4, 2, 0]
    people = _chat([("Ines", "a"), ("Tomas", "b"), ("Ines", "c")])
    assert ncv.assistant_first(people, np.asarray([2, 0, 1])).tolist() == [2, 0, 1]  # no assistant: unchanged


def test_preference_columns_read_the_question_and_the_users_own_statements():
    _, ncv = _modules()
    view = _chat([("user", "I love quiet campsites by a lake."), ("assistant", "I love that idea too!"),
                  ("user", "The car is in the garage."), ("user", "My favourite tent is the blue one.")])
    rows = np.asarray([0, 1, 2, 3])
    cols = ncv.preference_columns(view, rows, "Can you suggest a campsite for next weekend?")
    assert cols[:, 0].tolist() == [1.0] * 4 and cols[:, 1].tolist() == [1.0, 0.0, 0.0, 1.0]
    cols = ncv.preference_columns(view, rows, "Where did I park the car?")
    assert cols[:, 0].tolist() == [0.0] * 4 and cols[:, 1].tolist() == [1.0, 0.0, 0.0, 1.0]
    # Only the asked rows are read, in the order given.
    assert ncv.preference_columns(view, np.asarray([3, 2]), "Any tips?")[:, 1].tolist() == [1.0, 0.0]


def test_the_new_components_are_settings_and_preference_makes_its_own_model():
    _, ncv = _modules()
    names = [s.name for s in ncv.SETTINGS]
    assert "reference + preference" in names and "reference + assistant" in names
    n = len(ncv.BASE_FEATURES)
    pref = ncv.Setting(frozenset(["preference"]))
    assert ncv.columns(pref) == list(range(n)) + [n + 2, n + 3]
    assert ncv.columns(ncv.Setting(frozenset(["assistant"]))) == list(range(n))  # a selection rule: no column
    assert ncv.columns(ncv.Setting(frozenset(["recency", "preference"]))) == list(range(n)) + [n, n + 1, n + 2, n + 3]
