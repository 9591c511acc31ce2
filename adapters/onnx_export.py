"""Exporting a local sentence-transformers model to ONNX, offline, and deriving faster graphs.

sentence-transformers' own ONNX backend needs ``optimum-onnx``, whose only release pins
``transformers<4.58`` (this project runs transformers 5), so the export is done here with
``torch.onnx.export`` from the model's local files. Nothing is downloaded.

The export uses the model's eager attention (not torch's fused SDPA), because ONNX Runtime's
transformer optimizer recognises that graph and replaces each layer's attention, LayerNorms,
GELU and the embeddings with fused CPU kernels. From the plain export, named steps derive the
files the embedder runs:

- ``fused1``: the BERT fusions of ``onnxruntime.transformers.optimizer`` (fp32, same vectors
  within float rounding; checked against the plain export on probe texts when made);
- ``fusednoattn1``: the same without fusing attention (int8 runs its attention MatMuls on the
  plain float kernels; a fused Attention would be quantized into the slower QAttention);
- ``int8pc1``: dynamic int8 quantization of every weight MatMul, one scale per output
  channel (per-tensor scales lose far more: one column of large weights sets the scale of all);
- ``int8pt1``: the same with one scale per weight tensor (the recipe before, for comparison);
- ``int8pcffn1``: ``int8pc1`` leaving each layer's feed-forward output projection in fp32
  (the MatMuls whose quantization moves the vectors most, measured layer by layer);
- ``int8pcffn3first1``: the same for the first three layers only (where it matters most);
- ``int8tok1``: every weight MatMul in int8 with one weight scale per output channel and one
  activation scale per token, computed at run time from that token's own row (standard ONNX
  ops: ``QuantizeLinear`` / ``DequantizeLinear`` along the token axis, ``MatMulInteger``).
  ONNX Runtime's dynamic quantization scales a whole input tensor by its largest value, so a
  vector there depends on the other texts of its batch; with one scale per token it depends on
  its own text alone, so texts can be batched (and per-token scales are finer than one per
  tensor: closer to fp32 with the FFN output projection quantized too).

A recipe is a sequence of steps; ``RECIPES`` maps a precision to the shipped one, and
``recipe_id`` (part of the embedder identity) names export version and steps, so vectors of
two recipes never share a cache entry. Files live in ``onnx_cache_dir() / <weights hash>-
<export version> /`` as ``model.onnx`` (plain) and ``model.<step>.<step>.onnx``; each is
written under a lock to a temporary name and renamed into place, so a process never sees half
a file, and an existing file is reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from memcompile_local.errors import ConfigError, ModelNotFoundError

from .models import require_embed

logger = logging.getLogger(__name__)

EXPORT_VERSION = "torch-onnx-v2"
"""Changes when the way a model is exported changes (v2: eager attention, for the fusions)."""

OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
PLAIN_FILE = "model.onnx"

RECIPES: dict[str, tuple[str, ...]] = {
    "fp32": (),
    "int8": ("int8tok1",),
}
"""Precision -> the derivation steps the embedder runs, chosen by scripts/bench_embed_backends.py,
scripts/bench_build.py and recall@10 of the model-free preset on the 4-conversation LoCoMo dev
file (755 questions, 2 shared cores; torch and fp32 82.22):
fp32 plain 2.4-2.9x torch's documents/s (the fused graph was no faster: 2.2-3.2x);
int8 ``int8tok1`` (per-token activation scales, batched) 1.6-2.1x fp32's documents/s in one
run (6.3x torch), recall 81.83; before it, ``int8pcffn1`` (one text per run, per-tensor
activation scales) 1.2x fp32, 81.94; ``int8pcffn3first1`` 81.94 and ``int8pc1`` 81.90, both one text per run;
``int8pt1`` cosine 0.95 to torch."""

# Largest |difference| allowed between the fused and the plain graph's hidden states on the
# probe texts (fp32 rounding of reordered sums stays near 1e-5).
FUSION_TOLERANCE = 1e-3


def onnx_cache_dir() -> Path:
    """``$MCL_ONNX_CACHE``, else ``$XDG_CACHE_HOME/memcompile-local/onnx`` (``~/.cache`` by default)."""
    explicit = os.environ.get("MCL_ONNX_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memcompile-local" / "onnx"


def recipe_id(precision: str) -> str:
    """What the vectors of ``precision`` come from: export version and steps, e.g.
    ``"torch-onnx-v2+fused1"`` (raises ``ConfigError`` for an unknown precision)."""
    return "+".join((EXPORT_VERSION, *_recipe(precision)))


def _recipe(precision: str) -> tuple[str, ...]:
    if precision not in RECIPES:
        raise ConfigError(f"ONNX precision {precision!r}: expected one of {', '.join(RECIPES)}")
    return RECIPES[precision]


def model_folder(weights_sha256: str) -> Path:
    """The cache folder of one model's weights under the current export version."""
    return onnx_cache_dir() / f"{weights_sha256[:16]}-{EXPORT_VERSION}"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def exported_model(model_dir: Path, weights_sha256: str, precision: str) -> Path:
    """The ONNX file the embedder runs for ``model_dir`` at ``precision`` ("fp32" or "int8").

    Made on first use (export, then the steps of ``RECIPES[precision]``) and reused after.
    ``weights_sha256`` (``models.weights_fingerprint``) names the cache folder. Raises
    ``ConfigError`` for another precision and ``ModelNotFoundError`` when the folder holds no
    transformer this exporter understands.
    """
    return derived_model(model_dir, weights_sha256, _recipe(precision))


