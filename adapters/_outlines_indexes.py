"""Compiled outlines-core indexes for JSON-schema constrained decoding, one per schema.

The in-process backends (llama.cpp, transformers) constrain a JSON request with an
outlines-core logits processor. Compiling a schema's regex into an ``Index`` over the model's
vocabulary is the slow part, so :class:`SchemaIndexes` compiles each schema once and hands
out a fresh processor per generation (a processor holds that generation's guide state).
outlines and outlines-core are imported on first use only.
"""

from __future__ import annotations

from typing import Any, Callable

from ._specs import COMPACT_WHITESPACE


class SchemaIndexes:
    """Indexes of one loaded model. ``outlines_model`` builds the outlines model wrapper
    (called once, on the first schema); ``tensors`` is the processor's array library
    ("numpy" for llama.cpp, "torch" for transformers)."""

    def __init__(self, outlines_model: Callable[[], Any], tensors: str):
        self._outlines_model = outlines_model
        self._tensors = tensors
        self._vocabulary: Any = None
        self._indexes: dict[str, Any] = {}

    def processor(self, schema_text: str) -> Any:
        """A new logits processor constrained to ``schema_text`` (a canonical JSON schema)."""
        from outlines.backends.outlines_core import OutlinesCoreBackend, OutlinesCoreLogitsProcessor

        if self._vocabulary is None:
            self._vocabulary = OutlinesCoreBackend(self._outlines_model()).vocabulary
        index = self._indexes.get(schema_text)
        if index is None:
            from outlines_core import Index
            from outlines_core.json_schema import build_regex_from_schema

            index = Index(build_regex_from_schema(schema_text, COMPACT_WHITESPACE), self._vocabulary)
            self._indexes[schema_text] = index
        return OutlinesCoreLogitsProcessor(index, self._tensors)
