"""Bounded frontier append rule (Eqs. 12-14) and the pipeline-path presets."""

from __future__ import annotations

import pytest

from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.evidence.frontier import bounded_frontier, frontier_pool
from memcompile_local.pipeline.presets import (
    PRESET_DESCRIPTIONS,
    PRESETS,
    apply_preset,
    apply_presets,
    describe_preset,
)

A0 = ["a1", "a2", "a3"]


def test_appends_first_two_new_packets_of_the_top_five():
    ordering = ["a2", "d1", "a1", "d2", "d3", "d4"]
    assert bounded_frontier(A0, ordering) == ("a1", "a2", "a3", "d1", "d2")


def test_only_the_rank_window_is_examined():
    # d1 sits at position 6: outside K_R = 5, so only d0 is appended.
    ordering = ["a1", "a2", "d0", "a3", "a1x", "d1"]
    assert bounded_frontier(A0, ordering, k_rank=3) == ("a1", "a2", "a3", "d0")
    assert bounded_frontier(A0, ordering, k_rank=5) == ("a1", "a2", "a3", "d0", "a1x")


def test_no_new_packet_in_window_keeps_anchors_unchanged():
    assert bounded_frontier(A0, ["a3", "a2", "a1", "d1"], k_rank=3) == tuple(A0)
    assert bounded_frontier(A0, []) == tuple(A0)


def test_append_cap_and_zero_cap():
    ordering = ["d1", "d2", "d3", "d4", "d5"]
    assert bounded_frontier(A0, ordering, k_append=0) == tuple(A0)
    assert bounded_frontier(A0, ordering, k_append=1) == (*A0, "d1")
    assert bounded_frontier(A0, ordering, k_rank=5, k_append=4) == (*A0, "d1", "d2", "d3", "d4")
    assert bounded_frontier(A0, ordering, k_rank=1, k_append=3) == (*A0, "d1")


def test_anchor_order_is_preserved_even_when_the_ordering_disagrees():
    out = bounded_frontier(["x", "y", "z"], ["z", "y", "n1", "x", "n2"])
    assert out[:3] == ("x", "y", "z") and out[3:] == ("n1", "n2")


def test_repeated_ids_in_the_ordering_are_appended_once():
    assert bounded_frontier(A0, ["d1", "d1", "d2"], k_rank=3) == (*A0, "d1", "d2")


def test_negative_budgets_rejected():
    with pytest.raises(ValueError):
        bounded_frontier(A0, [], k_rank=-1)


def test_frontier_pool_is_anchor_first_union_by_id():
    assert frontier_pool(["a1", "a2"], ["d1", "a2", "d2", "d1"]) == ["a1", "a2", "d1", "d2"]
    assert frontier_pool([], ["d1"]) == ["d1"]


# ---------------------------------------------------------------------------------- presets


def test_ablation_presets_set_the_paths_of_table_2():
    base = PipelineConfig()
    expect = {
        "A0": ("llm", "llm", "both", "bounded", True),
        "A1": ("llm", "none", "both", "bounded", True),
        "A2": ("mmr", "none", "both", "bounded", True),
        "A3": ("mmr", "llm", "both", "bounded", True),
        "A4": ("llm", "llm", "cells", "bounded", True),
        "A5": ("llm", "llm", "bm25", "flat", True),
        "A6": ("llm", "llm", "both", "bounded", False),
        "A7": ("dense", "none", "both", "bounded", True),
    }
    for name, (anchor, frontier, channels, layout, intent) in expect.items():
        cfg = apply_preset(name, base)
        got = (cfg.evidence.anchor_selector, cfg.evidence.frontier, cfg.routing.channels,
               cfg.placement.layout, cfg.extraction.use_intent)
        assert got == (anchor, frontier, channels, layout, intent), name
        # Nothing else moves: model and numeric constants stay.
        assert cfg.model == base.model and cfg.evidence.k0 == base.evidence.k0


def test_ablations_reset_to_the_full_path_and_views_compose():
    cfg = apply_presets("A2+view-raw", PipelineConfig())
    assert cfg.evidence.anchor_selector == "mmr" and cfg.evidence.view == "raw_packet"
    cfg = apply_preset("A6", cfg)  # a later ablation replaces the earlier path, keeps the view
    assert cfg.evidence.anchor_selector == "llm" and cfg.extraction.use_intent is False
    assert cfg.evidence.view == "raw_packet"
    assert apply_preset("view-representative", PipelineConfig()).evidence.view == "representative_claim"
    for layout in ("flat", "sequential", "session", "entity"):
        assert apply_preset(f"layout-{layout}", PipelineConfig()).placement.layout == layout


def test_model_free_preset_needs_no_llm_before_answering():
    cfg = apply_preset("model-free", PipelineConfig())
    assert cfg.extraction.extractor == "rule" and cfg.extraction.intent_source == "rule"
    assert cfg.evidence.anchor_selector == "fused" and cfg.evidence.frontier == "none"


def test_unknown_preset_lists_the_names():
    with pytest.raises(ConfigError) as err:
        apply_preset("A9", PipelineConfig())
    assert "A0" in str(err.value) and "model-free" in str(err.value)
    with pytest.raises(ConfigError):
        apply_presets(["A1", "nope"], PipelineConfig())
    with pytest.raises(ConfigError):
        describe_preset("nope")
    assert set(PRESET_DESCRIPTIONS) == set(PRESETS)
