"""Extract each distinct turn once per process: a content-keyed memo around a deterministic extractor.

A LongMemEval run builds one namespace per question, and the haystacks share sessions (about
24,000 session slots over 19,000 distinct sessions in S), each haystack under dates of its own.
The rule-based extractor is a pure function of a turn's speaker, text and image fields, its
addressee (the preceding turn's speaker when that is someone else) and its session time; only
the time expressions' values (and the descriptors' identity fields) depend on the session time.
So the memo keeps, per distinct (speaker, text, image fields, addressee), the extractor's
*template* (``RuleExtractor.extract_with_template``), and a repeat is *bound* to its own packet
(``RuleExtractor.bind``: time expressions read again against its session time, identity fields
set), which gives exactly what extracting it would (``tests/test_build_shared.py``) for about a
third of the cost. A repeat under the same session time reuses the bound descriptors as well.

What is kept:

* By default the least recently used turns leave first past :data:`MAX_ENTRIES` (a server sees an
  unbounded stream of turns).
* Under a reuse plan (``reuse_plan``), as a benchmark run sets one knowing every turn it will
  build, only the turns planned to come again are kept, each until its last planned use; a turn
  that comes once is never held. Memory then holds the shared turns in flight, not the history.

LLM extraction needs no memo: its requests carry no ids, so the request cache serves repeats.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import Counter, OrderedDict
from typing import Iterable, Iterator, Sequence

from ..types import Conversation, Descriptor, SourcePacket, descriptor_id
from .dense import forget_documents
from .extract_rule import addressee_of

MAX_ENTRIES = 50_000
"""Memo size bound (distinct turns) without a reuse plan; past it the least recently used turns
leave first. A long-lived server sees an unbounded stream of distinct turns, so the bound is
what it holds at most."""

_lock = threading.Lock()
# key -> (template, (session time, bound descriptors) of the last binding)
_memo: OrderedDict[tuple, tuple[object, tuple[str, tuple[Descriptor, ...]] | None]] = OrderedDict()
_plan: Counter | None = None  # turn key -> planned uses left, while a reuse plan is active


def turn_key(speaker: str, text: str, image_caption: str | None, image_query: str | None,
             addressee: str | None) -> tuple:
    """What a template depends on (besides the extractor's configuration)."""
    return (speaker, text, image_caption, image_query, addressee)


def conversation_turn_keys(conversation: Conversation) -> Iterator[tuple]:
    """The ``turn_key`` of every turn of ``conversation`` as its build will extract it (in
    dialogue order, each turn after the one before it, across sessions)."""
    previous: str | None = None
    for session in conversation.sessions:
        for turn in session.turns:
            yield turn_key(turn.speaker, turn.text, turn.image_caption, turn.image_query,
                           addressee_of(turn.speaker, previous))
            previous = turn.speaker


def _packet_key(p: SourcePacket, addressee: str | None) -> tuple:
    return turn_key(p.speaker, p.content, p.image_caption, p.image_query, addressee)


def forget_memo() -> None:
    """Drop every memoized extraction and dense document: ``Memory.forget`` and ``delete_turn``
    call it so the text of erased turns does not outlive them in this process (these are only
    speed caches)."""
    with _lock:
        _memo.clear()
    forget_documents()


def memo_size() -> int:
    """Distinct turns held now."""
    with _lock:
        return len(_memo)


@contextlib.contextmanager
def reuse_plan(turns: Iterable[tuple]) -> Iterator[None]:
    """While active, keep only the turns of ``turns`` (``turn_key`` tuples, one per build of a
    turn, in any order) that are still to come, each until its last use; nothing else is kept.
    Plans do not nest. On exit the memo keeps nothing the plan added."""
    global _plan
    counts = Counter(turns)
    with _lock:
        if _plan is not None:
            raise RuntimeError("a reuse plan is already active")
        _plan = counts
    try:
        yield
    finally:
        with _lock:
            _plan = None
            for key in [k for k in _memo if k[1] in counts]:
                del _memo[key]


def _rebind(d: Descriptor, packet: SourcePacket) -> Descriptor:
    return dataclasses.replace(d, descriptor_id=descriptor_id(packet.namespace, packet.packet_id, d.claim_index),
                               namespace=packet.namespace, packet_id=packet.packet_id,
                               session_index=packet.session_index)


class MemoizedExtractor:
    """``inner``'s descriptors, computed once per distinct turn content (see the module docstring).

    ``inner`` provides ``addressee(packet, previous)``, ``extract_with_template(packet,
    addressee)`` and ``bind(template, packet)`` (``RuleExtractor``), and must be deterministic.
    Thread-safe; the memo is shared by every instance in the process and keyed by the
    extractor's configuration too. ``hits`` and ``misses`` count this instance's turns served
    from the memo and extracted by ``inner``.
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.descriptor_set = inner.descriptor_set
        # Everything that shapes the output: the set name and the extractor's whole configuration.
        self._key = (type(inner).__qualname__, inner.descriptor_set, repr(getattr(inner, "config", None)))
        self.hits = 0
        self.misses = 0

    def extract(self, items: Sequence[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]:
        items = list(items)
        turns = [_packet_key(p, self.inner.addressee(p, prev)) for p, prev in items]
        keys = [(self._key, t) for t in turns]
        with _lock:
            found = [_memo.get(k) for k in keys]
            for k, f in zip(keys, found):
                if f is not None:
                    _memo.move_to_end(k)
        out: list[list[Descriptor]] = []
        made: list[tuple[int, object, list[Descriptor]]] = []
        hits = 0
        for i, ((packet, _prev), entry) in enumerate(zip(items, found)):
            if entry is None:
                descriptors, template = self.inner.extract_with_template(packet, turns[i][4])
                made.append((i, template, descriptors))
                out.append(descriptors)
                continue
            hits += 1
            template, last = entry
            if last is not None and last[0] == packet.session_time:
                out.append([_rebind(d, packet) for d in last[1]])
            else:
                descriptors = self.inner.bind(template, packet)
                out.append(descriptors)
                made.append((i, template, descriptors))
        with _lock:
            self.hits += hits
            self.misses += len(items) - hits
            for i, template, descriptors in made:
                # A repeat's binding replaces the entry's last binding (its template is the same).
                _memo[keys[i]] = (template, (items[i][0].session_time, tuple(descriptors)))
            self._settle(keys)
        return out

    def _settle(self, keys: Sequence[tuple]) -> None:
        """Apply the keep rule to ``keys`` just used (caller holds the lock)."""
        if _plan is None:
            while len(_memo) > MAX_ENTRIES:
                _memo.popitem(last=False)
            return
        for key in keys:
            left = _plan.get(key[1], 0)
            if left > 0:
                _plan[key[1]] = left - 1
            if left <= 1:  # this was its last planned use (or it was never planned): not kept
                _memo.pop(key, None)
