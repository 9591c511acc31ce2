"""What erasing one turn removes, decided on the write side; the store deletes what it is told.

The rules come from how a build derives state from a turn:

- its descriptors and extraction markers, under every descriptor set;
- the next turn's descriptors and markers: it was extracted with the deleted turn as context,
  so it is extracted again;
- the namespace's Cells (their titles and keywords came from the descriptors; a build places
  them again);
- the embeddings of the turn and of its in-session neighbours: their context documents quoted
  it (embedding keys are ``<packet id>|<document hash>``, ``build.stages``), and a build
  embeds them again;
- every cached model request or response of the namespace that quotes a line of its text,
  caption or claims;
- its id in the lists of turns the rule extractor stood in for (``fallback:`` meta keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import StoreError
from ..store.base import Store
from .stages import FALLBACK_META_PREFIX, embedding_key_prefix


@dataclass(frozen=True)
class DeletionPlan:
    """The rows one turn's deletion removes (``Store.delete_rows``).

    ``generation``: the namespace's generation the plan was read at; a store refuses the plan
    (``StalePlanError``) once the namespace has moved on, and the caller plans again.
    """

    namespace: str
    packet_id: str
    generation: int
    reextract: tuple[str, ...]  # packets whose descriptors and extraction markers go
    embedding_key_prefixes: tuple[str, ...]  # embeddings whose key starts with one of these go
    quoted_lines: tuple[str, ...]  # cached requests/responses of the namespace quoting one of these go
    drop_cells: bool = True  # every Cell of the namespace goes
    meta_list_prefix: str = FALLBACK_META_PREFIX  # JSON-list meta values under these keys lose packet_id


def plan_turn_deletion(store: Store, namespace: str, packet_id: str) -> DeletionPlan:
    """The ``DeletionPlan`` of erasing ``packet_id`` from ``namespace`` (reads, writes nothing);
    ``StoreError`` when the namespace has no such turn."""
    generation = store.generation(namespace)
    packets = store.packets(namespace)
    at = next((i for i, p in enumerate(packets) if p.packet_id == packet_id), None)
    if at is None:
        raise StoreError(f"{store.path}: namespace {namespace!r} has no packet {packet_id!r}")
    p = packets[at]
    after_it = packets[at + 1:]
    nxt = after_it[0].packet_id if after_it else None
    # The nearest turns of the same session before and after it (sessions may interleave).
    before = next((q.packet_id for q in reversed(packets[:at]) if q.session_index == p.session_index), None)
    after = next((q.packet_id for q in after_it if q.session_index == p.session_index), None)
    texts = (p.content, p.image_caption or "", *store.packet_claims(namespace, packet_id))
    lines = tuple(dict.fromkeys(line.strip() for text in texts for line in text.splitlines() if line.strip()))
    return DeletionPlan(
        namespace=namespace,
        packet_id=packet_id,
        generation=generation,
        reextract=(packet_id,) + ((nxt,) if nxt else ()),
        embedding_key_prefixes=tuple(embedding_key_prefix(o) for o in (packet_id, before, after) if o),
        quoted_lines=lines,
    )
