"""vLLM in-process backend (offline ``vllm.LLM``), for machines with a GPU.

One ``generate`` call is one batched ``LLM.chat`` call: vLLM schedules the whole batch
itself. Each request carries its own ``SamplingParams`` (temperature, max_tokens, seed
and, for JSON specs, a structured-output constraint).

The structured-output API changed between vLLM releases: 0.10.2 and later have
``StructuredOutputsParams`` passed as ``SamplingParams(structured_outputs=...)``; earlier
releases have ``GuidedDecodingParams`` passed as ``SamplingParams(guided_decoding=...)``
(removed in 0.12). The backend looks for either in the installed vLLM.

vllm is imported only when the model is first loaded; request building is made of pure
functions that take the vllm module (or a stand-in) as an argument.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

from memcompile_local.errors import ConfigError, TransportError
from memcompile_local.llm.interface import LLMRequest, LLMResponse

from memcompile_local.llm.extras import require
from ._specs import chat_messages, json_schema_of
from .models import check_model_string, resolve_local_or_name, set_offline, weights_fingerprint

logger = logging.getLogger(__name__)


def sampling_kwargs(request: LLMRequest) -> dict[str, Any]:
    """SamplingParams keyword arguments for one request, without the constraint."""
    return {
        "temperature": float(request.temperature),
        "max_tokens": request.checked_max_tokens(),
        "seed": int(request.seed),
    }


def structured_output_kwargs(schema: dict[str, Any] | None, sampling_module: Any) -> dict[str, Any]:
    """The SamplingParams keyword that constrains output to ``schema``, by feature detection.

    ``sampling_module`` is ``vllm.sampling_params`` (or anything with the same class names).
    Returns ``{}`` for free text, ``{"structured_outputs": StructuredOutputsParams(json=...)}``
    on current vLLM, ``{"guided_decoding": GuidedDecodingParams(json=...)}`` on older vLLM.
    """
    if schema is None:
        return {}
    new_cls = getattr(sampling_module, "StructuredOutputsParams", None)
    if new_cls is not None:
        return {"structured_outputs": new_cls(json=schema)}
    old_cls = getattr(sampling_module, "GuidedDecodingParams", None)
    if old_cls is not None:
        return {"guided_decoding": old_cls(json=schema)}
    raise ConfigError(
        "this vLLM has neither StructuredOutputsParams nor GuidedDecodingParams; "
        "expected vLLM >= 0.8 for JSON-constrained decoding"
    )


def build_batch(requests: Sequence[LLMRequest], sampling_module: Any) -> tuple[list[list[dict[str, str]]], list[Any]]:
    """Conversations and per-request SamplingParams for one ``LLM.chat`` call."""
    conversations = [chat_messages(r.messages) for r in requests]
    params = []
    for r in requests:
        kwargs = sampling_kwargs(r)
        kwargs.update(structured_output_kwargs(json_schema_of(r.output), sampling_module))
        params.append(sampling_module.SamplingParams(**kwargs))
    return conversations, params


def response_from_output(output: Any, where: str) -> LLMResponse:
    """An ``LLMResponse`` from a vLLM ``RequestOutput`` (first completion)."""
    outs = getattr(output, "outputs", None)
    if not outs:
        raise TransportError(f"{where}: vLLM returned no completion", retryable=False)
    first = outs[0]
    reason = getattr(first, "finish_reason", None)
    if reason == "abort":
        raise TransportError(f"{where}: vLLM aborted the request", retryable=True)
    prompt_ids = getattr(output, "prompt_token_ids", None) or []
    token_ids = getattr(first, "token_ids", None) or []
    return LLMResponse(
        text=first.text or "",
        prompt_tokens=len(prompt_ids),
        completion_tokens=len(token_ids),
        finish_reason="length" if reason == "length" else "stop",
    )


class VLLMBackend:
    """A Hugging Face model run in-process by vLLM.

    ``model``: a local model folder, or a hub name when ``allow_download=True``.
    ``engine_kwargs`` go to ``vllm.LLM`` unchanged (e.g. ``enforce_eager``,
    ``quantization``); the named arguments cover the common ones.
    """

    def __init__(
        self,
        model: str,
        *,
        seed: int = 0,
        dtype: str = "auto",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.85,
        tensor_parallel_size: int = 1,
        allow_download: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model_name = check_model_string(model, "VLLMBackend(model=...)")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(f"VLLMBackend(gpu_memory_utilization=...): expected (0, 1], got {gpu_memory_utilization}")
        self.allow_download = allow_download
        self.model_ref, self.local_path = resolve_local_or_name(self.model_name, allow_download, what="vLLM")
        self.seed = seed
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.engine_kwargs = dict(engine_kwargs or {})
        self._llm: Any = None
        self._lock = threading.Lock()
        self._identity: dict[str, Any] | None = None

    def identity(self) -> dict[str, Any]:
        """Backend kind, model, dtype and (for a local folder) the weights fingerprint."""
        if self._identity is None:
            ident: dict[str, Any] = {"backend": "vllm", "model": self.model_name, "dtype": self.dtype}
            if self.local_path is not None:
                ident.update(weights_fingerprint(self.local_path))
            self._identity = ident
        return dict(self._identity)

    def engine_args(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.LLM`` (no vLLM needed to compute them)."""
        args: dict[str, Any] = {
            "model": self.model_ref,
            "seed": self.seed,
            "dtype": self.dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "tensor_parallel_size": self.tensor_parallel_size,
        }
        if self.max_model_len is not None:
            args["max_model_len"] = self.max_model_len
        args.update(self.engine_kwargs)
        return args

    def _load(self) -> Any:
        if self._llm is None:
            set_offline(self.allow_download)
            vllm = require("vllm", "vllm", "the vLLM backend")
            logger.info("starting vLLM on %s", self.model_ref)
            self._llm = vllm.LLM(**self.engine_args())
        return self._llm

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """One batched ``LLM.chat`` over all requests; responses in request order."""
        reqs = list(requests)
        if not reqs:
            return []
        sampling_module = require("vllm.sampling_params", "vllm", "the vLLM backend")
        conversations, params = build_batch(reqs, sampling_module)
        with self._lock:
            llm = self._load()
            try:
                outputs = llm.chat(conversations, sampling_params=params, use_tqdm=False)
            except ValueError as exc:
                # vLLM raises ValueError for requests it will never accept (too long a prompt).
                raise TransportError(f"vLLM rejected the batch: {exc}", retryable=False) from exc
        if len(outputs) != len(reqs):
            raise TransportError(f"vLLM returned {len(outputs)} outputs for {len(reqs)} requests", retryable=False)
        return [response_from_output(o, f"vllm request {i} (stage={r.stage})")
                for i, (o, r) in enumerate(zip(outputs, reqs))]

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's tokenizer."""
        tok = self._load().get_tokenizer()
        return len(tok.encode(text, add_special_tokens=False))
