#!/usr/bin/env python
"""Speed of the model-free rule extractor, against a reference version of it in the same run.

The rule extractor is the second-largest cost of a model-free build (after embedding). This
script times ``RuleExtractor.extract_with_template`` alone (no memo, no store) over a fixed set
of development turns, the tree's version and a reference version (by default the ``main``
branch, unpacked with ``git archive`` into a temporary folder under another package name) in
alternating rounds, so that a change of machine load hits both alike, and prints the median
seconds of each, turns per second and the ratio.

    PYTHONPATH=. python scripts/bench_extract.py                 # 20 LongMemEval haystacks + BEAM
    PYTHONPATH=. python scripts/bench_extract.py --corpora longmemeval --haystacks 10 --rounds 5

The loaders here (``load_items``, ``reference_package``) are shared with
``research/extract_identity.py``, which checks that the two versions give identical output.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from memcompile_local.address.extract_rule import RuleExtractor, addressee_of
from memcompile_local.data import load_beam, load_locomo, load_longmemeval, load_realtalk
from memcompile_local.types import Conversation, SourcePacket

ROOT = Path(__file__).resolve().parents[1]
DATA = {"locomo": "../shared/data/locomo/locomo_dev4.json", "realtalk": "../shared/data/realtalk",
        "beam": "../shared/data/beam/100K",
        "longmemeval": "../shared/data/longmemeval/longmemeval_s_dev100.json.gz"}
CORPORA = tuple(DATA)

Item = tuple[SourcePacket, str | None]  # a packet and its addressee


def load_conversations(corpus: str, data: str | None = None, haystacks: int | None = None) -> list[Conversation]:
    """The development conversations of ``corpus`` (LongMemEval: the first ``haystacks``)."""
    path = data or DATA[corpus]
    if corpus == "locomo":
        return load_locomo(path)
    if corpus == "realtalk":
        return load_realtalk(path)
    if corpus == "beam":
        return load_beam(path, max_turn_chars=None)  # every character, the 348,853-character reply too
    if corpus == "longmemeval":
        convs = load_longmemeval(path)
        return convs[:haystacks] if haystacks is not None else convs
    raise ValueError(f"unknown corpus {corpus!r}; expected one of {', '.join(CORPORA)}")


def conversation_items(conv: Conversation) -> list[Item]:
    """Every turn of ``conv`` as a packet (as a build stores it) with the addressee a build gives it."""
    out: list[Item] = []
    previous: str | None = None
    ordinal = 0
    for session in conv.sessions:
        for turn in session.turns:
            packet = SourcePacket(namespace=conv.namespace, packet_id=turn.packet_id, ordinal=ordinal,
                                  session_index=session.index, session_id=session.session_id,
                                  session_time=session.time, speaker=turn.speaker, content=turn.text,
                                  image_caption=turn.image_caption, sha256="", image_query=turn.image_query)
            out.append((packet, addressee_of(turn.speaker, previous)))
            previous = turn.speaker
            ordinal += 1
    return out


def load_items(corpora: Sequence[str], haystacks: int | None) -> dict[str, list[Item]]:
    """Items of each corpus, all its conversations in file order."""
    return {c: [it for conv in load_conversations(c, haystacks=haystacks) for it in conversation_items(conv)]
            for c in corpora}


def reference_package(ref: str, folder: str) -> Any:
    """The ``memcompile_local`` package as of git ``ref``, importable beside this tree's.

    ``git archive`` writes its files under ``folder``; the package is renamed (every
    ``memcompile_local`` in its source becomes the new name) so both versions live in one
    process. Returns the imported ``address.extract_rule`` module of the reference.
    """
    name = "memcompile_local_ref_" + "".join(ch if ch.isalnum() else "_" for ch in ref)
    blob = subprocess.run(["git", "archive", "--format=tar", ref, "memcompile_local"], cwd=ROOT,
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(folder, filter="data")
    src = Path(folder) / "memcompile_local"
    for path in src.rglob("*.py"):
        path.write_text(path.read_text(encoding="utf-8").replace("memcompile_local", name), encoding="utf-8")
    src.rename(Path(folder) / name)
    sys.path.insert(0, folder)
    return importlib.import_module(f"{name}.address.extract_rule")


def reference_items(module: Any, items: Sequence[Item]) -> list[Item]:
    """``items`` as the reference package's own ``SourcePacket`` objects (same field values)."""
    types = importlib.import_module(module.__name__.rsplit(".", 2)[0] + ".types")
    return [(types.SourcePacket(**{f: getattr(p, f) for f in p.__dataclass_fields__}), a) for p, a in items]


def run_once(extractor: Any, items: Sequence[Item]) -> float:
    """Seconds to extract every item once."""
    t0 = time.perf_counter()
    for packet, addressee in items:
        extractor.extract_with_template(packet, addressee)
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="longmemeval,beam", help=f"comma-separated, from {', '.join(CORPORA)}")
    ap.add_argument("--haystacks", type=int, default=20, help="LongMemEval haystacks (the first N)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds of each version")
    ap.add_argument("--ref", default="main", help="git ref of the reference version ('' for none)")
    args = ap.parse_args(argv)
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    items = load_items(corpora, args.haystacks)
    new = RuleExtractor()
    with tempfile.TemporaryDirectory() as tmp:
        old_module = reference_package(args.ref, tmp) if args.ref else None
        old = old_module.RuleExtractor() if old_module else None
        print(f"rule extractor: this tree against {args.ref!r}, {args.rounds} rounds, "
              f"load average {os.getloadavg()[0]:.2f} at start")
        print(f"{'corpus':<12} {'turns':>6} {'ref s':>8} {'new s':>8} {'ref t/s':>8} {'new t/s':>8} {'ratio':>6}")
        for corpus in corpora:
            mine = items[corpus]
            theirs = reference_items(old_module, mine) if old_module else []
            new_times, old_times = [], []
            for _ in range(args.rounds):  # alternate, so that a change of load hits both alike
                if old is not None:
                    old_times.append(run_once(old, theirs))
                new_times.append(run_once(new, mine))
            n = len(mine)
            t_new = statistics.median(new_times)
            t_old = statistics.median(old_times) if old_times else float("nan")
            print(f"{corpus:<12} {n:>6} {t_old:>8.2f} {t_new:>8.2f} {n / t_old:>8.0f} {n / t_new:>8.0f} "
                  f"{t_old / t_new:>5.2f}x")
        print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
