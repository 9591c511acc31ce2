"""Configuration. Every constant of the papers is a named field with the paper's value.

Seed 000 (MemCompile) Appendix B and Table 6 give the Address Plane constants; Section 3.4
and Appendix C give the Evidence Plane constants; the MemPursuit paper gives MemPursuit's tau.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from .errors import ConfigError

# Value ranges the method fixes: counts and capacities are positive or non-negative, weights
# and costs are non-negative, and Jaccard weights, BM25's b and the routing fractions lie in
# [0, 1]. Fields without such a constraint (e.g. the fused selector's weights) take any value
# of their type. ``PipelineConfig.from_dict`` and ``validate_config`` check them.
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
NonNeg = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]

# Every section rejects unknown fields when validated, and the string literal under each field
# becomes its description in the JSON schema (pydantic reads this class attribute), which the
# configuration reference is generated from.
_SECTION = ConfigDict(extra="forbid", use_attribute_docstrings=True)


@dataclass(frozen=True)
class PlacementConfig:
    """Bounded Cell placement (Appendix B.2, Eqs. 3-4 and 17-21)."""

    __pydantic_config__ = _SECTION

    layout: Literal["bounded", "flat", "sequential", "session", "entity"] = "bounded"
    """How descriptors are grouped into Cells: the paper's bounded placement, or one of the B.4 layout ablations."""
    token_cap: PosInt = 360
    """B_C: the most tokens one Cell holds."""
    item_cap: PosInt = 12
    """M_C: the most descriptors one Cell holds."""
    beta: NonNeg = 1.4
    """Weight of a Cell's coherence C in the placement score (Eq. 3)."""
    gamma: NonNeg = 1.0
    """Weight of a Cell's inconsistency X in the placement score (Eq. 3)."""
    eta: NonNeg = 0.45
    """Weight of a Cell's expansion pressure E in the placement score (Eq. 3)."""
    coherence_keyword: NonNeg = 0.45
    """Share of keyword overlap in a Cell's coherence (Eq. 17)."""
    coherence_person: NonNeg = 0.35
    """Share of person overlap in a Cell's coherence (Eq. 17)."""
    coherence_time: NonNeg = 0.20
    """Share of the time term in a Cell's coherence (Eq. 17)."""
    time_in_span: NonNeg = 1.0
    """Time term of a descriptor dated within the Cell's span."""
    time_out_of_span: NonNeg = 0.25
    """Time term of a descriptor dated outside the Cell's span."""
    inconsistency_penalty: NonNeg = 0.45
    """Inconsistency X of a descriptor that contradicts a Cell member (same subject, other value)."""
    session_span_weight: NonNeg = 0.2
    """Weight of the Cell's session span in its entropy H(c) (Eq. 19)."""
    entropy_delta_weight: NonNeg = 0.4
    """Weight of the entropy increase Delta_H in the expansion pressure E (Eq. 20)."""
    fill_weight: NonNeg = 0.25
    """Weight of the fill term (items over M_C beyond coherence) in the expansion pressure E."""
    entropy_excess_weight: NonNeg = 0.25
    """Weight of the entropy above ``entropy_threshold`` in the expansion pressure E."""
    entropy_threshold: NonNeg = 1.8
    """Entropy H(c) above which a Cell pays the excess term of E."""
    new_cell_coherence: NonNeg = 0.55
    """Coherence a new Cell is credited with when scored against the existing ones (Eq. 21)."""
    new_cell_pressure: NonNeg = 0.65
    """Expansion pressure a new Cell is charged with (Eq. 21)."""
    block_size: PosInt = 12
    """Descriptors per fixed-length block of the sequential, session and entity layouts (= M_C)."""


