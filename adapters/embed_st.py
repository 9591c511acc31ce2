"""sentence-transformers models (default: all-MiniLM-L6-v2 shipped in a PyPI package) on two
backends: ONNX Runtime on CPU and torch (the GPU path, CUDA in fp16).

The default CPU backend is ``onnx`` in fp32, chosen by measurement (scripts/bench_embed_backends.py
and scripts/ablate_model_free.py, 2 shared cores, the build's own documents): it gives torch's
vectors bit for bit (cosine 1.000000) at 3.0x torch's documents/s, so every figure chosen
by cross-validation holds as measured. ``int8`` (``onnx_export.RECIPES``: every weight MatMul
in int8, one scale per weight column and one per token, so texts are batched and a vector still
depends on its text alone) runs 2.1x fp32's documents/s (6.3x torch), with recall@10 of the
model-free preset on the 4-conversation LoCoMo dev file 0.26 points below torch on categories
1-4 (82.10 against 82.36; 0.33 over every question with evidence); but its small vector
changes move the leave-one-conversation-out choices (cross-validated recall@10 80.9 against
82.2, multi-hop 53.8 against 58.0), so it is the opt-in fast path, not the default.
The backend and precision are part of ``identity()``, so vectors of two backends never share a
cache entry.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import logging
import threading
from typing import Any, Sequence

import numpy as np

from memcompile_local.adapters._specs import embed_inputs
from memcompile_local.errors import ConfigError

from .embed_onnx import RUN_TEXTS, OnnxSentenceEncoder
from .models import MINILM_NAME, check_model_string, require_embed, resolve_local_or_name, set_offline, weights_fingerprint
from .onnx_export import batch_independent, exported_model, recipe_id

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "onnx")
PRECISIONS = ("auto", "fp32", "fp16", "int8")
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_ONNX_PRECISION = "fp32"  # torch's vectors exactly; int8 is opt-in (see above)


def importable(module: str) -> bool:
    """Whether ``module`` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def cuda_present() -> bool:
    """Whether torch can use a CUDA GPU. Without the NVIDIA driver library there is none, and
    torch is not imported (the ONNX path runs without it once its model is exported)."""
    if ctypes.util.find_library("cuda") is None or not importable("torch"):
        return False
    import torch  # heavy; only where a driver exists

    return bool(torch.cuda.is_available())


