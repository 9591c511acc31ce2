"""Exporting a local sentence-transformers model to ONNX, offline, into a user cache folder.

sentence-transformers' own ONNX backend needs ``optimum-onnx``, whose only release pins
``transformers<4.58`` (this project runs transformers 5), so the export is done here with
``torch.onnx.export`` from the model's local files, and int8 weights with ONNX Runtime's
dynamic quantization. Nothing is downloaded.

The files live in ``onnx_cache_dir() / <weights hash> /``: ``model.onnx`` (fp32) and
``model.int8.onnx``. The folder name is the hash of the source weights, so a changed model
exports again; files are written under a lock to a temporary name and renamed into place, so
two processes never see half a file.
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
from typing import Any, Iterator

from memcompile_local.errors import ConfigError, ModelNotFoundError

from .models import require_embed

logger = logging.getLogger(__name__)

EXPORT_VERSION = "torch-onnx-v1"
"""Changes when the way a model is exported changes (it is part of the embedder identity)."""

OPSET = 17
PRECISION_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def onnx_cache_dir() -> Path:
    """``$MCL_ONNX_CACHE``, else ``$XDG_CACHE_HOME/memcompile-local/onnx`` (``~/.cache`` by default)."""
    explicit = os.environ.get("MCL_ONNX_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memcompile-local" / "onnx"


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
    """The ONNX file of ``model_dir`` at ``precision`` ("fp32" or "int8"), exported on first use.

    ``weights_sha256`` (``models.weights_fingerprint``) names the cache folder. Raises
    ``ConfigError`` for another precision and ``ModelNotFoundError`` when the folder holds no
    transformer this exporter understands.
    """
    if precision not in PRECISION_FILES:
        raise ConfigError(f"ONNX precision {precision!r}: expected one of {', '.join(PRECISION_FILES)}")
    folder = onnx_cache_dir() / f"{weights_sha256[:16]}-{EXPORT_VERSION}"
    target = folder / PRECISION_FILES[precision]
    if target.is_file():
        return target
    with _locked(folder):
        if target.is_file():  # another process finished it while we waited
            return target
        fp32 = folder / PRECISION_FILES["fp32"]
        if not fp32.is_file():
            _export_fp32(model_dir, fp32)
        if precision == "int8":
            _quantize_int8(fp32, target)
        (folder / "source.json").write_text(json.dumps(
            {"model_dir": str(model_dir), "weights_sha256": weights_sha256, "export": EXPORT_VERSION,
             "opset": OPSET}, indent=1))
    return target


def _tmp_name(target: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    return Path(name)


def _export_fp32(model_dir: Path, target: Path) -> None:
    torch = require_embed("torch", "the ONNX export of a sentence-transformers model")
    transformers = require_embed("transformers", "the ONNX export of a sentence-transformers model")
    if not (model_dir / "config.json").is_file():
        raise ModelNotFoundError(f"{model_dir}: expected a transformer folder with config.json to export to ONNX")
    logger.info("exporting %s to ONNX (once; cached in %s)", model_dir, target.parent)
    base = transformers.AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()

    class _LastHidden(torch.nn.Module):
        # transformers 5 models take these by keyword only; the exporter passes positionals.
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.long)
    tmp = _tmp_name(target)
    try:
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
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _quantize_int8(source: Path, target: Path) -> None:
    require_embed("onnx", "int8 quantization of the ONNX embedder")
    quantization = require_embed("onnxruntime.quantization", "int8 quantization of the ONNX embedder")
    logger.info("quantizing %s to int8 (dynamic, weights only)", source)
    tmp = _tmp_name(target)
    root = logging.getLogger()
    level = root.level
    try:
        # quantize_dynamic logs a pre-processing hint on the root logger at WARNING; it concerns
        # static quantization of vision models, not dynamic weight quantization.
        root.setLevel(logging.ERROR)
        quantization.quantize_dynamic(str(source), str(tmp), weight_type=quantization.QuantType.QInt8)
        os.replace(tmp, target)
    finally:
        root.setLevel(level)
        tmp.unlink(missing_ok=True)
