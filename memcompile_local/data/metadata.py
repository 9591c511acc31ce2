"""A turn's metadata as callers send it: one small JSON object, bounded in size and depth.

Every door that takes metadata (the service's append and import, ``Memory.add`` with plain
dicts, the plain memory format) checks it here and stores the canonical text
(``types.canonical_metadata_json``: sorted keys, no spaces). The bounds keep a turn's metadata a
label-sized annotation, not a second document: ``MAX_METADATA_BYTES`` of canonical UTF-8 text
and ``MAX_METADATA_DEPTH`` levels of nesting (the object itself is level 1).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

MAX_METADATA_BYTES = 4096
MAX_METADATA_DEPTH = 4


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of a JSON value (a scalar is 0), counted only up to ``limit + 1``."""
    if limit < 0:
        return 1
    if isinstance(value, Mapping):
        return 1 + max((_depth(v, limit - 1) for v in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max((_depth(v, limit - 1) for v in value), default=0)
    return 0


def metadata_json(value: Any, *, max_bytes: int = MAX_METADATA_BYTES, max_depth: int = MAX_METADATA_DEPTH) -> str | None:
    """The canonical JSON text of a turn's metadata ``value`` (None for None).

    ``value`` must be a mapping with string keys whose values JSON can write (no NaN or
    infinity), at most ``max_depth`` levels deep and ``max_bytes`` bytes as canonical text.
    Raises ValueError saying what is wrong.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a JSON object, got {type(value).__name__}")
    depth = _depth(value, max_depth)
    if depth > max_depth:
        raise ValueError(f"nests more than {max_depth} levels of objects or arrays")
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"is not a JSON object: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(f"has {size} bytes as JSON; at most {max_bytes}")
    return text