@dataclass(frozen=True)
class RoutingConfig:
    """Diminishing-benefit Cell routing and the candidate union (Appendix B.3, Eqs. 5-7, 22-23)."""

    __pydantic_config__ = _SECTION

    w_keywords: NonNeg = 2.0
    """Weight of keyword overlap in a Cell's routing utility (Eq. 22)."""
    w_people: NonNeg = 2.2
    """Weight of person overlap in a Cell's routing utility (Eq. 22)."""
    w_title: NonNeg = 0.7
    """Weight of title overlap in a Cell's routing utility (Eq. 22)."""
    temporal_bonus: NonNeg = 0.25
    """T_q(c): routing bonus of a dated Cell for a temporal question."""
    w_density: NonNeg = 0.03
    """Weight of a Cell's size, log(1 + |c|) / log(1 + M_C), in its routing utility."""
    admission: NonNeg = 0.08
    """Least routing utility for a Cell to enter the candidate pool."""
    cell_budget: NonNegInt = 6
    """B_cell: the most Cells one question opens."""
    min_cells: NonNegInt = 1
    """Cells opened before the stopping rules apply."""
    pool_floor: NonNegInt = 12
    """Least size of the routing pool: pool = max(pool_floor, pool_per_cell * cell_budget)."""
    pool_per_cell: NonNegInt = 6
    """Routing pool entries per Cell of the budget."""
    redundancy: Fraction = 0.45
    """lambda_R: how much overlap with opened Cells discounts a Cell's utility."""
    open_cost: NonNeg = 0.02
    """Cost of opening one more Cell (grows with the number opened)."""
    token_cost: NonNeg = 0.0005
    """Cost per token of an opened Cell."""
    relative_floor: Fraction = 0.68
    """Stop opening Cells whose discounted utility falls below this share of the best one."""
    cumulative_top_p: Fraction = 0.90
    """Stop once the opened Cells hold this share of the pool's positive utility."""
    channels: Literal["both", "cells", "bm25"] = "both"
    """Address channels in the candidate union: both, Cells only (ablation A4) or BM25 only (A5)."""
    bm25_k1: NonNeg = 1.5
    """BM25 k1 of the descriptor index."""
    bm25_b: Fraction = 0.75
    """BM25 b of the descriptor index."""
    bm25_top: NonNegInt = 96
    """Descriptors the lexical channel returns per question."""
    bm25_map_scale: NonNeg = 2.0
    """Factor of the BM25 bonus b_i = scale * log(1 + s_i) / log(1 + s_max) in r_i (Eq. 7)."""
    seeds: NonNegInt = 8
    """First lexical hits whose terms expand the routing query (0: no expansion)."""
    alpha_f: NonNeg = 2.0
    """Weight of term overlap with the claim in a candidate's score r_i (Eq. 7)."""
    alpha_k: NonNeg = 1.6
    """Weight of term overlap with the descriptor's keywords in r_i (Eq. 7)."""
    alpha_p: NonNeg = 2.4
    """Weight of person overlap in r_i (Eq. 7)."""
    alpha_t: NonNeg = 0.3
    """Weight of the temporal match (temporal question, dated descriptor) in r_i (Eq. 7)."""
    alpha_b: NonNeg = 0.45
    """Weight of the BM25 bonus b_i in r_i (Eq. 7)."""
    mmr_support: NonNeg = 0.10
    """Weight of a packet's summed hit scores in the MMR relevance of the diagnostic Top-10 (B.3)."""
    mmr_overlap: NonNeg = 0.58
    """MMR penalty per unit of term overlap with an already chosen representative."""
    mmr_same_cell: NonNeg = 0.08
    """MMR penalty per chosen representative in the same Cell."""
    mmr_k: NonNegInt = 10
    """Size of the diagnostic MMR Top-k."""


