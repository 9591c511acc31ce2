"""Extract each distinct turn once per process: a content-keyed memo around a deterministic extractor.

A LongMemEval run builds one namespace per question, and the haystacks share most sessions, so
the same turn (same speaker, text, image fields and session time, after the same previous turn)
is extracted again and again. The rule-based extractor is a pure function of those fields, so
its descriptors for a repeated turn are the stored ones with the identity fields (namespace,
packet id, descriptor id, session index) rebound. LLM extraction needs no memo: its requests
carry no ids, so the request cache already serves repeats.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Sequence

from ..types import Descriptor, SourcePacket, descriptor_id
from .dense import forget_documents

MAX_ENTRIES = 50_000
"""Memo size bound (distinct turns); past it the least recently used turns leave first.

A long-lived server sees an unbounded stream of distinct turns, so the bound is what it holds
at most (about 2 KB a turn); a benchmark run over haystacks that share sessions keeps hitting
its recent ones."""

_lock = threading.Lock()
_memo: OrderedDict[tuple, tuple[Descriptor, ...]] = OrderedDict()


def _content(p: SourcePacket | None) -> tuple | None:
    if p is None:
        return None
    return (p.speaker, p.content, p.image_caption, p.image_query, p.session_time)


def _rebind(d: Descriptor, packet: SourcePacket) -> Descriptor:
    return dataclasses.replace(d, descriptor_id=descriptor_id(packet.namespace, packet.packet_id, d.claim_index),
                               namespace=packet.namespace, packet_id=packet.packet_id,
                               session_index=packet.session_index)


def forget_memo() -> None:
    """Drop every memoized extraction and dense document: ``Memory.forget`` and ``delete_turn``
    call it so the text of erased turns does not outlive them in this process (these are only
    speed caches)."""
    with _lock:
        _memo.clear()
    forget_documents()


class MemoizedExtractor:
    """``inner``'s descriptors, computed once per distinct (turn, previous turn) content.

    ``inner`` must be deterministic and read nothing of a packet but its speaker, text, image
    fields and session time, and its identity fields only to copy them into the descriptors
    (true of ``RuleExtractor``). Thread-safe; the memo is shared by every instance in the
    process and keyed by the descriptor set too.
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.descriptor_set = inner.descriptor_set
        # Everything that shapes the output: the set name and the extractor's whole configuration.
        self._key = (type(inner).__qualname__, inner.descriptor_set, repr(getattr(inner, "config", None)))
        # Turns this instance was asked for that the memo held, and that ``inner`` extracted.
        self.hits = 0
        self.misses = 0

    def extract(self, items: Sequence[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]:
        items = list(items)
        keys = [(self._key, _content(p), _content(prev)) for p, prev in items]
        with _lock:
            found = [_memo.get(k) for k in keys]
            for k, f in zip(keys, found):
                if f is not None:
                    _memo.move_to_end(k)
        todo = [i for i, f in enumerate(found) if f is None]
        with _lock:
            self.hits += len(items) - len(todo)
            self.misses += len(todo)
        if todo:
            fresh = self.inner.extract([items[i] for i in todo])
            with _lock:
                for i, descriptors in zip(todo, fresh):
                    found[i] = tuple(descriptors)
                    _memo[keys[i]] = found[i]
                while len(_memo) > MAX_ENTRIES:
                    _memo.popitem(last=False)
        return [[_rebind(d, packet) for d in f] for (packet, _), f in zip(items, found)]
