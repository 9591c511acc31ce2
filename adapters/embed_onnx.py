"""Running an exported sentence-transformers model with ONNX Runtime on CPU.

Does what ``SentenceTransformer.encode`` does for a Transformer + Pooling (+ Normalize) model,
read from the same folder: the fast tokenizer of ``tokenizer.json`` truncated at the model's
``max_seq_length``, the pooling of ``1_Pooling/config.json`` (mean or CLS) over the attention
mask, and l2 normalisation. Texts are sorted by token count and batched only with texts of
nearly the same count (``length_buckets``), so little time goes to padding, and the rows are put
back in input order. Each model run is small (``RUN_TEXTS`` texts) and single-threaded, and one
run per core goes at a time: on 2 shared cores that gave 1.4x the documents/s of batches of 64
spread over both cores by ONNX Runtime's own thread pool for int8, and 1.2x for fp32 (less
padding, no per-operator synchronisation; scripts/bench_embed_backends.py).

On the fp32 graphs a text's vector does not depend on its batch: with right padding and the
attention mask, the padded positions get exactly zero attention weight and every matrix row
is computed the same way whatever the batch holds (measured: batched and one-text-per-call
vectors equal bit for bit, plain and fused graphs). Dynamic int8 is different (see
``OnnxSentenceEncoder``).
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memcompile_local.errors import ConfigError

from .models import require_embed


def cpu_threads() -> int:
    """CPU cores this process may run on (the affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _read_json(path: Path, default: Any) -> Any:
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc


def model_layout(model_dir: Path) -> dict[str, Any]:
    """Max sequence length, pooling mode and normalisation of a sentence-transformers folder.

    Raises ``ConfigError`` for modules this runner does not reproduce (e.g. a Dense layer, or
    max/weighted pooling), instead of returning vectors that differ from the torch path.
    """
    modules = _read_json(model_dir / "modules.json", None)
    pooling_dir = model_dir / "1_Pooling"
    normalize = False
    if modules is not None:
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        unknown = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
        if unknown:
            raise ConfigError(f"{model_dir}: modules {unknown} are not supported by the ONNX backend; "
                              "use backend='torch'")
        normalize = "Normalize" in kinds
        for m in modules:
            if str(m.get("type", "")).endswith("Pooling"):
                pooling_dir = model_dir / m.get("path", "1_Pooling")
    pool = _read_json(pooling_dir / "config.json", {"pooling_mode_mean_tokens": True})
    modes = [k for k, v in pool.items() if k.startswith("pooling_mode_") and v]
    if modes == ["pooling_mode_mean_tokens"]:
        pooling = "mean"
    elif modes == ["pooling_mode_cls_token"]:
        pooling = "cls"
    else:
        raise ConfigError(f"{pooling_dir}/config.json: pooling {modes} is not supported by the ONNX backend "
                          "(mean or cls only); use backend='torch'")
    st_cfg = _read_json(model_dir / "sentence_bert_config.json", {})
    max_len = int(st_cfg.get("max_seq_length") or 512)
    return {"max_seq_length": max_len, "pooling": pooling, "normalize": normalize}


PAD_SLACK = 0.125
"""A batch holds texts whose token counts are within this fraction of its shortest one
(at least 2 tokens): little padding, and still batches of many short texts."""


RUN_TEXTS = 4
"""Most texts per model run (measured on the build's documents, 2 shared cores: 1, 2 and 4
texts per single-threaded run were equally fast, 8 was 5% slower, 16 15%)."""


def length_buckets(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into batches of at most ``batch_size`` texts.

    Texts are taken shortest first (ties by index, so the grouping is deterministic); a batch
    closes when it is full or the next text is longer than its first by more than
    ``PAD_SLACK`` (at least 2 tokens), so padding stays a small share of the work.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            first = lengths[batch[0]]
            if len(batch) < batch_size and lengths[i] - first <= max(2, int(first * PAD_SLACK)):
                batch.append(i)
                continue
        batches.append([i])
    return batches


class OnnxSentenceEncoder:
    """Sentence vectors from an ONNX file and the tokenizer of ``model_dir`` (CPU).

    ``threads``: model runs at a time, each on one thread (default: every core this process
    may use). Concurrent ``encode`` calls share those runs, so callers on many threads never
    put more than ``threads`` runs on the cores.
    ``spin``: let idle pool threads busy-wait for the next piece of work (ONNX Runtime's
    default). Off here: spinning threads burn the cores other processes (and this one's own
    tokenizer and store) need; measured on 2 shared cores, int8 one text per call ran about 2x
    the documents/s with half the CPU time without it.
    ``per_text``: run each text on its own. Dynamically quantized models with one activation
    scale per tensor scale it by the maximum over the whole input, so a text's vector would
    depend on the other texts of its batch (measured: up to 0.03 per component on MiniLM); one
    text per run makes every vector a function of its text alone, as the content-addressed
    store assumes.
    ``max_tokens``: read at most this many tokens of each text (special tokens included), below
    the model's ``max_seq_length``; None reads the model's whole window.
    """

    def __init__(self, model_dir: Path, onnx_path: Path, *, threads: int | None = None,
                 per_text: bool = False, spin: bool = False, max_tokens: int | None = None) -> None:
        self.per_text = per_text
        ort = require_embed("onnxruntime", "the ONNX embedding backend")
        tokenizers = require_embed("tokenizers", "the ONNX embedding backend")
        self.layout = model_layout(model_dir)
        tok_file = model_dir / "tokenizer.json"
        if not tok_file.is_file():
            raise ConfigError(f"{model_dir}: no tokenizer.json (a fast tokenizer) for the ONNX backend; "
                              "use backend='torch'")
        tok = tokenizers.Tokenizer.from_file(str(tok_file))
        # The file may pad every text to a fixed length; pad per batch instead (below).
        tok.no_padding()
        self.max_tokens = min(self.layout["max_seq_length"], max_tokens or self.layout["max_seq_length"])
        tok.enable_truncation(self.max_tokens)
        self._tok = tok
        self.workers = threads or cpu_threads()
        opts = ort.SessionOptions()
        # Parallel runs of one thread each (see the module docstring), not one run spread
        # over every core; the graph has no parallel branches worth an inter-op pool.
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.enable_cpu_mem_arena = True  # buffers of one shape are reused across runs
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # One session serves concurrent runs (ONNX Runtime's Run is thread-safe).
        self._session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._runs: ThreadPoolExecutor | None = None
        self._runs_pid = 0
        self._runs_lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        # Made on first use and again in a forked child (a parent's pool threads do not exist there).
        with self._runs_lock:
            if self._runs is None or self._runs_pid != os.getpid():
                self._runs = ThreadPoolExecutor(self.workers, thread_name_prefix="onnx-embed")
                self._runs_pid = os.getpid()
                # Its idle threads end with the encoder, not with the process.
                weakref.finalize(self, self._runs.shutdown, wait=False)
            return self._runs

    def encode(self, texts: Sequence[str], *, batch_size: int = RUN_TEXTS) -> np.ndarray:
        """``(len(texts), dim)`` float32 rows (unit length when the model normalises).

        ``batch_size``: most texts per model run; a few texts are spread over the workers
        (two query texts run side by side, not in one run)."""
        if not texts:
            raise ValueError("encode needs at least one text")
        size = 1 if self.per_text else max(1, min(batch_size, -(-len(texts) // self.workers)))
        encodings = self._tok.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        buckets = length_buckets(lengths, size)

        def run(idx: list[int]) -> np.ndarray:
            width = max(lengths[i] for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for row, i in enumerate(idx):
                e = encodings[i]
                ids[row, :len(e.ids)] = e.ids
                mask[row, :len(e.ids)] = 1
                types[row, :len(e.ids)] = e.type_ids
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
            return self._pool(hidden, mask)

        parts = list(self._executor().map(run, buckets)) if len(buckets) > 1 and self.workers > 1 else [
            run(b) for b in buckets]
        out = np.zeros((len(texts), parts[0].shape[1]), dtype=np.float32)
        for idx, vecs in zip(buckets, parts):
            out[idx] = vecs
        return out

    def _pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.layout["pooling"] == "cls":
            vecs = hidden[:, 0, :].astype(np.float32)
        else:
            m = mask[..., None].astype(np.float32)
            vecs = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        if self.layout["normalize"]:
            vecs = vecs / np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
        return vecs.astype(np.float32)
