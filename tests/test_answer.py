"""Answer step: prompt choice, request shape and post-processing."""

from __future__ import annotations

import pytest

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.errors import TransportError
from memcompile_local.evidence import answer as answer_mod
from memcompile_local.config import ModelConfig
from memcompile_local.evidence.answer import (
    answer_question,
    answer_settings,
    postprocess_answer,
    strip_restated_question,
    use_temporal_prompt,
)
from memcompile_local.language.timecues import is_temporal_question
from memcompile_local.evidence.prompts import ANSWER, SMALL_ANSWER, TEMPORAL_ANSWER
from memcompile_local.llm.client import LLMClient
from memcompile_local.llm.interface import TextSpec

from test_language import TEMPORAL_QUESTIONS

CONTEXT = "[1] dia_id=D1:2 | recorded: 8 May 2023 | speaker: Caroline\n- Caroline went hiking on 7 May 2023."


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("  7 May 2023  ", "7 May 2023"),
        ("Answer: 7 May 2023", "7 May 2023"),
        ("**Answer:** Paris\nShe said she lives there.", "Paris"),
        ("answer - three weeks", "three weeks"),
        ("Final answer: Yes, she did", "Yes, she did"),
        ("A: Sweden", "Sweden"),
        ("A-list celebrities", "A-list celebrities"),
        ("Answer:\nthe week before 9 July 2023", "the week before 9 July 2023"),
        ("- pottery\n- camping\n- painting", "pottery, camping, painting"),
        ("She enjoys:\n1. pottery\n2. swimming", "pottery, swimming"),
        ('"Unknown"', "Unknown"),
        ("", "Unknown"),
        ("Answer:", "Unknown"),
        ("The answer is 5", "The answer is 5"),
    ],
)
def test_postprocess(raw, expected):
    assert postprocess_answer(raw) == expected


def _client(reply):
    backend = ScriptedBackend(lambda request: reply)
    return LLMClient(backend), backend


def test_answer_request_shape_and_prompt_choice():
    client, backend = _client("Answer: 7 May 2023\nbecause the claim says so")
    res = answer_question(client, "When did Caroline go hiking?", CONTEXT, temporal=True,
                          namespace="conv-1", max_tokens=64)
    assert res.text == "7 May 2023"
    assert res.prompt_version == TEMPORAL_ANSWER.version and res.temporal is True
    assert res.raw.startswith("Answer: 7 May 2023")
    (req,) = backend.requests
    assert req.stage == "answer" and isinstance(req.output, TextSpec)
    assert req.max_tokens == 64 and req.namespace == "conv-1" and req.temperature == 0.0
    assert req.messages[0].content == TEMPORAL_ANSWER.system
    user = req.messages[1].content
    assert CONTEXT in user and "Question: When did Caroline go hiking?" in user
    assert user.index(CONTEXT) < user.index("Question:")

    client, backend = _client("hiking")
    res = answer_question(client, "What did Caroline do?", CONTEXT, temporal=False, question_date="2023/05/30")
    assert res.prompt_version == ANSWER.version
    assert backend.requests[0].messages[0].content == ANSWER.system
    assert "2023/05/30" in backend.requests[0].messages[1].content


def test_prompt_texts_carry_the_required_rules():
    for slot in ("person", "place", "object", "number", "date", "duration", "reason", "feeling",
                 "yes/no", "list"):
        assert slot in ANSWER.system
    assert "Unknown" in ANSWER.system and "Unknown" in TEMPORAL_ANSWER.system
    assert "the Sunday before 22 May 2023" in TEMPORAL_ANSWER.system
    assert "recorded" in TEMPORAL_ANSWER.system  # record date is not an event date
    assert ANSWER.version != TEMPORAL_ANSWER.version


def test_empty_reply_becomes_unknown_and_transport_errors_propagate():
    client, _ = _client("   ")
    res = answer_question(client, "Where?", CONTEXT, temporal=False)
    assert res.text == "Unknown" and res.raw == ""
    backend = ScriptedBackend(lambda request: TransportError("down", retryable=False))
    with pytest.raises(TransportError):
        answer_question(LLMClient(backend), "Where?", CONTEXT, temporal=False)


@pytest.mark.parametrize("question,temporal", TEMPORAL_QUESTIONS)
def test_use_temporal_prompt_is_the_shared_classifier(question, temporal):
    # One definition of "temporal" for the whole pipeline: the answer step must agree with it.
    assert use_temporal_prompt(question) is temporal
    assert use_temporal_prompt(question) == bool(is_temporal_question(question))


def test_unknown_constant():
    assert answer_mod.UNKNOWN == "Unknown"


@pytest.mark.parametrize("answer,question,expected", [
    ("The name of Nadia's cat is Pepper.", "What is the name of Nadia's cat?", "Pepper"),
    ("The answer is: June 2023", "When did Ruth get married?", "June 2023"),
    ("The class Owen started in the summer was pottery", "What class did Owen start in the summer?",
     "pottery"),
    ("Pepper is her name", "What is the name of the cat?", "Pepper is her name"),  # no restatement
    ("The person who looked after Pepper was Gloria", "Who looked after Pepper?",
     "The person who looked after Pepper was Gloria"),  # "person" is not a question word
    ("No.", "Would she?", "No."),
    ("The cat is", "What is the cat?", "The cat is"),  # nothing after the copula: unchanged
])
def test_strip_restated_question(answer, question, expected):
    assert strip_restated_question(answer, question) == expected


def test_answer_question_strips_a_restatement_only_when_asked():
    client, _ = _client("The name of the cat is Pepper.")
    assert answer_question(client, "What is the name of the cat?", CONTEXT, temporal=False).text == \
        "The name of the cat is Pepper."
    client, _ = _client("The name of the cat is Pepper.")
    assert answer_question(client, "What is the name of the cat?", CONTEXT, temporal=False,
                           strip_restatement=True).text == "Pepper"


def test_answer_settings_answer_applies_every_setting():
    # The one call Memory.answer, the demo and the runner share: a small-model setting must cut
    # the context to its first block, cap the tokens, use its own prompt and strip a restatement;
    # the full setting must pass the whole context with the question-chosen prompt.
    two_blocks = CONTEXT + "\n\n[2] Second block: Caroline painted a lake."
    small = answer_settings(ModelConfig(backend="llamacpp", model="smollm2-135m", answer_prompt="auto"))
    client, backend = _client("The name of the cat is Pepper.")
    res = small.answer(client, "What is the name of the cat?", two_blocks, namespace="u1")
    assert res.text == "Pepper" and res.prompt_version == SMALL_ANSWER.version
    (req,) = backend.requests
    user = req.messages[1].content
    assert CONTEXT in user and "Second block" not in user
    assert req.max_tokens == small.max_tokens <= 16 and req.namespace == "u1"

    full = answer_settings(ModelConfig(backend="openai", model="gpt-4o-mini", answer_prompt="auto"))
    client, backend = _client("7 May 2023")
    res = full.answer(client, "When did Caroline go hiking?", two_blocks, question_date="2023/06/01")
    assert res.prompt_version == TEMPORAL_ANSWER.version
    user = backend.requests[0].messages[1].content
    assert "Second block" in user and "2023/06/01" in user