def derived_model(model_dir: Path, weights_sha256: str, steps: Sequence[str]) -> Path:
    """The plain export of ``model_dir`` with ``steps`` (names of ``STEPS``) applied in order.

    ``steps=()`` is the plain export. Each intermediate file is kept, so recipes that share a
    prefix share its file.
    """
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ConfigError(f"ONNX derivation steps {unknown}: expected names of {', '.join(STEPS)}")
    folder = model_folder(weights_sha256)
    target = folder / _file_name(steps)
    if target.is_file():
        return target
    with _locked(folder):
        if target.is_file():  # another process finished it while we waited
            return target
        plain = folder / PLAIN_FILE
        if not plain.is_file():
            _export_fp32(model_dir, plain)
            (folder / "source.json").write_text(json.dumps(
                {"model_dir": str(model_dir), "weights_sha256": weights_sha256, "export": EXPORT_VERSION,
                 "opset": OPSET}, indent=1))
        source = plain
        for i, step in enumerate(steps):
            out = folder / _file_name(steps[:i + 1])
            if not out.is_file():
                logger.info("deriving %s from %s (once; cached)", out.name, source.name)
                _write_atomically(out, lambda tmp, src=source, s=step: STEPS[s](model_dir, src, tmp))
            source = out
    return target


def _file_name(steps: Sequence[str]) -> str:
    return ".".join(("model", *steps, "onnx")) if steps else PLAIN_FILE


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    fd, name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _export_fp32(model_dir: Path, target: Path) -> None:
    torch = require_embed("torch", "the ONNX export of a sentence-transformers model")
    transformers = require_embed("transformers", "the ONNX export of a sentence-transformers model")
    if not (model_dir / "config.json").is_file():
        raise ModelNotFoundError(f"{model_dir}: expected a transformer folder with config.json to export to ONNX")
    logger.info("exporting %s to ONNX (once; cached in %s)", model_dir, target.parent)
    # Eager attention traces to MatMul/Softmax nodes that the transformer optimizer fuses;
    # the SDPA graph of transformers 5 is left unfused (and ran slower, measured).
    base = transformers.AutoModel.from_pretrained(str(model_dir), local_files_only=True,
                                                  attn_implementation="eager").eval()

    class _LastHidden(torch.nn.Module):
        # transformers 5 models take these by keyword only; the exporter passes positionals.
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.long)

    def write(tmp: Path) -> None:
        # The TorchScript exporter warns about tracing details that do not apply to BERT-style
        # encoders with dynamic axes; the file is checked by the tests against torch's vectors.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _LastHidden(base), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(tmp),
                dynamo=False, input_names=list(INPUT_NAMES), output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in (*INPUT_NAMES, "last_hidden_state")},
                opset_version=OPSET, do_constant_folding=True,
            )

    _write_atomically(target, write)


