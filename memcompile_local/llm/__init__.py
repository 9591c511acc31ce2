"""The one model interface: typed requests, validation, a caching client and a backend registry.

Importing this package loads no model library; backends do that when constructed.
"""

from memcompile_local.llm.client import InMemoryLedger, LLMClient, add_totals
from memcompile_local.llm.extras import require
from memcompile_local.llm.interface import (
    STAGES,
    Embedder,
    JsonSchemaSpec,
    LLMBackend,
    LLMRequest,
    LLMResponse,
    Message,
    OutputSpec,
    RankingSpec,
    TextSpec,
    spec_for,
    stable_hash,
)
from memcompile_local.llm.registry import BACKENDS, EMBEDDERS, load_backend, load_embedder
from memcompile_local.llm.validate import extract_json, schema_errors, validate_response

__all__ = [
    "STAGES",
    "Embedder",
    "JsonSchemaSpec",
    "LLMBackend",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OutputSpec",
    "RankingSpec",
    "TextSpec",
    "spec_for",
    "stable_hash",
    "LLMClient",
    "InMemoryLedger",
    "add_totals",
    "require",
    "BACKENDS",
    "EMBEDDERS",
    "load_backend",
    "load_embedder",
    "validate_response",
    "extract_json",
    "schema_errors",
]
