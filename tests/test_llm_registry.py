"""Registry, lazy extras, the scripted backend and the hash embedder."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from memcompile_local.errors import (
    ConfigError,
    MissingExtraError,
    TransportError,
    UnexpectedRequestError,
)
from memcompile_local.config import ModelConfig
from memcompile_local.llm import registry
from memcompile_local.llm.extras import require
from memcompile_local.llm.interface import Embedder, LLMBackend, LLMRequest, Message
from memcompile_local.llm.registry import backend_kwargs, embedder_kwargs, load_backend, load_embedder

from memcompile_local.adapters.scripted import (  # noqa: E402  (installed package path)
    HashEmbedder,
    ScriptedBackend,
    ScriptedReply,
    request_key,
)


def _req(user: str, stage: str = "answer", system: str | None = None) -> LLMRequest:
    msgs = ((Message("system", system),) if system else ()) + (Message("user", user),)
    return LLMRequest(messages=msgs, stage=stage)


# ---------------------------------------------------------------------------- registry


def test_unknown_backend_lists_known_names():
    with pytest.raises(ConfigError) as info:
        load_backend("gpt-nonexistent")
    msg = str(info.value)
    for name in ("scripted", "llamacpp", "openai", "vllm", "transformers"):
        assert name in msg


def test_unknown_embedder_lists_known_names():
    with pytest.raises(ConfigError) as info:
        load_embedder("word2vec")
    assert "sentence-transformers" in str(info.value) and "hash" in str(info.value)


@pytest.mark.parametrize("table", [registry.BACKENDS, registry.EMBEDDERS], ids=["backends", "embedders"])
def test_every_registered_name_points_at_a_class_defined_in_its_module(table):
    """Read each adapter module's source (importing it could load a heavy library) and find the class."""
    for name, target in table.items():
        module_name, _, cls_name = target.partition(":")
        spec = importlib.util.find_spec(module_name)
        assert spec is not None and spec.origin, f"{name}: no module {module_name}"
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        assert cls_name in classes, f"{name}: {module_name} defines no class {cls_name}"
    assert set(registry.BACKENDS) == set(registry.BACKEND_EXTRAS)
    assert set(registry.EMBEDDERS) == set(registry.EMBEDDER_EXTRAS)


def test_core_adapters_satisfy_the_protocols():
    assert isinstance(load_backend("scripted", script={}), LLMBackend)
    assert isinstance(load_embedder("hash", dim=8), Embedder)


def test_backend_and_embedder_kwargs_follow_the_model_section():
    m = ModelConfig(backend="openai", model="qwen", base_url="http://127.0.0.1:9/v1", api_key_env="K",
                    concurrency=3, timeout_s=7.0, options={"timeout": 1.0, "extra": True},
                    embedder="openai", embed_model="e5")
    assert backend_kwargs(m) == {"model": "qwen", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K",
                                 "concurrency": 3, "timeout": 1.0, "extra": True}  # options win
    assert backend_kwargs(dataclasses.replace(m, backend="scripted")) == {"timeout": 1.0, "extra": True}
    assert backend_kwargs(dataclasses.replace(m, backend="llamacpp", options={})) == {"model": "qwen"}
    assert embedder_kwargs(m) == {"model": "e5", "base_url": "http://127.0.0.1:9/v1"}
    assert embedder_kwargs(dataclasses.replace(m, embedder="hash")) == {}
    assert embedder_kwargs(dataclasses.replace(m, embedder="sentence-transformers")) == {
        "model": "e5", "backend": "auto", "precision": "auto", "device": "auto", "batch_size": 64,
        "query_prefix": "", "document_prefix": "", "allow_download": False}


def test_load_scripted_backend_and_hash_embedder():
    backend = load_backend("scripted", script={("answer", "capital"): "Paris"})
    assert isinstance(backend, ScriptedBackend)
    assert backend.generate([_req("the capital of France?")])[0].text == "Paris"
    emb = load_embedder("hash", dim=32)
    assert isinstance(emb, HashEmbedder) and emb.dim == 32


def test_custom_module_class_path_and_malformed_path():
    backend = load_backend("memcompile_local.adapters.scripted:ScriptedBackend", script={})
    assert isinstance(backend, ScriptedBackend)
    with pytest.raises(ConfigError):
        load_backend("memcompile_local.adapters.scripted:NoSuchClass")
    with pytest.raises(ConfigError):
        registry.resolve("no_colon_here")


