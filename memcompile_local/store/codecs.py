"""Row codecs of the store: Python values to SQLite rows and back, with the checks on both sides.

Writing, every field is type-checked (a wrong type raises :class:`StoreError` naming the field) and
lists/sets become canonical JSON. Reading, a row that does not decode (bad JSON, a wrong type
written by another tool, a hand-edited file) raises :class:`StoreError` naming the table and the
row's key, never a bare ``json.JSONDecodeError`` or ``TypeError``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from functools import lru_cache
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import StoreError
from ..types import Cell, Descriptor, EventFields, SourcePacket, canonical_metadata_json, content_sha256
from .namespace import validate_namespace

IN_CHUNK = 500
"""Keys per ``IN (...)`` query; far below SQLite's bound-parameter limit."""


# -------------------------------------------------------------------------- write-side checks


def require_str(value: object, what: str, *, allow_empty: bool = False) -> str:
    """``value`` when it is a ``str`` (non-empty unless ``allow_empty``), else :class:`StoreError`."""
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a str, got {type(value).__name__}")
    if not allow_empty and value == "":
        raise StoreError(f"{what} must not be empty")
    return value


def check_metadata_json(value: object, what: str) -> str | None:
    """``value`` (None, or the text of one JSON object) as its canonical text (see
    :func:`canonical_metadata_json`), or StoreError naming ``what``."""
    try:
        return canonical_metadata_json(value)
    except ValueError as e:
        raise StoreError(f"{what} {e}") from None


def vector_rows(ns: str, mid: str, keys: Sequence[str], vectors: Any,
                content: Sequence[str] | None) -> tuple[list[str], list[bytes], list[str], int]:
    """Vectors checked for storing under ``keys``: (keys, float32 little-endian blobs, content
    addresses, dim). An address is the caller's (``content``) or the sha256 of the vector's bytes;
    StoreError for a wrong shape or dtype, NaN or infinity, repeated keys."""
    keys = [require_str(k, "embedding key") for k in keys]
    arr = np.asarray(vectors)
    if arr.ndim != 2 or arr.shape[0] != len(keys) or arr.shape[1] < 1:
        raise StoreError(f"vectors must have shape ({len(keys)}, dim>=1) to match the keys; got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise StoreError(f"vectors must be real numbers, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype="<f4")
    if not np.isfinite(arr).all():
        raise StoreError(f"vectors for {ns!r}/{mid!r} contain NaN or infinite values")
    if len(set(keys)) != len(keys):
        raise StoreError(f"embedding keys for {ns!r}/{mid!r} contain duplicates")
    blobs = [arr[i].tobytes() for i in range(len(keys))]
    if content is None:
        addresses = ["v:" + hashlib.sha256(b).hexdigest() for b in blobs]
    else:
        addresses = [require_str(a, "content address") for a in content]
        if len(addresses) != len(keys):
            raise StoreError(f"{len(addresses)} content addresses for {len(keys)} embedding keys")
    return keys, blobs, addresses, int(arr.shape[1])


def capsule_rows(ns: str, writer: str, budget: int,
                 capsules: Sequence[Any]) -> list[tuple[str, str, str, int, str]]:
    """The ``capsules`` rows (namespace, capsule_id, writer, budget, body as JSON) of retained
    capsules (retention/: ``Capsule.to_dict`` rows); StoreError for a capsule without an id or
    without source packets."""
    w = require_str(writer, "retention writer")
    rows = []
    for cap in capsules:
        cid = require_str(cap.get("capsule_id"), "capsule id")
        if not isinstance(cap.get("sources"), (list, tuple)) or not cap["sources"]:
            raise StoreError(f"capsule {cid!r} of {ns!r} names no source packet")
        rows.append((ns, cid, w, int(budget), json.dumps(dict(cap), ensure_ascii=False, sort_keys=True)))
    return rows