def _transformer_shape(model_dir: Path) -> tuple[str, int, int]:
    """(model_type, attention heads, hidden size) from ``config.json``."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"{model_dir}/config.json: expected a readable transformer config ({exc})") from exc
    return str(cfg.get("model_type", "")), int(cfg.get("num_attention_heads") or 0), int(cfg.get("hidden_size") or 0)


def _fuse(model_dir: Path, source: Path, target: Path, *, attention: bool) -> None:
    optimizer = require_embed("onnxruntime.transformers.optimizer", "the fused ONNX embedder")
    fusion_options = require_embed("onnxruntime.transformers.fusion_options", "the fused ONNX embedder")
    model_type, heads, hidden = _transformer_shape(model_dir)
    options = fusion_options.FusionOptions("bert")
    options.enable_attention = attention
    if model_type == "bert":
        model = optimizer.optimize_model(str(source), model_type="bert", num_heads=heads, hidden_size=hidden,
                                         optimization_options=options, opt_level=1, use_gpu=False)
    else:
        # The BERT fusion patterns are written for BERT graphs; other encoders get only
        # ONNX Runtime's own generic passes.
        model = optimizer.optimize_model(str(source), model_type="bert", opt_level=1, use_gpu=False,
                                         only_onnxruntime=True)
    logger.info("fused operators: %s", {k: v for k, v in model.get_fused_operator_statistics().items() if v})
    model.save_model_to_file(str(target))
    _check_same_outputs(source, target)


def _check_same_outputs(reference: Path, candidate: Path) -> None:
    """Refuse a derived fp32 graph whose hidden states differ from its source's on probe inputs."""
    ort = require_embed("onnxruntime", "the ONNX embedding backend")
    np = require_embed("numpy", "the ONNX embedding backend")
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 2000, size=(2, 12), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0  # one padded row: the fused attention reads the mask differently
    outs = []
    for path in (reference, candidate):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        outs.append(session.run(None, {k: v for k, v in feed.items() if k in names})[0])
    diff = float(np.abs(outs[0][mask == 1] - outs[1][mask == 1]).max())
    if not diff <= FUSION_TOLERANCE:
        raise ModelNotFoundError(f"{candidate}: the optimized graph's outputs differ from {reference.name} by "
                                 f"{diff:.2e} (> {FUSION_TOLERANCE}); use backend='torch' for this model")


def ffn_output_matmuls(path: Path) -> list[str]:
    """Names of the MatMul nodes of each layer's feed-forward output projection (BERT names:
    ``.../layer.N/output/dense/MatMul``), the weights whose int8 error costs the most."""
    onnx = require_embed("onnx", "int8 quantization of the ONNX embedder")
    graph = onnx.load(str(path)).graph
    return [n.name for n in graph.node
            if n.op_type == "MatMul" and "/output/dense/" in n.name and "/attention/" not in n.name]


