"""The ONNX embedder's recipes: length buckets, derived graphs, their cache, and their identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from memcompile_local.adapters import embed_onnx, onnx_export
from memcompile_local.adapters.embed_onnx import OnnxSentenceEncoder, length_buckets
from memcompile_local.adapters.embed_st import SentenceTransformerEmbedder
from memcompile_local.adapters.models import minilm_path, weights_fingerprint
from memcompile_local.build.stages import embedding_model_id
from memcompile_local.errors import ConfigError, ModelNotFoundError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = [
    "Our neighbour's dog barked through the whole thunderstorm last night.",
    "ok",
    "The library extended its opening hours on weekdays, starting in March, after a petition "
    "signed by more than four hundred students who study late before exams.",
    "She moved to Lisbon for a job at a bakery.",
    "Who fixed the bicycle?",
    "Tea, not coffee.",
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """A private ONNX cache for this module (exports take seconds; each is made once here)."""
    folder = tmp_path_factory.mktemp("onnx-cache")
    old = os.environ.get("MCL_ONNX_CACHE")
    os.environ["MCL_ONNX_CACHE"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("MCL_ONNX_CACHE", None)
    else:
        os.environ["MCL_ONNX_CACHE"] = old


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("onnxruntime")
    path = minilm_path()
    return path, weights_fingerprint(path)["weights_sha256"]


def test_length_buckets_group_similar_lengths_deterministically():
    lengths = [10, 40, 11, 12, 100, 41, 10, 13, 200, 11]
    batches = length_buckets(lengths, 3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 3 for b in batches)
    # Shortest first, ties by index; a full batch closes even when the next text is as short.
    assert batches[0] == [0, 6, 2]
    assert batches[1] == [9, 3, 7]
    # 40 and 41 share a batch; 100 and 200 are far from everything else.
    assert [1, 5] in batches and [4] in batches and [8] in batches
    for b in batches:
        first = lengths[b[0]]
        assert all(lengths[i] - first <= max(2, int(first * 0.125)) for i in b)
    assert length_buckets(lengths, 3) == batches
    assert length_buckets(lengths, 1) == [[i] for i in sorted(range(10), key=lambda i: (lengths[i], i))]
    with pytest.raises(ValueError):
        length_buckets(lengths, 0)


def test_a_long_run_of_equal_lengths_fills_batches():
    batches = length_buckets([7] * 10, 4)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_recipe_ids_name_export_and_steps_and_refuse_unknowns():
    assert onnx_export.recipe_id("fp32").startswith(onnx_export.EXPORT_VERSION)
    assert onnx_export.recipe_id("int8") != onnx_export.recipe_id("fp32")
    for step in onnx_export.RECIPES["int8"]:
        assert step in onnx_export.recipe_id("int8")
    with pytest.raises(ConfigError, match="fp16"):
        onnx_export.recipe_id("fp16")
    with pytest.raises(ConfigError, match="nosuchstep"):
        onnx_export.derived_model(minilm_path(), "0" * 64, ("nosuchstep",))


def test_the_recipe_is_part_of_the_embedder_identity(monkeypatch):
    before = SentenceTransformerEmbedder(backend="onnx", precision="int8")
    ident = before.identity()
    assert ident["export"] == onnx_export.recipe_id("int8")
    monkeypatch.setitem(onnx_export.RECIPES, "int8", ("int8pt1",))
    after = SentenceTransformerEmbedder(backend="onnx", precision="int8")
    assert after.identity()["export"] != ident["export"]
    assert embedding_model_id(after) != embedding_model_id(before)  # their vectors never mix


def test_onnx_modules_import_no_runtime():
    code = textwrap.dedent("""
        import json, sys
        import memcompile_local
        import memcompile_local.adapters.embed_st, memcompile_local.adapters.onnx_export
        print(json.dumps(sorted(m for m in ("onnxruntime", "onnx", "torch", "transformers") if m in sys.modules)))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@pytest.mark.slow
def test_fused_graph_matches_the_plain_export_and_files_are_reused(onnx_cache, minilm):
    model_dir, sha = minilm
    plain = onnx_export.derived_model(model_dir, sha, ())
    fused = onnx_export.derived_model(model_dir, sha, ("fused1",))
    folder = onnx_export.model_folder(sha)
    assert plain == folder / "model.onnx" and fused == folder / "model.fused1.onnx"
    assert folder.parent == onnx_cache
    a = OnnxSentenceEncoder(model_dir, plain).encode(TEXTS)
    b = OnnxSentenceEncoder(model_dir, fused).encode(TEXTS)
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert float(np.min(np.sum(a * b, axis=1))) > 1 - 1e-6
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.onnx")}
    assert onnx_export.derived_model(model_dir, sha, ("fused1",)) == fused
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.onnx")} == stamps
    assert not list(folder.glob("*.tmp"))
    assert json.loads((folder / "source.json").read_text())["export"] == onnx_export.EXPORT_VERSION


