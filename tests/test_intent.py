"""Query intent: cue detection, the rule-based intent and the model-read intent (scripted backend)."""

from __future__ import annotations

import json

import pytest

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.address.intent import (
    intent_request,
    llm_intent,
    llm_intent_many,
    needs_attribute,
    rule_intent,
)
from memcompile_local.address.prompts import INTENT_PROMPT_VERSION
from memcompile_local.errors import OutputValidationError
from memcompile_local.llm.client import LLMClient

PEOPLE = ("Caroline", "Melanie")


@pytest.mark.parametrize("question, attribute", [
    ("What is Caroline's favorite hobby?", True),
    ("What is Melanie's job?", True),
    ("Would Melanie likely enjoy a pottery class?", True),
    ("What is Caroline's relationship status?", True),
    ("What are Caroline's long-term goals?", True),
    ("Where did Melanie go camping?", False),
    ("When did Caroline buy the necklace?", False),
])
def test_attribute_cues(question, attribute):
    assert needs_attribute(question) is attribute


def test_rule_intent_fields():
    intent = rule_intent("When did Mel paint the lake sunrise in 2022?", known_people=PEOPLE)
    assert intent.people == ("Melanie",)
    assert intent.keywords[0] == "lake sunrise"
    assert "mel" not in intent.keywords and all("2022" not in k for k in intent.keywords)
    assert intent.time == "2022"
    assert intent.is_temporal and not intent.need_attribute
    assert intent.question == "When did Mel paint the lake sunrise in 2022?"


def test_rule_intent_people_month_and_attribute():
    intent = rule_intent("What did Jon Snow and Caroline buy in May 2023?", known_people=PEOPLE)
    assert intent.people == ("Caroline", "Jon Snow")
    assert intent.time == "2023-05"
    assert not intent.is_temporal  # asks what, not when
    intent = rule_intent("What is Caroline's favorite hobby?", known_people=PEOPLE)
    assert intent.people == ("Caroline",) and intent.need_attribute
    assert intent.keywords == ("favorite hobby",)
    assert intent.time is None
    intent = rule_intent("Would Melanie likely enjoy a pottery class?", known_people=PEOPLE)
    assert "pottery class" in intent.keywords and intent.need_attribute


def test_rule_intent_relative_time_is_kept_as_written():
    intent = rule_intent("What did Caroline do last weekend?", known_people=PEOPLE)
    assert intent.time == "last weekend"


def test_rule_intent_is_deterministic():
    q = "Which books did Melanie read at the beach last summer?"
    assert rule_intent(q, known_people=PEOPLE) == rule_intent(q, known_people=PEOPLE)


def _client(script):
    backend = ScriptedBackend(script)
    return backend, LLMClient(backend)


MODEL_ANSWER = json.dumps({
    "need_attribute": True,
    "people": ["Mel", "she", "Jon Snow"],
    "keywords": ["Pottery Class", "pottery class", "Melanie", "last week", "clay", "kiln", "glaze", "studio"],
    "time": "last week",
})


def test_llm_intent_cleans_model_output_and_sends_only_the_question():
    backend, client = _client({("intent", "pottery"): MODEL_ANSWER})
    q = "Did Melanie like the pottery class?"
    intent = llm_intent(client, q, namespace="conv-1", known_people=PEOPLE)
    assert intent.people == ("Melanie", "Jon Snow")  # nickname mapped, pronoun dropped
    assert intent.keywords == ("Pottery Class", "clay", "kiln", "glaze", "studio")
    assert intent.time == "last week"
    assert intent.need_attribute
    assert intent.is_temporal  # no temporal cue, but the model found a time constraint
    (request,) = backend.requests
    assert request.stage == "intent" and request.prompt_version == INTENT_PROMPT_VERSION
    assert request.namespace == "conv-1" and request.temperature == 0.0
    assert request.messages[-1].content == f"Question: {q}"
    assert "Caroline" not in request.messages[-1].content


def test_llm_intent_null_time_and_absolute_normalization():
    answers = {
        ("intent", "necklace"): json.dumps({"need_attribute": False, "people": ["Caroline"],
                                            "keywords": ["necklace"], "time": None}),
        ("intent", "concert"): json.dumps({"need_attribute": False, "people": [],
                                           "keywords": ["concert"], "time": "May 2023"}),
    }
    backend, client = _client(answers)
    necklace, concert = llm_intent_many(client, ["When did Caroline get the necklace?",
                                                 "Who went to the concert?"], known_people=PEOPLE)
    assert backend.generate_calls == 1  # one batched call
    assert necklace.time is None and necklace.is_temporal and necklace.people == ("Caroline",)
    assert concert.time == "2023-05" and concert.is_temporal
    assert concert.question == "Who went to the concert?"


def test_llm_intent_falls_back_to_rules_or_raises():
    _, client = _client({("intent", ""): "no json here"})
    q = "What is Caroline's favorite hobby?"
    assert llm_intent(client, q, known_people=PEOPLE) == rule_intent(q, known_people=PEOPLE)
    with pytest.raises(OutputValidationError):
        llm_intent(client, q, known_people=PEOPLE, fallback=False)


def test_intent_request_is_stable():
    assert intent_request("Where?").identity() == intent_request("Where?").identity()
