"""End to end on the embedded default models: SmolLM2-135M through llama.cpp and MiniLM.

The answer's quality is not asserted (a 135M model); the test checks that every LLM stage of
the full path (intent, scheduler, frontier, answer) ran on the real model, that the outputs
were validated and mapped back to packets, and that a second ask is served from the cache.
"""

from __future__ import annotations

import os

import pytest

from memcompile_local.config import PipelineConfig
from memcompile_local.data import example_conversation_path, load_locomo
from memcompile_local.memory import Memory

pytestmark = pytest.mark.slow


def test_compile_and_answer_with_the_embedded_default(tmp_path):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("sentence_transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    conv = load_locomo(example_conversation_path())[0]
    # Rule descriptors: SmolLM2-135M cannot extract usable claims (see the demo); every
    # query-time stage runs on the model. Short completions keep the test quick.
    cfg = PipelineConfig().replace(extraction={"extractor": "rule"}, model={"max_tokens": 96})
    with Memory(tmp_path / "m.sqlite", cfg) as mem:
        mem.add(conv.namespace, conv)
        ans = mem.answer(conv.namespace, conv.questions[0].question)
        ctx = ans.context
        packet_ids = {p.packet_id for p in mem.store.packets(conv.namespace)}
        assert len(ctx.anchors) == 10 and set(ctx.packet_ids) <= packet_ids
        assert len(set(ctx.packet_ids)) == len(ctx.packet_ids) <= 12
        assert isinstance(ans.text, str) and ans.text
        totals = mem.client.totals()
        assert {"intent", "schedule", "frontier", "answer"} <= set(totals)
        assert all(v["prompt"] > 0 for v in totals.values())
        calls = mem.client.stats()["backend_requests"]
        again = mem.answer(conv.namespace, conv.questions[0].question)
        assert again.text == ans.text and mem.client.stats()["backend_requests"] == calls
