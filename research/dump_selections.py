#!/usr/bin/env python
"""Dump the model-free selections (ids and scores of ``Memory.search``, ids of
``Memory.compile``) of every question, as JSON, to compare two trees.

    python research/dump_selections.py --out before.json ../shared/data/locomo/locomo_dev4.json
    python research/dump_selections.py --out after.json ... && cmp before.json after.json
    python research/dump_selections.py --corpora locomo,realtalk,beam --cache /tmp/sel --out before.json
    python research/dump_selections.py --compare before.json after.json

LoCoMo files given as arguments are built into a fresh store under a temporary folder (rule
descriptors, the model-free preset's embedder; zero model calls). ``--corpora`` reads the
development corpora instead (``scripts/dev_corpora.py``: LoCoMo dev4, REALTALK, BEAM 100K), one
store per conversation kept under ``--cache`` so that a second tree only loads them; every
question is searched at k = 10. ``--config`` also records each question under a FusionConfig
variant given as JSON (e.g. '{"ranker": "weighted"}'). ``--compare`` prints how many top-10
selections of two dumps differ and whether the second's scores lie in [0, 1], never rising.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # dev_corpora

from memcompile_local import Memory, PipelineConfig  # noqa: E402
from memcompile_local.data import load_locomo  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.store import open_store  # noqa: E402


def _configs(variants: list[dict]) -> list[tuple[str, PipelineConfig]]:
    base = apply_preset("model-free", PipelineConfig())
    return [("default", base)] + [(json.dumps(v, sort_keys=True), base.replace(fusion=v)) for v in variants]


def _record(mem: Memory, namespace: str, question: str, k: int | None) -> dict:
    hits = mem.search(namespace, question, k=k)
    return {"ids": [h.packet.packet_id for h in hits], "scores": [h.score for h in hits],
            "compile": list(mem.compile(namespace, question).packet_ids)}


def dump(paths: list[str], variants: list[dict]) -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, path in enumerate(paths):
            store = open_store(Path(tmp) / f"{n}.sqlite")
            convs = load_locomo(path)
            for name, cfg in _configs(variants):
                mem = Memory(store, cfg)
                for conv in convs:
                    mem.add(conv.namespace, conv)
                    mem.build(conv.namespace)
                    for i, q in enumerate(conv.questions):
                        key = f"{Path(path).name}|{name}|{conv.namespace}|{i}|{q.category}|{int(bool(q.evidence))}"
                        out[key] = _record(mem, conv.namespace, q.question, None)
            store.close()
    return out


def dump_corpora(names: list[str], cache: Path, variants: list[dict]) -> dict:
    from dev_corpora import DEFAULT_DATA, load_corpus

    out: dict = {}
    for name in names:
        for conv in load_corpus(name, DEFAULT_DATA[name]).convs:
            path = cache / name / f"{conv.namespace}.sqlite"
            path.parent.mkdir(parents=True, exist_ok=True)
            store = open_store(path)
            for label, cfg in _configs(variants):
                mem = Memory(store, cfg)
                mem.add(conv.namespace, conv)
                if not mem.is_built(conv.namespace):
                    mem.build(conv.namespace)
                for i, q in enumerate(conv.questions):
                    out[f"{name}|{label}|{conv.namespace}|{i}"] = _record(mem, conv.namespace, q.question, 10)
            store.close()
            print(f"{name}/{conv.namespace}: {len(conv.questions)} questions", flush=True)
    return out


def compare(before: dict, after: dict) -> int:
    if before.keys() != after.keys():
        print(f"the dumps hold other questions ({len(before)} and {len(after)})")
        return 1
    differ = [k for k in before if before[k]["ids"] != after[k]["ids"]]
    bad = [k for k, v in after.items() if any(not 0.0 <= s <= 1.0 for s in v["scores"])
           or any(a < b for a, b in zip(v["scores"], v["scores"][1:]))]
    print(f"{len(before)} questions; top-k selections that differ: {len(differ)} {differ[:5]}")
    print(f"second dump: questions whose scores leave [0, 1] or rise down the list: {len(bad)} {bad[:5]}")
    return 1 if differ or bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="LoCoMo files (or, with --compare, the two dumps)")
    ap.add_argument("--out", help="where to write the dump")
    ap.add_argument("--config", action="append", default=[], help="a FusionConfig variant as JSON")
    ap.add_argument("--corpora", default=None, help="development corpora instead of files: locomo,realtalk,beam")
    ap.add_argument("--cache", default=None, help="--corpora: the folder that keeps their stores")
    ap.add_argument("--compare", action="store_true", help="compare the two dumps given as files")
    args = ap.parse_args()
    if args.compare:
        if len(args.files) != 2:
            ap.error("--compare takes two dump files")
        return compare(*(json.loads(Path(f).read_text()) for f in args.files))
    if not args.out or bool(args.files) == bool(args.corpora):
        ap.error("give --out and either LoCoMo files or --corpora")
    variants = [json.loads(c) for c in args.config]
    if args.corpora:
        if not args.cache:
            ap.error("--corpora needs --cache")
        out = dump_corpora([n.strip() for n in args.corpora.split(",")], Path(args.cache).expanduser(), variants)
    else:
        out = dump(args.files, variants)
    Path(args.out).write_text(json.dumps(out, indent=0, sort_keys=True))
    print(f"{len(out)} selections -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
