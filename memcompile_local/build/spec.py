"""What a build and a view of a namespace are made of under one configuration.

A ``BuildSpec`` is made once per ``PipelineConfig`` (``Memory.spec``) and handed to everything
that reads or writes a namespace's derived state: the view loader, the append in place, the
service's partial views. They receive the spec together with the store, embedder and
extractor they use, never the ``Memory`` that made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..config import PipelineConfig
from ..protocols import Embedder
from .stages import DensePlan, dense_plan, embedding_model_id, layout_id


def uses_fusion(config: PipelineConfig) -> bool:
    """Whether views under ``config`` hold the fused index: it serves the fused selector, and
    the LLM scheduler when its pool is the fused top-N."""
    return config.evidence.anchor_selector == "fused" or config.fusion.schedule_pool == "fused"


@dataclass(frozen=True)
class BuildSpec:
    """One configuration's build and view recipe.

    ``descriptor_set``: the extractor's descriptor set; ``layout_id``: the store key of its
    Cell layout; ``dense``: what the dense channel embeds; ``fusion``: whether the view holds
    the fused index; ``context_vectors``: whether the fused dense channel also reads each
    turn's neighbour-context vector; ``embedder_id``: the store model id of the embedder's
    vectors (None without an embedder).
    """

    config: PipelineConfig
    descriptor_set: str
    layout_id: str
    dense: DensePlan
    fusion: bool
    context_vectors: bool
    embedder_id: str | None

    @cached_property
    def identity(self) -> tuple:
        """What a loaded view's per-text results depend on (reused only under an equal identity)."""
        return (self.descriptor_set, self.layout_id, repr(self.config.fusion), self.embedder_id, self.fusion,
                self.context_vectors)

    @cached_property  # read by every search: computed once
    def view_key(self) -> tuple:
        """The configuration part of a view's cache key: every section its structures are made of."""
        c = self.config
        parts = repr((c.placement, c.routing, c.fusion, c.model.embedder, c.model.embed_model, self.context_vectors))
        return (self.descriptor_set, self.layout_id, parts)


def make_spec(config: PipelineConfig, descriptor_set: str, embedder: Embedder | None) -> BuildSpec:
    """The ``BuildSpec`` of ``config`` for an extractor of ``descriptor_set`` and ``embedder``."""
    fusion = uses_fusion(config)
    context_vectors = fusion and embedder is not None
    return BuildSpec(
        config=config,
        descriptor_set=descriptor_set,
        layout_id=layout_id(descriptor_set, config.placement),
        dense=dense_plan(config, context_vectors),
        fusion=fusion,
        context_vectors=context_vectors,
        embedder_id=embedding_model_id(embedder) if embedder is not None else None,
    )