@pytest.mark.slow
def test_fp32_vectors_do_not_depend_on_the_batch(onnx_cache, minilm, monkeypatch):
    model_dir, sha = minilm
    for steps in ((), ("fused1",)):
        enc = OnnxSentenceEncoder(model_dir, onnx_export.derived_model(model_dir, sha, steps))
        alone = np.stack([enc.encode([t])[0] for t in TEXTS])
        np.testing.assert_allclose(enc.encode(TEXTS, batch_size=64), alone, atol=1e-6)
        # Every text in one batch padded to the longest: padding does not move a vector.
        monkeypatch.setattr(embed_onnx, "PAD_SLACK", 1e9)
        assert len(length_buckets([3, 40, 90], 64)) == 1
        np.testing.assert_allclose(enc.encode(TEXTS, batch_size=64), alone, atol=1e-6)
        monkeypatch.undo()


@pytest.mark.slow
def test_int8_recipe_batches_and_stays_close(onnx_cache, minilm):
    model_dir, sha = minilm
    fp32 = SentenceTransformerEmbedder(backend="onnx", precision="fp32").embed(TEXTS)
    emb = SentenceTransformerEmbedder(backend="onnx", precision="int8")
    v8 = emb.embed(TEXTS)
    assert float(np.mean(np.sum(v8 * fp32, axis=1))) > 0.98  # per-channel scales hold the vectors
    assert not emb._load_onnx().per_text  # per-token scales: texts share runs
    np.testing.assert_allclose(emb.embed(TEXTS[::-1])[::-1], v8, atol=1e-6)
    np.testing.assert_allclose(np.stack([emb.embed([t])[0] for t in TEXTS]), v8, atol=1e-6)
    name = "model." + ".".join(onnx_export.RECIPES["int8"]) + ".onnx"
    assert (onnx_export.model_folder(sha) / name).is_file()


@pytest.mark.slow
def test_a_graph_that_differs_from_its_source_is_refused(onnx_cache, minilm):
    model_dir, sha = minilm
    plain = onnx_export.derived_model(model_dir, sha, ())
    int8 = onnx_export.derived_model(model_dir, sha, ("int8pt1",))
    onnx_export._check_same_outputs(plain, plain)
    with pytest.raises(ModelNotFoundError, match="differ"):
        onnx_export._check_same_outputs(plain, int8)


@pytest.mark.slow
def test_a_failed_step_leaves_no_file(onnx_cache, minilm, monkeypatch):
    model_dir, sha = minilm
    onnx_export.derived_model(model_dir, sha, ())

    def half_then_fail(_model_dir, _source, target):
        target.write_bytes(b"half a model")
        raise RuntimeError("disk full")

    monkeypatch.setitem(onnx_export.STEPS, "broken9", half_then_fail)
    with pytest.raises(RuntimeError, match="disk full"):
        onnx_export.derived_model(model_dir, sha, ("broken9",))
    folder = onnx_export.model_folder(sha)
    assert not (folder / "model.broken9.onnx").exists()
    assert not list(folder.glob("*.tmp"))


