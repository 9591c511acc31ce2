"""Request limits of the memory service (all configurable from ``serve`` flags or a YAML ``service:`` section)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from ..errors import ConfigError


@dataclass(frozen=True)
class Limits:
    """Bounds a request must stay within; a request past one gets a typed 4xx, not a partial write.

    ``max_body_bytes``: request body size (413 past it). ``max_turns_per_request``: turns in one
    append (413). ``max_text_chars``: characters of one turn's text or of a query (400).
    ``max_k``: the largest ``k`` (evidence packets) a search may ask for (400). ``max_page``: the
    largest page size of the list routes. ``max_queue_turns``: turns waiting for a background
    build over the whole store (429 past it).
    """

    max_body_bytes: int = 1_000_000
    max_turns_per_request: int = 500
    max_text_chars: int = 20_000
    max_k: int = 50
    max_page: int = 500
    max_queue_turns: int = 50_000

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Limits":
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"service limits: unknown keys {unknown}; expected some of {sorted(known)}")
        for k, v in data.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"service limits: {k} must be a positive integer, got {v!r}")
        return cls(**data)
