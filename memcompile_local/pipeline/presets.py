"""Named pipeline paths as configuration (MemCompile paper, Table 2 ablations, Table 4 views, B.4 layouts).

A preset is a function ``PipelineConfig -> PipelineConfig`` built with ``cfg.replace``; it
never touches model settings or numeric constants. The ablations A0-A7 each set the whole
evidence path they are defined by (anchor selector, frontier, candidate channels, layout,
query intent) to the full system's values and then apply their one change. Views and
layouts change only their own field.

Composing presets
-----------------
``apply_presets("A1+view-raw", cfg)`` (or a list, or repeated ``--preset`` flags) applies the
names left to right. Every preset declares the fields it *writes* and the fields it *owns*
(the ones that define it: A1 owns the frontier, ``model-free`` owns every LLM switch,
``view-raw`` owns the reader view). A later preset that writes a field an earlier preset
owns, with a different value, is refused with a ``ConfigError`` naming both presets and the
field, because applying it would silently undo the earlier one (``model-free+A1`` would turn
the LLM scheduler back on). So a combination is one path preset (A0-A7 or model-free) first,
then at most one view and one layout: ``A1+layout-flat``, ``model-free+view-raw``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from memcompile_local.config import PipelineConfig, config_needs_llm
from memcompile_local.errors import ConfigError

__all__ = ["PRESETS", "PRESET_DESCRIPTIONS", "apply_preset", "apply_presets", "describe_preset",
           "split_preset_names", "COMPOSITION_HELP"]

Preset = Callable[[PipelineConfig], PipelineConfig]

COMPOSITION_HELP = (
    "Presets compose left to right: repeat --preset or join names with '+' (A1+view-raw). "
    "Put one path preset (A0..A7 or model-free) first, then at most one view-* and one layout-*; "
    "a preset that would undo what an earlier one set (model-free+A1 turns the LLM back on, "
    "view-raw+view-representative) is refused."
)

# Fields every A0-A7 path writes (the full system's values, then its one change).
_PATH_FIELDS = ("evidence.anchor_selector", "evidence.frontier", "routing.channels", "placement.layout",
                "extraction.use_intent")


@dataclass(frozen=True)
class _Spec:
    apply: Preset
    writes: tuple[str, ...]
    owns: tuple[str, ...]


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


def _ablation(owns: tuple[str, ...], **changes: Any) -> _Spec:
    def apply(cfg: PipelineConfig) -> PipelineConfig:
        return _path(cfg, **changes)

    return _Spec(apply, _PATH_FIELDS, owns)


def _view(name: str) -> _Spec:
    def apply(cfg: PipelineConfig) -> PipelineConfig:
        return cfg.replace(evidence={"view": name})

    apply.__name__ = f"view_{name}"
    return _Spec(apply, ("evidence.view",), ("evidence.view",))


def _layout(name: str) -> _Spec:
    def apply(cfg: PipelineConfig) -> PipelineConfig:
        return cfg.replace(placement={"layout": name})

    apply.__name__ = f"layout_{name}"
    return _Spec(apply, ("placement.layout",), ("placement.layout",))


def _model_free(cfg: PipelineConfig) -> PipelineConfig:
    # No LLM before the answer: rule-based descriptors and intent, the fused selector
    # (memcompile_local/fused/) picks K0 packets, no separate frontier.
    return cfg.replace(
        extraction={"extractor": "rule", "intent_source": "rule", "use_intent": True},
        evidence={"anchor_selector": "fused", "frontier": "none"},
        routing={"channels": "both"},
    )


def _a0_fused_pool(cfg: PipelineConfig) -> PipelineConfig:
    # A0 with one change: the LLM scheduler's closed pool is the fused ranking's top-N
    # (fusion.schedule_pool_size) instead of the normalized address pool.
    return _path(cfg).replace(fusion={"schedule_pool": "fused"})


def _mera(cfg: PipelineConfig) -> PipelineConfig:
    # MERA's rounds on the path chosen so far: the LLM planner and verifier over an LLM path
    # (alone, "mera" is A0 with rounds), the rule ones after "model-free" (no model call).
    llm = config_needs_llm(cfg)
    kind = "llm" if llm else "rule"
    return cfg.replace(mera={"enabled": True, "planner": kind, "verifier": kind})


_MODEL_FREE_FIELDS = ("extraction.extractor", "extraction.intent_source", "extraction.use_intent",
                      "evidence.anchor_selector", "evidence.frontier", "routing.channels")

_SPECS: dict[str, _Spec] = {
    "A0": _ablation(()),
    "A1": _ablation(("evidence.frontier",), frontier="none"),
    "A2": _ablation(("evidence.anchor_selector", "evidence.frontier"), anchor_selector="mmr", frontier="none"),
    "A3": _ablation(("evidence.anchor_selector", "evidence.frontier"), anchor_selector="mmr", frontier="llm"),
    "A4": _ablation(("routing.channels",), channels="cells"),
    # Appendix B.4: the flat layout disables Cell-derived candidates, leaving BM25 alone.
    "A5": _ablation(("placement.layout", "routing.channels"), layout="flat", channels="bm25"),
    "A6": _ablation(("extraction.use_intent",), use_intent=False),
    "A7": _ablation(("evidence.anchor_selector", "evidence.frontier"), anchor_selector="dense", frontier="none"),
    "view-claim-bundle": _view("claim_bundle"),
    "view-raw": _view("raw_packet"),
    "view-representative": _view("representative_claim"),
    "layout-bounded": _layout("bounded"),
    "layout-flat": _layout("flat"),
    "layout-sequential": _layout("sequential"),
    "layout-session": _layout("session"),
    "layout-entity": _layout("entity"),
    "model-free": _Spec(_model_free, _MODEL_FREE_FIELDS, _MODEL_FREE_FIELDS),
    "mera": _Spec(_mera, ("mera.enabled", "mera.planner", "mera.verifier"), ("mera.enabled",)),
    "A0-fused-pool": _Spec(_a0_fused_pool, (*_PATH_FIELDS, "fusion.schedule_pool"), ("fusion.schedule_pool",)),
}

PRESETS: dict[str, Preset] = {name: spec.apply for name, spec in _SPECS.items()}

PRESET_DESCRIPTIONS: dict[str, str] = {
    "A0": "full system: LLM anchor scheduler + LLM bounded frontier",
    "A1": "w/o frontier: LLM anchors only",
    "A2": "w/o scheduler and frontier: dialogue-level MMR top-10 anchors",
    "A3": "w/o scheduler, with frontier: MMR anchors + LLM frontier",
    "A4": "Cell-only: routing candidates without BM25 candidates",
    "A5": "BM25-only: flat layout, no Cell-derived candidates",
    "A6": "w/o query intent: question text only for lexical addressing",
    "A7": "dense SourcePacket top-10 as the final set",
    "A0-fused-pool": "A0 with the scheduler's pool taken from the fused ranking (top fusion.schedule_pool_size)",
    "view-claim-bundle": "reader view: every retained claim per packet (default)",
    "view-raw": "reader view: raw turn text, image caption and query",
    "view-representative": "reader view: one representative address claim per packet",
    "layout-bounded": "placement: bounded lexical Cells (default)",
    "layout-flat": "placement: flat (no Cell candidates)",
    "layout-sequential": "placement: fixed-size blocks in dialogue order",
    "layout-session": "placement: fixed-size blocks within sessions",
    "layout-entity": "placement: fixed-size blocks grouped by person",
    "mera": "MERA missing-evidence rounds on the path so far (A0: LLM planner and verifier; "
            "after model-free: rule planner and verifier, still no model call)",
    "model-free": "no LLM before answering: rule extraction/intent, fused lexical+claim+packet+speaker selector",
}


def _unknown(name: str) -> ConfigError:
    return ConfigError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")


def split_preset_names(names: str | list[str] | tuple[str, ...]) -> list[str]:
    """The preset names of ``"a+b"``, of a list, or of a list whose items contain '+'."""
    items = [names] if isinstance(names, str) else list(names)
    parts = [p.strip() for item in items for p in str(item).split("+")]
    for part in parts:
        if part not in _SPECS:
            raise _unknown(part)
    return parts


def _get(cfg: PipelineConfig, dotted: str) -> Any:
    section, name = dotted.split(".")
    return getattr(getattr(cfg, section), name)


def apply_preset(name: str, cfg: PipelineConfig) -> PipelineConfig:
    """Return ``cfg`` changed by the preset ``name``; unknown names raise ``ConfigError``.

    ``name`` may join several presets with "+" (composed as :func:`apply_presets` does).
    """
    return apply_presets(name, cfg)


def apply_presets(names: str | list[str] | tuple[str, ...], cfg: PipelineConfig) -> PipelineConfig:
    """Apply several presets left to right (a list, or one string joined with "+").

    Raises ``ConfigError`` for an unknown name, and for a preset that writes a field an
    earlier preset of the same call owns with a different value (see the module docstring);
    the message names both presets, the field and the two values.
    """
    parts = split_preset_names(names)
    owner: dict[str, tuple[str, Any]] = {}  # field -> (preset that owns it, the value it set)
    for part in parts:
        spec = _SPECS[part]
        new = spec.apply(cfg)
        for dotted in spec.writes:
            if dotted in owner:
                earlier, value = owner[dotted]
                if _get(new, dotted) != value:
                    raise ConfigError(_conflict(earlier, part, dotted, value, _get(new, dotted), new))
        for dotted in spec.owns:
            owner[dotted] = (part, _get(new, dotted))
        cfg = new
    return cfg


def _conflict(earlier: str, later: str, dotted: str, was: Any, now: Any, new: PipelineConfig) -> str:
    what = (f"preset {later!r} sets {dotted}={now!r}, undoing {dotted}={was!r} "
            f"that the earlier preset {earlier!r} defines")
    if earlier == "model-free" and config_needs_llm(new):
        what += f"; {later!r} turns an LLM stage back on, which 'model-free' exists to keep off"
    return (f"presets {earlier!r} and {later!r} conflict: {what}. Use one path preset "
            "(A0..A7 or model-free) first, then at most one view-* and one layout-*")


def describe_preset(name: str) -> str:
    """One-line description of a preset (``ConfigError`` for an unknown name)."""
    if name not in PRESETS:
        raise _unknown(name)
    return PRESET_DESCRIPTIONS[name]
