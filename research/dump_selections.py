#!/usr/bin/env python
"""Dump the model-free selections (ids and scores of ``Memory.search``, ids of
``Memory.compile``) of every question of LoCoMo files as JSON, to compare two trees.

    python scripts/dump_selections.py --out before.json \
        ../shared/data/locomo/locomo_dev4.json tests/fixtures/locomo_mini.json
    python scripts/dump_selections.py --out after.json ... && cmp before.json after.json

Each file is built into a fresh store under a temporary folder (rule descriptors, the
model-free preset's embedder; zero model calls). ``--config`` also records each question
under a FusionConfig variant given as JSON (e.g. '{"complement": "pursuit"}').
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memcompile_local import Memory, PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo  # noqa: E402

try:  # the preset's home moved with the package layout
    from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
except ImportError:
    from memcompile_local.evidence.presets import apply_preset  # noqa: E402

try:
    from memcompile_local.store import open_store  # noqa: E402
except ImportError:
    open_store = None
    from memcompile_local.store import MemoryStore  # noqa: E402


def dump(paths: list[str], variants: list[dict]) -> dict:
    out: dict = {}
    base = apply_preset("model-free", PipelineConfig())
    configs = [("default", base)] + [(json.dumps(v, sort_keys=True), base.replace(fusion=v)) for v in variants]
    with tempfile.TemporaryDirectory() as tmp:
        for n, path in enumerate(paths):
            db = Path(tmp) / f"{n}.sqlite"
            store = open_store(db) if open_store else MemoryStore(db)
            convs = load_locomo(path)
            for name, cfg in configs:
                mem = Memory(store, cfg)
                for conv in convs:
                    mem.add(conv.namespace, conv)
                    mem.build(conv.namespace)
                    for i, q in enumerate(conv.questions):
                        hits = mem.search(conv.namespace, q.question)
                        ctx = mem.compile(conv.namespace, q.question)
                        key = f"{Path(path).name}|{name}|{conv.namespace}|{i}|{q.category}|{int(bool(q.evidence))}"
                        out[key] = {"ids": [h.packet.packet_id for h in hits],
                                    "scores": [h.score for h in hits],
                                    "compile": list(ctx.packet_ids)}
            store.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", action="append", default=[], help="a FusionConfig variant as JSON")
    args = ap.parse_args()
    out = dump(args.files, [json.loads(c) for c in args.config])
    Path(args.out).write_text(json.dumps(out, indent=0, sort_keys=True))
    scored = sum(1 for k in out if k.split("|")[1] == "default" and k.split("|")[4] in "1234" and k.endswith("|1"))
    print(f"{len(out)} selections ({scored} default-config questions of categories 1-4 with evidence) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
