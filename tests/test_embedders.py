"""Embedders: real all-MiniLM-L6-v2 on CPU, and the /v1/embeddings client against a fake server."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _fake_openai import FakeOpenAIServer, Reply

from memcompile_local.adapters.embed_openai import OpenAIEmbedder
from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
from memcompile_local.adapters.models import minilm_path, weights_fingerprint
from memcompile_local.errors import ConfigError, TransportError

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.mark.slow
def test_minilm_on_cpu():
    pytest.importorskip("sentence_transformers")
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu", batch_size=4)
    texts = [
        "The cat sat on the mat.",
        "A kitten was sitting on the rug.",
        "Quarterly revenue grew by eight percent.",
        "The cat sat on the mat.",
        "",
    ]
    v = emb.embed(texts)
    assert emb.dim == 384 and v.shape == (5, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(v[0], v[3])  # identical texts, identical vectors
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.2  # similar beats unrelated by a margin
    # Batching does not change results (batch of 4 + 1 vs. one at a time).
    np.testing.assert_allclose(emb.embed([texts[2]])[0], v[2], atol=1e-5)
    assert emb.embed([]).shape == (0, 384)
    assert emb.device == "cpu"
    ident = emb.identity()
    assert ident["path"] == str(minilm_path())
    assert ident["weights_sha256"] == weights_fingerprint(minilm_path())["weights_sha256"]
    with pytest.raises(ConfigError):
        emb.embed(["ok", 3])  # type: ignore[list-item]


def _embedding_server(width: int = 4, *, shuffle: bool = True, zero_for: str | None = None):
    """Vectors are a function of the text (length, vowel count ...), so order errors show."""

    def vec(text: str) -> list[float]:
        if text == zero_for:
            return [0.0] * width
        base = [len(text) + 1.0, sum(c in "aeiou" for c in text) + 1.0, 2.0, 3.0, 5.0, 7.0]
        return base[:width]

    def reply(path, body, hit):
        assert path == "/v1/embeddings"
        inputs = body["input"]
        data = [{"object": "embedding", "index": i, "embedding": vec(t)} for i, t in enumerate(inputs)]
        if shuffle:
            data.reverse()
        return Reply(body={"object": "list", "data": data, "model": body["model"],
                           "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}})

    return reply


def test_openai_embedder_batches_orders_and_normalises():
    texts = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg"]
    with FakeOpenAIServer(_embedding_server()) as srv:
        emb = OpenAIEmbedder("emb-model", base_url=srv.base_url, batch_size=3, max_retries=0)
        v = emb.embed(texts)
    assert [len(b["input"]) for _, b in srv.requests] == [3, 3, 1]
    assert all(b["encoding_format"] == "float" and b["model"] == "emb-model" for _, b in srv.requests)
    raw = np.array([[len(t) + 1.0, sum(c in "aeiou" for c in t) + 1.0, 2.0, 3.0] for t in texts])
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(v, expected, rtol=1e-6)
    assert v.dtype == np.float32 and emb.dim == 4


def test_openai_embedder_learns_dim_with_one_probe():
    with FakeOpenAIServer(_embedding_server(width=6)) as srv:
        emb = OpenAIEmbedder("m", base_url=srv.base_url, max_retries=0)
        assert emb.dim == 6 and len(srv.requests) == 1
        assert emb.embed([]).shape == (0, 6)
        with pytest.raises(TransportError):
            OpenAIEmbedder("m", base_url=srv.base_url, max_retries=0, dim=3).embed(["x"])


def test_openai_embedder_faults():
    with FakeOpenAIServer(_embedding_server(zero_for="nothing")) as srv:
        with pytest.raises(TransportError) as err:
            OpenAIEmbedder("m", base_url=srv.base_url, max_retries=0).embed(["fine", "nothing"])
    assert "all-zero" in str(err.value)
    with FakeOpenAIServer(lambda p, b, n: Reply(429, {"error": {"message": "later"}}, {"Retry-After": "3"})) as srv:
        with pytest.raises(TransportError) as err:
            OpenAIEmbedder("m", base_url=srv.base_url, max_retries=0).embed(["x"])
    assert err.value.retryable and err.value.retry_after == 3.0
    with FakeOpenAIServer(lambda p, b, n: Reply(body={"object": "list", "data": [], "model": "m"})) as srv:
        with pytest.raises(TransportError) as err:
            OpenAIEmbedder("m", base_url=srv.base_url, max_retries=0).embed(["x"])
    assert "0 vectors for 1 inputs" in str(err.value)
