"""``model.embed_max_tokens``: a shorter embedding window, its own vector space, from config to vectors."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
from memcompile_local.cli.args import config_from_args
from memcompile_local.cli.main import build_parser
from memcompile_local.config import PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.llm.registry import embedder_kwargs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]

SHORT = "The ferry to the island leaves at seven."
# About 130 word pieces of text written for this test: longer than a 32-token window.
LONG = ("Before the move we sorted every box in the garage, labelled the kitchen ones in red, and "
        "gave the old sofa to the neighbours who had just had twins. The van came two hours late, "
        "the driver got lost near the bridge, and by the time the last crate was inside the new flat "
        "it was dark, the heating was off, and nobody could find the kettle. We ate cold pizza on "
        "the floor and laughed about the plant that had travelled in the front seat like a passenger.")
TAIL = " Weeks later the plant was still the only thing that had found its place."


def test_a_window_below_one_token_is_refused():
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ConfigError, match="max_tokens"):
            SentenceTransformerEmbedder(max_tokens=bad)
    with pytest.raises(ConfigError, match="embed_max_tokens"):
        PipelineConfig().replace(model={"embed_max_tokens": 0})


def test_the_window_is_part_of_the_identity_only_when_set():
    plain = SentenceTransformerEmbedder(backend="onnx").identity()
    capped = SentenceTransformerEmbedder(backend="onnx", max_tokens=128).identity()
    assert "max_tokens" not in plain
    assert capped["max_tokens"] == 128
    assert {k: v for k, v in capped.items() if k != "max_tokens"} == plain


def test_flag_config_and_embedder_arguments_agree():
    args = build_parser().parse_args(["eval", "longmemeval", "--data", "x.json", "--embed-max-tokens", "96"])
    cfg = config_from_args(args)
    assert cfg.model.embed_max_tokens == 96
    assert embedder_kwargs(cfg.model)["max_tokens"] == 96
    assert "max_tokens" not in embedder_kwargs(PipelineConfig().model)
    bad = build_parser().parse_args(["eval", "longmemeval", "--data", "x.json", "--embed-max-tokens", "0"])
    with pytest.raises(ConfigError, match="embed-max-tokens"):
        config_from_args(bad)


def test_research_build_keys_stay_put_while_the_window_is_unset():
    sys.path.insert(0, str(ROOT / "scripts"))
    import dev_corpora

    cfg = PipelineConfig()
    key = dev_corpora.build_key(cfg)
    # The key of the default config, as computed before the field existed.
    old = cfg.to_dict()
    old["model"].pop("embed_max_tokens")
    old["fusion"] = {k: v for k, v in old["fusion"].items() if k not in dev_corpora.QUERY_ONLY_FUSION_FIELDS}
    assert key == dev_corpora.stable_hash({"config": old, "package": dev_corpora.__version__,
                                           "rule_extractor": dev_corpora.extract_rule.RULE_EXTRACTOR_VERSION})[:12]
    assert dev_corpora.build_key(cfg.replace(model={"embed_max_tokens": 128})) != key
    assert dev_corpora.build_key(cfg.replace(model={"embed_max_tokens": None})) == key


@pytest.fixture(scope="module")
def onnx_pair():
    pytest.importorskip("onnxruntime")
    return (SentenceTransformerEmbedder(backend="onnx"),
            SentenceTransformerEmbedder(backend="onnx", max_tokens=32))


def test_onnx_reads_only_the_window(onnx_pair):
    full, capped = onnx_pair
    a = capped.embed([LONG, LONG + TAIL, SHORT])
    b = full.embed([LONG, LONG + TAIL, SHORT])
    # Past the window nothing is read: the tail changes the full vector, not the capped one.
    np.testing.assert_array_equal(a[0], a[1])
    assert float(b[0] @ b[1]) < 1 - 1e-4
    # A long text's capped vector is another vector; a short text's is the same one.
    assert float(a[0] @ b[0]) < 1 - 1e-3
    np.testing.assert_allclose(a[2], b[2], atol=1e-6)


@pytest.mark.slow
def test_torch_reads_the_same_window(onnx_pair):
    pytest.importorskip("torch")
    _, capped = onnx_pair
    torch_capped = SentenceTransformerEmbedder(backend="torch", device="cpu", max_tokens=32)
    np.testing.assert_allclose(torch_capped.embed([LONG, SHORT]), capped.embed([LONG, SHORT]), atol=1e-5)


def test_the_fast_build_example_sets_its_three_fields():
    args = build_parser().parse_args(["eval", "longmemeval", "--data", "x.json", "--preset", "model-free",
                                      "--config", str(ROOT / "examples" / "fast-build.yaml")])
    cfg = config_from_args(args)
    assert (cfg.model.embed_max_tokens, cfg.model.embed_precision, cfg.fusion.dense_context) == (128, "int8", "composed")
    assert cfg.extraction.extractor == "rule"
