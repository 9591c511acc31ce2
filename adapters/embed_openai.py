"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint."""

from __future__ import annotations

import logging
from typing import Any, Sequence

from memcompile_local.adapters._specs import embed_inputs
from memcompile_local.errors import ConfigError, TransportError

from memcompile_local.llm.extras import require
from .openai_compat import map_openai_error, resolve_endpoint

logger = logging.getLogger(__name__)


def l2_normalize(matrix: Any, where: str) -> Any:
    """Rows scaled to unit length, as float32. A zero row cannot be normalised: error."""
    import numpy as np
    m = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    if m.size and not np.all(norms > 0):
        bad = int(np.flatnonzero(norms[:, 0] <= 0)[0])
        raise TransportError(f"{where}: the server returned an all-zero vector for input {bad}", retryable=False)
    return (m / norms).astype(np.float32) if m.size else m.astype(np.float32)


class OpenAIEmbedder:
    """Batched calls to ``embeddings.create``; vectors come back l2-normalised float32.

    ``model`` defaults to ``$OPENAI_EMBEDDING_MODEL``; ``base_url`` to ``$OPENAI_BASE_URL``;
    the key to ``api_key`` or the variable named by ``api_key_env``. ``dim`` may be given
    up front; otherwise it is learnt from the first response.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 2,
        dim: int | None = None,
    ) -> None:
        self.model, self.base_url, self._api_key = resolve_endpoint(
            "OpenAIEmbedder", model, "OPENAI_EMBEDDING_MODEL", base_url, api_key, api_key_env)
        if batch_size < 1:
            raise ConfigError(f"OpenAIEmbedder(batch_size=...): expected >= 1, got {batch_size}")
        if dim is not None and dim < 1:
            raise ConfigError(f"OpenAIEmbedder(dim=...): expected >= 1, got {dim}")
        self.batch_size = batch_size
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self._dim = dim
        self._client: Any = None

    def identity(self) -> dict[str, Any]:
        """Embedder kind, base URL and model."""
        return {"embedder": "openai", "model": self.model,
                "base_url": self.base_url or "https://api.openai.com/v1"}

    def _get_client(self) -> Any:
        if self._client is None:
            openai = require("openai", "openai", "OpenAI-compatible embeddings")
            self._client = openai.OpenAI(api_key=self._api_key, base_url=self.base_url,
                                         timeout=self.timeout, max_retries=self.max_retries)
        return self._client

    @property
    def dim(self) -> int:
        """Vector dimension (one probe request when not given and not yet seen)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def _batch(self, texts: list[str], start: int) -> Any:
        openai = require("openai", "openai", "OpenAI-compatible embeddings")
        where = f"{self.base_url or 'openai'} embeddings model={self.model} inputs {start}..{start + len(texts) - 1}"
        try:
            resp = self._get_client().embeddings.create(model=self.model, input=texts, encoding_format="float")
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, where) from exc
        except ValueError as exc:  # a JSON body that does not parse (see openai_compat)
            raise TransportError(f"{where}: the response body is not valid JSON: {exc}", retryable=True) from exc
        if isinstance(resp, (str, bytes)):
            raise TransportError(f"{where}: the server answered with a non-JSON body", retryable=False)
        data = list(getattr(resp, "data", None) or [])
        if len(data) != len(texts):
            raise TransportError(f"{where}: {len(data)} vectors for {len(texts)} inputs", retryable=False)
        # Servers may answer out of order; each item carries the index of its input.
        data.sort(key=lambda d: d.index)
        if [d.index for d in data] != list(range(len(texts))):
            raise TransportError(f"{where}: response indices are not 0..{len(texts) - 1}", retryable=False)
        rows = [d.embedding for d in data]
        if not all(isinstance(r, list) for r in rows) or len({len(r) for r in rows}) != 1:
            raise TransportError(f"{where}: vectors are not float lists of one length", retryable=False)
        return rows

    def embed(self, texts: Sequence[str]) -> Any:
        """``(len(texts), dim)`` float32 array of unit-length rows."""
        import numpy as np
        items = embed_inputs(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            rows.extend(self._batch(items[start:start + self.batch_size], start))
        width = len(rows[0])
        if any(len(r) != width for r in rows):
            raise TransportError("embeddings: batches returned vectors of different lengths", retryable=False)
        if self._dim is not None and width != self._dim:
            raise TransportError(f"embeddings: got {width}-dim vectors, expected {self._dim}", retryable=False)
        self._dim = width
        return l2_normalize(np.asarray(rows, dtype=np.float64), f"embeddings model={self.model}")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None
