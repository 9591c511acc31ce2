"""The request frame of a question (language/framing.py) and fusion.request_frame: with "drop"
the dense channel embeds a framed question's content alone; every other question, and the
default, embed as before. The questions here are written for these tests."""

from __future__ import annotations

import numpy as np
import pytest

from memcompile_local.config import FusionConfig, PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.fused.index import FusionIndex
from memcompile_local.fused.retriever import FusedRetriever, dense_query_texts
from memcompile_local.language.framing import question_content
from memcompile_local.types import SourcePacket


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


def test_dense_texts_drop_the_frame_only_when_asked_and_only_where_there_is_one():
    framed = "Can you list the order in which I brought up different aspects of my kiln repair across our chats?"
    intent = framed + " list order kiln repair"
    keep, drop = FusionConfig(), FusionConfig(request_frame="drop")
    assert keep.request_frame == "keep"  # off by default (README, "Request frames")
    assert dense_query_texts(framed, intent, keep) == [intent, framed]
    assert dense_query_texts(framed, intent, drop) == ["my kiln repair?"]  # the content alone, no intent text
    plain = "What did Nora buy?"
    assert dense_query_texts(plain, plain + " Nora", drop) == dense_query_texts(plain, plain + " Nora", keep)
    with pytest.raises(ConfigError):
        PipelineConfig().replace(fusion={"request_frame": "strip"})


class _Recorder:
    """An embedder that records what it is asked to embed (one fixed vector per text)."""

    def __init__(self):
        self.seen: list[list[str]] = []

    def embed(self, texts):
        self.seen.append(list(texts))
        return np.ones((len(texts), 3), dtype=np.float32)


def test_the_retriever_embeds_the_content_of_a_framed_question():
    turns = [SourcePacket(namespace="ns", packet_id=f"D1:{i}", ordinal=i, session_index=1, session_id="s1",
                          session_time="3 March, 2024", speaker=s, content=t, image_caption=None, sha256="x")
             for i, (s, t) in enumerate([("user", "My kiln's thermocouple failed again."),
                                         ("assistant", "Replace the thermocouple and check the relay.")])]
    cfg = FusionConfig(request_frame="drop")
    retriever = FusedRetriever(FusionIndex.build(turns, {}, cfg), cfg)
    emb = _Recorder()
    question = "Could you remind me of my kiln repair throughout our conversations?"
    retriever.query_vector(emb, question, question + " kiln repair")
    assert emb.seen == [["my kiln repair?"]]
