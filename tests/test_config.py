"""Configuration values are checked: types, allowed values, ranges and unknown keys."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from memcompile_local.config import (
    EvidenceConfig,
    PipelineConfig,
    RoutingConfig,
    config_needs_llm,
    validate_config,
)
from memcompile_local.errors import ConfigError
from memcompile_local.pipeline.presets import PRESETS, apply_preset


def _error(data, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        PipelineConfig.from_dict(data, **kw)
    return str(info.value)


def test_defaults_round_trip_and_a_partial_dict_keeps_the_other_defaults():
    cfg = PipelineConfig()
    assert PipelineConfig.from_dict(cfg.to_dict()) == cfg
    assert PipelineConfig.from_dict(None) == PipelineConfig.from_dict({}) == cfg
    part = PipelineConfig.from_dict({"evidence": {"k0": 5, "anchor_selector": "fused"}})
    assert part.evidence == dataclasses.replace(EvidenceConfig(), k0=5, anchor_selector="fused")
    assert part.routing == RoutingConfig() and part.model == cfg.model
    assert isinstance(part.evidence, EvidenceConfig)


def test_an_unknown_choice_names_the_field_and_the_allowed_values():
    msg = _error({"evidence": {"anchor_selector": "banana"}}, source="my.yaml")
    assert msg.startswith("my.yaml: ")
    assert "evidence.anchor_selector" in msg and "'banana'" in msg
    for allowed in ("llm", "mmr", "normalized", "pursuit", "dense", "fused"):
        assert f"'{allowed}'" in msg
    assert "placement.layout" in _error({"placement": {"layout": "spiral"}})
    assert "routing.channels" in _error({"routing": {"channels": "all"}})


@pytest.mark.parametrize("section, name, bad, good", [
    ("evidence", "k0", 0, 1),
    ("evidence", "k_append", -1, 0),
    ("evidence", "max_schedule_pool", 0, None),
    ("routing", "bm25_b", 1.5, 1.0),
    ("routing", "redundancy", -0.1, 0.0),
    ("routing", "cell_budget", -1, 0),
    ("placement", "token_cap", 0, 1),
    ("placement", "beta", -1.4, 0.0),
    ("model", "timeout_s", 0, 0.5),
    ("model", "concurrency", 0, 1),
    ("extraction", "max_keywords", -1, 0),
    ("extraction", "max_rule_claims", 0, 1),
])
def test_ranges_fixed_by_the_method_are_enforced(section, name, bad, good):
    msg = _error({section: {name: bad}})
    assert f"{section}.{name}" in msg and repr(bad) in msg
    cfg = PipelineConfig.from_dict({section: {name: good}})
    assert getattr(getattr(cfg, section), name) == good


def test_types_are_checked_with_json_strictness():
    assert "evidence.k0" in _error({"evidence": {"k0": "10"}})  # no string for a number
    assert "extraction.use_intent" in _error({"extraction": {"use_intent": 1}})  # no 1 for true
    assert "routing.seeds" in _error({"routing": {"seeds": 8.5}})
    # A whole number is a valid float.
    cfg = PipelineConfig.from_dict({"placement": {"beta": 2}})
    assert cfg.placement.beta == 2.0 and isinstance(cfg.placement.beta, float)
    # Several bad values are all reported at once.
    msg = _error({"evidence": {"k0": 0, "frontier": "sometimes"}})
    assert "evidence.k0" in msg and "evidence.frontier" in msg


def test_unknown_sections_and_fields_list_the_known_names():
    msg = _error({"evidense": {}})
    assert "evidense" in msg and "'evidence'" in msg and "'routing'" in msg
    msg = _error({"evidence": {"k_zero": 3}})
    assert "evidence.k_zero" in msg and "'k0'" in msg and "'frontier'" in msg
    assert "evidence" in _error({"evidence": 3})  # a section must be a mapping
    assert "mapping" in _error(["evidence"])  # so must the whole config


def test_a_yaml_file_is_checked_the_same_way(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("evidence:\n  anchor_selector: fused\n  frontier: none\nrouting:\n  seeds: 4\n")
    cfg = PipelineConfig.from_dict(yaml.safe_load(path.read_text()), source=str(path))
    assert (cfg.evidence.anchor_selector, cfg.evidence.frontier, cfg.routing.seeds) == ("fused", "none", 4)
    path.write_text("evidence:\n  view: full\n")
    assert _error(yaml.safe_load(path.read_text()), source=str(path)).startswith(f"{path}: ")


def test_replace_and_configs_built_in_code_are_validated():
    cfg = PipelineConfig()
    assert cfg.replace(evidence={"k0": 3}).evidence.k0 == 3
    with pytest.raises(ConfigError, match="evidence.frontier"):
        cfg.replace(evidence={"frontier": "sometimes"})
    with pytest.raises(ConfigError, match="unknown config section 'evidense'"):
        cfg.replace(evidense={"k0": 3})
    built = PipelineConfig(evidence=EvidenceConfig(anchor_selector="banana"))  # dataclasses do not check
    with pytest.raises(ConfigError, match="evidence.anchor_selector"):
        validate_config(built)
    assert validate_config(cfg) is cfg


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_gives_a_valid_config(name):
    cfg = apply_preset(name, PipelineConfig())
    assert validate_config(cfg) is cfg
    assert PipelineConfig.from_dict(cfg.to_dict()) == cfg


def test_config_needs_llm_follows_the_stages_that_call_a_model():
    assert config_needs_llm(PipelineConfig())
    free = apply_preset("model-free", PipelineConfig())
    assert not config_needs_llm(free)
    assert config_needs_llm(free.replace(evidence={"frontier": "llm"}))
    assert config_needs_llm(free.replace(extraction={"intent_source": "llm"}))
    assert not config_needs_llm(free.replace(extraction={"intent_source": "llm", "use_intent": False}))
