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
    ``max_k``: the largest ``k`` (evidence packets) a search may ask for (400).
    ``max_metadata_bytes``: a turn's metadata object as JSON text (400). ``max_import_mb``: an
    uploaded import file, in MiB (413 past it). ``max_page``: the
    largest page size of the list routes. ``max_queue_turns``: turns waiting for a background
    build over the whole store (429 past it). ``max_views`` and ``max_view_mb``: bounds of the view
    cache (users held loaded, and their estimated MiB).
    """

    max_body_bytes: int = 1_000_000
    max_turns_per_request: int = 500
    max_text_chars: int = 100_000
    max_k: int = 50
    max_metadata_bytes: int = 4096
    max_import_mb: int = 64
    max_page: int = 500
    max_queue_turns: int = 50_000
    # The view cache: users whose memory is held loaded between searches, and their estimated
    # size; past either the least recently searched leave first and load again when asked for.
    max_views: int = 10_000
    max_view_mb: int = 1024

    @property
    def max_import_bytes(self) -> int:
        return self.max_import_mb << 20

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


@dataclass(frozen=True)
class ServeOptions:
    """How the HTTP app treats requests beyond their bodies (``serve`` flags of the same names).

    ``cors_origins``: origins a browser may call from (``--cors-origin``, repeatable; none by
    default, so no CORS headers are sent). ``rate_limit``: requests per second per tenant,
    averaged, with bursts of ``rate_burst`` (default twice the rate); None: no limit (the
    default). ``failed_keys_per_minute`` and ``failed_keys_burst``: refused API keys one source
    address may send before it gets 429 (``ratelimit.FailedKeyThrottle``). ``metrics_auth``:
    ``/metrics`` needs a valid API key of any tenant (off by default: it shows aggregate
    counts only). ``access_log``: one log line per request (``memcompile_local.service.access``).
    """

    cors_origins: tuple[str, ...] = ()
    rate_limit: float | None = None
    rate_burst: int | None = None
    failed_keys_per_minute: float = 10.0
    failed_keys_burst: int = 20
    metrics_auth: bool = False
    access_log: bool = True

    def __post_init__(self):
        if self.rate_limit is not None and not self.rate_limit > 0:
            raise ConfigError(f"rate_limit must be a positive number of requests per second, got {self.rate_limit!r}")
        if self.rate_burst is not None and self.rate_burst < 1:
            raise ConfigError(f"rate_burst must be a positive integer, got {self.rate_burst!r}")
        if not self.failed_keys_per_minute > 0 or self.failed_keys_burst < 1:
            raise ConfigError("failed_keys_per_minute and failed_keys_burst must be positive")
        for origin in self.cors_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ConfigError(f"CORS origin {origin!r}: expected '*' or a scheme and host such as "
                                  "'https://app.example.com'")
