"""Embedders: real all-MiniLM-L6-v2 on CPU, and the /v1/embeddings client against a fake server."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _fake_openai import FakeOpenAIServer, Reply

from memcompile_local.adapters import embed_st, models
from memcompile_local.adapters.embed_onnx import model_layout
from memcompile_local.adapters.embed_openai import OpenAIEmbedder
from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
from memcompile_local.adapters.models import minilm_path, weights_fingerprint
from memcompile_local.adapters.onnx_export import EXPORT_VERSION, RECIPES, onnx_cache_dir, recipe_id
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.build.stages import embedding_model_id
from memcompile_local.cli.args import config_from_args
from memcompile_local.cli.main import build_parser
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError, MissingExtraError, TransportError
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.llm.registry import embedder_kwargs
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def onnx_cache(tmp_path_factory, monkeypatch):
    """A private ONNX cache shared by this module's tests (the export takes a few seconds)."""
    folder = tmp_path_factory.getbasetemp() / "onnx-cache"
    monkeypatch.setenv("MCL_ONNX_CACHE", str(folder))
    return folder


TEXTS = [
    "The cat sat on the mat.",
    "A kitten was sitting on the rug.",
    "Quarterly revenue grew by eight percent, and the board approved the new budget for next year.",
    "Ok",
]


@pytest.mark.slow
def test_minilm_on_cpu(onnx_cache):
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


@pytest.mark.slow
def test_onnx_backends_match_torch_and_have_their_own_identity(onnx_cache):
    pytest.importorskip("onnxruntime")
    torch_emb = SentenceTransformerEmbedder(backend="torch", device="cpu")
    fp32 = SentenceTransformerEmbedder(backend="onnx", precision="fp32")
    int8 = SentenceTransformerEmbedder(backend="onnx", precision="int8")
    auto = SentenceTransformerEmbedder(device="cpu")
    assert auto.resolved() == ("onnx", "cpu", embed_st.DEFAULT_ONNX_PRECISION)
    assert torch_emb.resolved() == ("torch", "cpu", "fp32")
    ref = torch_emb.embed(TEXTS)
    v32, v8 = fp32.embed(TEXTS), int8.embed(TEXTS)
    np.testing.assert_allclose(v32, ref, atol=1e-4)  # the same function, another runtime
    assert float(np.min(np.sum(v8 * ref, axis=1))) > 0.85  # int8: close, not equal
    np.testing.assert_allclose(np.linalg.norm(v8, axis=1), 1.0, atol=1e-5)
    # Similar texts still rank above unrelated ones under int8.
    assert float(v8[0] @ v8[1]) > float(v8[0] @ v8[2]) + 0.2
    # An int8 vector is a function of its text alone (not of the other texts in the batch).
    np.testing.assert_array_equal(int8.embed([TEXTS[2]])[0], v8[2])
    np.testing.assert_array_equal(int8.embed(TEXTS[::-1])[::-1], v8)
    ids = {embedding_model_id(e) for e in (torch_emb, fp32, int8)}
    assert len(ids) == 3
    assert fp32.identity()["backend"] == "onnx" and fp32.identity()["export"] == recipe_id("fp32")
    assert int8.identity()["precision"] == "int8" and "export" not in torch_emb.identity()
    # The export landed in the cache folder, named by the weights hash, and is reused.
    sha = weights_fingerprint(minilm_path())["weights_sha256"]
    folder = onnx_cache_dir() / f"{sha[:16]}-{EXPORT_VERSION}"
    assert onnx_cache_dir() == onnx_cache
    files = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.onnx")}
    assert {"model.onnx", ".".join(("model", *RECIPES["int8"], "onnx"))} <= set(files)
    SentenceTransformerEmbedder(backend="onnx", precision="int8").embed(["again"])
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.onnx")} == files


@pytest.mark.slow
def test_prefixes_go_before_documents_and_queries(onnx_cache):
    pytest.importorskip("onnxruntime")
    plain = SentenceTransformerEmbedder(backend="onnx", precision="fp32")
    e5 = SentenceTransformerEmbedder(backend="onnx", precision="fp32", query_prefix="query: ",
                                     document_prefix="passage: ")
    np.testing.assert_allclose(e5.embed(["a red bike"]), plain.embed(["passage: a red bike"]), atol=1e-6)
    np.testing.assert_allclose(e5.embed_query(["a red bike"]), plain.embed(["query: a red bike"]), atol=1e-6)
    assert e5.identity()["document_prefix"] == "passage: " and "query_prefix" not in plain.identity()
    assert embedding_model_id(e5) != embedding_model_id(plain)


