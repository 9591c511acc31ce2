"""Controlled placement layouts (MemCompile paper, Appendix B.4).

Every layout receives the same descriptors, in dialogue and claim order, and returns Cells:

* ``flat``: no Cells at all; routing then opens nothing and the address channel is BM25 only.
* ``bounded``: Algorithm 2 (``cells.place_descriptors``).
* ``sequential``: descriptors sorted by session index, keeping dialogue order inside a
  session, cut into consecutive blocks of ``block_size``.
* ``session``: each session cut separately into blocks of ``block_size`` (the last block of
  a session may be short; no block crosses a session boundary).
* ``entity``: one bucket per primary person (the first listed person of the descriptor,
  normalized; the speaker when it lists none), buckets in order of first appearance, each
  bucket in dialogue order and cut into blocks of ``block_size``.

Block layouts ignore the token cap on purpose: they keep only the one signal they test.
"""

from __future__ import annotations

from typing import Sequence

from ..config import PlacementConfig
from ..errors import ConfigError
from ..types import Cell, Descriptor
from .cells import cell_from_descriptors, place_descriptors
from ..language.tokens import normalize_name

LAYOUTS = ("flat", "bounded", "sequential", "session", "entity")


def primary_person(descriptor: Descriptor) -> str:
    """The entity-layout bucket key: first normalized person, else the normalized speaker."""
    for p in descriptor.people:
        name = normalize_name(p)
        if name:
            return name
    return normalize_name(descriptor.speaker)


def _blocks(groups: Sequence[Sequence[Descriptor]], size: int, cfg: PlacementConfig) -> list[Cell]:
    cells: list[Cell] = []
    for group in groups:
        for start in range(0, len(group), size):
            cells.append(cell_from_descriptors(len(cells), group[start:start + size], cfg))
    return cells


def build_layout(name: str, descriptors: Sequence[Descriptor], cfg: PlacementConfig = PlacementConfig()) -> list[Cell]:
    """Cells of layout ``name`` over ``descriptors`` (dialogue and claim order); ids from 0.

    Raises ConfigError for an unknown layout name or a block size below 1.
    """
    if name not in LAYOUTS:
        raise ConfigError(f"unknown placement layout {name!r}; expected one of {list(LAYOUTS)}")
    if name == "flat":
        return []
    if name == "bounded":
        return place_descriptors(descriptors, cfg)
    size = cfg.block_size
    if size < 1:
        raise ConfigError(f"placement.block_size must be >= 1, got {size}")
    if name == "sequential":
        # sorted() is stable, so dialogue order survives inside each session
        return _blocks([sorted(descriptors, key=lambda d: d.session_index)], size, cfg)
    buckets: dict[object, list[Descriptor]] = {}
    for d in descriptors:
        key = d.session_index if name == "session" else primary_person(d)
        buckets.setdefault(key, []).append(d)
    if name == "session":
        return _blocks([buckets[k] for k in sorted(buckets)], size, cfg)
    return _blocks(list(buckets.values()), size, cfg)  # entity: first-appearance order
