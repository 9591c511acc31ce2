"""Which model judges a run: the judge section resolved against the answer model.

A judge that is the answer model itself grades its own answers (a 135M model marked a wrong
date CORRECT and scored 100%), so :func:`resolve_judge` refuses it unless the judge section
says ``allow_self_judge``. A judge given its own backend or model does not inherit the
answer model's server: its base URL and key variable come from the judge section only (or the
backend's environment variables, such as ``OPENAI_BASE_URL``, when it names none). The answer
model's backend options (``options``: e.g. ``server_kind: vllm``, ``extra_body``, llama.cpp's
``n_ctx``) describe the answer model's server, so the judge takes them only when it runs on the
same backend at the same place, and never the keys that would point it elsewhere (``model``,
``base_url``, ``api_key``, ``api_key_env``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import JudgeConfig, ModelConfig
from ..errors import ConfigError

__all__ = ["resolve_judge", "judge_description", "is_self_judge"]

# Option keys that name a model, a server or a key: an answer model's are never a judge's.
ENDPOINT_OPTIONS = frozenset({"model", "base_url", "api_key", "api_key_env"})


def resolve_judge(answer: ModelConfig, judge: JudgeConfig) -> ModelConfig:
    """The model section the judge runs with.

    Nothing set in ``judge``: the answer model itself (refused below unless allowed).
    Otherwise the judge's backend and model (each defaulting to the answer model's), its own
    base URL (None: the backend's default) and key variable (default ``OPENAI_API_KEY``).
    The answer model's backend options carry over only to a judge on the same backend and
    the same server (the same base URL, or none for both), less :data:`ENDPOINT_OPTIONS`.
    Raises ``ConfigError`` when the result is the answer model and ``allow_self_judge`` is off.
    """
    own = (judge.backend, judge.model, judge.base_url, judge.api_key_env)
    if all(v is None for v in own):
        resolved = answer
    else:
        backend = judge.backend or answer.backend
        same_place = backend == answer.backend and _url(judge.base_url) == _url(answer.base_url)
        options = ({k: v for k, v in answer.options.items() if k not in ENDPOINT_OPTIONS}
                   if same_place else {})
        resolved = dataclasses.replace(
            answer, backend=backend, model=judge.model or answer.model, base_url=judge.base_url,
            api_key_env=judge.api_key_env or "OPENAI_API_KEY", options=options)
    if is_self_judge(answer, resolved) and not judge.allow_self_judge:
        raise ConfigError(
            f"the judge would be the answer model itself ({_name(answer)}): a model grading its own "
            "answers is not an independent judge. Name a judge (--judge-backend/--judge-model/"
            "--judge-base-url, or a judge: section in the config), skip judging (--no-judge), or "
            "accept it explicitly (--allow-self-judge; the report then says so)")
    return resolved


def is_self_judge(answer: ModelConfig, judge: ModelConfig) -> bool:
    """Whether the judge is the same backend, model and server as the answer model (a model
    or server given in ``options`` counts, as the backend is built with it)."""
    return _endpoint(judge) == _endpoint(answer)


def _url(url: str | None) -> str | None:
    return url.rstrip("/") if url else None


def _endpoint(m: ModelConfig) -> tuple[str, str, str | None]:
    """Backend, model and base URL as the backend is built with them (``options`` win, as in
    ``llm.registry.backend_kwargs``)."""
    model = m.options.get("model") or m.model
    return m.backend, str(model), _url(m.options.get("base_url") or m.base_url)


def judge_description(judge: ModelConfig, prompt_version: str, *, self_judge: bool,
                      identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """The judge as ``config.json``, ``report.md`` and the compare table name it."""
    out: dict[str, Any] = {"backend": judge.backend, "model": judge.model, "prompt_version": prompt_version,
                           "self_judge": self_judge}
    if judge.base_url:
        out["base_url"] = judge.base_url
    if identity:
        out["identity"] = identity
    return out


def _name(m: ModelConfig) -> str:
    return f"{m.backend} {m.model}" + (f" at {m.base_url}" if m.base_url else "")