@dataclass(frozen=True)
class EvidenceConfig:
    """Evidence Plane (Section 3.4, Appendix C.2)."""

    __pydantic_config__ = _SECTION

    k0: PosInt = 10
    """K0: SourcePackets the anchor selector keeps (the evidence budget; a search's default k)."""
    k_dense: NonNegInt = 40
    """K_D: dense packet proposals D_q."""
    k_rank: NonNegInt = 5
    """K_R: frontier rank cutoff (only the first K_R of the frontier's ordering may be appended)."""
    k_append: NonNegInt = 2
    """K_Delta: the most packets the frontier appends."""
    max_retries: NonNegInt = 3
    """Schema-correction retries of the LLM scheduler and frontier (Appendix A.2)."""
    anchor_selector: Literal["llm", "mmr", "normalized", "pursuit", "dense", "fused"] = "llm"
    """Who chooses the anchors A0: the LLM scheduler, MMR, the normalized pool, MemPursuit, dense top-K, or the model-free fused selector."""
    frontier: Literal["llm", "pursuit", "none"] = "llm"
    """Who orders the bounded frontier over A0 and D_q: the LLM, MemPursuit, or no frontier."""
    view: Literal["claim_bundle", "raw_packet", "representative_claim"] = "claim_bundle"
    """The reader view the evidence is rendered in (Table 4)."""
    pursuit_tau: NonNeg = 1e-5
    """MemPursuit's adaptive stop: pick no more once the residual gain falls below tau."""
    pursuit_pool: PosInt = 200
    """P: MemPursuit's candidates (the normalized pool, then the dense proposals)."""
    max_schedule_pool: PosInt | None = None
    """For a small model's context window: the most candidates the scheduler sees, in pool order (None: all)."""
    max_candidate_chars: PosInt | None = None
    """For a small model's context window: characters of each candidate the scheduler sees (None: all)."""
    max_block_chars: Annotated[int, Field(ge=1000)] | None = 8000
    """Characters of one evidence block in the reader view; a longer block is cut with a visible marker (None: no cap)."""


@dataclass(frozen=True)
class FusionConfig:
    """The model-free ``fused`` selector (memcompile_local/fused/); not a paper component.

    Each channel of ``fused.channels.CHANNELS`` has a ``<name>_weight`` here (0 turns it off).
    The defaults are the cross-validated winners of the research scripts (research/).
    """

    __pydantic_config__ = _SECTION

    lexical_weight: float = 1.0
    """Weight of the BM25 channel (each turn's lexical document: turn, caption, claims and its session neighbours; divided by the question's best)."""
    packet_weight: float = 1.5
    """Weight of the dense channel (the larger of the cosines with the turn's document and with its context document)."""
    speaker_weight: float = 0.3
    """Weight of the speaker channel: 1 on the turns of the one participant the question names."""
    temporal_weight: float = 0.2
    """Weight of the temporal channel: 1, for a question about time, on turns with a resolved event time."""
    dense_document: Literal["packet", "turn"] = "packet"
    """What the dense channel embeds per turn: z(p) with its claims, people, keywords and time, or the raw turn alone (for histories of long assistant replies)."""
    dense_context: Literal["embedded", "composed"] = "embedded"
    """Context vectors: each turn's neighbour document embedded, or the normalized sum of the neighbours' vectors (nothing more embedded: the fastest build)."""
    context_window_words: NonNegInt = 300
    """The context vector counts only for turns whose context document has at most this many words (0: every turn); longer ones are cut by the embedder's window."""
    bm25_k1: NonNeg = 1.5
    """BM25 k1 of the turns' lexical documents."""
    bm25_b: Fraction = 0.75
    """BM25 b of the turns' lexical documents."""
    time_match_weight: float = 0.75
    """Weight of the time-match channel: 1 on turns dated in the period the question names ("in June", "last month")."""
    answer_type_weight: NonNeg = 0.75
    """Weight of the answer-type channel: 1 on turns that name a person, place or title when the question asks for one (never on user-assistant histories)."""
    bursts: bool = False
    """Lexical documents group consecutive same-speaker messages (try it for chat logs split into many short messages)."""
    tolerant_names: bool = False
    """Match lower-case, nickname and one-typo spellings of participant names (with ``bursts``, for chat logs)."""
    role_weight: float = 0.5
    """Weight of the role channel: on a user-assistant history, 1 on the side a question that names nobody points at ("I" -> the user, "you recommended" -> the assistant)."""
    name_term_weight: Fraction = 0.25
    """Share of the BM25 score the terms of the one participant a question names keep (1: like any other term)."""
    name_term_scope: Literal["always", "alone"] = "alone"
    """When ``name_term_weight`` applies: always, or only when no other term of the question matches any turn."""
    # On by default as the fix of a defect integrators hit (copies of one filler line taking
    # several of the top slots); recall-neutral on all four development corpora (nested CV,
    # decision record of 2026-12-06), so it is not a recall component under the shipping rule.
    distinct_turns: bool = True
    """A turn whose text is the same as a better-ranked turn's (case and spacing aside) gives its slot to the next turn, so copies of one filler line from several sessions fill one slot at most."""
    complement_pool: NonNegInt = 30
    """P: the fused top-P a list question's complementary (MemPursuit) selection picks from."""
    complement_keep: NonNegInt = 6
    """First slots of a list question's selection kept in fused order before MemPursuit picks the rest."""
    schedule_pool: Literal["normalized", "fused"] = "normalized"
    """The pool handed to the LLM scheduler: the paper's normalized pool, or the fused top-N (preset A0-fused-pool)."""
    schedule_pool_size: PosInt = 103
    """N of the fused pool handed to the LLM scheduler (the mean size of the paper's pool)."""
    ranker: Literal["weighted", "learned", "auto"] = "auto"
    """How the fused score is made: the weighted channel sum, the learned ranker over its best turns, or auto (learned on user-assistant and bursty histories, weighted on alternating dialogue)."""
    ranker_model: str | None = None
    """The learned ranker's model file (None: the shipped one)."""


