"""sentence-transformers embedder (default: all-MiniLM-L6-v2 shipped in a PyPI package)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

from memcompile_local.adapters._specs import embed_inputs
from memcompile_local.errors import ConfigError

from memcompile_local.llm.extras import require
from .models import MINILM_NAME, check_model_string, resolve_local_or_name, set_offline, weights_fingerprint

logger = logging.getLogger(__name__)


class SentenceTransformerEmbedder:
    """Dense, l2-normalised float32 sentence vectors.

    ``model``: "all-MiniLM-L6-v2" (the shipped folder), a local sentence-transformers
    folder, or a hub name when ``allow_download=True``. ``device``: "auto" picks CUDA when
    torch sees a GPU, else CPU. The model loads on first use.
    """

    def __init__(
        self,
        model: str = MINILM_NAME,
        *,
        device: str = "auto",
        batch_size: int = 64,
        allow_download: bool = False,
    ) -> None:
        self.model_name = check_model_string(model, "SentenceTransformerEmbedder(model=...)")
        if batch_size < 1:
            raise ConfigError(f"SentenceTransformerEmbedder(batch_size=...): expected >= 1, got {batch_size}")
        self.allow_download = allow_download
        self.model_ref, self.local_path = resolve_local_or_name(self.model_name, allow_download,
                                                                what="sentence-transformers")
        self.device_setting = device
        self.batch_size = batch_size
        self._model: Any = None
        self._dim: int | None = None
        self._lock = threading.Lock()
        self._identity: dict[str, Any] | None = None

    def identity(self) -> dict[str, Any]:
        """Embedder kind, model name, resolved path and a hash of the weight files (cached)."""
        if self._identity is None:
            ident: dict[str, Any] = {"embedder": "sentence-transformers", "model": self.model_name,
                                     "path": self.model_ref}
            if self.local_path is not None:
                ident.update(weights_fingerprint(self.local_path))
            self._identity = ident
        return dict(self._identity)

    @property
    def device(self) -> str:
        """The device the model runs on (loads the model)."""
        return str(self._load().device)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                set_offline(self.allow_download)
                torch = require("torch", "cpu", "sentence-transformers embeddings")
                st = require("sentence_transformers", "cpu", "sentence-transformers embeddings")
                device = self.device_setting
                if device == "auto":
                    device = "cuda" if torch.cuda.is_available() else "cpu"
                logger.info("loading sentence-transformers model %s on %s", self.model_ref, device)
                self._model = st.SentenceTransformer(self.model_ref, device=device,
                                                     local_files_only=not self.allow_download)
        return self._model

    @property
    def dim(self) -> int:
        """Vector dimension (384 for all-MiniLM-L6-v2)."""
        if self._dim is None:
            model = self._load()
            getter = getattr(model, "get_embedding_dimension", None) or getattr(
                model, "get_sentence_embedding_dimension", None)
            dim = getter() if getter is not None else None
            if not dim:
                dim = int(self.embed(["dimension probe"]).shape[1])
            self._dim = int(dim)
        return self._dim

    def embed(self, texts: Sequence[str]) -> Any:
        """``(len(texts), dim)`` float32 array of unit-length rows (zero rows for no texts)."""
        import numpy as np
        items = embed_inputs(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vecs = model.encode(items, batch_size=self.batch_size, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)
        vecs = np.asarray(vecs, dtype=np.float32)
        if self._dim is None:
            self._dim = int(vecs.shape[1])
        return vecs
