"""PostgreSQL locations: which strings name a database, and how to show one without its password.

Nothing here imports the driver, so the factory can recognise a URL (and a message can name it)
on an installation without the ``postgres`` extra.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from ...errors import MissingExtraError

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