def test_adapter_with_missing_top_level_import_raises_missing_extra(tmp_path, monkeypatch):
    (tmp_path / "fake_heavy_adapter.py").write_text(
        "import heavy_lib_that_is_not_installed_xyz\n\nclass Backend:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.BACKENDS, "fake", "fake_heavy_adapter:Backend")
    monkeypatch.setitem(registry.BACKEND_EXTRAS, "fake", "vllm")
    with pytest.raises(MissingExtraError) as info:
        load_backend("fake")
    assert info.value.extra == "vllm"
    assert info.value.package == "heavy_lib_that_is_not_installed_xyz"
    assert "memcompile-local[vllm]" in str(info.value)


# ------------------------------------------------------------------------------ require


def test_require_returns_module():
    import json

    assert require("json", "bench") is json


def test_require_missing_names_package_and_extra():
    with pytest.raises(MissingExtraError) as info:
        require("surely_not_installed_pkg_123.sub", "bench", "plots")
    err = info.value
    assert err.package == "surely_not_installed_pkg_123" and err.extra == "bench"
    assert "plots" in str(err) and "pip install 'memcompile-local[bench]'" in str(err)


def test_require_maps_import_name_to_pip_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(MissingExtraError) as info:
        require("llama_cpp", "cpu")
    assert info.value.package == "llama-cpp-python" and info.value.extra == "cpu"


# ---------------------------------------------------------------------- scripted backend


def test_rules_checked_in_order_with_stage_and_wildcard():
    backend = ScriptedBackend({
        ("intent", "where"): "INTENT",
        ("*", "where"): "ANY",
        ("answer", "when"): "ANSWER",
    })
    out = backend.generate([_req("where is it", "intent"), _req("where is it", "answer"),
                            _req("when was it", "answer")])
    assert [r.text for r in out] == ["INTENT", "ANY", "ANSWER"]
    assert backend.generate_calls == 1 and backend.calls == 3


def test_rule_matches_last_user_message_only():
    backend = ScriptedBackend({("answer", "needle"): "found"})
    req = LLMRequest(messages=(Message("system", "needle"), Message("user", "hay")), stage="answer")
    with pytest.raises(UnexpectedRequestError) as info:
        backend.generate([req])
    assert "'answer'" in str(info.value) and "'hay'" in str(info.value)


def test_hash_key_precedes_rules_and_callables_are_fallbacks():
    exact = _req("q1")
    backend = ScriptedBackend([
        {request_key(exact): "exact", ("answer", "q"): "rule"},
        lambda r: "called" if r.stage == "judge" else None,
    ])
    out = backend.generate([exact, _req("q2"), _req("zzz", "judge")])
    assert [r.text for r in out] == ["exact", "rule", "called"]


def test_token_counts_and_scripted_reply_fields():
    backend = ScriptedBackend({
        ("answer", "one"): "Paris, France.",
        ("answer", "two"): ScriptedReply('{"a": ', finish_reason="length"),
        ("answer", "three"): ScriptedReply("x", prompt_tokens=100, completion_tokens=5),
    })
    r1, r2, r3 = backend.generate([_req("one two?", system="Be brief."), _req("two"), _req("three")])
    # count_tokens: "Be brief." -> be, brief, . = 3 ; "one two?" -> one, two, ? = 3
    assert (r1.prompt_tokens, r1.completion_tokens) == (6, 4)  # Paris , France .
    assert r2.finish_reason == "length" and r2.completion_tokens == 5  # {, ", a, ", :
    assert (r3.prompt_tokens, r3.completion_tokens) == (100, 5)


def test_list_entries_are_consumed_in_order_and_last_repeats():
    backend = ScriptedBackend({("answer", "q"): ["first", "second"]})
    texts = [backend.generate([_req("q")])[0].text for _ in range(3)]
    assert texts == ["first", "second", "second"]


def test_exception_entry_is_raised():
    fault = TransportError("server said 503", retryable=True, status=503)
    backend = ScriptedBackend({("answer", "q"): fault})
    with pytest.raises(TransportError) as info:
        backend.generate([_req("q")])
    assert info.value.status == 503
    assert backend.calls == 1  # the request was still recorded


def test_identity_depends_on_static_script_and_model():
    a = ScriptedBackend({("answer", "q"): "x"})
    b = ScriptedBackend({("answer", "q"): "x"})
    c = ScriptedBackend({("answer", "q"): "y"})
    d = ScriptedBackend({("answer", "q"): "x"}, model="other")
    assert a.identity() == b.identity()
    assert a.identity() != c.identity()
    assert a.identity() != d.identity()
    assert a.identity()["backend"] == "scripted"


def test_bad_script_is_a_config_error():
    with pytest.raises(ConfigError):
        ScriptedBackend({42: "x"})
    with pytest.raises(ConfigError):
        ScriptedBackend({("answer", "q"): 3.5})
    with pytest.raises(ConfigError):
        ScriptedBackend("not a script")


# -------------------------------------------------------------------------- hash embedder


def _bucket(token: str, dim: int) -> tuple[int, float]:
    value = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
    return value % dim, (1.0 if value >> 63 else -1.0)


def test_hash_embedder_single_term_is_signed_one_hot():
    emb = HashEmbedder(dim=64)
    vec = emb.embed(["Pottery"])[0]
    index, sign = _bucket("pottery", 64)
    expected = np.zeros(64, dtype=np.float32)
    expected[index] = sign
    np.testing.assert_array_equal(vec, expected)


def test_hash_embedder_properties():
    emb = HashEmbedder(dim=128)
    texts = ["Caroline went to a pottery class", "pottery class with Caroline", "stock market crash", ""]
    out = emb.embed(texts)
    assert out.shape == (4, 128) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out[:3], axis=1), 1.0, rtol=1e-6)
    assert not out[3].any()
    assert out[0] @ out[1] > 0.5 > out[0] @ out[2]
    np.testing.assert_array_equal(out, HashEmbedder(dim=128).embed(texts))  # deterministic
    with pytest.raises(ConfigError):
        HashEmbedder(dim=0)
