"""The interfaces the pipeline's stages meet at, as ``typing.Protocol`` classes.

A stage asks for one of these instead of a concrete class, so a test (or a user) can hand in
anything with the right methods:

* ``LLMBackend``: a model that answers a batch of ``LLMRequest`` (the adapters implement it);
* ``ModelClient``: what a stage calls to get one validated, cached response per request
  (``llm.client.LLMClient`` wraps a backend into one);
* ``Embedder``: texts in, l2-normalized float32 rows out (the embedding adapters);
* ``DescriptorExtractor``: turns (a packet and the one before it) in, descriptors out
  (``address.extract_rule.RuleExtractor`` and ``address.extract_llm.LLMExtractor``).

The Address Plane's index is one concrete class, ``address.index.AddressIndex``, and is
typed as such. Nothing here imports a model library.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from .errors import ModelError
from .llm.interface import Embedder, LLMBackend, LLMRequest, LLMResponse
from .types import Descriptor, SourcePacket

__all__ = ["DescriptorExtractor", "Embedder", "LLMBackend", "ModelClient"]


@runtime_checkable
class ModelClient(Protocol):
    """Validated model calls: one response per request, failures as ``ModelError``.

    ``complete`` raises the failure; ``complete_many`` returns it in the request's slot, so
    one bad response does not lose the batch.
    """

    def complete(self, request: LLMRequest) -> LLMResponse: ...

    def complete_many(self, requests: Sequence[LLMRequest]) -> list[LLMResponse | ModelError]: ...


@runtime_checkable
class DescriptorExtractor(Protocol):
    """Turns SourcePackets into source-linked descriptors (MemCompile paper, Section 3.2.1).

    ``descriptor_set`` names the extractor and every setting that changes its output; the
    store keys extracted descriptors by it. ``extract`` takes (packet, preceding packet or
    None) pairs and returns one descriptor list per pair, in order; a model-backed extractor
    that fails on some packets raises ``errors.PacketExtractionError`` carrying the others.
    """

    @property
    def descriptor_set(self) -> str: ...

    def extract(self, items: Sequence[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]: ...