def cache_entry(key: str, namespace: str | None, stage: str, identity_json: str,
                response: dict) -> tuple[str, str | None, str, str, int, int]:
    """A request-cache entry checked for storing: (key, namespace, stage, response as JSON
    text, prompt tokens, completion tokens); StoreError naming what is wrong."""
    k = require_str(key, "cache key")
    ns = optional_namespace(namespace)
    st = require_str(stage, "stage")
    require_str(identity_json, "identity_json")
    try:
        json.loads(identity_json)
    except ValueError as exc:
        raise StoreError(f"identity_json of cache key {k!r} is not JSON ({exc})") from exc
    if not isinstance(response, dict):
        raise StoreError(f"response must be a dict, got {type(response).__name__}")
    pt = require_int(response.get("prompt_tokens", 0), "response['prompt_tokens']", minimum=0)
    ct = require_int(response.get("completion_tokens", 0), "response['completion_tokens']", minimum=0)
    try:
        # NaN is allowed: Python's json parser accepts it in model output, and a valid response
        # must not become uncacheable because of it.
        body = json.dumps(response, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"response of cache key {k!r} is not JSON-serialisable ({exc})") from exc
    return k, ns, st, body, pt, ct


# What a stored packet may never change, beside its content hash (ingest compares these).
IMMUTABLE_PACKET_FIELDS = ("session_index", "session_id", "session_time", "speaker", "image_query",
                           "agent_id", "metadata_json")
STORED_TURN_COLS = "sha256, " + ", ".join(IMMUTABLE_PACKET_FIELDS)
"""The columns :func:`stored_turn_diffs` compares, in its order."""


def turn_values(session: Any, turn: Any, where: str) -> tuple:
    """A turn's checked values for the packets row: (session_index, session_id, session_time,
    speaker, text, image_caption, image_query, agent_id, canonical metadata_json); StoreError
    naming ``where`` for a value of the wrong type."""
    for value, name in ((turn.image_caption, "image_caption"), (turn.image_query, "image_query"),
                        (turn.agent_id, "agent_id")):
        if value is not None and not isinstance(value, str):
            raise StoreError(f"Turn.{name} ({where}) must be a str or None")
    return (
        require_int(session.index, f"Session.index ({where})"),
        require_str(session.session_id, f"Session.session_id ({where})", allow_empty=True),
        require_str(session.time, f"Session.time ({where})", allow_empty=True),
        require_str(turn.speaker, f"Turn.speaker ({where})", allow_empty=True),
        require_str(turn.text, f"Turn.text ({where})", allow_empty=True),
        turn.image_caption,
        turn.image_query,
        turn.agent_id,
        check_metadata_json(turn.metadata_json, f"Turn.metadata_json ({where})"),
    )


def stored_turn_diffs(old: Sequence[Any], sha: str, new: tuple) -> list[str]:
    """How a stored packet (a row of :data:`STORED_TURN_COLS`) differs from a turn with content
    hash ``sha`` and :func:`turn_values` ``new``; [] when it is the same turn."""
    diffs = []
    if old[0] != sha:
        diffs.append(f"content sha256 {str(old[0])[:12]}.. -> {sha[:12]}..")
    for name, was, now in zip(IMMUTABLE_PACKET_FIELDS, old[1:], (new[0], new[1], new[2], new[3], new[6], new[7],
                                                                 new[8])):
        if was != now:
            diffs.append(f"{name} {was!r} -> {now!r}")
    return diffs


