"""Every configuration field is described and read: the JSON schema the configuration reference
is generated from carries a description for every field, and every field is read somewhere in
the shipped package (a field nothing reads is an option that does nothing)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from pydantic import TypeAdapter

from memcompile_local.config import PipelineConfig
from memcompile_local.fused.channels import CHANNELS

PACKAGE = Path(__file__).resolve().parents[1] / "memcompile_local"
ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"


def _fields() -> list[tuple[str, str]]:
    """(section, field) of every field of every section of PipelineConfig."""
    return [(section.name, f.name) for section in dataclasses.fields(PipelineConfig)
            for f in dataclasses.fields(section.default_factory)]


def test_every_field_of_the_schema_has_a_description():
    schema = TypeAdapter(PipelineConfig).json_schema()
    missing = [f"{name}.{field}" for name, section in schema["$defs"].items()
               for field, spec in section["properties"].items() if not spec.get("description")]
    missing += [f"PipelineConfig.{field}" for field, spec in schema["properties"].items() if not spec.get("description")]
    assert missing == []
    # Each section of the schema is one dataclass section, and every field is there.
    sections = {s.name: s.default_factory.__name__ for s in dataclasses.fields(PipelineConfig)}
    for section, field in _fields():
        assert field in schema["$defs"][sections[section]]["properties"], (section, field)
    # Types, defaults, allowed values and ranges come with the descriptions.
    fusion = schema["$defs"]["FusionConfig"]["properties"]
    assert fusion["ranker"]["enum"] == ["weighted", "learned", "auto"] and fusion["ranker"]["default"] == "auto"
    assert schema["$defs"]["EvidenceConfig"]["properties"]["k0"]["minimum"] == 1


def _read_attributes() -> set[str]:
    """Every attribute name read in the shipped code (the package and its adapters), the
    configuration module itself left out."""
    names: set[str] = set()
    for path in [*PACKAGE.rglob("*.py"), *ADAPTERS.glob("*.py")]:
        if path == PACKAGE / "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
    return names


# Fields read by a name the code builds rather than spells: the fused selector reads the weight
# of channel ``name`` as ``getattr(cfg, f"{name}_weight")`` (channels.channel_weights).
BUILT_NAMES = {f"{name}_weight" for name in CHANNELS}


def unread(fields: list[tuple[str, str]], read: set[str]) -> list[str]:
    return [f"{section}.{field}" for section, field in fields if field not in read and field not in BUILT_NAMES]


def test_every_config_field_is_read_by_the_shipped_code():
    read = _read_attributes()
    assert unread(_fields(), read) == []
    # The scan does catch a field nothing reads (as the options issue 49 removed were).
    assert unread([("fusion", "chat_norm"), ("fusion", "passage_pool")], read) == ["fusion.chat_norm",
                                                                                  "fusion.passage_pool"]


def test_the_built_weight_names_are_the_channels():
    fusion = {f.name for f in dataclasses.fields(PipelineConfig().fusion)}
    assert BUILT_NAMES <= fusion  # every channel has its weight field, and nothing else is exempt
