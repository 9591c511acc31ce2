"""transformers in-process backend, CPU or GPU, with outlines-constrained JSON.

Requests are grouped by everything that must be shared inside one ``model.generate``
call (output schema, max_tokens, temperature, seed) and run in left-padded batches of
``batch_size``. A JSON spec gets an outlines-core logits processor whose compiled index
is cached per schema; the processor keeps one guide per batch row.

Only local model folders are loaded unless ``allow_download=True``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from memcompile_local.errors import ConfigError, TransportError
from memcompile_local.llm.interface import LLMRequest, LLMResponse

from memcompile_local.llm.extras import require
from ._outlines_indexes import SchemaIndexes
from ._specs import chat_messages, json_schema_of, schema_key
from .models import check_model_string, resolve_local_or_name, set_offline, weights_fingerprint

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupKey:
    """What requests in one generate() call must have in common."""

    schema: str | None
    max_tokens: int
    temperature: float
    seed: int


def group_key(request: LLMRequest) -> GroupKey:
    """The batch group of a request."""
    max_tokens = request.checked_max_tokens()
    schema = json_schema_of(request.output)
    return GroupKey(schema_key(schema) if schema is not None else None, max_tokens,
                    float(request.temperature), int(request.seed))


def plan_batches(requests: Sequence[LLMRequest], batch_size: int) -> list[tuple[GroupKey, list[int]]]:
    """Indices of ``requests`` grouped by ``group_key`` and cut into chunks of ``batch_size``.

    Groups appear in order of their first request; inside a group the order is kept, so
    results can be put back by index.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    groups: dict[GroupKey, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(group_key(r), []).append(i)
    plan = []
    for key, idx in groups.items():
        for start in range(0, len(idx), batch_size):
            plan.append((key, idx[start:start + batch_size]))
    return plan


def generation_kwargs(key: GroupKey, pad_token_id: int, eos_token_id: Any) -> dict[str, Any]:
    """``model.generate`` keyword arguments for a group (no constraint)."""
    kwargs: dict[str, Any] = {
        "max_new_tokens": key.max_tokens,
        "pad_token_id": pad_token_id,
        "eos_token_id": eos_token_id,
    }
    if key.temperature > 0:
        kwargs.update(do_sample=True, temperature=key.temperature, top_k=0, top_p=1.0)
    else:
        # Greedy; explicit None values stop a model's generation_config from adding samplers.
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    return kwargs


def completion_length(token_ids: Sequence[int], stop_ids: set[int]) -> tuple[int, str]:
    """Generated tokens before the first stop token, and the finish reason.

    transformers pads a row only after it produced a stop token, so a row without one used
    its whole budget and ended on length.
    """
    for n, t in enumerate(token_ids):
        if t in stop_ids:
            return n, "stop"
    return len(token_ids), "length"


class TransformersBackend:
    """A causal LM from a local Hugging Face folder, run by transformers.

    ``device``: "auto" (CUDA when available, else CPU), "cpu", "cuda", "cuda:1", ...
    ``dtype``: "auto" (bfloat16 on CUDA, float32 on CPU), or a torch dtype name.
    """

    def __init__(
        self,
        model: str,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        allow_download: bool = False,
    ) -> None:
        self.model_name = check_model_string(model, "TransformersBackend(model=...)")
        if batch_size < 1:
            raise ConfigError(f"TransformersBackend(batch_size=...): expected >= 1, got {batch_size}")
        self.allow_download = allow_download
        self.model_ref, self.local_path = resolve_local_or_name(self.model_name, allow_download, what="transformers")
        self.device_setting = device
        self.dtype_setting = dtype
        self.batch_size = batch_size
        self._model: Any = None
        self._tok: Any = None
        self._device: str | None = None
        self._outlines = SchemaIndexes(self._outlines_model, "torch")
        self._lock = threading.Lock()
        self._identity: dict[str, Any] | None = None

    def identity(self) -> dict[str, Any]:
        """Backend kind, model and (for a local folder) the weights fingerprint."""
        if self._identity is None:
            ident: dict[str, Any] = {"backend": "transformers", "model": self.model_name, "dtype": self.dtype_setting}
            if self.local_path is not None:
                ident.update(weights_fingerprint(self.local_path))
            self._identity = ident
        return dict(self._identity)

    def _load(self) -> tuple[Any, Any]:
        if self._model is None:
            set_offline(self.allow_download)
            torch = require("torch", "transformers", "the transformers backend")
            transformers = require("transformers", "transformers", "the transformers backend")
            if self.device_setting == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            else:
                device = self.device_setting
            if self.dtype_setting == "auto":
                dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            else:
                dtype = getattr(torch, self.dtype_setting, None)
                if not isinstance(dtype, torch.dtype):
                    raise ConfigError(f"TransformersBackend(dtype=...): {self.dtype_setting!r} is not a torch dtype")
            local_only = not self.allow_download
            tok = transformers.AutoTokenizer.from_pretrained(self.model_ref, local_files_only=local_only)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                self.model_ref, dtype=dtype, local_files_only=local_only
            )
            model.to(device)
            model.eval()
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            tok.padding_side = "left"
            self._model, self._tok, self._device = model, tok, device
        return self._model, self._tok

    def _processor(self, schema_text: str) -> Any:
        """A fresh outlines processor (per batch) over the cached index of ``schema_text``."""
        require("outlines", "transformers", "constrained JSON decoding with transformers")
        return self._outlines.processor(schema_text)

    def _outlines_model(self) -> Any:
        import outlines

        return outlines.from_transformers(*self._load())

    def render_prompts(self, requests: Sequence[LLMRequest]) -> list[str]:
        """Chat-templated prompt strings (needs the tokenizer)."""
        _, tok = self._load()
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"{self.model_ref}: the tokenizer has no chat template; expected an instruct/chat model")
        return [tok.apply_chat_template(chat_messages(r.messages), add_generation_prompt=True, tokenize=False)
                for r in requests]

    def _run_group(self, key: GroupKey, reqs: list[LLMRequest]) -> list[LLMResponse]:
        torch = require("torch", "transformers", "the transformers backend")
        transformers = require("transformers", "transformers", "the transformers backend")
        model, tok = self._load()
        prompts = self.render_prompts(reqs)
        # The chat template already contains any BOS the model wants.
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self._device)
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = tok.eos_token_id
        stop_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        kwargs = generation_kwargs(key, tok.pad_token_id, eos)
        if key.schema is not None:
            kwargs["logits_processor"] = transformers.LogitsProcessorList([self._processor(key.schema)])
        if key.temperature > 0:
            torch.manual_seed(key.seed)
        try:
            with torch.no_grad():
                out = model.generate(**enc, **kwargs)
        except (RuntimeError, ValueError) as exc:
            raise TransportError(f"transformers generation failed for {len(reqs)} request(s): {exc}",
                                 retryable=False) from exc
        prompt_len = enc["input_ids"].shape[1]
        results = []
        for row in range(len(reqs)):
            gen = out[row, prompt_len:].tolist()
            n, finish = completion_length(gen, stop_ids)
            text = tok.decode(gen[:n], skip_special_tokens=True)
            results.append(LLMResponse(
                text=text,
                prompt_tokens=int(enc["attention_mask"][row].sum().item()),
                completion_tokens=n,
                finish_reason=finish,
            ))
        return results

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """Grouped, batched generation; responses in request order."""
        reqs = list(requests)
        plan = plan_batches(reqs, self.batch_size)
        results: list[LLMResponse | None] = [None] * len(reqs)
        with self._lock:
            for key, idx in plan:
                for i, resp in zip(idx, self._run_group(key, [reqs[i] for i in idx])):
                    results[i] = resp
        return [r for r in results if r is not None]
