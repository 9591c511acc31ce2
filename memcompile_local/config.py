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

# Every section rejects unknown fields when validated (pydantic reads this class attribute).
_STRICT_FIELDS = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class PlacementConfig:
    """Bounded Cell placement (Appendix B.2, Eqs. 3-4 and 17-21)."""

    __pydantic_config__ = _STRICT_FIELDS

    layout: Literal["bounded", "flat", "sequential", "session", "entity"] = "bounded"
    token_cap: PosInt = 360  # B_C
    item_cap: PosInt = 12  # M_C
    beta: NonNeg = 1.4  # weight of coherence C
    gamma: NonNeg = 1.0  # weight of inconsistency X
    eta: NonNeg = 0.45  # weight of expansion pressure E
    coherence_keyword: NonNeg = 0.45
    coherence_person: NonNeg = 0.35
    coherence_time: NonNeg = 0.20
    time_in_span: NonNeg = 1.0
    time_out_of_span: NonNeg = 0.25
    inconsistency_penalty: NonNeg = 0.45
    session_span_weight: NonNeg = 0.2  # in H(c)
    entropy_delta_weight: NonNeg = 0.4  # Delta_H weight in E
    fill_weight: NonNeg = 0.25
    entropy_excess_weight: NonNeg = 0.25
    entropy_threshold: NonNeg = 1.8
    new_cell_coherence: NonNeg = 0.55
    new_cell_pressure: NonNeg = 0.65
    block_size: PosInt = 12  # fixed-length blocks of the sequential/session/entity layouts (= M_C)


@dataclass(frozen=True)
class RoutingConfig:
    """Diminishing-benefit Cell routing and the candidate union (Appendix B.3, Eqs. 5-7, 22-23)."""

    __pydantic_config__ = _STRICT_FIELDS

    w_keywords: NonNeg = 2.0
    w_people: NonNeg = 2.2
    w_title: NonNeg = 0.7
    temporal_bonus: NonNeg = 0.25  # T_q(c)
    w_density: NonNeg = 0.03
    admission: NonNeg = 0.08
    cell_budget: NonNegInt = 6  # B_cell: maximum opened Cells
    min_cells: NonNegInt = 1
    pool_floor: NonNegInt = 12  # pool = max(12, 6 * B_cell) = 36
    pool_per_cell: NonNegInt = 6
    redundancy: Fraction = 0.45  # lambda_R
    open_cost: NonNeg = 0.02
    token_cost: NonNeg = 0.0005
    relative_floor: Fraction = 0.68
    cumulative_top_p: Fraction = 0.90
    channels: Literal["both", "cells", "bm25"] = "both"  # A4 Cell-only, A5 BM25-only ablations
    bm25_k1: NonNeg = 1.5
    bm25_b: Fraction = 0.75
    bm25_top: NonNegInt = 96
    bm25_map_scale: NonNeg = 2.0  # b_i = 2 log(1 + s_i) / log(1 + s_max)
    seeds: NonNegInt = 8
    alpha_f: NonNeg = 2.0
    alpha_k: NonNeg = 1.6
    alpha_p: NonNeg = 2.4
    alpha_t: NonNeg = 0.3
    alpha_b: NonNeg = 0.45
    mmr_support: NonNeg = 0.10
    mmr_overlap: NonNeg = 0.58
    mmr_same_cell: NonNeg = 0.08
    mmr_k: NonNegInt = 10


