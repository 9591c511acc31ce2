"""Lazy imports of optional packages, with an error that says which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from memcompile_local.errors import MissingExtraError

__all__ = ["require", "PIP_NAMES"]

# Import name -> distribution name where they differ, so the error names what to pip install.
PIP_NAMES: dict[str, str] = {
    "llama_cpp": "llama-cpp-python",
    "sentence_transformers": "sentence-transformers",
    "sklearn": "scikit-learn",
}


def require(module_name: str, extra: str, purpose: str = "") -> ModuleType:
    """Import ``module_name`` now and return it.

    ``extra`` is the pip extra of memcompile-local that provides it (``cpu``, ``vllm``,
    ``openai``, ``transformers``, ``bench``) and ``purpose`` a few words for the message.
    When the module, or a package it needs, is not installed, raises ``MissingExtraError``
    naming the missing package and the extra. Other import failures (a broken install)
    propagate unchanged, because reinstalling the extra would not be the fix.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or module_name).split(".")[0]
        raise MissingExtraError(PIP_NAMES.get(missing, missing), extra, purpose) from exc
