"""Appends in place keep one view per namespace alive, not every view they replaced.

Each append in place makes a new view that extends the last one. If anything the new view
keeps (its lazily built address index, say) held the append's plan, the plan's base view would
stay reachable, and through it the view before that: a server taking appends all day would hold
every earlier copy of a user's vectors and packets, and its memory would grow with the square
of the history.
"""

from __future__ import annotations

import gc

from memcompile_local import Memory, PipelineConfig
from memcompile_local.pipeline.presets import apply_preset


def alive_views(namespace: str) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if type(o).__name__ == "MemoryView" and getattr(o, "namespace", None) == namespace)


def test_appends_in_place_do_not_keep_the_views_they_replaced():
    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    with Memory(":memory:", cfg) as mem:
        for i in range(40):
            mem.add("garden-log", [{"time": "2024-05-01 09:00", "turns": [
                {"speaker": "Ines", "text": f"Watered row {i} of the tomatoes.", "id": f"n{i}"}]}])
            hits = mem.search("garden-log", f"Which row was watered as number {i}?", k=3)
            assert hits
        # the current view, and at most one being replaced; never one per append
        assert alive_views("garden-log") <= 2
