"""Query embeddings of concurrent searches share one embedder call (service/embed_batch.py).

In process: 16 threads embedding at once get exactly the rows a serial call gives, in fewer
model calls, with the hash embedder and the shipped MiniLM; an error reaches every caller of
its batch. Over real HTTP: 16 concurrent searches against a server with the MiniLM embedder
and batching on return exactly the packets and scores of the same searches sent one at a time.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from _service_util import MODEL_FREE, running, write_config
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.service.embed_batch import BatchedQueryEmbedder

QUERIES = [f"where did person {i} leave the {thing}?" for i, thing in
           enumerate(["keys", "red kayak", "umbrella", "chess set", "telescope", "old camera", "map", "ukulele"] * 2)]


class Counting:
    """An embedder that counts its calls (and can be told to fail)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0
        self.fail = False
        self.lock = threading.Lock()

    def identity(self):
        return self.inner.identity()

    @property
    def dim(self):
        return self.inner.dim

    def embed(self, texts):
        return self.inner.embed(texts)

    def embed_query(self, texts):
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            # The first call holds the model a while, so that the other callers queue behind it
            # whatever the machine's load (the next batch then merges them).
            time.sleep(0.3)
        if self.fail:
            raise RuntimeError("model gone")
        embed = getattr(self.inner, "embed_query", None) or self.inner.embed
        return embed(texts)


def concurrent(batched, texts_per_call):
    barrier = threading.Barrier(len(texts_per_call))

    def one(texts):
        barrier.wait()
        return batched.embed_query(texts)

    with ThreadPoolExecutor(len(texts_per_call)) as pool:
        return list(pool.map(one, texts_per_call))


def minilm():
    from memcompile_local.llm.registry import embedder_kwargs, load_embedder
    from memcompile_local.config import PipelineConfig

    m = PipelineConfig().replace(model={"embedder": "sentence-transformers"}).model
    return load_embedder(m.embedder, **embedder_kwargs(m))


@pytest.mark.parametrize("make", [lambda: HashEmbedder(dim=64), minilm], ids=["hash", "minilm"])
def test_sixteen_concurrent_callers_get_the_serial_rows_in_fewer_calls(make):
    inner = Counting(make())
    serial = [np.asarray(inner.embed_query([q]), dtype=np.float32) for q in QUERIES]
    # Some callers embed two texts (the fused selector's intent text and the question).
    calls = [[q] if i % 3 else [q, q.upper()] for i, q in enumerate(QUERIES)]
    serial_two = {i: np.asarray(inner.embed_query(c), dtype=np.float32) for i, c in enumerate(calls) if len(c) == 2}
    inner.calls = 0
    batched = BatchedQueryEmbedder(inner, window_s=0.02)
    got = concurrent(batched, calls)
    for i, rows in enumerate(got):
        want = serial_two[i] if i in serial_two else serial[i]
        assert rows.shape == want.shape
        np.testing.assert_array_equal(rows, want)
    assert inner.calls == batched.batches < len(calls)
    assert batched.batched_texts == sum(len(c) for c in calls)
    # Everything but embed_query is the inner embedder's (views and build keys do not change).
    assert batched.identity() == inner.identity() and batched.dim == inner.dim


@pytest.mark.parametrize("make", [lambda: HashEmbedder(dim=64), minilm], ids=["hash", "minilm"])
def test_small_document_calls_are_merged_too_and_large_ones_go_alone(make):
    inner = make()
    docs = [[f"Mara: I keep the item {i} in the shed", f"context of item {i}", "Time: 2024-01-01"][: 1 + i % 3]
            for i in range(12)]
    serial = [np.asarray(inner.embed(d), dtype=np.float32) for d in docs]
    counted = Counting(inner)
    calls = []
    def embed(texts):
        calls.append(len(texts))
        if len(calls) == 1:
            time.sleep(0.3)  # as in Counting.embed_query: the others queue behind the first call
        return inner.embed(texts)

    counted.embed = embed
    batched = BatchedQueryEmbedder(counted, window_s=0.02, small_docs=3)
    got = concurrent(type("Docs", (), {"embed_query": staticmethod(batched.embed)})(), docs)
    for rows, want in zip(got, serial):
        np.testing.assert_array_equal(rows, want)
    assert len(calls) < len(docs)
    calls.clear()
    batched.embed([f"doc {i}" for i in range(10)])  # past small_docs: one call of its own
    assert calls == [10]


def test_window_zero_calls_the_model_once_per_caller_and_errors_reach_every_caller():
    inner = Counting(HashEmbedder(dim=16))
    off = BatchedQueryEmbedder(inner, window_s=0)
    concurrent(off, [[q] for q in QUERIES[:8]])
    assert inner.calls == 8 and off.batches == 0
    inner.fail = True
    on = BatchedQueryEmbedder(inner, window_s=0.02)
    barrier = threading.Barrier(6)
    errors = []

    def one(q):
        barrier.wait()
        try:
            on.embed_query([q])
        except RuntimeError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=(q,)) for q in QUERIES[:6]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == ["model gone"] * 6
    inner.fail = False
    assert on.embed_query(["still works"]).shape == (1, 16)  # a failed batch leaves no stuck state


def test_max_batch_splits_a_large_batch_and_every_caller_is_answered():
    inner = Counting(HashEmbedder(dim=16))
    batched = BatchedQueryEmbedder(inner, window_s=0.02, max_batch=4)
    got = concurrent(batched, [[q] for q in QUERIES])
    assert [r.shape for r in got] == [(1, 16)] * len(QUERIES)
    assert inner.calls >= len(QUERIES) // 4


@pytest.mark.slow
def test_concurrent_searches_over_http_equal_serial_ones_with_minilm(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", {**MODEL_FREE, "model": {"embedder": "sentence-transformers"}})
    turns = [{"speaker": "Ana" if i % 2 else "Ben", "text": f"I left the {thing} at {place}",
              "time": f"2024-02-{1 + i % 20:02d} 10:00"}
             for i, (thing, place) in enumerate((t, p) for t in ["keys", "red kayak", "umbrella", "chess set",
                                                                 "telescope", "old camera"]
                                                for p in ["the lake", "the office", "Kyoto", "the market"])]
    with running(tmp_path / "m.sqlite", "--query-batch-ms", "5", config=cfg) as srv:
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            assert c.post("/v1/memories/u/turns", json={"turns": turns}).status_code == 200

            def ask(q):
                r = c.post("/v1/memories/u/search", json={"query": q, "k": 5})
                assert r.status_code == 200, r.text
                return [(p["id"], p["score"]) for p in r.json()["packets"]]

            serial = [ask(q) for q in QUERIES]
            barrier = threading.Barrier(16)

            def at_once(q):
                barrier.wait()
                return ask(q)

            with ThreadPoolExecutor(16) as pool:
                together = list(pool.map(at_once, QUERIES))
    assert together == serial


def test_a_lone_caller_does_not_wait_for_the_window():
    import time

    batched = BatchedQueryEmbedder(HashEmbedder(dim=16), window_s=0.5)
    t0 = time.perf_counter()
    for q in QUERIES[:4]:
        batched.embed_query([q])
    assert time.perf_counter() - t0 < 0.5  # four waits of the window would take 2 s
    assert batched.batches == 4
