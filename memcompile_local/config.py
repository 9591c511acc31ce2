"""Configuration. Every constant of the papers is a named field with the paper's value.

Seed 000 (MemCompile) Appendix B and Table 6 give the Address Plane constants; Section 3.4
and Appendix C give the Evidence Plane constants; seed 001 gives MemPursuit's tau.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class PlacementConfig:
    """Bounded Cell placement (Appendix B.2, Eqs. 3-4 and 17-21)."""

    layout: Literal["bounded", "flat", "sequential", "session", "entity"] = "bounded"
    token_cap: int = 360  # B_C
    item_cap: int = 12  # M_C
    beta: float = 1.4  # weight of coherence C
    gamma: float = 1.0  # weight of inconsistency X
    eta: float = 0.45  # weight of expansion pressure E
    coherence_keyword: float = 0.45
    coherence_person: float = 0.35
    coherence_time: float = 0.20
    time_in_span: float = 1.0
    time_out_of_span: float = 0.25
    inconsistency_penalty: float = 0.45
    session_span_weight: float = 0.2  # in H(c)
    entropy_delta_weight: float = 0.4  # Delta_H weight in E
    fill_weight: float = 0.25
    entropy_excess_weight: float = 0.25
    entropy_threshold: float = 1.8
    new_cell_coherence: float = 0.55
    new_cell_pressure: float = 0.65
    block_size: int = 12  # fixed-length blocks of the sequential/session/entity layouts (= M_C)


@dataclass(frozen=True)
class RoutingConfig:
    """Diminishing-benefit Cell routing and the candidate union (Appendix B.3, Eqs. 5-7, 22-23)."""

    w_keywords: float = 2.0
    w_people: float = 2.2
    w_title: float = 0.7
    temporal_bonus: float = 0.25  # T_q(c)
    w_density: float = 0.03
    admission: float = 0.08
    cell_budget: int = 6  # B_cell: maximum opened Cells
    min_cells: int = 1
    pool_floor: int = 12  # pool = max(12, 6 * B_cell) = 36
    pool_per_cell: int = 6
    redundancy: float = 0.45  # lambda_R
    open_cost: float = 0.02
    token_cost: float = 0.0005
    relative_floor: float = 0.68
    cumulative_top_p: float = 0.90
    channels: Literal["both", "cells", "bm25"] = "both"  # A4 Cell-only, A5 BM25-only ablations
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_top: int = 96
    bm25_map_scale: float = 2.0  # b_i = 2 log(1 + s_i) / log(1 + s_max)
    seeds: int = 8
    alpha_f: float = 2.0
    alpha_k: float = 1.6
    alpha_p: float = 2.4
    alpha_t: float = 0.3
    alpha_b: float = 0.45
    mmr_support: float = 0.10
    mmr_overlap: float = 0.58
    mmr_same_cell: float = 0.08
    mmr_k: int = 10


@dataclass(frozen=True)
class EvidenceConfig:
    """Evidence Plane (Section 3.4, Appendix C.2)."""

    k0: int = 10  # initial SourcePackets
    k_dense: int = 40  # K_D, dense packet proposals
    k_rank: int = 5  # K_R, frontier rank cutoff
    k_append: int = 2  # K_Delta, frontier append cap
    max_retries: int = 3  # scheduler schema-correction retries (Appendix A.2)
    anchor_selector: Literal["llm", "mmr", "normalized", "pursuit", "dense", "fused"] = "llm"
    frontier: Literal["llm", "pursuit", "none"] = "llm"
    view: Literal["claim_bundle", "raw_packet", "representative_claim"] = "claim_bundle"
    pursuit_tau: float = 1e-5  # MemPursuit adaptive stop (seed 001)
    pursuit_pool: int = 200  # P: MemPursuit candidates (normalized pool, then dense proposals)
    # For models with a small context window (not in the paper, which sends the whole pool):
    # the scheduler sees at most this many candidates (pool order) and this many characters of each.
    max_schedule_pool: int | None = None
    max_candidate_chars: int | None = None


@dataclass(frozen=True)
class FusionConfig:
    """The model-free ``fused`` selector (memcompile_local/fused.py); not a paper component.

    Weights were set on the two development conversations (see README, "Model-free path").
    """

    lexical_weight: float = 1.0
    packet_weight: float = 1.0
    speaker_weight: float = 0.3
    temporal_weight: float = 0.2
    neighbor_context: bool = True  # lexical documents take in the in-session neighbours
    dense_neighbor_context: bool = True  # packet cosine is max(z(p), context document)
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    # Components measured by `scripts/ablate_model_free.py --cv` (off unless that kept them).
    time_match_weight: float = 0.0  # bonus for turns dated in the period the question names
    bursts: bool = False  # lexical documents group consecutive same-speaker messages
    tolerant_names: bool = False  # lower-case, nickname and one-typo spellings of participant names
    complement: Literal["none", "mmr", "pursuit"] = "none"  # complementary selection over the fused top-P
    complement_scope: Literal["list", "all"] = "list"  # list questions only, or every question
    complement_pool: int = 30  # P
    complement_keep: int = 6  # first slots kept in fused order
    mmr_lambda: float = 0.3
    second_round_slots: int = 0  # last slots filled by the evidence-conditioned second round
    second_round_read: int = 3  # top packets whose names/keywords re-query the lexical channel
    second_round_weight: float = 0.5
    # Pool handed to the LLM scheduler: the paper's normalized pool, or the fused top-N.
    schedule_pool: Literal["normalized", "fused"] = "normalized"
    schedule_pool_size: int = 100  # N for the fused pool


@dataclass(frozen=True)
class ExtractionConfig:
    """Descriptor extraction (Appendix B.1)."""

    extractor: Literal["llm", "rule"] = "llm"
    combined_call: bool = False  # facts and metadata in one call per turn
    on_failure: Literal["error", "rule"] = "error"  # a turn the model fails on: stop, or rule-extract it
    max_keywords: int = 5
    use_intent: bool = True  # query intent (ablation A6 turns it off)
    intent_source: Literal["llm", "rule"] = "llm"  # the model-free path uses the rule-based intent


@dataclass(frozen=True)
class ModelConfig:
    """Which backend and model serve LLM calls, and which embedder serves dense retrieval."""

    backend: str = "llamacpp"
    model: str = "smollm2-135m"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int = 2048  # every stage decodes greedily: temperature 0, seed 0 (LLMRequest defaults)
    concurrency: int = 4
    timeout_s: float = 120.0
    context_window: int | None = None  # tokens; checked by the full-context baseline when set
    embedder: str = "sentence-transformers"
    embed_model: str = "all-MiniLM-L6-v2"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeConfig:
    """The LLM judge of ``eval`` and ``compare``: a backend, model, server and key of its own.

    ``backend``/``model`` left unset take the answer model's (``ModelConfig``); ``base_url``
    and ``api_key_env`` are never inherited, so a judge named here does not go to the answer
    model's server. A judge that resolves to the answer model itself is refused unless
    ``allow_self_judge`` (a model grading its own answers is lenient with them).
    """

    backend: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None  # default OPENAI_API_KEY
    allow_self_judge: bool = False


@dataclass(frozen=True)
class PipelineConfig:
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # used by eval/compare only

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PipelineConfig":
        """Build from a (possibly partial) nested dict; unknown keys are an error."""
        from .errors import ConfigError

        parts = {}
        sub = {
            "extraction": ExtractionConfig,
            "placement": PlacementConfig,
            "routing": RoutingConfig,
            "evidence": EvidenceConfig,
            "model": ModelConfig,
            "fusion": FusionConfig,
            "judge": JudgeConfig,
        }
        for key, value in (data or {}).items():
            if key not in sub:
                raise ConfigError(f"unknown config section {key!r}; expected one of {sorted(sub)}")
            if not isinstance(value, dict):
                raise ConfigError(f"config section {key!r} must be a mapping, got {type(value).__name__}")
            names = {f.name for f in dataclasses.fields(sub[key])}
            unknown = set(value) - names
            if unknown:
                raise ConfigError(f"unknown field(s) {sorted(unknown)} in config section {key!r}")
            parts[key] = sub[key](**value)
        return cls(**parts)

    def replace(self, **sections: Any) -> "PipelineConfig":
        """Return a copy with some fields of some sections replaced: replace(evidence={'k0': 5})."""
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, changes in sections.items():
            current[name] = dataclasses.replace(current[name], **changes)
        return PipelineConfig(**current)


def config_needs_llm(c: PipelineConfig) -> bool:
    """Whether building or compiling (answering aside) makes any model call under ``c``."""
    return (
        c.extraction.extractor == "llm"
        or (c.extraction.use_intent and c.extraction.intent_source == "llm")
        or c.evidence.anchor_selector == "llm"
        or c.evidence.frontier == "llm"
    )