@dataclass(frozen=True)
class MeraConfig:
    """MERA missing-evidence retrieval rounds (Missing-Evidence Retrieval Augmentation; evidence/mera.py); off by default."""

    __pydantic_config__ = _SECTION

    enabled: bool = False
    """Run MERA's follow-up retrieval rounds after the first selection."""
    planner: Literal["rule", "llm"] = "rule"
    """Who writes the follow-up queries: rules (no model) or the LLM (constrained JSON)."""
    verifier: Literal["rule", "llm"] = "rule"
    """Who checks a found packet: rules (no model) or the LLM (constrained JSON)."""
    max_rounds: NonNegInt = 2
    """Follow-up rounds after the first selection."""
    queries_per_round: PosInt = 3
    """Follow-up queries the planner writes per round."""
    hits_per_query: PosInt = 5
    """Packets each follow-up query retrieves."""
    read: PosInt = 5
    """Verified packets the planner reads when it writes the next queries."""
    verify_threshold: Fraction = 0.5
    """Rule verifier: least share of the query's best search score a packet needs to count as found."""
    final_slots: NonNegInt = 2
    """The most verified new packets that replace the tail of the first selection (K0 is unchanged)."""
    max_tokens: PosInt = 6000
    """Planner and verifier tokens one question may spend; rounds stop when they are spent."""


@dataclass(frozen=True)
class ExtractionConfig:
    """Descriptor extraction (Appendix B.1)."""

    __pydantic_config__ = _SECTION

    extractor: Literal["llm", "rule"] = "llm"
    """Who extracts descriptors from turns: the LLM, or the rule-based extractor (no model calls)."""
    combined_call: bool = False
    """LLM extractor: facts and metadata in one call per turn instead of two steps."""
    on_failure: Literal["error", "rule"] = "error"
    """A turn the model fails on: stop the build, or extract that turn by rule."""
    max_keywords: NonNegInt = 5
    """Keywords kept per descriptor."""
    max_rule_claims: PosInt | None = None
    """Rule extractor: at most this many sentence claims per turn, the most content-rich (None: one per sentence); bounds a long reply's build cost."""
    use_intent: bool = True
    """Extract a query intent (people, keywords, time) before retrieval (ablation A6 turns it off)."""
    intent_source: Literal["llm", "rule"] = "llm"
    """Who extracts the query intent: the LLM, or rules (the model-free path)."""


