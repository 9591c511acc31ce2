"""Arguments the commands share, and the PipelineConfig they stand for.

``config_from_args`` reads --config, then --preset, then the individual flags (later wins),
and fills in the small-model settings when the embedded SmolLM2-135M runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..config import PipelineConfig, config_needs_llm
from ..errors import ConfigError
from ..pipeline.presets import apply_presets

DEFAULT_STORE = "memcompile.sqlite"


def add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=os.environ.get("MEMCOMPILE_STORE", DEFAULT_STORE),
        help="the store: a SQLite file or a postgresql://user@host:port/db URL "
             "(default: $MEMCOMPILE_STORE or ./%(default)s)",
    )


def add_model(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pipeline and models")
    g.add_argument("--config", help="YAML file with a PipelineConfig (sections: extraction, placement, routing, evidence, model)")
    g.add_argument("--preset", action="append",
                   help="named pipeline path (A0..A7, model-free, view-*, layout-*); repeat it or join names "
                        "with '+' to compose (model-free+view-raw); see `memcompile-local presets`")
    g.add_argument("--backend", help="LLM backend: llamacpp (default), openai, vllm, transformers, scripted")
    g.add_argument("--model", help="model name or path for the LLM backend")
    g.add_argument("--base-url", help="base URL of an OpenAI-compatible server")
    g.add_argument("--concurrency", type=int, help="concurrent requests to an OpenAI-compatible server")
    g.add_argument("--max-tokens", type=int,
                   help="cap on the tokens of every model completion (default 2048; 256 for the embedded "
                        "SmolLM2-135M unless set here or in --config)")
    g.add_argument("--embedder", help="embedder: sentence-transformers (default), openai, hash")
    g.add_argument("--embed-model", help="embedding model: all-MiniLM-L6-v2 (default, shipped), a local "
                                         "sentence-transformers folder, or a hub name with --embed-allow-download")
    g.add_argument("--embed-backend", choices=["auto", "torch", "onnx"],
                   help="sentence-transformers backend: auto (default: ONNX Runtime on CPU, torch on CUDA)")
    g.add_argument("--embed-precision", choices=["auto", "fp32", "fp16", "int8"],
                   help="auto (default): fp32 on CPU, fp16 on CUDA; int8 (ONNX) embeds faster than fp32 "
                        "at a small cost in recall (docs/guides/backends.md)")
    g.add_argument("--embed-device", choices=["auto", "cpu", "cuda"], help="embedding device (default auto)")
    g.add_argument("--embed-batch-size", type=int, help="texts per embedding batch (default 64)")
    g.add_argument("--embed-threads", type=int,
                   help="ONNX Runtime threads per embedding call (default: every usable core)")
    g.add_argument("--embed-max-tokens", type=int, metavar="N",
                   help="tokens of each text the embedder reads (default: the model's window, 256 for MiniLM); "
                        "fewer build faster on long turns")
    g.add_argument("--embed-query-prefix", help="text put before each query (e5: 'query: ')")
    g.add_argument("--embed-document-prefix", help="text put before each stored document (e5: 'passage: ')")
    g.add_argument("--embed-allow-download", action="store_true", default=None,
                   help="let a hub model name be downloaded when a hub is reachable (default: offline)")
    g.add_argument("--extractor", choices=["llm", "rule"], help="descriptor extractor (rule = no model calls)")
    g.add_argument("--combined-extraction", action="store_true", default=None,
                   help="extract facts and metadata in one call per turn")


def add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars (also those of sentence-transformers, datasets and the HF hub)")


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


SMALL_MODEL = ("llamacpp", "smollm2-135m")
SMALL_MODEL_CAPS = {
    ("model", "max_tokens"): 256,
    ("extraction", "extractor"): "rule",
    ("evidence", "max_schedule_pool"): 40,
    ("evidence", "max_candidate_chars"): 240,
}


def apply_small_model_caps(cfg: PipelineConfig, explicit: set[tuple[str, str]]) -> tuple[PipelineConfig, list[str]]:
    """The small-model settings for the embedded SmolLM2-135M on llama.cpp, except the fields
    in ``explicit`` (set by a flag, the --config file or a preset). Returns the config and the
    ``section.field=value`` settings applied (empty for any other model)."""
    if (cfg.model.backend, cfg.model.model) != SMALL_MODEL:
        return cfg, []
    changes: dict[str, dict[str, Any]] = {}
    applied = []
    for (section, name), value in SMALL_MODEL_CAPS.items():
        if (section, name) in explicit or getattr(getattr(cfg, section), name) == value:
            continue
        changes.setdefault(section, {})[name] = value
        applied.append(f"{section}.{name}={value}")
    return (cfg.replace(**changes) if changes else cfg), applied


def config_from_args(args: argparse.Namespace, *, announce: bool = False) -> PipelineConfig:
    """PipelineConfig from --config, then --preset, then individual flags (later wins).

    When the embedded SmolLM2-135M runs, the small-model caps (``SMALL_MODEL_CAPS``) fill the
    fields none of those set; ``announce=True`` says so on stderr.
    """
    cfg = PipelineConfig()
    explicit: set[tuple[str, str]] = set()
    if getattr(args, "config", None):
        import yaml  # optional dependency of the CLI's --config only

        with open(args.config, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        section_data = data.get("pipeline", data)
        cfg = PipelineConfig.from_dict(section_data, source=args.config)
        explicit |= {(sec, name) for sec, fields in section_data.items() if isinstance(fields, dict)
                     for name in fields}
    if getattr(args, "preset", None):
        names = args.preset if isinstance(args.preset, list) else [args.preset]
        cfg = apply_presets(names, cfg)
        if cfg.extraction.extractor == "rule" or not config_needs_llm(cfg):
            explicit.add(("extraction", "extractor"))  # e.g. model-free chose it already
    model: dict[str, Any] = {}
    for flag, field in [("backend", "backend"), ("model", "model"), ("base_url", "base_url"),
                        ("concurrency", "concurrency"), ("embedder", "embedder"), ("embed_model", "embed_model"),
                        ("max_tokens", "max_tokens"), ("embed_backend", "embed_backend"),
                        ("embed_precision", "embed_precision"), ("embed_device", "embed_device"),
                        ("embed_batch_size", "embed_batch_size"), ("embed_query_prefix", "embed_query_prefix"),
                        ("embed_document_prefix", "embed_document_prefix"),
                        ("embed_allow_download", "embed_allow_download"), ("embed_threads", "embed_threads"),
                        ("embed_max_tokens", "embed_max_tokens")]:
        value = getattr(args, flag, None)
        if value is not None:
            model[field] = value
            explicit.add(("model", field))
    if "max_tokens" in model and model["max_tokens"] < 1:
        raise ConfigError(f"--max-tokens must be at least 1, got {model['max_tokens']}")
    for name in ("embed_batch_size", "embed_threads", "embed_max_tokens"):
        if name in model and model[name] < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {model[name]}")
    extraction: dict[str, Any] = {}
    if getattr(args, "extractor", None):
        extraction["extractor"] = args.extractor
        explicit.add(("extraction", "extractor"))
    if getattr(args, "combined_extraction", None):
        extraction["combined_call"] = True
    changes = {}
    if model:
        changes["model"] = model
    if extraction:
        changes["extraction"] = extraction
    cfg = cfg.replace(**changes) if changes else cfg
    cfg, applied = apply_small_model_caps(cfg, explicit)
    if applied and announce and (config_needs_llm(cfg) or answers_questions(args)):
        print("note: the embedded SmolLM2-135M runs with the small-model settings of "
              f"examples/smollm2-cpu.yaml ({', '.join(applied)}); set --max-tokens, --extractor or "
              "--config to choose otherwise", file=sys.stderr)
    return cfg


def will_call_model(args) -> bool:
    """Whether this command builds or answers, so may call the LLM (then the caps get a note
    when the configuration does call it)."""
    if args.command in ("ask", "demo", "eval", "build"):
        return True
    return args.command == "ingest" and getattr(args, "build", False)


def answers_questions(args) -> bool:
    """Whether this command asks the model for answers (whatever the evidence path)."""
    if args.command == "ask":
        return not getattr(args, "no_answer", False)
    if args.command == "eval":
        return not getattr(args, "retrieval_only", False)
    return args.command == "demo"
