"""Pronoun roles (fusion.role_weight, the role channel): a first-person question in a user-assistant history is
about the user's turns, one about what "you" said about the assistant's; histories between
people are untouched. The chats here are written for these tests."""

from __future__ import annotations

import numpy as np
import pytest

from memcompile_local.config import FusionConfig
from memcompile_local.fused.channels import fused_scores, score_order
from memcompile_local.fused.documents import question_speakers
from memcompile_local.fused.features import FEATURE_NAMES, query_features
from memcompile_local.fused.index import FusionIndex
from memcompile_local.language.roles import addressed_role
from memcompile_local.types import SourcePacket


@pytest.mark.parametrize("question, role", [
    ("When did I move my standup meeting?", "user"),
    ("What is my sister's new job?", "user"),
    # A request to the assistant now: its "you" answers, the "I" is the asker.
    ("Can you list the order in which I brought up the garden beds?", "user"),
    ("Could you remind me what I planted first?", "user"),
    ("What did you recommend for my sleep schedule?", "assistant"),
    ("How did you suggest I split the chores?", "assistant"),
    ("Which of your suggestions did I try?", "assistant"),
    ("You mentioned a bread recipe; which flour was it?", "assistant"),
    ("What did we decide about the logo?", None),
    ("Which libraries are used in this project?", None),
])
def test_addressed_role_reads_the_pronouns(question, role):
    assert addressed_role(question) == role


def test_question_speakers_map_roles_only_in_a_user_assistant_history():
    pair = ["Ines", "Tomas"]
    chat = ["user", "assistant"]
    assert question_speakers("What did I bake?", pair, roles=True) == []  # two people: "I" names nobody
    assert question_speakers("What did Ines bake?", pair, roles=True) == ["Ines"]
    assert question_speakers("What did I bake?", chat, roles=True) == ["user"]
    assert question_speakers("What did you recommend I bake?", chat, roles=True) == ["assistant"]
    assert question_speakers("What did I bake?", chat, roles=False) == []
    # A name the question says wins over the pronouns.
    assert question_speakers("What did the assistant say about my bread?", chat, roles=True) == ["assistant"]
    # Two users and an assistant: "I" is ambiguous, so nobody.
    assert question_speakers("What did I bake?", ["user", "guest", "assistant"], roles=True) == []


def _turn(i: int, speaker: str, text: str) -> SourcePacket:
    # One turn per session: no turn's lexical document takes in a neighbour's words.
    return SourcePacket(namespace="ns", packet_id=f"D{i + 1}:{i}", ordinal=i, session_index=i + 1,
                        session_id=f"s{i + 1}",
                        session_time="3 March, 2024", speaker=speaker, content=text, image_caption=None, sha256="x")


CHAT = [
    _turn(0, "user", "My sister Wren moved to Porto last spring and loves it."),
    _turn(1, "assistant", "A sister moving far away is a big change; after a sister's move, calls help."),
    _turn(2, "user", "Good idea, I will call her on Sunday."),
    _turn(3, "assistant", "Sunday calls are a lovely habit."),
    _turn(4, "user", "Next question: how long should bread dough rest?"),
    _turn(5, "assistant", "Let it rest about an hour, until it has doubled."),
    _turn(6, "user", "And the oven temperature?"),
    _turn(7, "assistant", "Bake it hot, around 230 degrees, with steam for the first minutes."),
]


def _cfg(**changes) -> FusionConfig:
    # BM25 and the speaker cue only (no embedder).
    return FusionConfig(packet_weight=0, temporal_weight=0, **changes)


def test_a_first_person_question_finds_the_users_fact_over_an_assistant_reply_that_repeats_its_words():
    question = "Where did my sister move?"
    off = _cfg(role_weight=0.0)
    before = fused_scores(FusionIndex.build(CHAT, {}, off), question, None, off)
    assert int(score_order(before.total)[0]) == 1  # the assistant's reply repeats "sister" and "moved"
    assert "role" not in before.channels
    on = _cfg()
    assert on.role_weight == 0.5  # on by default
    after = fused_scores(FusionIndex.build(CHAT, {}, on), question, None, on)
    assert after.channels["role"].tolist() == [1.0, 0.0] * 4
    assert not after.channels["speaker"].any()  # the question names nobody
    assert int(score_order(after.total)[0]) == 0
    assert np.allclose(after.total - before.total, 0.5 * after.channels["role"])


def test_a_named_participant_leaves_the_role_channel_silent():
    cfg = _cfg()
    s = fused_scores(FusionIndex.build(CHAT, {}, cfg), "What did the assistant say about my sister?", None, cfg)
    assert s.channels["speaker"].tolist() == [0.0, 1.0] * 4 and not s.channels["role"].any()


def test_people_histories_score_as_before():
    people = [_turn(t.ordinal, "Ines" if t.speaker == "user" else "Tomas", t.content) for t in CHAT]
    question = "Where did my sister move?"
    off, on = _cfg(role_weight=0.0), _cfg(role_weight=0.5)
    a = fused_scores(FusionIndex.build(people, {}, off), question, None, off)
    b = fused_scores(FusionIndex.build(people, {}, on), question, None, on)
    assert np.array_equal(a.total, b.total) and "role" not in b.channels and not b.channels["speaker"].any()
    fa = query_features(FusionIndex.build(people, {}, off), people, question, None, off, len(people))
    fb = query_features(FusionIndex.build(people, {}, on), people, question, None, on, len(people))
    assert np.array_equal(fa.matrix, fb.matrix)


def test_the_rankers_speaker_columns_read_the_role():
    cfg = _cfg()
    index = FusionIndex.build(CHAT, {}, cfg)
    qf = query_features(index, CHAT, "What did you say about calling my sister?", None, cfg, len(CHAT))
    speaker = qf.matrix[:, FEATURE_NAMES.index("speaker")]
    assert {int(r): s for r, s in zip(qf.rows, speaker)} == {i: float(i % 2) for i in range(len(CHAT))}
    assert set(qf.matrix[:, FEATURE_NAMES.index("q_names_one")]) == {1.0}
    plain = query_features(index, CHAT, "Which city came up?", None, cfg, len(CHAT))
    assert not plain.matrix[:, FEATURE_NAMES.index("q_names_one")].any()
    off = _cfg(role_weight=0.0)
    before = query_features(FusionIndex.build(CHAT, {}, off), CHAT, "What did you say about calling my sister?",
                            None, off, len(CHAT))
    assert not before.matrix[:, FEATURE_NAMES.index("speaker")].any()
