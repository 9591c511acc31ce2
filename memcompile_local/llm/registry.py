"""Backend and embedder names, resolved to classes only when asked for.

The tables map a short name to a ``"module:Class"`` string, so importing this module loads
no adapter and no model library. ``load_backend``/``load_embedder`` import the adapter at
call time; adapters import their heavy package inside ``__init__`` through
:func:`memcompile_local.llm.extras.require`, which raises ``MissingExtraError`` naming the
pip extra when the package is absent.
"""

from __future__ import annotations

import importlib
from typing import Any

from memcompile_local.config import ModelConfig
from memcompile_local.errors import ConfigError, MissingExtraError
from memcompile_local.llm.extras import PIP_NAMES
from memcompile_local.llm.interface import Embedder, LLMBackend

__all__ = [
    "BACKENDS",
    "EMBEDDERS",
    "BACKEND_EXTRAS",
    "EMBEDDER_EXTRAS",
    "backend_kwargs",
    "embedder_kwargs",
    "load_backend",
    "load_embedder",
    "resolve",
]

BACKENDS: dict[str, str] = {
    "scripted": "memcompile_local.adapters.scripted:ScriptedBackend",
    "llamacpp": "memcompile_local.adapters.llamacpp:LlamaCppBackend",
    "openai": "memcompile_local.adapters.openai_compat:OpenAICompatBackend",
    "vllm": "memcompile_local.adapters.vllm_offline:VLLMBackend",
    "transformers": "memcompile_local.adapters.transformers_local:TransformersBackend",
}

EMBEDDERS: dict[str, str] = {
    "hash": "memcompile_local.adapters.scripted:HashEmbedder",
    "sentence-transformers": "memcompile_local.adapters.embed_st:SentenceTransformerEmbedder",
    "openai": "memcompile_local.adapters.embed_openai:OpenAIEmbedder",
}

# The pip extra that provides each backend's libraries (None: core only).
BACKEND_EXTRAS: dict[str, str | None] = {
    "scripted": None,
    "llamacpp": "cpu",
    "openai": "openai",
    "vllm": "vllm",
    "transformers": "transformers",
}
EMBEDDER_EXTRAS: dict[str, str | None] = {
    "hash": None,
    "sentence-transformers": "embed",
    "openai": "openai",
}


def resolve(target: str, *, where: str = "target") -> type:
    """Import ``"package.module:Class"`` and return the class (raises ConfigError if malformed)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{where}: expected 'package.module:Class', got {target!r}")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{where}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def _load(kind: str, table: dict[str, str], extras: dict[str, str | None], name: str,
          kwargs: dict[str, Any]) -> Any:
    key = (name or "").strip()
    if key in table:
        target = table[key]
    elif ":" in key:  # a custom class given as "module:Class"
        target = key
    else:
        known = ", ".join(sorted(table))
        raise ConfigError(
            f"unknown {kind} {name!r}; known {kind}s: {known} (or a 'package.module:Class' path)"
        )
    try:
        cls = resolve(target, where=f"{kind} {key!r}")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        extra = extras.get(key)
        if missing and missing != "memcompile_local" and extra:
            # The adapter imported its library at module level and it is absent.
            raise MissingExtraError(PIP_NAMES.get(missing, missing), extra, f"the {key} {kind}") from exc
        raise
    return cls(**kwargs)


def load_backend(name: str, **kwargs: Any) -> LLMBackend:
    """Construct the LLM backend registered as ``name`` with ``kwargs``.

    ``name`` is a key of ``BACKENDS`` or a ``"module:Class"`` path. Raises ``ConfigError``
    for an unknown name (listing the known ones) and ``MissingExtraError`` when the
    backend's optional package is not installed.
    """
    return _load("backend", BACKENDS, BACKEND_EXTRAS, name, kwargs)


def load_embedder(name: str, **kwargs: Any) -> Embedder:
    """Construct the embedder registered as ``name`` (see ``load_backend``)."""
    return _load("embedder", EMBEDDERS, EMBEDDER_EXTRAS, name, kwargs)


def backend_kwargs(m: ModelConfig) -> dict[str, Any]:
    """Constructor arguments of the backend ``m.backend`` taken from the model section ``m``.

    ``m.options`` goes through as given; the scripted backend takes nothing else, and the
    server-backed ones also get the URL, key variable, concurrency and timeout.
    """
    kw: dict[str, Any] = dict(m.options)
    if m.backend == "scripted":
        return kw
    kw.setdefault("model", m.model)
    if m.backend == "openai":
        kw.setdefault("base_url", m.base_url)
        kw.setdefault("api_key_env", m.api_key_env)
        kw.setdefault("concurrency", m.concurrency)
        kw.setdefault("timeout", m.timeout_s)
    return kw


def embedder_kwargs(m: ModelConfig) -> dict[str, Any]:
    """Constructor arguments of the embedder ``m.embedder`` (the hash embedder takes none)."""
    kw: dict[str, Any] = {}
    if m.embedder == "hash":
        return kw
    kw["model"] = m.embed_model
    if m.embedder == "openai" and m.base_url:
        kw["base_url"] = m.base_url
    if m.embedder == "sentence-transformers":
        kw.update(backend=m.embed_backend, precision=m.embed_precision, device=m.embed_device,
                  batch_size=m.embed_batch_size, query_prefix=m.embed_query_prefix,
                  document_prefix=m.embed_document_prefix, allow_download=m.embed_allow_download)
        if m.embed_threads is not None:
            kw["threads"] = m.embed_threads
        if m.embed_max_tokens is not None:
            kw["max_tokens"] = m.embed_max_tokens
    return kw
