"""Catching a held view up with what another process wrote, instead of loading it again.

A view is keyed on its namespace's store generation, and any write moves that generation, in
this process or another. When the write came from another process (a second ``serve``
replica, a CLI or worker beside a server, any process on the same PostgreSQL database), the
next search here used to load the whole namespace again: every packet, every descriptor, the
fused index rebuilt, seconds on a history of a few thousand long turns.

The store keeps a per-namespace change log written in the transaction of each write
(``store.base.ChangeStep``). ``catch_up`` asks it what happened since the held view's
generation (``Store.changes_since``: one read of the log and of the rows after the view's last
ordinal) and, when every step is an append of built turns or something derived from turns
(Cells, vectors, meta values), grows the held view in place exactly as an append made in this
process does (``ViewLoader.plan_catch_up`` -> ``ViewLoader.plan_append`` -> ``adopt``). The grown
view equals a load from scratch (``tests/test_view_catchup.py``). Anything the log cannot
explain (a deleted turn, a forget, a re-extraction of old turns, a gap in the log) leaves it
to a whole load, and a deletion or forget also drops what this process held of the namespace.
"""

from __future__ import annotations

import logging
from typing import Callable

from ..build.spec import BuildSpec
from ..protocols import Embedder
from ..store.base import Store
from .cache import ViewCache
from .record import MemoryView

log = logging.getLogger(__name__)


def catch_up(views: ViewCache, spec: BuildSpec, store: Store, embedder: Embedder | None,
             namespace: str, *, build: Callable[[str], bool] | None = None) -> tuple[MemoryView, int] | None:
    """(``namespace``'s view grown to what the store holds now, its generation), held in
    ``views``; None when no view is remembered or the change log does not explain the steps
    since it (the caller builds and loads as before). A deletion or forget in the log drops
    what ``views`` held of the namespace. Saves the vectors of new documents the writer left
    unembedded, as a load would, and then catches up with its own write too. ``build``: for
    new turns stored without being built, a builder in place (``InPlaceAppend.build_stored``;
    True when it grew the held view), tried before giving up."""
    result = None
    for _ in range(3):
        held = views.held(namespace, spec, generation=store.generation(namespace))
        if held is not None:  # current already (another thread caught up meanwhile)
            return held
        found = views.loader.plan_catch_up(spec, store, embedder, namespace)
        if found.raced:
            continue
        if found.plan is None or found.generation is None:
            if found.deleted:
                # Its text must not outlive it here: the view and the remembered load go now.
                views.drop(namespace)
            elif found.unbuilt:
                if build is not None and build(namespace):
                    build = None  # built and adopted in place: the next pass finds it current
                    continue
                log.debug("catch-up of %s: new turns wait for a build", namespace)
            return result
        view = views.adopt(spec, store, found.plan, found.generation)
        if view is None:
            # Another thread caught up, loaded or dropped the namespace meanwhile: plan again
            # from what is remembered now (nothing, after a drop).
            continue
        result = (view, found.generation)
        log.debug("caught up the view of %s: %d turns now, generation %d", namespace, len(view.packets),
                  found.generation)
        if not found.wrote:
            break
    return result


def follow_change(views: ViewCache, spec: BuildSpec, store: Store, embedder: Embedder | None,
                  namespace: str) -> bool:
    """On word that another process committed a write to ``namespace`` (PostgreSQL's NOTIFY):
    catch the view ``views`` holds of it up now, so the next search finds it current; when the
    change log does not explain the write (a deletion, a forget, turns not built yet), drop the
    view and the remembered load instead, as a change notice always did. Returns whether a
    view of the namespace is still held."""
    try:
        caught = catch_up(views, spec, store, embedder, namespace)
    except Exception as exc:  # a store error now: the next search reports it, from the store
        log.debug("catch-up of %s after a change notice failed: %s", namespace, exc)
        caught = None
    if caught is None:
        views.drop(namespace)
        return False
    return True
