"""Open a store from where it is: a file path, ``:memory:``, or a ``sqlite:`` URL.

The one place that knows which backend serves which location; the facade, the service and
the command line receive what ``open_store`` returns (a ``Store``).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from ..errors import StoreError
from .base import Store
from .sqlite_store import DEFAULT_FORGET_WAIT_S, MemoryStore

SCHEMES = ("sqlite",)  # URL schemes served (a bare path is a SQLite file)


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


def open_store(location: str | os.PathLike, *, create: bool = True, read_only: bool = False,
               forget_wait_s: float | None = None) -> Store:
    """The store at ``location`` (see ``sqlite_path``). ``create=False``: an absent store is an
    error; ``read_only=True``: every write raises ``StoreError``; ``forget_wait_s`` bounds how
    long ``forget`` waits for readers before its scrub."""
    path = sqlite_path(location)
    if path is None:
        raise StoreError(f"no store backend for {os.fspath(location)!r}; expected a file path or a "
                         f"URL of scheme {', '.join(SCHEMES)}")
    return MemoryStore(path, create=create, read_only=read_only,
                       forget_wait_s=DEFAULT_FORGET_WAIT_S if forget_wait_s is None else forget_wait_s)
