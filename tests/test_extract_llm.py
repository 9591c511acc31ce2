"""LLM descriptor extraction end to end with the scripted backend (no model files)."""

from __future__ import annotations

import json
import re

import pytest

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.address.extract_llm import LLMExtractor, PacketExtractionError, clean_claims
from memcompile_local.address.prompts import (
    COMBINED_PROMPT_VERSION,
    FACT_PROMPT_VERSION,
    METADATA_PROMPT_VERSION,
)
from memcompile_local.language.tokens import count_tokens
from memcompile_local.config import ExtractionConfig
from memcompile_local.errors import OutputValidationError, TransportError
from memcompile_local.llm.client import LLMClient
from memcompile_local.types import SourcePacket, content_sha256

TIME = "1:56 pm on 8 May, 2023"


def packet(pid: str, speaker: str, text: str, *, ordinal: int, caption: str | None = None) -> SourcePacket:
    return SourcePacket(namespace="chat", packet_id=pid, ordinal=ordinal, session_index=1,
                        session_id="session_1", session_time=TIME, speaker=speaker, content=text,
                        image_caption=caption, sha256=content_sha256(text, caption))


P1 = packet("S1:1", "Alex", "Hey Sam! I adopted a beagle named Pepper yesterday.", ordinal=0,
            caption="a photo of a small dog on a rug")
P2 = packet("S1:2", "Sam", "So cute! Sadly I can't join the hike next Saturday.", ordinal=1)
P3 = packet("S1:3", "Alex", "No worries, take care!", ordinal=2)
ITEMS = [(P1, None), (P2, P1), (P3, P2)]

FACTS = {
    "S1:1": ["Alex adopted a beagle named Pepper.", "  Alex adopted a beagle named Pepper. ",
             "- Alex shared a photo of a small dog on a rug.", ""],
    "S1:2": ["Sam cannot join the hike next Saturday."],
    "S1:3": [],
}


def meta(people, keywords, time, *, event_type="occurrence", predicate="adopt", event_time="",
         polarity="positive", confidence=0.9, subject=None, interaction="garbage") -> str:
    return json.dumps({
        "people": people, "keywords": keywords, "time": [time, interaction],
        "needs_profile_extraction": False,
        "event": {"subject_people": subject if subject is not None else people[:1], "predicate": predicate,
                  "focus_terms": ["beagle", "Beagle"], "goal_context_terms": [],
                  "event_type": event_type, "event_time": event_time, "polarity": polarity,
                  "confidence": confidence},
    })


METADATA = {
    "Alex adopted a beagle named Pepper.": meta(
        ["Alex", "he", "Alex"], ["beagle", "Beagle", "Alex", "yesterday", "Pepper the dog", "pet adoption",
                                 "dog", "puppy"], "yesterday", predicate="Adopted "),
    "Alex shared a photo of a small dog on a rug.": meta(
        ["Alex"], ["small dog", "rug", "photo", "carpet", "pet", "living room", "floor"], "",
        predicate="share", confidence=1.7),
    "Sam cannot join the hike next Saturday.": meta([], ["hike"], "", event_type="plan",
                                                   predicate="join to", polarity="negative"),
}


def dialogue_id(request) -> str:
    """The id of the request's current turn, found by its quoted text (requests carry no ids)."""
    m = re.search(r"^Current turn:\n(?:.*\n)*?text:\n> (.*)$", request.messages[-1].content, re.MULTILINE)
    assert m, "fact/extract requests quote the current turn's text"
    ids = [p.packet_id for p in (P1, P2, P3) if p.content == m.group(1)]
    assert len(ids) == 1, m.group(1)
    return ids[0]


def statement(request) -> str:
    m = re.search(r"^Statement: (.*)$", request.messages[-1].content, re.MULTILINE)
    assert m, "metadata requests start with the statement"
    return m.group(1)


def answer(request):
    if request.stage == "fact":
        return json.dumps({"facts": FACTS[dialogue_id(request)]})
    if request.stage == "metadata":
        return METADATA[statement(request)]
    if request.stage == "extract":
        claims = []
        for fact in FACTS[dialogue_id(request)]:
            key = " ".join(fact.split()).lstrip("- ")
            if key in METADATA:
                claims.append({"fact": fact, **json.loads(METADATA[key])})
        return json.dumps({"claims": claims})
    return None