def test_invalid_embedder_settings_are_config_errors():
    for kw in ({"backend": "tensorrt"}, {"precision": "int4"}, {"device": "tpu"}, {"batch_size": 0},
               {"threads": 0}, {"query_prefix": 3}):
        with pytest.raises(ConfigError):
            SentenceTransformerEmbedder(**kw)
    with pytest.raises(ConfigError, match="ONNX backend runs on CPU"):
        SentenceTransformerEmbedder(backend="onnx", device="cuda").identity()
    with pytest.raises(ConfigError, match="torch on cpu runs fp32"):
        SentenceTransformerEmbedder(backend="torch", device="cpu", precision="int8").identity()
    with pytest.raises(ConfigError, match="fp32 or int8"):
        SentenceTransformerEmbedder(backend="onnx", precision="fp16").identity()
    with pytest.raises(ConfigError, match="hub name"):
        SentenceTransformerEmbedder("org/some-hub-model", allow_download=True, backend="onnx").identity()


def test_a_missing_embedding_package_says_exactly_what_to_run(monkeypatch):
    def missing(module, extra, purpose=""):
        raise MissingExtraError(module, extra, purpose)

    monkeypatch.setattr(models, "require", missing)
    emb = SentenceTransformerEmbedder(backend="torch", device="cpu")
    with pytest.raises(MissingExtraError) as err:
        emb.embed(["x"])
    msg = str(err.value)
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in msg
    assert "pip install 'memcompile-local[embed]'" in msg
    assert msg.index("torch==2.13.0") < msg.index("[embed]")  # the CPU torch goes first


def test_model_layout_reads_pooling_and_refuses_what_it_cannot_run(tmp_path):
    assert model_layout(minilm_path()) == {"max_seq_length": 256, "pooling": "mean", "normalize": True}
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(ConfigError, match="Dense"):
        model_layout(tmp_path)
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ConfigError, match="pooling"):
        model_layout(tmp_path)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert model_layout(tmp_path) == {"max_seq_length": 512, "pooling": "cls", "normalize": False}


def test_embedder_settings_reach_config_and_cli():
    args = build_parser().parse_args([
        "build", "--embed-model", "/models/e5-small", "--embed-backend", "torch", "--embed-precision", "fp16",
        "--embed-device", "cuda", "--embed-batch-size", "128", "--embed-query-prefix", "query: ",
        "--embed-document-prefix", "passage: ", "--embed-allow-download", "--embed-threads", "1"])
    m = config_from_args(args).model
    assert (m.embed_model, m.embed_backend, m.embed_precision, m.embed_device, m.embed_batch_size,
            m.embed_query_prefix, m.embed_document_prefix, m.embed_allow_download) == (
        "/models/e5-small", "torch", "fp16", "cuda", 128, "query: ", "passage: ", True)
    kw = embedder_kwargs(m)
    assert kw == {"model": "/models/e5-small", "backend": "torch", "precision": "fp16", "device": "cuda",
                  "batch_size": 128, "query_prefix": "query: ", "document_prefix": "passage: ",
                  "allow_download": True, "threads": 1}
    defaults = config_from_args(build_parser().parse_args(["build"])).model
    assert (defaults.embed_backend, defaults.embed_allow_download, defaults.embed_threads) == ("auto", False, None)
    assert "threads" not in embedder_kwargs(defaults)
    with pytest.raises(ConfigError, match="embed-threads"):
        config_from_args(build_parser().parse_args(["build", "--embed-threads", "0"]))
    with pytest.raises(ConfigError, match="embed_backend"):
        PipelineConfig.from_dict({"model": {"embed_backend": "tensorrt"}})
    with pytest.raises(ConfigError):
        PipelineConfig.from_dict({"model": {"embed_batch_size": 0}})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["build", "--embed-backend", "tensorrt"])


class PrefixedHash(HashEmbedder):
    """Queries and documents on separate paths, counted."""

    def __init__(self):
        super().__init__(dim=64)
        self.queries: list[str] = []

    def embed_query(self, texts):
        self.queries.extend(texts)
        return self.embed(["query " + t for t in texts])


def test_search_embeds_the_question_on_the_query_path(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    emb = PrefixedHash()
    mem = Memory(store, apply_preset("model-free", PipelineConfig()), embedder=emb)
    mem.add("ana", [{"time": "2024-05-01 10:00", "turns": [{"speaker": "Ana", "text": "I bought a red bike."}]}])
    mem.search("ana", "What colour is the bike?", k=3)
    assert emb.queries and all("bike" in q for q in emb.queries)
    store.close()
