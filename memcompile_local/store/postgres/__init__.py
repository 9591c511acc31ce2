"""The PostgreSQL backend of the store (the ``postgres`` extra: psycopg 3 and psycopg_pool).

``url`` recognises and redacts ``postgresql://`` URLs without the driver; ``store`` is the
backend (``PostgresStore``), with its pool and transactions in ``connection``, the request
cache in ``ledger``, the build queue in ``queue``, the schema in ``schema``, the content check
in ``check`` and the NOTIFY listener in ``listen``. Only ``open_postgres`` imports the driver.
"""

from __future__ import annotations

from .url import SCHEMES, is_postgres_url, redact_url


def open_postgres(url: str, *, create: bool = True, read_only: bool = False,
                  forget_wait_s: float | None = None, **pool: object):
    """A ``PostgresStore`` on the database at ``url`` (``pool_size``/``pool_timeout`` query
    parameters size its pool, see ``url.POOL_OPTIONS``); ``MissingExtraError`` without the driver."""
    from .url import require_driver, split_pool_options

    require_driver()
    from .store import DEFAULT_FORGET_WAIT_S, PostgresStore

    url, options = split_pool_options(url)
    pool = {**options, **pool}
    return PostgresStore(url, create=create, read_only=read_only,
                         forget_wait_s=DEFAULT_FORGET_WAIT_S if forget_wait_s is None else forget_wait_s,
                         **pool)  # type: ignore[arg-type]


__all__ = ["SCHEMES", "is_postgres_url", "open_postgres", "redact_url"]
