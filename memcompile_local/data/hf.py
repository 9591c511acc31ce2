"""Benchmark data from the Hugging Face hub, and a run's predictions as a dataset.

``--data hf:SOURCE`` accepts

* ``hf:ORG/NAME:FILE`` -- one file of a dataset repository, fetched with
  ``huggingface_hub.hf_hub_download`` (a ``.json`` file then goes through the package's own
  loaders, which locate every error; ``.jsonl``/``.parquet`` files are read with ``datasets``);
* ``hf:ORG/NAME`` -- a hub dataset read with ``datasets.load_dataset`` (its one split, or
  ``train``);
* ``hf:/a/local/dir`` -- a dataset saved with ``Dataset.save_to_disk``, and
  ``hf:/a/local/file.parquet`` (or ``.jsonl``/``.json``) -- local data files read by ``datasets``.

Rows read by ``datasets`` are written back as one JSON document (the layout of the
benchmark's own file) under ``$MEMCOMPILE_CACHE`` (default ``~/.cache/memcompile_local``) and
parsed by the stdlib loaders like any local file, so both paths give the same conversations.
Arrow gives every row every nested key (``None`` where a row has none), so ``None`` values
inside mappings are dropped on the way back, which restores the original layout.

Offline (``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1``) only what is already cached can
load; anything else raises :class:`HubUnavailableError` naming the cache folders. The stdlib
JSON loaders stay the default: ``--data file.json`` never imports ``datasets``.

``datasets`` and ``huggingface_hub`` are the optional extra ``hf``, imported on use.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ConfigError, DataFormatError, MissingExtraError

__all__ = [
    "HF_PREFIX",
    "HubUnavailableError",
    "is_hf_source",
    "parse_hf_source",
    "resolve_hf_source",
    "rows_to_json",
    "cache_dir",
    "export_rows",
]

HF_PREFIX = "hf:"
_DATA_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


class HubUnavailableError(ConfigError):
    """A hub dataset could not be loaded (offline and not cached, unknown name, no network)."""


def is_hf_source(data: str) -> bool:
    """Whether ``--data`` names a Hugging Face source (``hf:...``)."""
    return isinstance(data, str) and data.startswith(HF_PREFIX)


def parse_hf_source(data: str) -> tuple[str, str | None]:
    """``(repo id or local path, file or None)`` of ``hf:ORG/NAME[:FILE]`` / ``hf:/local/path``."""
    if not is_hf_source(data):
        raise ConfigError(f"{data!r} is not a Hugging Face source; expected hf:ORG/NAME[:FILE]")
    rest = data[len(HF_PREFIX):].strip()
    if not rest:
        raise ConfigError(f"{data!r}: expected hf:ORG/NAME[:FILE] or hf:/path/to/saved/dataset")
    if rest.startswith(("/", ".", "~")):
        return str(Path(rest).expanduser().resolve()), None
    repo, sep, filename = rest.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ConfigError(f"{data!r}: expected a dataset id ORG/NAME before the optional :FILE, got {repo!r}")
    return repo, (filename or None) if sep else None


def cache_dir() -> Path:
    """Where exported and converted files go (``$MEMCOMPILE_CACHE`` or ``~/.cache/memcompile_local``)."""
    root = os.environ.get("MEMCOMPILE_CACHE") or str(Path("~/.cache/memcompile_local").expanduser())
    return Path(root) / "hf"


def _datasets() -> Any:
    try:
        import datasets  # noqa: PLC0415 - optional heavy dependency, imported on use
    except ImportError as exc:
        raise MissingExtraError("datasets", "hf", "--data hf:...") from exc
    return datasets


def _hub() -> Any:
    try:
        import huggingface_hub  # noqa: PLC0415 - optional dependency, imported on use
    except ImportError as exc:
        raise MissingExtraError("huggingface_hub", "hf", "--data hf:ORG/NAME:FILE") from exc
    return huggingface_hub


def _cache_note() -> str:
    parts = []
    try:
        import datasets.config as dcfg  # noqa: PLC0415 - optional dependency

        parts.append(f"datasets cache {dcfg.HF_DATASETS_CACHE}")
    except ImportError:
        pass
    try:
        from huggingface_hub import constants  # noqa: PLC0415 - optional dependency

        parts.append(f"hub cache {constants.HF_HUB_CACHE}")
    except ImportError:
        pass
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
               if os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")]
    mode = f"offline ({', '.join(offline)} set): only cached data can load" if offline else "online"
    return f"{mode}; looked in the {' and the '.join(parts) or 'Hugging Face caches'}"


def _unavailable(source: str, exc: BaseException) -> HubUnavailableError:
    return HubUnavailableError(
        f"cannot load {source}: {type(exc).__name__}: {str(exc)[:300]}. {_cache_note()}. Fetch it once "
        "with a network, or pass a local file (--data path.json) or a dataset saved with save_to_disk "
        "(--data hf:/path/to/folder)")


def _drop_none(value: Any) -> Any:
    """Remove ``None`` values from mappings, recursively (Arrow's filler for absent keys)."""
    if isinstance(value, Mapping):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def rows_to_json(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Dataset rows as the benchmark file's list of objects (``None`` fillers dropped)."""
    return [_drop_none(dict(row)) for row in rows]


def _one_split(obj: Any, source: str) -> Any:
    """A ``Dataset`` from a ``Dataset`` or ``DatasetDict`` (its only split, else ``train``)."""
    if isinstance(obj, dict):  # DatasetDict is a dict of split name -> Dataset
        splits = list(obj.keys())
        if len(splits) == 1:
            return obj[splits[0]]
        if "train" in splits:
            return obj["train"]
        raise HubUnavailableError(f"{source}: several splits ({', '.join(splits)}) and none is 'train'; "
                                  "name a file with hf:ORG/NAME:FILE")
    return obj


def _load_rows(repo_or_path: str, filename: str | None, source: str) -> list[dict[str, Any]] | Path:
    """A local JSON file to parse (a downloaded ``.json``), or the rows of a dataset."""
    path = Path(repo_or_path)
    if path.is_absolute():  # parse_hf_source expands local sources to absolute paths
        if not path.exists():
            raise HubUnavailableError(f"{source}: {path} does not exist")
        ds = _datasets()
        if path.is_dir():
            try:
                return list(_one_split(ds.load_from_disk(str(path)), source))
            except Exception as exc:  # noqa: BLE001 - datasets raises many types; name the folder
                raise HubUnavailableError(f"{source}: {path} is not a dataset saved with save_to_disk "
                                          f"({type(exc).__name__}: {exc})") from exc
        if path.suffix == ".json":
            return path  # the package's own loader reads it (located errors)
        kind = _DATA_SUFFIXES.get(path.suffix)
        if kind is None:
            raise HubUnavailableError(f"{source}: expected a .json, .jsonl, .parquet or .csv file, got {path.name}")
        return list(_one_split(ds.load_dataset(kind, data_files=str(path)), source))
    if filename is not None:
        hub = _hub()
        try:
            local = Path(hub.hf_hub_download(repo_id=repo_or_path, filename=filename, repo_type="dataset"))
        except Exception as exc:  # noqa: BLE001 - offline, unknown repo or file: one clear message
            raise _unavailable(source, exc) from exc
        return _load_rows(str(local), None, source)
    ds = _datasets()
    try:
        return list(_one_split(ds.load_dataset(repo_or_path), source))
    except HubUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - offline, unknown dataset: one clear message
        raise _unavailable(source, exc) from exc


def resolve_hf_source(data: str, *, benchmark: str | None = None) -> Path:
    """The local JSON file for ``hf:...``: a downloaded ``.json`` as is, else the dataset's rows
    written to :func:`cache_dir` (named by a hash of the content, so equal data, equal file)."""
    repo_or_path, filename = parse_hf_source(data)
    loaded = _load_rows(repo_or_path, filename, data)
    if isinstance(loaded, Path):
        return loaded
    doc = rows_to_json(loaded)
    if not doc:
        raise DataFormatError(data, "$", f"at least one {benchmark or 'benchmark'} item", "the dataset has no rows")
    text = json.dumps(doc, ensure_ascii=False)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    out = cache_dir() / f"{benchmark or 'data'}-{digest}.json"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    return out


def export_rows(rows: list[dict[str, Any]], path: str | Path, fmt: str) -> Path:
    """Write rows as a dataset file: ``parquet`` (through ``datasets``) or ``jsonl``.

    Returns the path written. Nested values (id lists, token maps) stay nested: Arrow lists
    and structs in parquet, JSON in jsonl.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        tmp = out.with_suffix(out.suffix + ".tmp")
        try:
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                           encoding="utf-8")
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        return out
    if fmt != "parquet":
        raise ConfigError(f"export format {fmt!r}: expected parquet or jsonl")
    ds = _datasets()
    dataset = ds.Dataset.from_list(rows)
    tmp = out.with_suffix(out.suffix + ".tmp")
    try:
        dataset.to_parquet(str(tmp))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)  # a failed write leaves no partial file behind
    return out
