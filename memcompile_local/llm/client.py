"""The client every pipeline stage calls: cache, validation and token ledger around a backend.

Call flow of ``complete_many``: each request gets a cache key (the backend's identity plus
the request's identity). Cache hits are answered without the backend; the misses go to the
backend in one ``generate`` call (so vLLM can batch them and a server adapter can run them
concurrently); every response is validated against the request's output spec; valid
responses of deterministic requests are cached, and their tokens enter the ledger once.

A backend that also has ``iter_generate(requests)`` (llama.cpp, OpenAI-compatible servers)
yields ``(position, LLMResponse | ModelError)`` pairs as each request finishes; the client
then validates and caches every response the moment it arrives, so an interrupted batch
(Ctrl-C, a killed process, one failed request) keeps the responses that were finished, and
a rerun asks the backend only for the rest. Backends that finish a batch all at once
(vLLM, transformers) keep the plain ``generate`` path.

The ledger is the store's cache table: a successful response is one row with its token
counts, and a run's totals are the sum over the rows that run used (``mark_used``), hit or
miss. A run that is interrupted and resumed with the same ``run_id`` therefore reports the
same totals as an uninterrupted run, and a repeated hit never counts twice. Failed calls
(transport errors, invalid or truncated output) are recorded separately as waste. Without a
store, :class:`InMemoryLedger` gives the same semantics for the life of the client.

There is one retry layer in the system and it is not here: adapters (the openai client)
retry 429/5xx themselves, and validation retries with a changed prompt belong to the calling
protocol (the packet scheduler). The client reports each failure as a typed ``ModelError``.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from memcompile_local.errors import (
    ConfigError,
    MemCompileError,
    ModelError,
    OutputValidationError,
    TransportError,
    UnexpectedRequestError,
)
from memcompile_local.llm.interface import LLMBackend, LLMRequest, LLMResponse, stable_hash
from memcompile_local.llm.validate import validate_response
from memcompile_local.store.ledger import InMemoryLedger  # the store's ledger SQL, on a private in-memory database

if TYPE_CHECKING:  # the store is only used as a request cache and ledger
    from memcompile_local.store.base import RequestCache

__all__ = ["LLMClient", "InMemoryLedger", "Result", "add_totals"]

logger = logging.getLogger(__name__)

Result = LLMResponse | ModelError


def _empty_totals() -> dict[str, int]:
    return {"prompt": 0, "completion": 0, "calls": 0}


def add_totals(*totals: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Sum per-stage totals dicts (``stage -> {"prompt", "completion", "calls"}``)."""
    out: dict[str, dict[str, int]] = {}
    for table in totals:
        for stage, row in table.items():
            acc = out.setdefault(stage, _empty_totals())
            for name in ("prompt", "completion", "calls"):
                acc[name] += int(row.get(name, 0))
    return {stage: out[stage] for stage in sorted(out)}


@dataclass
class _Pending:
    """A cache key being computed by one thread; others wait for its outcome."""

    event: threading.Event = field(default_factory=threading.Event)
    result: Result | None = None


@dataclass
class _Miss:
    """One request sent to the backend and the batch positions that share its answer."""

    request: LLMRequest
    key: str | None  # None: sampled request, never cached
    positions: list[int]
    pending: _Pending | None


