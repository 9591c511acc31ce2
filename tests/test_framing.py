"""The request frame of a question (research/framing.py; ``fusion.request_frame`` until issue 49
removed it, measured and not shipped): with "drop" the dense channel embedded a framed
question's content alone (research/dropped.py). The questions here are written for these
tests. Research code: marked ``research``, run in CI like the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))

from dropped import framed_query_texts  # noqa: E402
from framing import question_content  # noqa: E402
from memcompile_local.config import FusionConfig  # noqa: E402
from memcompile_local.fused.retriever import dense_query_texts  # noqa: E402

pytestmark = pytest.mark.research


@pytest.mark.parametrize("question, content", [
    ("Could you walk me through the order in which I raised the parts of my garden plan across our chats? "
     "Mention only and only four items.", "the parts of my garden plan?"),
    ("Can you list the order in which I brought up different aspects of my kiln repair throughout our "
     "conversations, in order?", "my kiln repair"),
    ("Can you give me a brief summary of how my violin practice has changed throughout our sessions?",
     "how my violin practice has changed?"),
    ("How many tomato varieties did I plant across my sessions?", "How many tomato varieties did I plant?"),
    ("Could you remind me of the bakery we discussed so far?", "the bakery?"),
])
def test_the_frame_goes_and_the_subject_stays(question, content):
    assert question_content(question) == content


@pytest.mark.parametrize("question", [
    "What did Nora buy at the market in June?",  # third person: no frame
    "When did I move my standup meeting?",
    "Which chat app did Ivo install for his team?",  # "chat" without "our"/"my"
    # All frame: nothing would be left to embed, so the question stays whole.
    "Can you list the order in which I brought up things?",
])
def test_questions_without_a_frame_come_back_unchanged(question):
    assert question_content(question) == question


def test_dense_texts_drop_the_frame_only_where_there_is_one():
    framed = "Can you list the order in which I brought up different aspects of my kiln repair across our chats?"
    intent = framed + " list order kiln repair"
    assert dense_query_texts(framed, intent) == [intent, framed]  # the package: as asked
    assert framed_query_texts(framed, intent) == ["my kiln repair?"]  # the content alone, no intent text
    plain = "What did Nora buy?"
    assert framed_query_texts(plain, plain + " Nora") == dense_query_texts(plain, plain + " Nora")
    assert "request_frame" not in FusionConfig.__dataclass_fields__
