"""Deterministic stand-ins for a model: ``ScriptedBackend`` and ``HashEmbedder``.

``ScriptedBackend`` answers from a fixed script so that every stage of the pipeline can be
tested without model files. ``HashEmbedder`` is a real (if weak) embedding: an l2-normalized
signed hashed bag of words, deterministic across processes and platforms.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

from memcompile_local.language.tokens import count_tokens, terms, words
from memcompile_local.errors import ConfigError, UnexpectedRequestError
from memcompile_local.llm.interface import LLMRequest, LLMResponse, stable_hash

__all__ = [
    "ScriptedReply",
    "ScriptedBackend",
    "HashEmbedder",
    "request_key",
    "ANY_STAGE",
]

ANY_STAGE = "*"


@dataclass(frozen=True)
class ScriptedReply:
    """A scripted answer with explicit finish reason and, optionally, token counts.

    Counts left as None are computed with ``count_tokens`` like plain-string entries.
    """

    text: str
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


# What a script entry may be: text, a reply, an exception to raise, or a list of those
# consumed one per matching request (the last one repeats).
Entry = Union[str, ScriptedReply, BaseException, list]
ScriptPart = Union[Mapping[Any, Any], Callable[[LLMRequest], Any]]


def request_key(request: LLMRequest) -> str:
    """The hash a script uses to name one exact request: ``stable_hash(request.identity())``."""
    return stable_hash(request.identity())


def _last_user_message(request: LLMRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.content
    return ""


def _entry_identity(entry: Any) -> Any:
    """A JSON-able description of an entry for ``identity()``."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, ScriptedReply):
        return {"text": entry.text, "finish_reason": entry.finish_reason,
                "prompt_tokens": entry.prompt_tokens, "completion_tokens": entry.completion_tokens}
    if isinstance(entry, BaseException):
        return {"raise": type(entry).__qualname__, "message": str(entry)}
    if isinstance(entry, list):
        return [_entry_identity(e) for e in entry]
    raise ConfigError(f"scripted entry: expected str, ScriptedReply, exception or list, got {entry!r}")