@dataclass(frozen=True)
class EvidenceConfig:
    """Evidence Plane (Section 3.4, Appendix C.2)."""

    __pydantic_config__ = _STRICT_FIELDS

    k0: PosInt = 10  # initial SourcePackets
    k_dense: NonNegInt = 40  # K_D, dense packet proposals
    k_rank: NonNegInt = 5  # K_R, frontier rank cutoff
    k_append: NonNegInt = 2  # K_Delta, frontier append cap
    max_retries: NonNegInt = 3  # scheduler schema-correction retries (Appendix A.2)
    anchor_selector: Literal["llm", "mmr", "normalized", "pursuit", "dense", "fused"] = "llm"
    frontier: Literal["llm", "pursuit", "none"] = "llm"
    view: Literal["claim_bundle", "raw_packet", "representative_claim"] = "claim_bundle"
    pursuit_tau: NonNeg = 1e-5  # MemPursuit adaptive stop (MemPursuit paper)
    pursuit_pool: PosInt = 200  # P: MemPursuit candidates (normalized pool, then dense proposals)
    # For models with a small context window (not in the paper, which sends the whole pool):
    # the scheduler sees at most this many candidates (pool order) and this many characters of each.
    max_schedule_pool: PosInt | None = None
    max_candidate_chars: PosInt | None = None
    # Reader budget of one evidence block in characters: a longer block is cut with
    # a visible marker (evidence/views.py). None: no cap. Far above any benchmark turn.
    max_block_chars: Annotated[int, Field(ge=1000)] | None = 8000