class LLMClient:
    """Cached, validated, token-accounted access to one ``LLMBackend``.

    ``store`` (a ``RequestCache``: the store's cache and ledger) makes the cache and the ledger persistent; without it an
    ``InMemoryLedger`` is used. ``run_id`` names the run whose totals ``totals()`` reports;
    pass the same id to resume a run (a fresh random id by default). ``progress`` shows a
    tqdm counter of finished requests on stderr.

    Thread safe: several threads may call ``complete``/``complete_many`` at once; a key
    being computed by one thread is awaited, not recomputed, by the others.
    """

    def __init__(self, backend: LLMBackend, store: "RequestCache | None" = None, *,
                 run_id: str | None = None, progress: bool = False) -> None:
        self.backend = backend
        self.store = store
        self.run_id = run_id if run_id is not None else uuid.uuid4().hex
        self._ledger: RequestCache = store if store is not None else InMemoryLedger()
        # Backends are immutable once built; identity() may hash weight files, so ask once.
        self._backend_identity = backend.identity()
        self._lock = threading.RLock()
        self._inflight: dict[str, _Pending] = {}
        # Sampled calls (temperature > 0) are never cached, so they have no ledger row; their
        # tokens are kept here for this client's lifetime.
        self._sampled: dict[str, dict[str, int]] = {}
        self._counters = {"requests": 0, "hits": 0, "backend_requests": 0, "backend_batches": 0,
                          "errors": 0}
        self._progress = progress
        self._bar: Any = None
        self._parents: tuple[str, ...] = ()

    def child(self, run_id: str) -> "LLMClient":
        """A client for a sub-run (one question, one build) that shares this client's backend,
        cache and in-flight table, and marks every key it uses under both run ids: the parent's
        totals stay exact while the child's totals give the sub-run's own tokens."""
        kid = copy.copy(self)
        kid.run_id = run_id
        kid._parents = (*self._parents, self.run_id)
        kid._sampled = {}
        kid._counters = dict.fromkeys(self._counters, 0)
        kid._bar = None
        kid._progress = False
        return kid

    def _mark(self, keys: list[str]) -> None:
        for rid in (self.run_id, *self._parents):
            self._ledger.mark_used(rid, keys)

    # ----------------------------------------------------------------------------- keys

    def cache_key(self, request: LLMRequest) -> str:
        """``stable_hash({"backend": backend.identity(), "request": request.identity()})``."""
        return stable_hash({"backend": self._backend_identity, "request": request.identity()})

    def _identity_json(self, request: LLMRequest) -> str:
        return json.dumps({"backend": self._backend_identity, "request": request.identity()},
                          sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    # ----------------------------------------------------------------------------- public

    def complete(self, request: LLMRequest) -> LLMResponse:
        """One validated response; raises the ``ModelError`` subclass on failure."""
        result = self.complete_many([request])[0]
        if isinstance(result, ModelError):
            raise result
        return result

    def complete_many(self, requests: Sequence[LLMRequest]) -> list[Result]:
        """Validated responses or typed errors, one per request and in order.

        Hits come from the cache (``cached=True``, zero tokens); the remaining requests are
        sent to the backend in a single ``generate`` call, identical ones only once. Errors
        are returned, not raised: ``TransportError`` when the backend failed,
        ``OutputValidationError`` when the output does not fit its spec.
        """
        requests = list(requests)
        results: list[Result | None] = [None] * len(requests)
        misses: list[_Miss] = []
        by_key: dict[str, _Miss] = {}
        waiting: list[tuple[int, str, _Pending]] = []
        hits: list[str] = []

        with self._lock:
            self._counters["requests"] += len(requests)
            for pos, request in enumerate(requests):
                if request.temperature > 0:
                    misses.append(_Miss(request, None, [pos], None))
                    continue
                key = self.cache_key(request)
                if key in by_key:
                    by_key[key].positions.append(pos)
                    continue
                if key in self._inflight:
                    waiting.append((pos, key, self._inflight[key]))
                    continue
                hit = self._from_cache(request, key)
                if hit is not None:
                    results[pos] = hit
                    hits.append(key)
                    continue
                pending = _Pending()
                self._inflight[key] = pending
                miss = _Miss(request, key, [pos], pending)
                by_key[key] = miss
                misses.append(miss)
            if hits:
                self._counters["hits"] += len(hits)
                self._mark(hits)

        try:
            if misses:
                self._run_misses(misses, results)
        finally:
            # Whatever happened, release the keys this call owns so no thread waits forever.
            with self._lock:
                for miss in misses:
                    if miss.pending is not None:
                        if miss.pending.result is None:
                            miss.pending.result = ModelError("the call computing this request failed")
                        self._inflight.pop(miss.key, None)  # type: ignore[arg-type]
                        miss.pending.event.set()

        for pos, key, pending in waiting:
            pending.event.wait()
            outcome = pending.result
            if isinstance(outcome, LLMResponse):
                with self._lock:
                    self._counters["hits"] += 1
                    self._mark([key])
                results[pos] = replace(outcome, cached=True, prompt_tokens=0, completion_tokens=0)
            else:
                results[pos] = outcome if outcome is not None else ModelError("no result")

        errors = sum(1 for r in results if isinstance(r, ModelError))
        with self._lock:
            self._counters["errors"] += errors
            self._tick(len(results))
        return results  # type: ignore[return-value]  (every slot is filled by now)

    def totals(self) -> dict[str, dict[str, int]]:
        """This run's tokens per stage: ``stage -> {"prompt", "completion", "calls"}``.

        Sums the unique successful calls the run used (a cached call the run hit counts
        once, as it would have cost one call in an uninterrupted run) plus sampled calls.
        """
        with self._lock:
            stored = self._ledger.token_totals(run_id=self.run_id)
            return add_totals(stored, self._sampled)

    def waste_totals(self) -> dict[str, dict[str, int]]:
        """This run's failed attempts per stage (same shape as ``totals``)."""
        with self._lock:
            return add_totals(self._ledger.waste_totals(run_id=self.run_id))

    def stats(self) -> dict[str, int]:
        """Counters of this client: requests, hits, backend_requests, backend_batches, errors."""
        with self._lock:
            return dict(self._counters)

    def close(self) -> None:
        """Close the progress bar (the backend and store belong to the caller)."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ----------------------------------------------------------------------------- internals

    def _from_cache(self, request: LLMRequest, key: str) -> LLMResponse | None:
        entry = self._ledger.cache_get(key)
        if entry is None:
            return None
        stored = LLMResponse(text=entry["text"], finish_reason=entry.get("finish_reason") or "stop")
        try:
            checked = validate_response(request, stored)
        except OutputValidationError as exc:
            # Only possible if validation rules changed since the entry was written.
            logger.warning("cached response %s no longer validates (%s); asking the backend", key[:12], exc)
            return None
        return replace(checked, cached=True, prompt_tokens=0, completion_tokens=0)

    def _waste(self, request: LLMRequest, prompt: int, completion: int, reason: str) -> None:
        self._ledger.record_waste(stage=request.stage, namespace=request.namespace,
                                  prompt_tokens=prompt, completion_tokens=completion,
                                  reason=reason, run_id=self.run_id)

    def _generate(self, batch: list[LLMRequest]) -> list[LLMResponse] | ModelError:
        """One backend call; a backend failure becomes one error shared by the batch."""
        with self._lock:
            self._counters["backend_batches"] += 1
            self._counters["backend_requests"] += len(batch)
        try:
            responses = list(self.backend.generate(batch))
        except UnexpectedRequestError:
            raise  # a scripted backend missing an answer is a bug in the test, not a model failure
        except ModelError as exc:
            return exc
        except MemCompileError:
            raise  # configuration problems (missing extra, bad config) are not per-request
        except Exception as exc:  # noqa: BLE001 - the backend library's own failure types vary
            logger.warning("backend %s failed on a batch of %d", self._backend_identity, len(batch),
                           exc_info=True)
            wrapped = ModelError(f"backend failed: {type(exc).__name__}: {exc}")
            wrapped.__cause__ = exc
            return wrapped
        if len(responses) != len(batch):
            return ModelError(f"backend returned {len(responses)} responses for {len(batch)} requests")
        return responses

    def _run_misses(self, misses: list[_Miss], results: list[Result | None]) -> None:
        if getattr(self.backend, "iter_generate", None) is not None:
            self._stream_misses(misses, results)
            return
        generated = self._generate([m.request for m in misses])
        with self._lock:
            for i, miss in enumerate(misses):
                if isinstance(generated, ModelError):
                    outcome: Result = generated
                    self._waste(miss.request, 0, 0, _failure_reason(generated))
                else:
                    outcome = self._accept(miss, generated[i])
                self._settle(miss, outcome, results)

    def _settle(self, miss: _Miss, outcome: Result, results: list[Result | None]) -> None:
        """Hand one request's outcome to its batch positions and to threads waiting on its key."""
        if miss.pending is not None:
            miss.pending.result = outcome
        first, *rest = miss.positions
        results[first] = outcome
        for pos in rest:  # identical requests in the same batch share one call
            results[pos] = (replace(outcome, cached=True, prompt_tokens=0, completion_tokens=0)
                            if isinstance(outcome, LLMResponse) else outcome)

    def _stream_misses(self, misses: list[_Miss], results: list[Result | None]) -> None:
        """Send the misses through ``backend.iter_generate`` and cache each response on arrival."""
        with self._lock:
            self._counters["backend_batches"] += 1
            self._counters["backend_requests"] += len(misses)
        settled: set[int] = set()
        failure: ModelError | None = None
        try:
            for i, raw in self.backend.iter_generate([m.request for m in misses]):
                if not 0 <= i < len(misses) or i in settled:
                    failure = ModelError(f"backend yielded position {i} for a batch of {len(misses)}")
                    break
                miss = misses[i]
                with self._lock:
                    if isinstance(raw, ModelError):
                        self._waste(miss.request, 0, 0, _failure_reason(raw))
                        outcome: Result = raw
                    else:
                        outcome = self._accept(miss, raw)
                    self._settle(miss, outcome, results)
                    if miss.pending is not None:
                        # Threads waiting on this key need not wait for the rest of the batch.
                        self._inflight.pop(miss.key, None)  # type: ignore[arg-type]
                        miss.pending.event.set()
                settled.add(i)
        except UnexpectedRequestError:
            raise
        except ModelError as exc:
            failure = exc
        except MemCompileError:
            raise
        except Exception as exc:  # noqa: BLE001 - the backend library's own failure types vary
            logger.warning("backend %s failed during a batch of %d", self._backend_identity, len(misses),
                           exc_info=True)
            failure = ModelError(f"backend failed: {type(exc).__name__}: {exc}")
            failure.__cause__ = exc
        if len(settled) < len(misses):
            failure = failure or ModelError(
                f"backend finished after {len(settled)} of {len(misses)} responses")
            with self._lock:
                for i, miss in enumerate(misses):
                    if i not in settled:
                        self._waste(miss.request, 0, 0, _failure_reason(failure))
                        self._settle(miss, failure, results)

    def _accept(self, miss: _Miss, raw: LLMResponse) -> Result:
        """Validate one backend response and enter it into the cache and ledger."""
        request = miss.request
        try:
            response = validate_response(request, replace(raw, cached=False))
        except OutputValidationError as exc:
            reason = "truncated" if raw.finish_reason == "length" else "invalid_output"
            self._waste(request, raw.prompt_tokens, raw.completion_tokens, reason)
            return exc
        if miss.key is None:
            row = self._sampled.setdefault(request.stage, _empty_totals())
            row["prompt"] += response.prompt_tokens
            row["completion"] += response.completion_tokens
            row["calls"] += 1
            return response
        inserted = self._ledger.cache_put(
            miss.key,
            namespace=request.namespace,
            stage=request.stage,
            identity_json=self._identity_json(request),
            response={
                "text": response.text,
                "parsed": response.parsed,
                "prompt_tokens": response.prompt_tokens,
                "completion_tokens": response.completion_tokens,
                "finish_reason": response.finish_reason,
                "stage": request.stage,
            },
        )
        if not inserted:
            # Another process computed the same key meanwhile; the first write is the ledger
            # entry, so this call's tokens were spent twice.
            self._waste(request, response.prompt_tokens, response.completion_tokens, "duplicate")
        self._mark([miss.key])
        return response

    def _tick(self, n: int) -> None:
        if not self._progress or n == 0:
            return
        if self._bar is None:
            from tqdm.auto import tqdm

            # disable=False: our bar follows `progress`, not a TQDM_DISABLE set for library bars.
            self._bar = tqdm(desc="llm requests", unit="req", disable=False)
        self._bar.update(n)
        self._bar.set_postfix(hits=self._counters["hits"], errors=self._counters["errors"], refresh=False)


def _failure_reason(exc: ModelError) -> str:
    return "transport" if isinstance(exc, TransportError) else "backend_error"


class NoModelBackend:
    """Stands in where a configuration makes no model call; any call is a configuration error."""

    def identity(self) -> dict[str, Any]:
        return {"backend": "none"}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        stages = sorted({r.stage for r in requests})
        raise ConfigError(f"this run was configured without a model, but stage(s) {stages} asked for one")