@dataclass(frozen=True)
class ModelConfig:
    """Which backend and model serve LLM calls, and which embedder serves dense retrieval."""

    __pydantic_config__ = _SECTION

    backend: str = "llamacpp"
    """The LLM backend: llamacpp, openai, vllm, transformers, or scripted (tests)."""
    model: str = "smollm2-135m"
    """The model name the backend loads or asks for."""
    base_url: str | None = None
    """The server of an OpenAI-compatible backend (None: the backend's default)."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable that holds the backend's API key."""
    max_tokens: PosInt = 2048
    """Completion tokens per call (every stage decodes greedily: temperature 0, seed 0)."""
    concurrency: PosInt = 4
    """Model calls in flight at once."""
    timeout_s: Positive = 120.0
    """Seconds one model call may take."""
    context_window: PosInt | None = None
    """The model's context window in tokens; the full-context baseline checks it when set."""
    answer_prompt: Literal["auto", "full", "small"] = "auto"
    """Answer prompt and decoding: the paper-style prompts, a short extractive prompt for small models, or auto (small for the embedded SmolLM2-135M)."""
    embedder: str = "sentence-transformers"
    """The dense embedder: sentence-transformers, hash (no model; tests and model-free runs without torch), or another registered one."""
    embed_model: str = "all-MiniLM-L6-v2"
    """The embedding model: a shipped name, a local folder, or a hub name (needs ``embed_allow_download``)."""
    embed_backend: Literal["auto", "torch", "onnx"] = "auto"
    """How sentence-transformers runs: auto (ONNX Runtime on CPU, torch on CUDA), torch or onnx; part of the vectors' cache key."""
    embed_precision: Literal["auto", "fp32", "fp16", "int8"] = "auto"
    """Embedding precision: auto (fp32 on CPU, fp16 on CUDA) or forced; int8 is faster on CPU and slightly less accurate."""
    embed_device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the embedder runs."""
    embed_batch_size: PosInt = 64
    """Texts per embedding batch."""
    embed_threads: PosInt | None = None
    """ONNX Runtime threads per embedding call (None: every usable core)."""
    embed_max_tokens: PosInt | None = None
    """Tokens of each text the embedder reads (None: the model's own window, 256 for MiniLM); a smaller window builds faster on long turns and is its own vector space."""
    embed_query_prefix: str = ""
    """Text put before every query the embedder reads (e5: "query: ")."""
    embed_document_prefix: str = ""
    """Text put before every document the embedder reads (e5: "passage: ")."""
    embed_allow_download: bool = False
    """Fetch a hub model name when a hub is reachable (default: offline)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments handed to the backend as they are."""


@dataclass(frozen=True)
class JudgeConfig:
    """The LLM judge of ``eval`` and ``compare``: a backend, model, server and key of its own.

    ``backend``/``model`` left unset take the answer model's (``ModelConfig``); ``base_url``
    and ``api_key_env`` are never inherited, so a judge named here does not go to the answer
    model's server. A judge that resolves to the answer model itself is refused unless
    ``allow_self_judge`` (a model grading its own answers is lenient with them).
    """

    __pydantic_config__ = _SECTION

    backend: str | None = None
    """The judge's backend (None: the answer model's)."""
    model: str | None = None
    """The judge's model (None: the answer model's)."""
    base_url: str | None = None
    """The judge's OpenAI-compatible server (never inherited from the answer model)."""
    api_key_env: str | None = None
    """The environment variable of the judge's API key (None: OPENAI_API_KEY)."""
    allow_self_judge: bool = False
    """Allow a judge that is the answer model itself (it grades its own answers leniently)."""


@dataclass(frozen=True)
class PipelineConfig:
    """Every setting of a memory's build and query path, one section per stage."""

    __pydantic_config__ = _SECTION

    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    """Descriptor extraction and the query intent."""
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    """Cell placement of the Address Plane."""
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    """Cell routing and candidate scoring of the Address Plane."""
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    """The Evidence Plane: anchors, frontier, reader view."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The LLM backend and the embedder."""
    fusion: FusionConfig = field(default_factory=FusionConfig)
    """The model-free fused selector."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    """The judge of eval and compare (used by them only)."""
    mera: MeraConfig = field(default_factory=MeraConfig)
    """MERA's missing-evidence retrieval rounds."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, source: str | None = None) -> "PipelineConfig":
        """Build from a (possibly partial) nested mapping such as a parsed config file.

        Every value is checked against its field's type, allowed values and range, with
        JSON's strictness (no "10" for 10, no 1 for true); unknown sections and fields are
        errors. Raises ``ConfigError`` naming ``source`` (e.g. the file), each bad field's
        path such as ``evidence.anchor_selector``, what it allows and what it got.
        """
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{_where(source)}expected a mapping of config sections, got {type(data).__name__}")
        return _validated(data, source)

    def replace(self, **sections: Any) -> "PipelineConfig":
        """Return a copy with some fields of some sections replaced: replace(evidence={'k0': 5}).

        The result is validated like ``from_dict`` (``ConfigError`` on a bad value).
        """
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, changes in sections.items():
            if name not in current:
                raise ConfigError(f"unknown config section {name!r}; expected one of {sorted(current)}")
            current[name] = dataclasses.replace(current[name], **changes)
        return validate_config(PipelineConfig(**current))


@functools.cache
def _adapter() -> TypeAdapter:
    # Built on first use: constructing the validator costs a few milliseconds.
    return TypeAdapter(PipelineConfig)


def _where(source: str | None) -> str:
    return f"{source}: " if source else ""


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the config section at ``loc`` (() is the top level)."""
    cls: Any = PipelineConfig
    for part in loc:
        match = [f for f in dataclasses.fields(cls) if f.name == part]
        if not match or not dataclasses.is_dataclass(match[0].default_factory):  # type: ignore[arg-type]
            return []
        cls = match[0].default_factory
    return sorted(f.name for f in dataclasses.fields(cls))


def _describe(error: Mapping[str, Any]) -> str:
    loc = tuple(error["loc"])
    path = ".".join(str(p) for p in loc) or "<config>"
    if error["type"] == "unexpected_keyword_argument":
        parent = loc[:-1]
        kind = "section" if not parent else "field"
        where = f" of {'.'.join(map(str, parent))}" if parent else ""
        return f"{path}: unknown config {kind}{where}; expected one of {_fields_at(parent)}"
    return f"{path}: {error['msg']} (got {error['input']!r})"


def _validated(data: Mapping[str, Any], source: str | None) -> PipelineConfig:
    try:
        # A config file is JSON-shaped; a value JSON cannot hold (a YAML date) is checked as text.
        text = json.dumps(data, default=str)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{_where(source)}the config is not a JSON-like mapping ({exc})") from None
    try:
        return _adapter().validate_json(text, strict=True)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors())
        raise ConfigError(f"{_where(source)}invalid config: {problems}") from None


def validate_config(cfg: PipelineConfig, *, source: str | None = None) -> PipelineConfig:
    """Check every value of ``cfg`` (as ``from_dict`` does) and return it unchanged.

    For configurations assembled in code (``PipelineConfig(evidence=EvidenceConfig(...))``),
    which dataclasses do not check. Raises ``ConfigError``.
    """
    _validated(dataclasses.asdict(cfg), source)
    return cfg


def config_needs_llm(c: PipelineConfig) -> bool:
    """Whether building or compiling (answering aside) makes any model call under ``c``."""
    return (
        c.extraction.extractor == "llm"
        or (c.extraction.use_intent and c.extraction.intent_source == "llm")
        or c.evidence.anchor_selector == "llm"
        or c.evidence.frontier == "llm"
        or (c.mera.enabled and "llm" in (c.mera.planner, c.mera.verifier))
    )