@dataclass(frozen=True)
class FusionConfig:
    """The model-free ``fused`` selector (memcompile_local/fused/); not a paper component.

    Each channel of ``fused.channels.CHANNELS`` has a ``<name>_weight`` here (0 turns it off).

    The defaults are the cross-validated winner of ``scripts/ablate_model_free.py --cv``
    (leave-one-conversation-out on four LoCoMo conversations; README, "The model-free path").
    """

    __pydantic_config__ = _STRICT_FIELDS

    lexical_weight: float = 1.0
    packet_weight: float = 1.5
    speaker_weight: float = 0.3
    temporal_weight: float = 0.2
    neighbor_context: bool = True  # lexical documents take in the in-session neighbours
    dense_neighbor_context: bool = True  # packet cosine is max(z(p), context document)
    # What the dense channel embeds per turn when the fused selector is the anchor selector
    # (build.stages.dense_plan; LLM paths always embed z(p)): "packet" = z(p) with its claims, people,
    # keywords and time; "lean" = z(p) without the claim lines; "turn" = the raw turn alone.
    dense_document: Literal["packet", "lean", "turn"] = "packet"
    # Context vectors: "embedded" = each turn's neighbour document (previous, own, next turn)
    # embedded; "composed" = the normalized sum of those turns' dense vectors (nothing embedded).
    dense_context: Literal["embedded", "composed"] = "embedded"
    # The context vector counts only for turns whose context document has at most this many
    # words (whitespace runs; 0: for every turn). An embedder reads its first window only
    # (all-MiniLM-L6-v2: 256 word pieces, about 190 words), so the context document of a long
    # turn is embedded as the turn before it, which the question often resembles more. The
    # learned ranker's plain-turn vector of a turn longer than this is its z(p) vector: both read
    # the same first window of the turn's text, so the turn is not embedded a second time.
    context_window_words: NonNegInt = 300
    # Long turns (issue 25 item 3): a turn of more than ``passage_words`` words (whitespace runs)
    # is also embedded as overlapping passages of at most that many words on sentence boundaries
    # (address/passages.py), and its dense score is its passages' pooled cosine
    # (``passage_pool``: "max" = the best passage, "top2" = the mean of the two best); the
    # selected unit stays the turn. 0 turns passages off.
    passage_words: NonNegInt = 0
    passage_overlap_words: NonNegInt = 30
    passage_pool: Literal["max", "top2"] = "top2"
    bm25_k1: NonNeg = 1.5
    bm25_b: Fraction = 0.75
    # Components measured by `scripts/ablate_model_free.py --cv` (on only where that kept them).
    time_match_weight: float = 0.75  # bonus for turns dated in the period the question names
    # Bonus for turns that name a person, place or title when the question asks for one
    # (language/answertype.py; of the named participant's turns when the question names one;
    # never on user-assistant histories). 0.75: chosen per held-out LoCoMo conversation (0.75 in
    # all four folds), and it gains on REALTALK too under both rankers (README, "Answer type";
    # scripts/multihop_study.py, scripts/train_ranker.py); 0 turns it off.
    answer_type_weight: NonNeg = 0.75
    # The dense query: the rule intent's text alone, or the mean of its embedding and the question's.
    dense_query: Literal["intent", "intent+question"] = "intent+question"
    # "drop": a question with a request frame ("Can you list the order in which I brought up
    # ... across our conversations? Mention only five items.") is embedded as its content alone
    # (language/framing.py); "keep": as asked. BM25 and every cue read the question as asked.
    request_frame: Literal["keep", "drop"] = "keep"
    bursts: bool = False  # lexical documents group consecutive same-speaker messages
    tolerant_names: bool = False  # lower-case, nickname and one-typo spellings of participant names
    # Bonus for the side a user-assistant question's pronouns point at when it names nobody: the
    # user's turns for "I"/"my", the assistant's for "you recommended" (language/roles.py, the
    # ``role`` channel; the ranker's speaker columns read it too). Never on a history without an
    # assistant, so LoCoMo-shaped dialogue is unchanged; 0 turns it off. README ("Pronoun roles")
    # has the cross-validated choice and why it is on though it can gain on one corpus only.
    role_weight: float = 0.5
    # Chat-log normalization of the BM25 terms of turns and questions (issue 25 item 7;
    # language/chatnorm.py): chat spellings to standard words ("bday" -> "birthday", "gonna" ->
    # "going to"), elongations squashed ("sooo" -> "so"), emoji and emoticons to words. The dense
    # channel reads the text as written. Measured with ``scripts/ablate_model_free.py --cv`` and
    # kept off (README, "The model-free path").
    chat_norm: bool = False
    # Share of the lexical score the terms of the one participant a question names keep
    # (1 = a term like any other; below 1 the speaker channel alone carries who is asked about).
    name_term_weight: Fraction = 0.25
    # When that share applies: "always", or "alone" = only when no other term of the question
    # matches any turn (the name is then the channel's only evidence). 0.25 "alone" fixes
    # questions that name the user and gained a little on LoCoMo and REALTALK cross-validated.
    name_term_scope: Literal["always", "alone"] = "alone"
    # Complementary selection of list questions over the fused top-P: MemPursuit starting from
    # the kept packets (its picks explain what the kept ones leave of the query), or none.
    complement: Literal["none", "pursuit"] = "pursuit"
    complement_pool: NonNegInt = 30  # P
    complement_keep: NonNegInt = 6  # first slots kept in fused order
    # Pool handed to the LLM scheduler: the paper's normalized pool, or the fused top-N.
    schedule_pool: Literal["normalized", "fused"] = "normalized"
    schedule_pool_size: PosInt = 103  # N for the fused pool: the mean size of the paper's pool (ablate --pool-recall)
    # How the fused score is made (issue 25 item 5): "weighted" = the weighted channel sum above;
    # "learned" = a learned ranker (fused/ranker.py) reorders the weighted sum's best turns;
    # "auto" = learned on a history with an "assistant" speaker (a user-assistant chat, where the
    # weighted sum fell below plain dense retrieval) or sent in bursts (a messaging-app chat, where
    # one person often sends several turns in a row; retriever.AUTO_BURST_SHARE), weighted on
    # strictly alternating dialogue (LoCoMo's shape: the weights were fit there, and the learned
    # ranker lost recall there). See README, "Learned fusion".
    ranker: Literal["weighted", "learned", "auto"] = "auto"
    ranker_model: str | None = None  # the learned ranker's model file (None: the shipped one)


@dataclass(frozen=True)
class MeraConfig:
    """MERA missing-evidence retrieval rounds (Missing-Evidence Retrieval Augmentation; evidence/mera.py); off by default.

    ``planner``/``verifier``: "rule" (no model) or "llm" (prompted, constrained JSON).
    ``max_rounds``: follow-up rounds after the first selection; ``max_tokens``: planner and
    verifier tokens one question may spend (rounds stop when reached); ``final_slots``: at
    most this many verified new packets replace the tail of the first selection (the packet
    budget K0 is unchanged).
    """

    __pydantic_config__ = _STRICT_FIELDS

    enabled: bool = False
    planner: Literal["rule", "llm"] = "rule"
    verifier: Literal["rule", "llm"] = "rule"
    max_rounds: NonNegInt = 2
    queries_per_round: PosInt = 3
    hits_per_query: PosInt = 5
    read: PosInt = 5  # verified packets the planner reads
    verify_threshold: Fraction = 0.5  # rule verifier: least share of the query's best search score
    final_slots: NonNegInt = 2
    max_tokens: PosInt = 6000


