"""Query embeddings of concurrent searches, computed in one embedder call.

Under concurrent searches a transformer embedder (MiniLM) is the bottleneck: every search embeds
one or two short query texts, each call pays the model's fixed cost, and calls from many
request threads contend for the same cores. ``BatchedQueryEmbedder`` wraps the server's
embedder: a search that needs a query vector joins the batch being collected; the first one in
waits ``window_s`` for others, then one ``embed_query`` call embeds every text of the batch and
each caller gets its own rows back. At most one batch runs in the model at a time; searches
that arrive meanwhile make up the next batch, so under load batches grow by themselves. A
search that finds no other embedding call in flight does not wait at all: a lone client pays
nothing for the batching.

The rows are the ones an unbatched call gives: the ONNX encoder pads each batch on the right
under an attention mask, so a text's vector does not depend on its batch (``adapters/embed_onnx``),
and the hash embedder embeds each text alone. The small document calls of appends (a new
turn's documents) are merged the same way; the large ones of view loads and builds pass
through. ``window_s`` 0 turns batching off.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_WINDOW_S = 0.002


@dataclass
class _Request:
    texts: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    rows: np.ndarray | None = None
    error: BaseException | None = None


class _Merger:
    """Merges the calls of one embedder function that arrive together (see the module doc).

    ``running`` is shared by the mergers of one embedder: one model call at a time in all.
    """

    def __init__(self, fn: Callable[[list[str]], Any], window_s: float, max_batch: int, running: threading.Lock,
                 others_in_flight: Callable[[], bool] = lambda: True):
        self.fn = fn
        self.others_in_flight = others_in_flight
        self.window_s = window_s
        self.max_batch = max_batch
        self._running = running
        self._lock = threading.Lock()  # guards _pending and _collecting
        self._pending: list[_Request] = []
        self._collecting = False
        self.batches = 0
        self.texts = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        req = _Request(texts)
        with self._lock:
            self._pending.append(req)
            lead = not self._collecting
            if lead:
                self._collecting = True
        if lead:
            self._lead()
        req.done.wait()
        if req.error is not None:
            raise req.error
        assert req.rows is not None
        return req.rows

    def _lead(self) -> None:
        """Wait the window, then embed batches (each once the model is free) until none is left.

        The leader's own request is the first of the first batch; while ``_collecting`` is set
        no other caller leads, so requests past ``max_batch`` or arriving during a batch are
        taken in the next round of this loop or, once it has ended, by a new leader."""
        if self.others_in_flight():
            threading.Event().wait(self.window_s)
        while True:
            with self._running:
                with self._lock:
                    batch, self._pending = self._take(self._pending)
                    more = bool(self._pending)
                    if not more:
                        self._collecting = False
                self._run(batch)
            if not more:
                return

    def _take(self, pending: list[_Request]) -> tuple[list[_Request], list[_Request]]:
        batch, size = [], 0
        for n, req in enumerate(pending):
            if batch and size + len(req.texts) > self.max_batch:
                return batch, pending[n:]
            batch.append(req)
            size += len(req.texts)
        return batch, []

    def _run(self, batch: list[_Request]) -> None:
        texts = [t for req in batch for t in req.texts]
        try:
            rows = np.asarray(self.fn(texts), dtype=np.float32)
            if rows.shape[0] != len(texts):
                raise RuntimeError(f"the embedder returned {rows.shape[0]} rows for {len(texts)} texts")
        except BaseException as exc:  # every caller of the batch gets the error
            for req in batch:
                req.error = exc
                req.done.set()
            return
        self.batches += 1
        self.texts += len(texts)
        start = 0
        for req in batch:
            req.rows = rows[start: start + len(req.texts)]
            start += len(req.texts)
            req.done.set()


class BatchedQueryEmbedder:
    """``inner`` with its small calls merged across threads (see the module doc).

    ``embed_query`` calls are merged, and so are ``embed`` calls of at most ``small_docs``
    texts (an append's new turn and its neighbours' context documents); larger ``embed`` calls
    (a view load, a build) go to the model directly. ``max_batch`` bounds the texts of one
    merged call. Every other attribute (``dim``, ``identity``, ...) is the inner embedder's, so
    views and build keys are unchanged. ``batches`` and ``batched_texts`` count the merged
    query calls and their texts (tests, metrics).
    """

    def __init__(self, inner: Any, *, window_s: float = DEFAULT_WINDOW_S, max_batch: int = 64, small_docs: int = 8):
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        self.inner = inner
        self.window_s = window_s
        self.small_docs = small_docs
        running = threading.Lock()
        self._count_lock = threading.Lock()
        self._in_flight = 0  # callers inside embed_query or a merged embed, this one included
        busy = lambda: self._in_flight > 1  # noqa: E731
        self._queries = _Merger(getattr(inner, "embed_query", None) or inner.embed, window_s, max_batch, running,
                                busy)
        self._docs = _Merger(inner.embed, window_s, max_batch, running, busy)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this class does not define.
        return getattr(self.inner, name)

    @property
    def batches(self) -> int:
        return self._queries.batches

    @property
    def batched_texts(self) -> int:
        return self._queries.texts

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """The query embeddings of ``texts`` (rows in order), computed in a shared batch."""
        texts = list(texts)
        if self.window_s <= 0 or not texts:
            return np.asarray(self._queries.fn(texts), dtype=np.float32)
        return self._counted(self._queries, texts)

    def _counted(self, merger: _Merger, texts: list[str]) -> np.ndarray:
        with self._count_lock:
            self._in_flight += 1
        try:
            return merger(texts)
        finally:
            with self._count_lock:
                self._in_flight -= 1

    def embed(self, texts: Sequence[str]) -> Any:
        """Document embeddings: a small call shares a batch, a large one goes to the model alone."""
        texts = list(texts)
        if self.window_s <= 0 or not texts or len(texts) > self.small_docs:
            return self.inner.embed(texts)
        return self._counted(self._docs, texts)
