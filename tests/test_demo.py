"""The demo: model-free evidence by default, the small-model answer settings for the embedded
model, the evidence printed, and a score over every example question (issue 16.5).

The answer model is a scripted stand-in, so the test checks the demo's wiring and scoring,
not SmolLM2's answers (those are measured by running ``make demo``).
"""

from __future__ import annotations

import argparse
import re

from memcompile_local.adapters.scripted import HashEmbedder, ScriptedBackend
from memcompile_local.config import ModelConfig, PipelineConfig
from memcompile_local.data import example_conversation_path, load_locomo
from memcompile_local.cli.demo import RIGHT_F1, demo_config, run_demo
from memcompile_local.evidence.answer import SMALL_ANSWER_BLOCKS, SMALL_ANSWER_MAX_TOKENS, answer_settings
from memcompile_local.evidence.prompts import ANSWER, SMALL_ANSWER, TEMPORAL_ANSWER
from memcompile_local.memory import Memory

CONV = load_locomo(example_conversation_path())[0]
HEADER = re.compile(r"^\[\d+\] dia_id=", re.MULTILINE)


def _args(tmp_path, **over):
    base = dict(store=str(tmp_path / "demo.sqlite"), question=None, quiet=True, preset=None, config=None)
    base.update(over)
    return argparse.Namespace(**base)


def _knows_only_the_cat(request):
    # A stand-in model that answers one question right and every other one wrong.
    user = request.messages[-1].content
    return "Pepper" if "name of Nadia's cat" in user else "Unknown"


def test_the_demo_scores_every_example_question_and_shows_the_evidence(tmp_path, capsys):
    backend = ScriptedBackend(_knows_only_the_cat)
    cfg = PipelineConfig().replace(model={"backend": "scripted", "model": "scripted",
                                          "answer_prompt": "small"})
    assert run_demo(_args(tmp_path), cfg, backend=backend, embedder=HashEmbedder(dim=64)) == 0
    out = capsys.readouterr().out
    n = len(CONV.questions)
    assert f"score: 1/{n} answers right (token F1 >= {RIGHT_F1}), mean F1 " in out
    # Fewer than half right: one line says so and the evidence blocks of the misses follow.
    assert "is too small to answer most of these questions" in out
    for qa in CONV.questions:
        assert f"question: {qa.question}" in out and f"reference: {qa.answer}" in out
    # Model-free evidence by default: the only model calls are the answers, one per question,
    # each with the small prompt, few tokens and the first blocks of the context only.
    assert [r.stage for r in backend.requests] == ["answer"] * n
    for request in backend.requests:
        assert request.messages[0].content == SMALL_ANSWER.system
        assert request.max_tokens == SMALL_ANSWER_MAX_TOKENS
        assert len(HEADER.findall(request.messages[-1].content)) == SMALL_ANSWER_BLOCKS
    # The evidence the model read is printed (indented) under each question.
    assert "  evidence given to the model:\n    [1] dia_id=" in out


def test_a_model_that_gets_most_right_is_not_called_too_small(tmp_path, capsys):
    gold = {qa.question: qa.answer for qa in CONV.questions}

    def oracle(request):
        user = request.messages[-1].content
        return next(answer for question, answer in gold.items() if f"Question: {question}" in user)

    cfg = PipelineConfig().replace(model={"backend": "scripted", "model": "scripted"})
    run_demo(_args(tmp_path), cfg, backend=ScriptedBackend(oracle), embedder=HashEmbedder(dim=64))
    out = capsys.readouterr().out
    n = len(CONV.questions)
    right = int(re.search(rf"score: (\d+)/{n} answers right", out).group(1))
    assert right > n // 2  # the post-processing may shorten a reference-length answer or two
    assert "too small" not in out


def test_one_question_prints_its_answer_without_a_score(tmp_path, capsys):
    backend = ScriptedBackend(lambda request: "Pepper")
    cfg = PipelineConfig().replace(model={"backend": "scripted", "model": "scripted"})
    run_demo(_args(tmp_path, question="What is the cat called?"), cfg, backend=backend,
             embedder=HashEmbedder(dim=64))
    out = capsys.readouterr().out
    assert "question: What is the cat called?" in out and "answer:    Pepper" in out
    assert "score:" not in out
    # A scripted model is not a small model: the full answer prompt and the whole context.
    assert backend.requests[0].messages[0].content in (ANSWER.system, TEMPORAL_ANSWER.system)


def test_demo_config_and_answer_settings():
    args = argparse.Namespace(preset=None, config=None)
    cfg = demo_config(args, PipelineConfig())
    assert (cfg.evidence.anchor_selector, cfg.extraction.extractor) == ("fused", "rule")
    chosen = demo_config(argparse.Namespace(preset="A0", config=None), PipelineConfig())
    assert chosen.evidence.anchor_selector == "llm"  # a chosen path is kept ...
    assert chosen.extraction.on_failure == "rule" and chosen.model.max_tokens == 512  # ... with caps
    embedded = answer_settings(ModelConfig())  # llamacpp + smollm2-135m
    assert embedded.prompt is SMALL_ANSWER and embedded.max_blocks == SMALL_ANSWER_BLOCKS
    server = answer_settings(ModelConfig(backend="openai", model="qwen"))
    assert server.prompt is None and server.max_tokens == 2048 and server.max_blocks is None
    forced = answer_settings(ModelConfig(backend="openai", model="qwen", answer_prompt="small"))
    assert forced.prompt is SMALL_ANSWER
    full = answer_settings(ModelConfig(answer_prompt="full"))
    assert full.prompt is None


def test_memory_answer_uses_the_small_model_settings_for_the_embedded_model(tmp_path):
    # The config names the embedded model; a scripted stand-in serves its requests.
    backend = ScriptedBackend(lambda request: "Pepper")
    cfg = demo_config(argparse.Namespace(preset=None, config=None), PipelineConfig())
    with Memory(tmp_path / "m.sqlite", cfg, backend=backend, embedder=HashEmbedder(dim=64)) as mem:
        mem.add(CONV.namespace, CONV)
        ans = mem.answer(CONV.namespace, CONV.questions[0].question)
    (request,) = backend.requests
    assert request.messages[0].content == SMALL_ANSWER.system and ans.prompt_version == SMALL_ANSWER.version
    assert request.max_tokens == SMALL_ANSWER_MAX_TOKENS
    assert len(HEADER.findall(request.messages[-1].content)) == SMALL_ANSWER_BLOCKS
    assert len(HEADER.findall(ans.context.text)) == len(ans.context.packet_ids) > SMALL_ANSWER_BLOCKS