def make(script=answer, **kw):
    backend = ScriptedBackend(script, **({"model": kw.pop("model")} if "model" in kw else {}))
    return backend, LLMExtractor(LLMClient(backend), **kw)


def test_two_step_end_to_end():
    backend, ex = make()
    results = ex.extract(ITEMS)
    # one batched backend call for the facts, one for the metadata
    assert backend.generate_calls == 2
    stages = [r.stage for r in backend.requests]
    assert stages == ["fact"] * 3 + ["metadata"] * 3
    assert all(r.namespace == "chat" and r.temperature == 0.0 for r in backend.requests)
    assert [r.prompt_version for r in backend.requests] == [FACT_PROMPT_VERSION] * 3 + [METADATA_PROMPT_VERSION] * 3

    fact_p2 = backend.requests[1].messages[-1].content
    assert "Previous turn:\nAlex:\n> Hey Sam! I adopted a beagle named Pepper yesterday." in fact_p2
    assert "S1:2" not in fact_p2 and "speaker: Sam" in fact_p2  # no ids in extraction requests
    assert f"session time: {TIME} (date 2023-05-08)" in fact_p2
    fact_p1 = backend.requests[0].messages[-1].content
    assert "Previous turn: (none)" in fact_p1
    assert "image caption:\n> a photo of a small dog on a rug" in fact_p1
    meta_req = backend.requests[3].messages[-1].content
    assert meta_req.startswith("Statement: Alex adopted a beagle named Pepper.")
    assert f"Session time: {TIME}" in meta_req and "Alex:" in meta_req

    d1, d2, d3 = results
    assert [d.text for d in d1] == ["Alex adopted a beagle named Pepper.",
                                    "Alex shared a photo of a small dog on a rug."]
    assert [d.descriptor_id for d in d1] == ["chat:S1:1:0", "chat:S1:1:1"]
    assert [d.claim_index for d in d1] == [0, 1]
    assert d3 == []

    a = d1[0]
    assert a.people == ("Alex",)
    # duplicates, the person and the bare time expression are dropped
    assert a.keywords == ("beagle", "Pepper the dog", "pet adoption", "dog", "puppy")
    # seven clean keywords are capped at config.max_keywords = 5, in the model's order
    assert d1[1].keywords == ("small dog", "rug", "photo", "carpet", "pet")
    assert a.event_time == "2023-05-07" and a.event.event_time == "2023-05-07"
    assert a.interaction_time == "2023-05-08"  # never the model's copy
    assert a.event.predicate == "adopted"
    assert a.event.focus_terms == ("beagle",)
    assert a.n_tokens == count_tokens(a.text) and a.speaker == "Alex" and a.session_time == TIME
    assert not a.negated
    assert d1[1].event.confidence == 1.0  # clamped

    (s,) = d2
    assert s.descriptor_id == "chat:S1:2:0"
    assert s.negated and s.event.polarity == "negative" and s.event.event_type == "plan"
    assert s.people == ("Sam",)  # the speaker named in the claim is added
    # the model left the time empty: it is read from the claim, looking forward for a plan
    assert s.event_time == "the Saturday after 2023-05-08"
    assert s.event.predicate == "join"


def test_combined_mode_single_call_per_turn():
    backend, ex = make(combined=True)
    results = ex.extract(ITEMS)
    assert backend.generate_calls == 1
    assert [r.stage for r in backend.requests] == ["extract"] * 3
    assert all(r.prompt_version == COMBINED_PROMPT_VERSION for r in backend.requests)
    assert "Previous turn:\nAlex:" in backend.requests[1].messages[-1].content
    _, two_step = make()
    expected = two_step.extract(ITEMS)
    assert [[d.text for d in r] for r in results] == [[d.text for d in r] for r in expected]
    assert [[d.keywords for d in r] for r in results] == [[d.keywords for d in r] for r in expected]
    assert [[d.event_time for d in r] for r in results] == [[d.event_time for d in r] for r in expected]
    assert ex.descriptor_set != two_step.descriptor_set


