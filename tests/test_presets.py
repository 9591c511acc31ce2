"""Composing presets: repeated names apply in order, conflicting ones are refused (issue 16.6)."""

from __future__ import annotations

import pytest

from memcompile_local.config import PipelineConfig, config_needs_llm
from memcompile_local.errors import ConfigError
from memcompile_local.pipeline.presets import apply_preset, apply_presets, split_preset_names


def test_model_free_then_a_view_keeps_the_model_free_path():
    cfg = apply_presets(["model-free", "view-raw"], PipelineConfig())
    assert cfg.evidence.view == "raw_packet"
    assert cfg.evidence.anchor_selector == "fused" and not config_needs_llm(cfg)
    assert apply_preset("model-free+view-raw", PipelineConfig()) == cfg
    assert apply_presets(["model-free+view-raw"], PipelineConfig()) == cfg


def test_an_ablation_then_a_layout_composes():
    cfg = apply_presets("A1+layout-flat", PipelineConfig())
    assert cfg.evidence.frontier == "none" and cfg.placement.layout == "flat"


@pytest.mark.parametrize("names", ["model-free+A1", "model-free+A0", "model-free+A4"])
def test_a_preset_that_turns_the_llm_back_on_after_model_free_is_refused(names):
    with pytest.raises(ConfigError) as err:
        apply_presets(names, PipelineConfig())
    msg = str(err.value)
    later = names.split("+")[1]
    assert "'model-free'" in msg and f"'{later}'" in msg and "LLM" in msg


@pytest.mark.parametrize("names, field", [
    ("view-raw+view-representative", "evidence.view"),
    ("A5+layout-bounded", "placement.layout"),
    ("layout-flat+A1", "placement.layout"),
    ("A1+A4", "evidence.frontier"),
    ("model-free+A2", "evidence.anchor_selector"),
])
def test_presets_that_undo_an_earlier_one_are_refused_naming_both(names, field):
    first, second = names.split("+")
    with pytest.raises(ConfigError) as err:
        apply_presets(names, PipelineConfig())
    msg = str(err.value)
    assert f"'{first}'" in msg and f"'{second}'" in msg and field in msg


def test_repeating_the_same_value_is_not_a_conflict():
    assert apply_presets("A5+layout-flat", PipelineConfig()).placement.layout == "flat"


def test_unknown_names_inside_a_composition_are_named():
    with pytest.raises(ConfigError, match="'nope'"):
        split_preset_names(["A1", "view-raw+nope"])