def _callable_identity(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"


class ScriptedBackend:
    """An ``LLMBackend`` that answers each request from a fixed script.

    ``script`` is one part or a list of parts checked in order; a part is

    - a mapping whose keys are either an exact request hash (``request_key(request)``) or a
      ``(stage, substring)`` pair matching requests of that stage (``"*"``: any stage) whose
      last user message contains ``substring``. Hash keys are checked before pair keys, and
      pair keys in the mapping's insertion order;
    - a callable ``request -> entry | None`` (None: no answer, try the next part).

    An entry is a string (the reply text), a ``ScriptedReply`` (text plus finish reason and
    token counts), an exception instance (raised by ``generate``, failing the whole batch as
    a real transport error would) or a list of entries used one per matching request in
    turn, the last one repeating. A request no part answers raises
    ``UnexpectedRequestError`` naming its stage and the start of its last user message.

    Token counts default to ``count_tokens`` of all message contents (prompt) and of the
    reply (completion). Every request seen is appended to ``requests``; ``generate_calls``
    counts batches. Nothing is random.
    """

    def __init__(self, script: ScriptPart | Sequence[ScriptPart], *, model: str = "scripted") -> None:
        parts = list(script) if isinstance(script, (list, tuple)) else [script]
        self._by_hash: list[dict[str, Any]] = []
        self._parts: list[tuple[str, Any]] = []  # ("rules", [(stage, substr, entry), ...]) | ("call", fn)
        static: list[Any] = []
        for i, part in enumerate(parts):
            if isinstance(part, Mapping):
                hashes: dict[str, Any] = {}
                rules: list[tuple[str, str, Any]] = []
                described: list[Any] = []
                for key, entry in part.items():
                    if isinstance(key, str):
                        hashes[key] = entry
                        described.append(["hash", key, _entry_identity(entry)])
                    elif (isinstance(key, tuple) and len(key) == 2
                          and all(isinstance(k, str) for k in key)):
                        rules.append((key[0], key[1], entry))
                        described.append(["rule", key[0], key[1], _entry_identity(entry)])
                    else:
                        raise ConfigError(
                            f"scripted part {i}: key {key!r}: expected a request hash string "
                            f"or a (stage, substring) pair"
                        )
                self._parts.append(("map", (hashes, rules)))
                static.append(described)
            elif callable(part):
                self._parts.append(("call", part))
                static.append(["callable", _callable_identity(part)])
            else:
                raise ConfigError(f"scripted part {i}: expected a mapping or a callable, got {part!r}")
        self._model = model
        self._script_hash = stable_hash(static)
        self._lock = threading.Lock()
        self._list_pos: dict[Any, int] = {}  # mapping slot of a list entry -> next index
        self.requests: list[LLMRequest] = []
        self.generate_calls = 0

    def identity(self) -> dict[str, Any]:
        return {"backend": "scripted", "model": self._model, "script": self._script_hash}

    @property
    def calls(self) -> int:
        """Number of requests answered (or attempted) so far."""
        return len(self.requests)

    def _lookup(self, request: LLMRequest) -> tuple[Any, Any]:
        """(slot, entry) of the first part that answers; ``slot`` names a mapping entry."""
        user = _last_user_message(request)
        key: str | None = None
        for index, (kind, part) in enumerate(self._parts):
            if kind == "map":
                hashes, rules = part
                if hashes:
                    key = key or request_key(request)
                    if key in hashes:
                        return (index, "hash", key), hashes[key]
                for rule_index, (stage, substring, entry) in enumerate(rules):
                    if stage in (ANY_STAGE, request.stage) and substring in user:
                        return (index, "rule", rule_index), entry
            else:
                entry = part(request)
                if entry is not None:
                    if isinstance(entry, list):
                        raise ConfigError(
                            f"scripted part {index}: a callable must return one entry, not a list "
                            f"(it can count calls itself)"
                        )
                    return None, entry
        start = user[:80].replace("\n", " ")
        raise UnexpectedRequestError(
            f"scripted backend has no reply for stage {request.stage!r}, "
            f"last user message starting {start!r}"
        )

    def _next(self, slot: Any, entry: Any) -> Any:
        if isinstance(entry, list):
            if not entry or any(isinstance(e, list) for e in entry):
                raise ConfigError("scripted entry: a list must be non-empty and flat")
            pos = self._list_pos.get(slot, 0)
            self._list_pos[slot] = pos + 1
            entry = entry[min(pos, len(entry) - 1)]
        return entry

    def _answer(self, request: LLMRequest) -> LLMResponse:
        entry = self._next(*self._lookup(request))
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, str):
            entry = ScriptedReply(text=entry)
        if not isinstance(entry, ScriptedReply):
            raise ConfigError(f"scripted entry for stage {request.stage!r}: unsupported value {entry!r}")
        prompt = entry.prompt_tokens
        if prompt is None:
            prompt = sum(count_tokens(m.content) for m in request.messages)
        completion = entry.completion_tokens
        if completion is None:
            completion = count_tokens(entry.text)
        return LLMResponse(text=entry.text, prompt_tokens=prompt, completion_tokens=completion,
                           finish_reason=entry.finish_reason)

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """Answer ``requests`` in order; raises the first scripted exception met."""
        with self._lock:
            self.generate_calls += 1
            self.requests.extend(requests)
            return [self._answer(r) for r in requests]


class HashEmbedder:
    """Deterministic embedding without a model: an l2-normalized signed hashed bag of words.

    Each content term (``language.tokens.terms``; all words when a text has no content term)
    adds +1 or -1, chosen by its blake2b digest, to one of ``dim`` buckets, also chosen by
    the digest. Texts sharing words get positive cosine similarity; the signs keep hash
    collisions from biasing similarities upward. A text without words maps to the zero
    vector.
    """

    def __init__(self, dim: int = 256) -> None:
        if not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"HashEmbedder: dim must be a positive int, got {dim!r}")
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def identity(self) -> dict[str, Any]:
        return {"embedder": "hash", "dim": self._dim, "version": 1}

    def embed(self, texts: Sequence[str]) -> Any:
        """Return a float32 array of shape ``(len(texts), dim)`` with unit (or zero) rows."""
        import numpy as np

        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = terms(text) or words(text)
            for token in tokens:
                digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self._dim] += 1.0 if (value >> 63) & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out