def test_config_selects_combined_mode_and_keyword_cap():
    _, ex = make(config=ExtractionConfig(combined_call=True, max_keywords=2))
    assert ex.combined
    results = ex.extract([(P1, None)])
    assert all(len(d.keywords) <= 2 for d in results[0])
    assert results[0][0].keywords == ("beagle", "Pepper the dog")


def test_descriptor_set_names_prompts_and_model():
    _, a = make(model="m1")
    _, b = make(model="m2")
    assert FACT_PROMPT_VERSION in a.descriptor_set and METADATA_PROMPT_VERSION in a.descriptor_set
    assert a.descriptor_set != b.descriptor_set
    _, c = make(model="m1")
    assert a.descriptor_set == c.descriptor_set


def test_empty_turn_needs_no_metadata_call():
    backend, ex = make()
    assert ex.extract([(P3, P2)]) == [[]]
    assert backend.generate_calls == 1


def test_invalid_fact_output_raises_naming_the_packet():
    def script(request):
        if request.stage == "fact" and dialogue_id(request) == "S1:2":
            return "I cannot produce JSON today"
        return answer(request)

    backend, ex = make(script)
    with pytest.raises(PacketExtractionError) as info:
        ex.extract(ITEMS)
    err = info.value
    assert err.packet_ids == ("S1:2",)
    assert err.failures[0].stage == "fact"
    assert isinstance(err.failures[0].error, OutputValidationError)
    assert "chat/S1:2" in str(err)
    # the packets that succeeded are still handed back
    assert [d.descriptor_id for d in err.partial[0]] == ["chat:S1:1:0", "chat:S1:1:1"]
    assert err.partial[1] is None and err.partial[2] == []


def test_invalid_metadata_output_fails_that_packet_only():
    def script(request):
        if request.stage == "metadata" and "small dog" in statement(request):
            return json.dumps({"people": []})  # missing required fields
        return answer(request)

    _, ex = make(script)
    with pytest.raises(PacketExtractionError) as info:
        ex.extract(ITEMS)
    err = info.value
    assert err.packet_ids == ("S1:1",) and err.failures[0].stage == "metadata"
    assert err.partial[0] is None
    assert [d.text for d in err.partial[1]] == ["Sam cannot join the hike next Saturday."]


def test_transport_failure_names_every_packet_of_the_batch():
    def script(request):
        if request.stage == "fact":
            return TransportError("server down", retryable=True)
        return None

    _, ex = make(script)
    with pytest.raises(PacketExtractionError) as info:
        ex.extract(ITEMS)
    assert info.value.packet_ids == ("S1:1", "S1:2", "S1:3")
    assert all(isinstance(f.error, TransportError) for f in info.value.failures)


def test_cached_rerun_makes_no_backend_call_and_is_identical():
    backend, ex = make()
    first = ex.extract(ITEMS)
    calls = backend.generate_calls
    second = ex.extract(ITEMS)
    assert second == first
    assert backend.generate_calls == calls


def test_list_bounds_reach_the_schema():
    """A grammar-constrained model must be able to stop: every list in the schemas is bounded."""
    from memcompile_local.address.schemas import ClaimMetadata, CombinedExtraction, FactList, inline_schema

    def arrays(node):
        if isinstance(node, dict):
            if node.get("type") == "array":
                yield node
            for v in node.values():
                yield from arrays(v)
        elif isinstance(node, list):
            for v in node:
                yield from arrays(v)

    for model in (FactList, ClaimMetadata, CombinedExtraction):
        schema = inline_schema(model)
        assert "$ref" not in json.dumps(schema)
        assert all("maxItems" in a for a in arrays(schema)), model.__name__


def test_clean_claims():
    assert clean_claims(["1. A cat.", "a cat", "", "  ", 7, "* Two  spaces "]) == ["A cat.", "Two spaces"]
    assert len(clean_claims([f"fact {i}" for i in range(40)])) == 16
