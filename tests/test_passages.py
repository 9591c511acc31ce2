"""Passages of long turns (research/passages.py and research/dropped.py; the package's
``FusionConfig.passage_words`` until issue 49 removed it, measured and not shipped).

A turn longer than an embedder's window is embedded as passages and scores by its best ones;
the selected unit stays the turn. The embedder here reads only its first WINDOW words (as a
sentence transformer reads its first 256 word pieces), so a fact deep in a long reply is out
of reach of the turn's own vector and found only through its passage.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))

from dropped import packet_channel_with_passages, passage_model_id, passage_vectors  # noqa: E402
from passages import best_passage_scores, long_turn_passages, sentences, split_passages  # noqa: E402
from memcompile_local.adapters.scripted import HashEmbedder  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.llm.client import LLMClient, NoModelBackend  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.store import MemoryStore  # noqa: E402

pytestmark = pytest.mark.research

WINDOW = 12


class WindowEmbedder(HashEmbedder):
    """The hash embedder over each text's first ``WINDOW`` words only."""

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "window": WINDOW}

    def embed(self, texts: Sequence[str]) -> Any:
        return super().embed([" ".join(t.split()[:WINDOW]) for t in texts])


# A long assistant reply whose one fact about the sourdough starter sits in its last sentences.
FILLER = ("Here is a plan for the week. Monday is for stretching and a short walk. Tuesday adds "
          "light weights for the arms and shoulders. Wednesday rests the legs with an easy swim. "
          "Thursday repeats Tuesday with a little more weight. Friday is a long walk by the river. ")
LONG_REPLY = FILLER + "About your kitchen: the sourdough starter Pip lives in the blue jar on the fridge."
SESSIONS = [
    {"time": "2024-03-01 09:00", "id": "s1", "turns": [
        {"speaker": "user", "text": "Can you plan my exercise week?", "id": "t1"},
        {"speaker": "assistant", "text": LONG_REPLY, "id": "t2"},
        {"speaker": "user", "text": "Thanks, the river walk sounds good.", "id": "t3"},
    ]},
    {"time": "2024-03-02 09:00", "id": "s2", "turns": [
        {"speaker": "user", "text": "I bought a new jar of honey for the kitchen.", "id": "u1"},
        {"speaker": "assistant", "text": "Honey keeps for years in a closed jar.", "id": "u2"},
    ]},
]
QUESTION = "Where does the sourdough starter Pip live?"


def test_a_short_text_is_one_passage_and_a_long_one_is_cut_on_sentences():
    assert split_passages("Three short words.", 5, 1) == ("Three short words.",)
    assert long_turn_passages("Three short words.", 5, 1) == ()
    text = "One two three. Four five six. Seven eight nine. Ten eleven twelve."
    passages = split_passages(text, 6, 3)
    assert passages == ("One two three. Four five six.", "Four five six. Seven eight nine.",
                        "Seven eight nine. Ten eleven twelve.")
    assert all(len(p.split()) <= 6 for p in passages)
    # Every sentence is in some passage, in order, and the cut is the same every time.
    assert all(any(s in p for p in passages) for s in sentences(text))
    assert split_passages(text, 6, 3) == passages
    # A sentence longer than a window is cut into runs of words; no overlap is allowed.
    assert split_passages("a b c d e f g", 3, 0) == ("a b c", "d e f", "g")
    with pytest.raises(ValueError):
        split_passages(text, 4, 4)


def test_pooled_passage_scores_by_hand():
    cos = np.asarray([0.2, 0.9, 0.5, 0.4, 0.1])
    owner = np.asarray([0, 0, 0, 2, 2])
    assert best_passage_scores(cos, owner, 3, pool="max").tolist() == [0.9, 0.0, 0.4]
    assert np.allclose(best_passage_scores(cos, owner, 3, pool="top2"), [(0.9 + 0.5) / 2, 0.0, (0.4 + 0.1) / 2])
    assert np.allclose(best_passage_scores(np.asarray([0.3]), np.asarray([1]), 2, pool="top2"), [0.0, 0.3])


def memory(store: MemoryStore) -> Memory:
    cfg = apply_preset("model-free", PipelineConfig())
    # The dense channel alone: no lexical or answer-type score, and no learned ranker (its own
    # features read BM25 of the raw turn).
    cfg = cfg.replace(fusion={"lexical_weight": 0.0, "answer_type_weight": 0.0, "ranker": "weighted"})
    return Memory(store, cfg, embedder=WindowEmbedder(dim=256), client=LLMClient(NoModelBackend(), store))


def dense_best(mem: Memory, ns: str, passages) -> str:
    """The turn the packet channel scores best for QUESTION, with ``passages`` (or without: None)."""
    view = mem.view(ns)
    vec = np.asarray(mem.embedder.embed([QUESTION]), dtype=np.float32)[0]
    scores = packet_channel_with_passages(view.fusion, vec, passages, "max")
    return view.packets[int(np.argmax(scores))].packet_id


def test_a_fact_deep_in_a_long_reply_is_found_through_its_passage(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    mem = memory(store)
    mem.add("u", SESSIONS)
    view = mem.view("u")
    assert dense_best(mem, "u", None) != "t2"  # the reply's own vector never read its last sentence
    passages = passage_vectors(store, "u", mem.embedder, list(view.packets), WINDOW, 3)
    assert passages is not None and set(passages[1].tolist()) == {1}  # only the long reply has passages
    assert dense_best(mem, "u", passages) == "t2"  # the turn is selected, not a passage
    # The vectors are stored once: a second call embeds nothing and reads the same rows.
    calls: list[int] = []
    real = mem.embedder.embed
    mem.embedder.embed = lambda texts: calls.append(len(texts)) or real(texts)  # type: ignore[method-assign]
    again = passage_vectors(store, "u", mem.embedder, list(view.packets), WINDOW, 3)
    assert calls == [] and np.array_equal(again[0], passages[0]) and np.array_equal(again[1], passages[1])
    assert passage_model_id(mem.embedder).endswith("|passage-v1")
    store.close()


def test_passages_are_not_package_config():
    from memcompile_local.config import FusionConfig

    fields = set(FusionConfig.__dataclass_fields__)
    assert not fields & {"passage_words", "passage_overlap_words", "passage_pool"}