def _one_matmul_model(path, weight):
    """An ONNX file with one MatMul of a float input by the constant ``weight``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", n])],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_export.OPSET)]), str(path))


def _per_token_reference(x, w):
    """Per-token int8 MatMul written out in numpy: row scale max|row|/127, column scale max|col|/127."""
    col = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
    wq = np.clip(np.round(w / col), -127, 127)
    rows = x.reshape(-1, x.shape[-1])
    scale = np.maximum(np.abs(rows).max(axis=1), 1e-12) / 127.0
    xq = np.clip(np.round(rows / scale[:, None]), -128, 127)
    return ((xq @ wq) * scale[:, None] * col[None, :]).reshape(*x.shape[:-1], w.shape[1])


def test_per_token_int8_matches_its_definition_and_reads_each_row_alone(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    w = rng.normal(size=(16, 8)).astype(np.float32)
    w[:, 2] *= 40  # one large column: per-column scales keep the others fine
    src, dst = tmp_path / "one.onnx", tmp_path / "one.tok.onnx"
    _one_matmul_model(src, w)
    onnx_export._quantize_per_token(tmp_path, src, dst)
    run = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run
    x = rng.normal(size=(2, 3, 16)).astype(np.float32)
    x[1, 2] *= 100  # one loud token: under one scale per tensor it would flatten the others
    x[0, 1] = 0.0  # an all-zero row stays zero, not NaN
    y = run(None, {"x": x})[0]
    assert y.shape == (2, 3, 8)
    np.testing.assert_allclose(y, _per_token_reference(x, w), rtol=1e-5, atol=1e-4)
    assert np.all(y[0, 1] == 0.0)
    exact = x @ w
    quiet = np.ones(x.shape[:2], bool)
    quiet[1, 2] = False
    err = np.abs(y - exact)[quiet].max() / np.abs(exact[quiet]).max()
    assert err < 0.02
    # A row's output does not depend on the rest of the batch.
    alone = run(None, {"x": x[:1, :2]})[0]
    np.testing.assert_array_equal(alone, y[:1, :2])


def test_per_token_int8_refuses_a_graph_without_weight_matmuls(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    src = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_export.OPSET)]), str(src))
    with pytest.raises(ModelNotFoundError, match="no MatMul"):
        onnx_export._quantize_per_token(tmp_path, src, tmp_path / "out.onnx")


def test_only_recipes_of_batch_independent_steps_share_runs(monkeypatch):
    assert onnx_export.batch_independent("fp32")
    monkeypatch.setitem(onnx_export.RECIPES, "int8", ("int8pcffn1",))
    assert not onnx_export.batch_independent("int8")
    monkeypatch.setitem(onnx_export.RECIPES, "int8", ("int8tok1",))
    assert onnx_export.batch_independent("int8")


@pytest.mark.slow
def test_per_token_int8_minilm_batches_and_stays_closer_than_per_tensor(onnx_cache, minilm):
    model_dir, sha = minilm
    plain = OnnxSentenceEncoder(model_dir, onnx_export.derived_model(model_dir, sha, ())).encode(TEXTS)
    tok = OnnxSentenceEncoder(model_dir, onnx_export.derived_model(model_dir, sha, ("int8tok1",)))
    batched = tok.encode(TEXTS, batch_size=64)
    alone = np.stack([tok.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(batched, alone, atol=1e-6)
    per_tensor = OnnxSentenceEncoder(model_dir, onnx_export.derived_model(model_dir, sha, ("int8pt1",)),
                                     per_text=True).encode(TEXTS)
    cos_tok = np.sum(batched * plain, axis=1)
    cos_pt = np.sum(per_tensor * plain, axis=1)
    assert float(cos_tok.min()) > 0.98 and float(cos_tok.mean()) > 0.99  # "ok" moves most
    assert float(cos_tok.mean()) > float(cos_pt.mean())


@pytest.mark.slow
def test_parallel_runs_give_the_serial_vectors_under_concurrent_callers(onnx_cache, minilm):
    from concurrent.futures import ThreadPoolExecutor

    model_dir, sha = minilm
    path = onnx_export.derived_model(model_dir, sha, ())
    serial = OnnxSentenceEncoder(model_dir, path, threads=1)
    parallel = OnnxSentenceEncoder(model_dir, path, threads=2)
    texts = [f"{t} ({i})" for i, t in enumerate(TEXTS * 4)]
    want = serial.encode(texts)
    np.testing.assert_array_equal(parallel.encode(texts), want)
    np.testing.assert_array_equal(parallel.encode(texts[:2]), want[:2])  # two texts: one run each
    with ThreadPoolExecutor(16) as pool:  # sixteen callers share the encoder's two runs
        got = list(pool.map(lambda i: parallel.encode(texts[i:] + texts[:i]), range(16)))
    for i, vecs in enumerate(got):
        np.testing.assert_array_equal(vecs, np.roll(want, -i, axis=0))
    assert parallel._executor()._max_workers == 2


@pytest.mark.slow
def test_an_encoders_run_threads_end_with_it(onnx_cache, minilm):
    import gc
    import threading

    model_dir, sha = minilm
    before = {t.ident for t in threading.enumerate() if t.name.startswith("onnx-embed")}
    enc = OnnxSentenceEncoder(model_dir, onnx_export.derived_model(model_dir, sha, ()), threads=2)
    enc.encode(TEXTS)
    mine = {t for t in threading.enumerate() if t.name.startswith("onnx-embed") and t.ident not in before}
    assert mine
    del enc
    gc.collect()
    for t in mine:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in mine)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_encodes_with_its_own_run_threads(onnx_cache, minilm):
    # A server that forks workers after the parent embedded once: the parent's pool threads do
    # not exist in the child, so the child must make its own instead of waiting on them.
    import multiprocessing

    global _FORKED_ENCODER
    model_dir, sha = minilm
    _FORKED_ENCODER = OnnxSentenceEncoder(model_dir, onnx_export.derived_model(model_dir, sha, ()), threads=2)
    want = _FORKED_ENCODER.encode(TEXTS)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # the child inherits the encoder, its session and its used pool
        got = pool.apply_async(_encode_in_child, (TEXTS,)).get(timeout=60)
    np.testing.assert_array_equal(got, want)


_FORKED_ENCODER = None


def _encode_in_child(texts):
    return _FORKED_ENCODER.encode(texts)
