"""Open a store from where it is: a file path, ``:memory:``, a ``sqlite:`` URL, or a
``postgresql://`` / ``postgres://`` URL.

The one place that knows which backend serves which location; the facade, the service and
the command line receive what ``open_store`` returns (a ``Store``). ``describe_location`` and
``check_store`` are the other two things they ask of a location without knowing its backend.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from ..errors import StoreError
from .base import Store
from .check import CheckReport
from .check import check_store as check_sqlite_file
from .postgres import SCHEMES as POSTGRES_SCHEMES
from .postgres import is_postgres_url, open_postgres, redact_url
from .sqlite_store import DEFAULT_FORGET_WAIT_S, MemoryStore

SCHEMES = ("sqlite", *POSTGRES_SCHEMES)  # URL schemes served (a bare path is a SQLite file)


def sqlite_path(location: str | os.PathLike) -> str | None:
    """The SQLite file ``location`` names (a path, ``:memory:``, ``sqlite:///abs/path`` or
    ``sqlite:relative/path``), or None when it is a URL of another scheme."""
    text = os.fspath(location)
    if text == ":memory:" or "://" not in text and not text.startswith("sqlite:"):
        return text
    url = urlparse(text)
    if url.scheme != "sqlite":
        return None
    path = unquote(url.path if url.netloc in ("", "localhost") else f"//{url.netloc}{url.path}")
    return path or ":memory:"


def is_database_url(location: str | os.PathLike) -> bool:
    """Whether ``location`` names a database server (a ``postgresql://`` URL), not a file."""
    return is_postgres_url(os.fspath(location))


def describe_location(location: str | os.PathLike) -> str:
    """``location`` as messages may show it: a database URL without its password."""
    text = os.fspath(location)
    return redact_url(text) if is_postgres_url(text) else text


def open_store(location: str | os.PathLike, *, create: bool = True, read_only: bool = False,
               forget_wait_s: float | None = None) -> Store:
    """The store at ``location`` (see ``sqlite_path``; a ``postgresql://`` URL opens the
    PostgreSQL backend, which needs the ``postgres`` extra). ``create=False``: an absent store
    is an error; ``read_only=True``: every write raises ``StoreError``; ``forget_wait_s`` bounds
    how long ``forget`` waits for others before its scrub (its vacuum, on PostgreSQL)."""
    text = os.fspath(location)
    if is_postgres_url(text):
        return open_postgres(text, create=create, read_only=read_only, forget_wait_s=forget_wait_s)
    path = sqlite_path(text)
    if path is None:
        raise StoreError(f"no store backend for {describe_location(text)!r}; expected a file path or a "
                         f"URL of scheme {', '.join(SCHEMES)}")
    return MemoryStore(path, create=create, read_only=read_only,
                       forget_wait_s=DEFAULT_FORGET_WAIT_S if forget_wait_s is None else forget_wait_s)


def check_store(location: str | os.PathLike) -> CheckReport:
    """Check the store at ``location`` for damage with its backend's own checks (a SQLite
    file's pages and rows; a database's rows and references). Raises ``StoreError`` only when
    there is no store there."""
    text = os.fspath(location)
    if is_postgres_url(text):
        with open_postgres(text, create=False, read_only=True) as store:
            return store.check()
    path = sqlite_path(text)
    if path is None:
        raise StoreError(f"no store backend for {describe_location(text)!r}")
    return check_sqlite_file(path)