def _choice(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ConfigError(f"SentenceTransformerEmbedder({where}=...): expected one of {', '.join(allowed)}, "
                          f"got {value!r}")
    return value


class SentenceTransformerEmbedder:
    """Dense, l2-normalised float32 sentence vectors.

    ``model``: "all-MiniLM-L6-v2" (the shipped folder), a local sentence-transformers folder,
    or a hub name when ``allow_download=True`` (hub names run on torch only: the ONNX export
    reads local files). ``device``: "auto" (CUDA when torch sees a GPU), "cpu" or "cuda".
    ``backend``: "auto" picks torch on CUDA and ONNX Runtime on CPU; "torch" or "onnx" force
    one. ``precision``: "auto" is fp16 on CUDA and fp32 on CPU (torch's vectors exactly); "int8"
    runs the faster quantized ONNX recipe.
    ``query_prefix``/``document_prefix`` are prepended to queries (``embed_query``) and to
    stored documents (``embed``), for models trained with them (e5: "query: "/"passage: ").
    ``batch_size``: texts per torch batch; ONNX runs at most ``min(batch_size, RUN_TEXTS)``
    texts per model run (small single-threaded runs side by side were the fastest on CPU).
    ``threads``: ONNX model runs at a time, one thread each (default every usable core). The model loads on
    first use.
    """

    def __init__(
        self,
        model: str = MINILM_NAME,
        *,
        device: str = "auto",
        batch_size: int = 64,
        allow_download: bool = False,
        backend: str = "auto",
        precision: str = "auto",
        query_prefix: str = "",
        document_prefix: str = "",
        threads: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.model_name = check_model_string(model, "SentenceTransformerEmbedder(model=...)")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"SentenceTransformerEmbedder(batch_size=...): expected an int >= 1, got {batch_size!r}")
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                       or max_tokens < 1):
            raise ConfigError(f"SentenceTransformerEmbedder(max_tokens=...): expected an int >= 1, got {max_tokens!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"SentenceTransformerEmbedder(threads=...): expected an int >= 1, got {threads!r}")
        for name, value in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(value, str):
                raise ConfigError(f"SentenceTransformerEmbedder({name}=...): expected a string, got {value!r}")
        self.device_setting = _choice(device, DEVICES, "device")
        self.backend_setting = _choice(backend, BACKENDS, "backend")
        self.precision_setting = _choice(precision, PRECISIONS, "precision")
        self.allow_download = allow_download
        self.model_ref, self.local_path = resolve_local_or_name(self.model_name, allow_download,
                                                                what="sentence-transformers")
        self.batch_size = batch_size
        self.threads = threads
        self.max_tokens = max_tokens
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._model: Any = None
        self._onnx: OnnxSentenceEncoder | None = None
        self._dim: int | None = None
        self._lock = threading.Lock()
        self._identity: dict[str, Any] | None = None
        self._resolved: tuple[str, str, str] | None = None

    # -- what runs ------------------------------------------------------------------------
    def resolved(self) -> tuple[str, str, str]:
        """``(backend, device, precision)`` after "auto" is decided (checks for CUDA once)."""
        if self._resolved is None:
            device, backend, precision = self.device_setting, self.backend_setting, self.precision_setting
            if device == "auto" and (backend != "onnx"):
                device = "cuda" if cuda_present() else "cpu"
            elif device == "auto":
                device = "cpu"
            if backend == "auto":
                onnx_ok = (device == "cpu" and self.local_path is not None
                           and importable("onnxruntime"))
                backend = "onnx" if onnx_ok else "torch"
            if backend == "onnx":
                if device == "cuda":
                    raise ConfigError("SentenceTransformerEmbedder: the ONNX backend runs on CPU; "
                                      "use backend='torch' for CUDA")
                if self.local_path is None:
                    raise ConfigError(f"SentenceTransformerEmbedder: the ONNX backend exports a local model "
                                      f"folder; {self.model_name!r} is a hub name (use backend='torch')")
                if precision == "auto":
                    precision = DEFAULT_ONNX_PRECISION
                if precision not in ("fp32", "int8"):
                    raise ConfigError(f"SentenceTransformerEmbedder: the ONNX backend runs fp32 or int8, "
                                      f"not {precision!r}")
            else:
                if precision == "auto":
                    precision = "fp16" if device == "cuda" else "fp32"
                if precision == "int8" or (precision == "fp16" and device == "cpu"):
                    raise ConfigError(f"SentenceTransformerEmbedder: torch on {device} runs "
                                      f"{'fp32 or fp16' if device == 'cuda' else 'fp32'}, not {precision!r}")
            self._resolved = (backend, device, precision)
        return self._resolved

    def identity(self) -> dict[str, Any]:
        """Embedder kind, model, resolved path, weight hash, backend and precision (cached).

        Two backends (or precisions) give slightly different vectors, so each is its own
        vector space in the store; switching re-embeds.
        """
        if self._identity is None:
            backend, _device, precision = self.resolved()
            ident: dict[str, Any] = {"embedder": "sentence-transformers", "model": self.model_name,
                                     "path": self.model_ref, "backend": backend, "precision": precision}
            if backend == "onnx":
                ident["export"] = recipe_id(precision)  # export version and derivation steps
            if self.document_prefix:
                ident["document_prefix"] = self.document_prefix
            if self.query_prefix:
                ident["query_prefix"] = self.query_prefix
            if self.max_tokens is not None:
                # A shorter window gives other vectors for long texts: its own vector space.
                ident["max_tokens"] = self.max_tokens
            if self.local_path is not None:
                ident.update(weights_fingerprint(self.local_path))
            self._identity = ident
        return dict(self._identity)

    @property
    def backend(self) -> str:
        return self.resolved()[0]

    @property
    def precision(self) -> str:
        return self.resolved()[2]

    @property
    def device(self) -> str:
        """The device the model runs on (loads a torch model)."""
        backend, device, _ = self.resolved()
        if backend == "onnx":
            return "cpu"
        return str(self._load_torch().device)

    # -- loading --------------------------------------------------------------------------
    def _load_torch(self) -> Any:
        with self._lock:
            if self._model is None:
                set_offline(self.allow_download)
                _backend, device, precision = self.resolved()
                require_embed("torch", "sentence-transformers embeddings")
                st = require_embed("sentence_transformers", "sentence-transformers embeddings")
                logger.info("loading sentence-transformers model %s on %s (%s)", self.model_ref, device, precision)
                model = st.SentenceTransformer(self.model_ref, device=device,
                                               local_files_only=not self.allow_download)
                if precision == "fp16":
                    model = model.half()
                if self.max_tokens is not None:
                    model.max_seq_length = min(int(model.max_seq_length or self.max_tokens), self.max_tokens)
                self._model = model
        return self._model

    def _load_onnx(self) -> OnnxSentenceEncoder:
        with self._lock:
            if self._onnx is None:
                set_offline(self.allow_download)
                assert self.local_path is not None
                _backend, _device, precision = self.resolved()
                sha = self.identity()["weights_sha256"]
                path = exported_model(self.local_path, sha, precision)
                logger.info("loading ONNX model %s (%s)", path, precision)
                self._onnx = OnnxSentenceEncoder(self.local_path, path, threads=self.threads,
                                                 per_text=not batch_independent(precision),
                                                 max_tokens=self.max_tokens)
        return self._onnx

    @property
    def dim(self) -> int:
        """Vector dimension (384 for all-MiniLM-L6-v2)."""
        if self._dim is None:
            if self.backend == "torch":
                model = self._load_torch()
                getter = getattr(model, "get_embedding_dimension", None) or getattr(
                    model, "get_sentence_embedding_dimension", None)
                dim = getter() if getter is not None else None
                if dim:
                    self._dim = int(dim)
            if self._dim is None:
                self._dim = int(self._encode(["dimension probe"]).shape[1])
        return self._dim

    # -- embedding ------------------------------------------------------------------------
    def _encode(self, items: list[str]) -> np.ndarray:
        if self.backend == "onnx":
            vecs = self._load_onnx().encode(items, batch_size=min(self.batch_size, RUN_TEXTS))
        else:
            vecs = self._load_torch().encode(items, batch_size=self.batch_size, normalize_embeddings=True,
                                             convert_to_numpy=True, show_progress_bar=False)
        vecs = np.asarray(vecs, dtype=np.float32)
        if self._dim is None:
            self._dim = int(vecs.shape[1])
        return vecs

    def embed(self, texts: Sequence[str]) -> Any:
        """Document vectors: ``(len(texts), dim)`` float32 unit-length rows (zero rows for no texts)."""
        items = embed_inputs(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._encode([self.document_prefix + t for t in items])

    def embed_query(self, texts: Sequence[str]) -> Any:
        """Query vectors: as ``embed``, with ``query_prefix`` instead of ``document_prefix``."""
        items = embed_inputs(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._encode([self.query_prefix + t for t in items])