def require_int(value: object, what: str, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (numpy integers accepted, bools refused), at least ``minimum``."""
    # bool is an int subclass; a True token count is a bug, not a count.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise StoreError(f"{what} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise StoreError(f"{what} must be >= {minimum}, got {value}")
    return value


def optional_namespace(ns: str | None) -> str | None:
    """``None`` or a validated namespace id."""
    return None if ns is None else validate_namespace(ns)


def str_tuple_json(values: Iterable[str], what: str) -> str:
    """A JSON list of the strings in ``values``, in their order."""
    items = list(values)
    for v in items:
        require_str(v, what, allow_empty=True)
    return json.dumps(items, ensure_ascii=False)


def sorted_set_json(values: Iterable[str], what: str) -> str:
    """A JSON list of ``values`` sorted (frozensets have no stable order across processes)."""
    return str_tuple_json(sorted(values), what)


def event_to_json(ev: EventFields) -> str:
    """Canonical JSON of a descriptor's event fields."""
    if not isinstance(ev, EventFields):
        raise StoreError(f"Descriptor.event must be EventFields, got {type(ev).__name__}")
    # The fields are flat (strings, a float, tuples of strings): a dict of them dumps exactly as
    # ``asdict`` would, without its recursive deep copy (a third of writing a descriptor).
    return json.dumps({name: getattr(ev, name) for name in _EVENT_FIELDS}, ensure_ascii=False, sort_keys=True,
                      allow_nan=False)


# -------------------------------------------------------------------------- read-side decoding


def row_error(table: str, key: str, detail: str) -> StoreError:
    """The error for a stored row that cannot be read back; says how to find every damaged row."""
    return StoreError(
        f"table {table}, row {key}: stored data is damaged ({detail}); "
        "run `memcompile-local check --store PATH` for a full report"
    )


def _json_list(text: object, table: str, key: str, column: str) -> list:
    try:
        value = json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise row_error(table, key, f"column {column} is not JSON: {exc}") from exc
    if not isinstance(value, list):
        raise row_error(table, key, f"column {column} should hold a JSON list, holds {type(value).__name__}")
    return value


# Read once: ``dataclasses.fields`` is slow enough to show when every stored descriptor is read.
_EVENT_FIELDS = tuple(f.name for f in fields(EventFields))


def event_from_json(text: object, key: str = "?") -> EventFields:
    """EventFields from the ``event_json`` column of descriptor ``key``."""
    try:
        raw = json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise row_error("descriptors", key, f"column event_json is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise row_error("descriptors", key, "column event_json should hold a JSON object")
    kwargs: dict[str, Any] = {}
    for name in _EVENT_FIELDS:
        if name in raw:
            v = raw[name]
            # JSON has no tuples; every list-valued field of EventFields is a tuple.
            kwargs[name] = tuple(v) if isinstance(v, list) else v
    try:
        return EventFields(**kwargs)
    except (TypeError, ValueError) as exc:
        raise row_error("descriptors", key, f"column event_json does not fit EventFields: {exc}") from exc


_CLASS_OF = {"s": str, "i": int, "n": (str, type(None)), "b": int}


@lru_cache(maxsize=None)
def _column_classes(types: str) -> tuple[tuple, tuple[int, ...]]:
    """(the class each column must be an instance of, the positions of 0/1 columns)."""
    return tuple(_CLASS_OF[t] for t in types), tuple(i for i, t in enumerate(types) if t == "b")


def _check_types(table: str, key: str, row: Sequence[Any], names: Sequence[str], types: str) -> None:
    # One letter per column: s = text, i = integer, n = text or NULL, b = 0/1 integer.
    # A whole-row check first (every stored row is checked on each read), the column loop
    # below only to name the column of a bad row.
    classes, flags = _column_classes(types)
    if len(row) >= len(types) and all(map(isinstance, row, classes)) and all(row[i] in (0, 1) for i in flags):
        return
    for value, name, t in zip(row, names, types):
        ok = (
            (t == "s" and isinstance(value, str))
            or (t == "i" and isinstance(value, int))
            or (t == "n" and (value is None or isinstance(value, str)))
            or (t == "b" and value in (0, 1))
        )
        if not ok:
            raise row_error(table, key, f"column {name} holds {type(value).__name__} {value!r:.40}")


# -------------------------------------------------------------------------- descriptors


def descriptor_row(namespace: str, descriptor_set: str, packet_id: str, d: Descriptor) -> tuple:
    """The ``descriptors`` row of ``d`` (which must belong to this namespace and packet)."""
    if not isinstance(d, Descriptor):
        raise StoreError(f"expected Descriptor, got {type(d).__name__}")
    if d.namespace != namespace:
        raise StoreError(
            f"descriptor {d.descriptor_id!r} has namespace {d.namespace!r}; expected {namespace!r}"
        )
    if d.packet_id != packet_id:
        raise StoreError(
            f"descriptor {d.descriptor_id!r} belongs to packet {d.packet_id!r}; expected {packet_id!r}"
        )
    return (
        namespace,
        descriptor_set,
        require_str(d.descriptor_id, "Descriptor.descriptor_id"),
        packet_id,
        require_int(d.claim_index, "Descriptor.claim_index", minimum=0),
        require_str(d.text, "Descriptor.text", allow_empty=True),
        require_str(d.speaker, "Descriptor.speaker", allow_empty=True),
        require_int(d.session_index, "Descriptor.session_index"),
        require_str(d.session_time, "Descriptor.session_time", allow_empty=True),
        str_tuple_json(d.people, "Descriptor.people item"),
        str_tuple_json(d.keywords, "Descriptor.keywords item"),
        require_str(d.event_time, "Descriptor.event_time", allow_empty=True),
        require_str(d.interaction_time, "Descriptor.interaction_time", allow_empty=True),
        require_int(d.n_tokens, "Descriptor.n_tokens", minimum=0),
        int(bool(d.needs_profile)),
        int(bool(d.negated)),
        event_to_json(d.event),
    )


DESCRIPTOR_INSERT = (
    "INSERT INTO descriptors (namespace, descriptor_set, descriptor_id, packet_id, claim_index, text, "
    "speaker, session_index, session_time, people_json, keywords_json, event_time, interaction_time, "
    "n_tokens, needs_profile, negated, event_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

DESCRIPTOR_COLS = (
    "d.descriptor_id, d.namespace, d.packet_id, d.claim_index, d.text, d.speaker, d.session_index, "
    "d.session_time, d.people_json, d.keywords_json, d.event_time, d.interaction_time, d.n_tokens, "
    "d.needs_profile, d.event_json, d.negated"
)
_DESCRIPTOR_NAMES = tuple(c.strip()[2:] for c in DESCRIPTOR_COLS.split(","))


def descriptor_from_row(r: Sequence[Any], descriptor_set: str = "?") -> Descriptor:
    """A Descriptor from a row selected with :data:`DESCRIPTOR_COLS`."""
    key = f"{r[1]!r}/{descriptor_set!r}/{r[0]!r}"
    _check_types("descriptors", key, r, _DESCRIPTOR_NAMES, "sssississsssibsb")
    return Descriptor(
        descriptor_id=r[0],
        namespace=r[1],
        packet_id=r[2],
        claim_index=r[3],
        text=r[4],
        speaker=r[5],
        session_index=r[6],
        session_time=r[7],
        people=tuple(_json_list(r[8], "descriptors", key, "people_json")),
        keywords=tuple(_json_list(r[9], "descriptors", key, "keywords_json")),
        event_time=r[10],
        interaction_time=r[11],
        n_tokens=r[12],
        needs_profile=bool(r[13]),
        event=event_from_json(r[14], key),
        negated=bool(r[15]),
    )


# -------------------------------------------------------------------------- packets


PACKET_COLS = (
    "namespace, packet_id, ordinal, session_index, session_id, session_time, speaker, content, "
    "image_caption, sha256, image_query, agent_id, metadata_json"
)
_PACKET_NAMES = tuple(c.strip() for c in PACKET_COLS.split(","))


def packet_from_row(r: Sequence[Any], *, verify: bool = True) -> SourcePacket:
    """A SourcePacket from a row selected with :data:`PACKET_COLS`.

    With ``verify`` the stored sha256 is recomputed from the content: a turn changed in the file
    (a flipped byte that still decodes, a hand edit) raises :class:`StoreError` instead of being
    served as if it were what the user said.
    """
    key = f"{r[0]!r}/{r[1]!r}"
    _check_types("packets", key, r, _PACKET_NAMES, "ssiissssnsnnn")
    if verify and content_sha256(r[7], r[8]) != r[9]:
        raise row_error("packets", key, "the content does not match its stored sha256")
    return SourcePacket(
        namespace=r[0],
        packet_id=r[1],
        ordinal=r[2],
        session_index=r[3],
        session_id=r[4],
        session_time=r[5],
        speaker=r[6],
        content=r[7],
        image_caption=r[8],
        sha256=r[9],
        image_query=r[10],
        agent_id=r[11],
        metadata_json=r[12],
    )


# -------------------------------------------------------------------------- cells


CELL_COLS = (
    "cell_id, descriptor_ids_json, tokens, people_json, keywords_json, session_min, session_max, title, "
    "has_time"
)
_CELL_NAMES = tuple(c.strip() for c in CELL_COLS.split(","))


def cell_writes(where: str, namespace: str, layout_id: str, cells: Sequence[Cell],
                stored: Sequence[Cell] | None) -> tuple[list[int] | None, list[tuple]]:
    """What ``save_cells`` writes: the ids of the rows to delete (None: the whole layout) and
    the rows to insert. With ``stored`` (the cells known to be stored now) only the difference:
    rows gone or changed are deleted, new or changed ones inserted. An append moves a Cell or two
    of a layout of dozens, so this spares rewriting (and re-encoding) the rest. A repeated cell
    id in ``cells`` is a ``StoreError`` naming ``where``."""
    ids = [cell.cell_id for cell in cells]
    if len(set(ids)) != len(ids):
        raise StoreError(f"{where}: layout {layout_id!r} of {namespace!r} has a repeated cell_id")
    if stored is None:
        return None, [cell_row(namespace, layout_id, cell) for cell in cells]
    before = {c.cell_id: c for c in stored}
    after = {c.cell_id: c for c in cells}
    # ``is`` first: a placement hands back the very Cell objects it did not change, and
    # comparing tens of thousands of them field by field cost more than the write.
    gone = sorted(cid for cid, c in before.items() if after.get(cid) is not c and after.get(cid) != c)
    return gone, [cell_row(namespace, layout_id, c) for c in cells
                  if before.get(c.cell_id) is not c and before.get(c.cell_id) != c]


def cell_row(namespace: str, layout_id: str, cell: Cell) -> tuple:
    """The ``cells`` row of ``cell``."""
    if not isinstance(cell, Cell):
        raise StoreError(f"expected Cell, got {type(cell).__name__}")
    return (
        namespace,
        layout_id,
        require_int(cell.cell_id, "Cell.cell_id"),
        str_tuple_json(cell.descriptor_ids, "Cell.descriptor_ids item"),
        require_int(cell.tokens, "Cell.tokens", minimum=0),
        sorted_set_json(cell.people, "Cell.people item"),
        sorted_set_json(cell.keywords, "Cell.keywords item"),
        require_int(cell.session_min, "Cell.session_min"),
        require_int(cell.session_max, "Cell.session_max"),
        require_str(cell.title, "Cell.title", allow_empty=True),
        int(bool(cell.has_time)),
    )


def cell_from_row(r: Sequence[Any], namespace: str = "?", layout_id: str = "?") -> Cell:
    """A Cell from a row selected with :data:`CELL_COLS`."""
    key = f"{namespace!r}/{layout_id!r}/{r[0]!r}"
    _check_types("cells", key, r, _CELL_NAMES, "isissiisb")
    return Cell(
        cell_id=r[0],
        descriptor_ids=tuple(_json_list(r[1], "cells", key, "descriptor_ids_json")),
        tokens=r[2],
        people=frozenset(_json_list(r[3], "cells", key, "people_json")),
        keywords=frozenset(_json_list(r[4], "cells", key, "keywords_json")),
        session_min=r[5],
        session_max=r[6],
        title=r[7],
        has_time=bool(r[8]),
    )


# -------------------------------------------------------------------------- embeddings


def vector_from_blob(blob: object, dim: object, key: str) -> np.ndarray:
    """A writable float32 vector from an ``embeddings`` row (``key`` names the row in errors)."""
    if not isinstance(blob, bytes) or not isinstance(dim, int) or len(blob) != 4 * dim:
        size = len(blob) if isinstance(blob, (bytes, str)) else type(blob).__name__
        raise row_error("embeddings", key, f"vector has {size} bytes; expected {4 * dim if isinstance(dim, int) else '?'} "
                        f"for dim {dim!r}")
    vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)  # a writable copy
    if not np.isfinite(vec).all():
        raise row_error("embeddings", key, "vector holds NaN or infinite values")
    return vec


def chunks(items: Sequence[str], size: int = IN_CHUNK) -> Iterator[Sequence[str]]:
    """``items`` in consecutive slices of at most ``size``."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
