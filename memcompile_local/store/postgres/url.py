"""PostgreSQL locations: which strings name a database, and how to show one without its password.

Nothing here imports the driver, so the factory can recognise a URL (and a message can name it)
on an installation without the ``postgres`` extra.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import MissingExtraError, StoreError

SCHEMES = ("postgresql", "postgres")


def is_postgres_url(location: str) -> bool:
    """Whether ``location`` is a ``postgresql://`` or ``postgres://`` URL."""
    head, sep, _ = location.partition("://")
    return bool(sep) and head.lower() in SCHEMES


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in the user part and in a ``password=``
    query parameter), for messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://(unparsable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    query = "&".join(
        (p.split("=", 1)[0] + "=***") if p.split("=", 1)[0].lower() == "password" else p
        for p in parts.query.split("&")
    ) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


POOL_OPTIONS = {"pool_size": int, "pool_timeout": float}
"""Query parameters of a store URL that size this process's connection pool (taken out of the
URL before it reaches the server): ``pool_size`` connections at most (default 8) and
``pool_timeout`` seconds to wait for a free one before a call fails (default 10)."""


def split_pool_options(url: str) -> tuple[str, dict[str, float]]:
    """(``url`` without the pool parameters, ``{"pool_size": .., "pool_timeout_s": ..}`` given)."""
    parts = urlsplit(url)
    kept, options = [], {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in POOL_OPTIONS:
            try:
                number = POOL_OPTIONS[key](value)
            except ValueError:
                raise StoreError(f"{redact_url(url)}: {key} must be a number, got {value!r}") from None
            if not number > 0:
                raise StoreError(f"{redact_url(url)}: {key} must be > 0, got {value!r}")
            options["pool_timeout_s" if key == "pool_timeout" else key] = number
        else:
            kept.append((key, value))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept, safe="/"), parts.fragment)), options


def require_driver():
    """The ``psycopg`` and ``psycopg_pool`` modules, or :class:`MissingExtraError` naming the extra."""
    try:
        import psycopg
    except ImportError as exc:
        raise MissingExtraError("psycopg", "postgres", "a postgresql:// store") from exc
    try:
        import psycopg_pool
    except ImportError as exc:
        raise MissingExtraError("psycopg_pool", "postgres", "a postgresql:// store") from exc
    return psycopg, psycopg_pool