def _quantize_int8(model_dir: Path, source: Path, target: Path, *, per_channel: bool,
                   keep_ffn_output: int = 0) -> None:
    """``keep_ffn_output``: how many layers, from the first, keep their FFN output in fp32."""
    onnx = require_embed("onnx", "int8 quantization of the ONNX embedder")
    quantization = require_embed("onnxruntime.quantization", "int8 quantization of the ONNX embedder")
    exclude = ffn_output_matmuls(source)[:keep_ffn_output]
    root = logging.getLogger()
    level = root.level
    try:
        # quantize_dynamic logs a pre-processing hint on the root logger at WARNING; it concerns
        # static quantization of vision models, not dynamic weight quantization.
        root.setLevel(logging.ERROR)
        quantization.quantize_dynamic(
            str(source), str(target), weight_type=quantization.QuantType.QInt8, per_channel=per_channel,
            op_types_to_quantize=["MatMul"], nodes_to_exclude=exclude,
            # Fused operators (com.microsoft) have no ONNX shape inference; their outputs are floats.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)


def _quantize_per_token(model_dir: Path, source: Path, target: Path) -> None:
    """Rewrite each ``MatMul(x, W)`` with a constant 2-d ``W`` as per-token int8 (``int8tok1``).

    ``W`` becomes int8 with one symmetric scale per output column. At run time ``x`` is viewed
    as (tokens, K); each row gets the scale max|row| / 127 and is quantized to uint8 around 128;
    ``MatMulInteger`` accumulates in int32; the row scale (``DequantizeLinear`` along axis 0)
    and the column scales turn it back into floats, reshaped to ``x``'s leading dims. A row's
    result reads only that row, so padding and batch neighbours cannot move it.

    Measured and left out (recall@10 of the model-free preset on the LoCoMo dev file, 2 shared
    cores): keeping the FFN output projections in fp32 (cosine to fp32 0.9982 against 0.9976,
    but recall 81.76 against 81.81, and 25% slower), and quantizing those with each row's own
    [min, max] range (81.68).
    """
    onnx = require_embed("onnx", "int8 quantization of the ONNX embedder")
    np = require_embed("numpy", "int8 quantization of the ONNX embedder")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    model = onnx.load(str(source))
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    added: list[Any] = []

    def const(name: str, value: Any) -> str:
        added.append(numpy_helper.from_array(value, name))
        return name

    c127 = const("tok8/127", np.array(127.0, np.float32))
    tiny = const("tok8/tiny", np.array(1e-12, np.float32))
    zero_u8 = const("tok8/zp", np.array(128, np.uint8))
    first = const("tok8/0", np.array([0], np.int64))
    last = const("tok8/-1", np.array([-1], np.int64))
    nodes: list[Any] = []
    count = 0
    for node in graph.node:
        w = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if w is None or len(w.dims) != 2:
            nodes.append(node)
            continue
        matrix = numpy_helper.to_array(w).astype(np.float32)
        k, n = matrix.shape
        col = np.maximum(np.abs(matrix).max(axis=0), 1e-12) / 127.0
        p = f"tok8/{count}/"
        count += 1
        wq = const(p + "w", np.clip(np.round(matrix / col), -127, 127).astype(np.int8))
        wscale = const(p + "wscale", col.astype(np.float32))
        rows = const(p + "rows", np.array([-1, k], np.int64))
        width = const(p + "n", np.array([n], np.int64))
        x = node.input[0]
        nodes += [
            helper.make_node("Reshape", [x, rows], [p + "x2"]),
            helper.make_node("Abs", [p + "x2"], [p + "abs"]),
            helper.make_node("ReduceMax", [p + "abs"], [p + "max"], axes=[1], keepdims=0),
            helper.make_node("Max", [p + "max", tiny], [p + "maxed"]),  # an all-zero row stays finite
            helper.make_node("Div", [p + "maxed", c127], [p + "scale"]),
            helper.make_node("Shape", [p + "scale"], [p + "m"]),
            helper.make_node("ConstantOfShape", [p + "m"], [p + "zps"],
                             value=numpy_helper.from_array(np.array([128], np.uint8))),
            helper.make_node("QuantizeLinear", [p + "x2", p + "scale", p + "zps"], [p + "xq"], axis=0),
            helper.make_node("MatMulInteger", [p + "xq", wq, zero_u8], [p + "acc"]),
            helper.make_node("DequantizeLinear", [p + "acc", p + "scale"], [p + "rowscaled"], axis=0),
            helper.make_node("Mul", [p + "rowscaled", wscale], [p + "y2"]),
            helper.make_node("Shape", [x], [p + "xshape"]),
            helper.make_node("Slice", [p + "xshape", first, last], [p + "lead"]),
            helper.make_node("Concat", [p + "lead", width], [p + "yshape"], axis=0),
            helper.make_node("Reshape", [p + "y2", p + "yshape"], list(node.output)),
        ]
    if not count:
        raise ModelNotFoundError(f"{source}: no MatMul with a constant weight matrix to quantize")
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    used = {i for nd in graph.node for i in nd.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))


BATCH_INDEPENDENT_STEPS = frozenset({"fused1", "fusednoattn1", "int8tok1"})
"""Steps whose vectors depend on a text alone (per-tensor dynamic int8 steps are not: their
activation scale is the maximum over the whole batch)."""


def batch_independent(precision: str) -> bool:
    """Whether texts of ``precision``'s recipe may share a run (else one text per run)."""
    return all(step in BATCH_INDEPENDENT_STEPS for step in _recipe(precision))


STEPS: dict[str, Callable[[Path, Path, Path], None]] = {
    "fused1": lambda m, s, t: _fuse(m, s, t, attention=True),
    "fusednoattn1": lambda m, s, t: _fuse(m, s, t, attention=False),
    "int8pc1": lambda m, s, t: _quantize_int8(m, s, t, per_channel=True),
    "int8pt1": lambda m, s, t: _quantize_int8(m, s, t, per_channel=False),
    "int8pcffn1": lambda m, s, t: _quantize_int8(m, s, t, per_channel=True, keep_ffn_output=1 << 30),
    "int8pcffn3first1": lambda m, s, t: _quantize_int8(m, s, t, per_channel=True, keep_ffn_output=3),
    "int8tok1": _quantize_per_token,
}
"""Derivation step name -> ``fn(model_dir, source file, target file)``; a name never changes
meaning (a changed step gets a new name, so cached files of the old one are not reused)."""
