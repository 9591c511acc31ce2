"""Any OpenAI-compatible chat server (vLLM serve, OpenAI, llama.cpp server, SGLang, Ollama).

Requests in a batch are sent concurrently (``concurrency`` threads sharing one client) so
a server that batches continuously stays busy. Retries of 408/409/429/5xx, timeouts and
connection errors are left to the openai client's own ``max_retries`` with its backoff;
what still fails after that is mapped to ``TransportError`` with ``retryable`` set the
way the failure suggests, so the caller can decide whether to try again later.
"""

from __future__ import annotations

import email.utils
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Iterator, Sequence

from memcompile_local.errors import ConfigError, TransportError
from memcompile_local.llm.interface import LLMRequest, LLMResponse

from memcompile_local.llm.extras import require
from ._specs import SERVER_KINDS, openai_chat_kwargs

logger = logging.getLogger(__name__)

_LOCAL_KEY = "EMPTY"  # servers without auth still need the client to send some key


def resolve_endpoint(who: str, model: str | None, model_env: str, base_url: str | None,
                     api_key: str | None, api_key_env: str) -> tuple[str, str | None, str]:
    """``(model, base_url, key)`` of an OpenAI-compatible client named ``who`` in errors.

    The model comes from the argument or ``$model_env``, the base URL from the argument or
    ``$OPENAI_BASE_URL`` (None: OpenAI's own API), the key from the argument or
    ``$api_key_env``; a custom base URL without a key gets a placeholder, OpenAI's API does not.
    """
    model = model or os.environ.get(model_env)
    if not model or not isinstance(model, str):
        raise ConfigError(f"{who}: expected a model name (argument model= or ${model_env})")
    url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").rstrip("/") or None
    key = api_key if api_key is not None else os.environ.get(api_key_env)
    if not key:
        if url is None:
            raise ConfigError(f"{who}: no API key (argument api_key= or ${api_key_env}) for OpenAI's API")
        key = _LOCAL_KEY
    return model, url, key


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date)."""
    if headers is None:
        return None
    get = getattr(headers, "get", None)
    if get is None:
        return None
    ms = get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    raw = get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(raw)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def map_openai_error(exc: BaseException, where: str) -> TransportError:
    """Turn an exception from the openai client into a typed ``TransportError``.

    Timeouts, connection failures, 408, 409, 429 and 5xx are retryable (with the server's
    Retry-After when it sent one); other 4xx mean the request itself is wrong and are not.
    """
    openai = require("openai", "openai", "OpenAI-compatible servers")
    if isinstance(exc, openai.APITimeoutError):
        return TransportError(f"{where}: request timed out", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return TransportError(f"{where}: connection failed: {exc}", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = int(exc.status_code)
        retry_after = parse_retry_after(getattr(exc.response, "headers", None))
        retryable = status in (408, 409, 429) or status >= 500
        return TransportError(
            f"{where}: HTTP {status}: {exc.message}", retryable=retryable, status=status,
            retry_after=retry_after if retryable else None,
        )
    if isinstance(exc, openai.APIResponseValidationError):
        return TransportError(f"{where}: malformed response: {exc}", retryable=False,
                              status=getattr(exc, "status_code", None))
    return TransportError(f"{where}: {type(exc).__name__}: {exc}", retryable=False)


def response_from_completion(completion: Any, where: str) -> LLMResponse:
    """An ``LLMResponse`` from a ChatCompletion object (or a plain dict of the same shape).

    A body without choices or without a message is a malformed answer: ``TransportError``
    (not retryable: the server produced it on purpose). Token counts come from ``usage``;
    a server that omits usage yields zeros.
    """
    if isinstance(completion, (str, bytes)):
        # The client hands back the raw body when the server did not send JSON.
        head = completion[:120] if isinstance(completion, str) else completion[:120].decode("utf-8", "replace")
        raise TransportError(f"{where}: the server answered with a non-JSON body: {head!r}", retryable=False)
    choices = _get(completion, "choices")
    if not choices:
        raise TransportError(f"{where}: the response has no choices", retryable=False)
    choice = choices[0]
    message = _get(choice, "message")
    if message is None:
        raise TransportError(f"{where}: the first choice has no message", retryable=False)
    text = _get(message, "content")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise TransportError(f"{where}: message content is {type(text).__name__}, expected a string",
                             retryable=False)
    raw_reason = _get(choice, "finish_reason")
    if raw_reason == "abort":
        raise TransportError(f"{where}: the server aborted the generation", retryable=True)
    finish = "length" if raw_reason == "length" else "stop"
    usage = _get(completion, "usage")
    prompt_tokens = int(_get(usage, "prompt_tokens") or 0) if usage is not None else 0
    completion_tokens = int(_get(usage, "completion_tokens") or 0) if usage is not None else 0
    if usage is None:
        logger.warning("%s: the server returned no usage; token counts are 0", where)
    return LLMResponse(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                       finish_reason=finish)


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class OpenAICompatBackend:
    """Chat completions from an OpenAI-compatible HTTP server.

    ``model``: the model name the server knows (default ``$OPENAI_MODEL``).
    ``base_url``: e.g. ``http://127.0.0.1:8000/v1`` (default ``$OPENAI_BASE_URL``, else
    OpenAI's own API). ``api_key``: the key itself; otherwise read from the environment
    variable named by ``api_key_env`` (default ``OPENAI_API_KEY``); a server at a custom
    base URL that needs no key gets a placeholder. ``server_kind`` selects where the
    structured-output constraint goes (see ``_specs.openai_chat_kwargs``): "openai",
    "sglang", "ollama" use response_format json_schema, "llamacpp" its json_object+schema,
    "vllm" vLLM's ``structured_outputs`` body field and "vllm-legacy" ``guided_json``.
    ``strict`` None: strict json_schema whenever the schema allows it.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        server_kind: str = "openai",
        concurrency: int = 4,
        timeout: float = 120.0,
        max_retries: int = 2,
        strict: bool | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.model, self.base_url, self._api_key = resolve_endpoint(
            "OpenAICompatBackend", model, "OPENAI_MODEL", base_url, api_key, api_key_env)
        if server_kind not in SERVER_KINDS:
            raise ConfigError(f"OpenAICompatBackend(server_kind=...): expected one of {', '.join(SERVER_KINDS)}, "
                              f"got {server_kind!r}")
        if concurrency < 1:
            raise ConfigError(f"OpenAICompatBackend(concurrency=...): expected >= 1, got {concurrency}")
        if timeout <= 0:
            raise ConfigError(f"OpenAICompatBackend(timeout=...): expected > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ConfigError(f"OpenAICompatBackend(max_retries=...): expected >= 0, got {max_retries}")
        self.server_kind = server_kind
        self.concurrency = concurrency
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.strict = strict
        self.extra_body = dict(extra_body or {})
        self._client: Any = None

    def identity(self) -> dict[str, Any]:
        """Backend kind, model name and base URL (never the key)."""
        return {
            "backend": "openai",
            "model": self.model,
            "base_url": self.base_url or "https://api.openai.com/v1",
            "server_kind": self.server_kind,
        }

    def _get_client(self) -> Any:
        if self._client is None:
            openai = require("openai", "openai", "OpenAI-compatible servers")
            self._client = openai.OpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return self._client

    def request_kwargs(self, request: LLMRequest) -> dict[str, Any]:
        """The ``chat.completions.create`` arguments for one request (no network)."""
        return openai_chat_kwargs(
            request.messages, request.output, model=self.model, max_tokens=request.checked_max_tokens(),
            temperature=request.temperature, seed=request.seed, server_kind=self.server_kind,
            strict=self.strict, extra_body=self.extra_body,
        )

    def _one(self, index: int, request: LLMRequest, kwargs: dict[str, Any]) -> LLMResponse:
        where = f"{self.base_url or 'openai'} model={self.model} request {index} (stage={request.stage})"
        client = self._get_client()
        openai = require("openai", "openai", "OpenAI-compatible servers")
        try:
            completion = client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, where) from exc
        except ValueError as exc:
            # A body declared as JSON that does not parse (the client raises JSONDecodeError):
            # most often a transfer cut short, so worth another try.
            raise TransportError(f"{where}: the response body is not valid JSON: {exc}", retryable=True) from exc
        return response_from_completion(completion, where)

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """Send the batch with up to ``concurrency`` requests in flight; results in order.

        When some requests fail, the others still finish (no thread is left running) and the
        first failure in request order is raised.
        """
        reqs = list(requests)
        if not reqs:
            return []
        # Build every request first: a malformed one fails before anything is sent.
        all_kwargs = [self.request_kwargs(r) for r in reqs]
        self._get_client()
        if self.concurrency == 1 or len(reqs) == 1:
            return [self._one(i, r, k) for i, (r, k) in enumerate(zip(reqs, all_kwargs))]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(reqs))) as pool:
            futures = [pool.submit(self._one, i, r, k) for i, (r, k) in enumerate(zip(reqs, all_kwargs))]
            results: list[LLMResponse] = []
            first_error: BaseException | None = None
            failed = 0
            for fut in futures:
                try:
                    results.append(fut.result())
                except TransportError as exc:
                    failed += 1
                    if first_error is None:
                        first_error = exc
        if first_error is not None:
            logger.warning("%d of %d requests failed; raising the first failure", failed, len(reqs))
            raise first_error
        return results

    def iter_generate(self, requests: Sequence[LLMRequest]) -> Iterator[tuple[int, LLMResponse | TransportError]]:
        """``(position, response or TransportError)`` as each request finishes (up to
        ``concurrency`` in flight), so the client caches each response on arrival; a failed
        request no longer fails the others. Closing the iterator early cancels what was not sent."""
        reqs = list(requests)
        if not reqs:
            return
        all_kwargs = [self.request_kwargs(r) for r in reqs]
        self._get_client()
        if self.concurrency == 1 or len(reqs) == 1:
            for i, (r, k) in enumerate(zip(reqs, all_kwargs)):
                try:
                    yield i, self._one(i, r, k)
                except TransportError as exc:
                    yield i, exc
            return
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(reqs)))
        try:
            futures = {pool.submit(self._one, i, r, k): i for i, (r, k) in enumerate(zip(reqs, all_kwargs))}
            for fut in as_completed(futures):
                try:
                    yield futures[fut], fut.result()
                except TransportError as exc:
                    yield futures[fut], exc
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None