@dataclass(frozen=True)
class ExtractionConfig:
    """Descriptor extraction (Appendix B.1)."""

    __pydantic_config__ = _STRICT_FIELDS

    extractor: Literal["llm", "rule"] = "llm"
    combined_call: bool = False  # facts and metadata in one call per turn
    on_failure: Literal["error", "rule"] = "error"  # a turn the model fails on: stop, or rule-extract it
    max_keywords: NonNegInt = 5
    # Rule extractor only: at most this many sentence claims per turn (image captions always
    # kept), the most content-rich; None: one per sentence. Bounds a long reply's claim cost.
    max_rule_claims: PosInt | None = None
    use_intent: bool = True  # query intent (ablation A6 turns it off)
    intent_source: Literal["llm", "rule"] = "llm"  # the model-free path uses the rule-based intent


@dataclass(frozen=True)
class ModelConfig:
    """Which backend and model serve LLM calls, and which embedder serves dense retrieval."""

    __pydantic_config__ = _STRICT_FIELDS

    backend: str = "llamacpp"
    model: str = "smollm2-135m"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: PosInt = 2048  # every stage decodes greedily: temperature 0, seed 0 (LLMRequest defaults)
    concurrency: PosInt = 4
    timeout_s: Positive = 120.0
    context_window: PosInt | None = None  # tokens; checked by the full-context baseline when set
    # Answer prompt and decoding (evidence/answer.py answer_settings): "full" = the paper-style
    # prompts, "small" = a short extractive prompt, few tokens, first blocks only; "auto" picks
    # "small" for the embedded SmolLM2-135M and "full" otherwise.
    answer_prompt: Literal["auto", "full", "small"] = "auto"
    embedder: str = "sentence-transformers"
    embed_model: str = "all-MiniLM-L6-v2"  # a shipped name, a local folder, or a hub name (needs downloads on)
    # sentence-transformers embedder (adapters/embed_st.py): "auto" runs ONNX Runtime fp32 on a
    # CPU (int8: faster, opt-in) and torch fp16 on CUDA; backend and precision are part of the
    # vectors' cache key.
    embed_backend: Literal["auto", "torch", "onnx"] = "auto"
    embed_precision: Literal["auto", "fp32", "fp16", "int8"] = "auto"
    embed_device: Literal["auto", "cpu", "cuda"] = "auto"
    embed_batch_size: PosInt = 64
    # ONNX Runtime threads per embedding call (None: every usable core), e.g. to leave cores to
    # other processes. (On 2 cores, 1 thread did not change the service's 8-client throughput.)
    embed_threads: PosInt | None = None
    embed_query_prefix: str = ""  # e5: "query: ", bge: "Represent this sentence for searching relevant passages: "
    embed_document_prefix: str = ""  # e5: "passage: "
    embed_allow_download: bool = False  # fetch a hub model name when a hub is reachable (default: offline)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeConfig:
    """The LLM judge of ``eval`` and ``compare``: a backend, model, server and key of its own.

    ``backend``/``model`` left unset take the answer model's (``ModelConfig``); ``base_url``
    and ``api_key_env`` are never inherited, so a judge named here does not go to the answer
    model's server. A judge that resolves to the answer model itself is refused unless
    ``allow_self_judge`` (a model grading its own answers is lenient with them).
    """

    __pydantic_config__ = _STRICT_FIELDS

    backend: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None  # default OPENAI_API_KEY
    allow_self_judge: bool = False


@dataclass(frozen=True)
class PipelineConfig:
    """Every setting of a memory's build and query path, one section per stage."""

    __pydantic_config__ = _STRICT_FIELDS

    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # used by eval/compare only
    mera: MeraConfig = field(default_factory=MeraConfig)

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
