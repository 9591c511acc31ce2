"""Importing the package and the model interface loads no heavy model library.

Each check runs in a fresh interpreter so that modules imported by other tests in this
process cannot hide (or fake) an eager import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch", "vllm", "openai", "llama_cpp", "outlines", "sentence_transformers", "transformers")


def _run(code: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_core_imports_load_no_heavy_library():
    result = _run(
        f"""
        import json, sys
        import memcompile_local, memcompile_local.llm, memcompile_local.llm.client
        import memcompile_local.llm.registry, memcompile_local.llm.validate
        import memcompile_local.adapters.scripted
        print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
        """
    )
    assert result == []


@pytest.mark.slow
def test_registry_lookup_of_every_name_loads_no_heavy_library():
    """Resolving an adapter class (without constructing it) must stay light too."""
    result = _run(
        f"""
        import json, sys
        from memcompile_local.llm import registry
        for table in (registry.BACKENDS, registry.EMBEDDERS):
            for target in table.values():
                try:
                    registry.resolve(target)
                except ModuleNotFoundError as exc:
                    if not (exc.name or "").startswith("memcompile_local.adapters"):
                        raise  # a heavy import at module level, not a not-yet-written adapter
        print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
        """
    )
    assert result == []


@pytest.mark.slow
def test_vllm_backend_without_vllm_names_the_extra(tmp_path):
    # Needs adapters/vllm_offline.py (written with the other backends). vllm is hidden from
    # the import system when it happens to be installed. The adapter may refuse at
    # construction or at its first call; either way the error must name the extra, and the
    # client must let it through rather than turn it into a per-request model error.
    model_dir = tmp_path / "tiny-model"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"not real weights")
    result = _run(
        f"""
        import importlib.util, json, sys
        if importlib.util.find_spec("vllm") is not None:
            sys.modules["vllm"] = None
        from memcompile_local.errors import MissingExtraError
        from memcompile_local.llm.client import LLMClient
        from memcompile_local.llm.interface import LLMRequest, Message
        from memcompile_local.llm.registry import load_backend
        try:
            backend = load_backend("vllm", model={str(model_dir)!r})
            LLMClient(backend).complete(LLMRequest(messages=(Message("user", "hi"),), stage="answer"))
        except MissingExtraError as exc:
            print(json.dumps({{"extra": exc.extra, "package": exc.package, "message": str(exc)}}))
        else:
            print(json.dumps({{"extra": None}}))
        """
    )
    assert result["extra"] == "vllm"
    assert "memcompile-local[vllm]" in result["message"]
    assert result["package"] == "vllm"
