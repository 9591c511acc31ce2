"""Named pipeline paths as configuration (seed 000, Table 2 ablations, Table 4 views, B.4 layouts).

A preset is a function ``PipelineConfig -> PipelineConfig`` built with ``cfg.replace``; it
never touches model settings or numeric constants. The ablations A0-A7 each set the whole
evidence path they are defined by (anchor selector, frontier, candidate channels, layout,
query intent) to the full system's values and then apply their one change, so applying an
ablation after another gives that ablation, not a mix. Views and layouts change only their
own field and compose with an ablation applied before them, e.g. ``A1`` then ``view-raw``.
``apply_presets("A1+view-raw", cfg)`` applies several names in order.
"""

from __future__ import annotations

from typing import Callable

from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError

__all__ = ["PRESETS", "PRESET_DESCRIPTIONS", "apply_preset", "apply_presets", "describe_preset"]

Preset = Callable[[PipelineConfig], PipelineConfig]


def _path(
    cfg: PipelineConfig,
    *,
    anchor_selector: str = "llm",
    frontier: str = "llm",
    channels: str = "both",
    layout: str = "bounded",
    use_intent: bool = True,
) -> PipelineConfig:
    """The full system's path (A0) with the given fields changed."""
    return cfg.replace(
        evidence={"anchor_selector": anchor_selector, "frontier": frontier},
        routing={"channels": channels},
        placement={"layout": layout},
        extraction={"use_intent": use_intent},
    )


def _a0(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg)


def _a1(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg, frontier="none")


def _a2(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg, anchor_selector="mmr", frontier="none")


def _a3(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg, anchor_selector="mmr", frontier="llm")


def _a4(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg, channels="cells")


def _a5(cfg: PipelineConfig) -> PipelineConfig:
    # Appendix B.4: the flat layout disables Cell-derived candidates, leaving BM25 alone.
    return _path(cfg, layout="flat", channels="bm25")


def _a6(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg, use_intent=False)


def _a7(cfg: PipelineConfig) -> PipelineConfig:
    return _path(cfg, anchor_selector="dense", frontier="none")


def _view(name: str) -> Preset:
    def apply(cfg: PipelineConfig) -> PipelineConfig:
        return cfg.replace(evidence={"view": name})

    apply.__name__ = f"view_{name}"
    return apply


def _layout(name: str) -> Preset:
    def apply(cfg: PipelineConfig) -> PipelineConfig:
        return cfg.replace(placement={"layout": name})

    apply.__name__ = f"layout_{name}"
    return apply


def _model_free(cfg: PipelineConfig) -> PipelineConfig:
    # No LLM before the answer: rule-based descriptors and intent, the fused selector
    # (memcompile_local/fused.py) picks K0 packets, no separate frontier.
    return cfg.replace(
        extraction={"extractor": "rule", "intent_source": "rule", "use_intent": True},
        evidence={"anchor_selector": "fused", "frontier": "none"},
        routing={"channels": "both"},
    )


PRESETS: dict[str, Preset] = {
    "A0": _a0,
    "A1": _a1,
    "A2": _a2,
    "A3": _a3,
    "A4": _a4,
    "A5": _a5,
    "A6": _a6,
    "A7": _a7,
    "view-claim-bundle": _view("claim_bundle"),
    "view-raw": _view("raw_packet"),
    "view-representative": _view("representative_claim"),
    "layout-bounded": _layout("bounded"),
    "layout-flat": _layout("flat"),
    "layout-sequential": _layout("sequential"),
    "layout-session": _layout("session"),
    "layout-entity": _layout("entity"),
    "model-free": _model_free,
}

PRESET_DESCRIPTIONS: dict[str, str] = {
    "A0": "full system: LLM anchor scheduler + LLM bounded frontier",
    "A1": "w/o frontier: LLM anchors only",
    "A2": "w/o scheduler and frontier: dialogue-level MMR top-10 anchors",
    "A3": "w/o scheduler, with frontier: MMR anchors + LLM frontier",
    "A4": "Cell-only: routing candidates without BM25 candidates",
    "A5": "BM25-only: flat layout, no Cell-derived candidates",
    "A6": "w/o query intent: question text only for lexical addressing",
    "A7": "dense SourcePacket top-10 as the final set",
    "view-claim-bundle": "reader view: every retained claim per packet (default)",
    "view-raw": "reader view: raw turn text, image caption and query",
    "view-representative": "reader view: one representative address claim per packet",
    "layout-bounded": "placement: bounded lexical Cells (default)",
    "layout-flat": "placement: flat (no Cell candidates)",
    "layout-sequential": "placement: fixed-size blocks in dialogue order",
    "layout-session": "placement: fixed-size blocks within sessions",
    "layout-entity": "placement: fixed-size blocks grouped by person",
    "model-free": "no LLM before answering: rule extraction/intent, fused lexical+claim+packet+speaker selector",
}


def _unknown(name: str) -> ConfigError:
    return ConfigError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")


def apply_preset(name: str, cfg: PipelineConfig) -> PipelineConfig:
    """Return ``cfg`` changed by the preset ``name``; unknown names raise ``ConfigError``.

    ``name`` may join several presets with "+" (applied left to right).
    """
    if "+" in name:
        return apply_presets(name, cfg)
    fn = PRESETS.get(name.strip())
    if fn is None:
        raise _unknown(name)
    return fn(cfg)


def apply_presets(names: str | list[str] | tuple[str, ...], cfg: PipelineConfig) -> PipelineConfig:
    """Apply several presets in order (a list, or one string joined with "+")."""
    parts = [n.strip() for n in names.split("+")] if isinstance(names, str) else [n.strip() for n in names]
    for part in parts:
        if part not in PRESETS:
            raise _unknown(part)
    for part in parts:
        cfg = PRESETS[part](cfg)
    return cfg


def describe_preset(name: str) -> str:
    """One-line description of a preset (``ConfigError`` for an unknown name)."""
    if name not in PRESETS:
        raise _unknown(name)
    return PRESET_DESCRIPTIONS[name]
