"""Namespace ids: the key that keeps one user's (or one conversation's) memory apart from another's.

A namespace id ends up in SQL parameters, log lines, file names of exports and CLI arguments, so
it is restricted to a small allow-list of characters rather than escaped everywhere it is used.
"""

from __future__ import annotations

import re

from ..errors import NamespaceError

MAX_NAMESPACE_LEN = 128
"""Longest accepted namespace id, in characters."""

NAMESPACE_CHARS = "A-Za-z0-9._:@-"
"""Characters a namespace id may contain (as a regex character-class body)."""

# The first character may not be '.', so that an id can never look like a hidden file or a
# relative path component ("." / "..") when it is used to build a file name.
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_:@-][A-Za-z0-9._:@-]*")


def validate_namespace(ns: object) -> str:
    """Return ``ns`` unchanged when it is a well-formed namespace id, else raise.

    Accepts a ``str`` of 1..128 characters from ``[A-Za-z0-9._:@-]`` that does not start
    with ``'.'``. Raises :class:`NamespaceError` (a ``ValueError``) for ``None``, non-strings,
    the empty string, over-long ids and any other character (``/``, spaces, non-ASCII, ...).
    """
    if ns is None:
        raise NamespaceError("a namespace id is required for this call (got None)")
    if not isinstance(ns, str):
        raise NamespaceError(f"namespace id must be a str, got {type(ns).__name__}")
    if ns == "":
        raise NamespaceError("namespace id must not be empty")
    if len(ns) > MAX_NAMESPACE_LEN:
        raise NamespaceError(
            f"namespace id is {len(ns)} characters long; expected at most {MAX_NAMESPACE_LEN}"
        )
    if _NAMESPACE_RE.fullmatch(ns) is None:
        raise NamespaceError(
            f"namespace id {ns!r} is malformed: expected characters from [{NAMESPACE_CHARS}] "
            "and a first character other than '.'"
        )
    return ns
