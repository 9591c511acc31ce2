#!/usr/bin/env python
"""Does this tree's rule extractor give exactly what a reference version gives, on every dev turn?

Stored builds are keyed on the extractor's identity (``RULE_EXTRACTOR_VERSION``), so a change
that only makes it faster must not change one byte of its output. For every turn of the
chosen corpora this runs both versions (the reference is unpacked from git, by default
``main``, see ``scripts/bench_extract.py``) and compares a canonical JSON dump of

* the descriptors and the template of ``extract_with_template(packet, addressee)``;
* ``bind(template, packet)`` of the template to the same turn under another session time
  (the next conversation's first session time), which reads the time expressions again;
* with ``--claims-cap N`` as well, the same under ``ExtractionConfig(max_rule_claims=N)``.

It prints turns compared and mismatches per corpus (and the first few mismatches in full), and
exits 1 on any mismatch.

    PYTHONPATH=. python research/extract_identity.py --haystacks 20 --claims-cap 8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # bench_extract

import bench_extract  # noqa: E402
from memcompile_local.address.extract_rule import RuleExtractor  # noqa: E402
from memcompile_local.config import ExtractionConfig  # noqa: E402


def canonical(descriptors: Sequence[Any], template: Any, bound: Sequence[Any]) -> str:
    """One JSON text of everything the extractor returned for a turn (class names left out,
    since the two versions' classes differ only in their module)."""
    return json.dumps({"descriptors": [dataclasses.asdict(d) for d in descriptors],
                       "template": dataclasses.asdict(template),
                       "bound": [dataclasses.asdict(d) for d in bound]},
                      sort_keys=True, ensure_ascii=False)


def other_time(items: Sequence[bench_extract.Item], i: int) -> str:
    """A session time other than turn ``i``'s: the next different one in the list (wrapping)."""
    own = items[i][0].session_time
    for j in list(range(i + 1, len(items))) + list(range(i)):
        if items[j][0].session_time != own:
            return items[j][0].session_time
    return "2020-02-29"


def dump(extractor: Any, items: Sequence[bench_extract.Item], j: int, rebound: Any) -> str:
    packet, addressee = items[j]
    descriptors, template = extractor.extract_with_template(packet, addressee)
    return canonical(descriptors, template, extractor.bind(template, rebound))


def compare(new: Any, old: Any, mine: Sequence[bench_extract.Item], theirs: Sequence[bench_extract.Item],
            show: int) -> tuple[int, list[str]]:
    """(turns compared, descriptions of mismatches)."""
    bad: list[str] = []
    for i in range(len(mine)):
        when = other_time(mine, i)
        a = dump(new, mine, i, dataclasses.replace(mine[i][0], session_time=when))
        b = dump(old, theirs, i, dataclasses.replace(theirs[i][0], session_time=when))
        if a != b:
            packet = mine[i][0]
            bad.append(f"{packet.namespace}:{packet.packet_id}")
            if len(bad) <= show:
                print(f"MISMATCH {bad[-1]}\n  new: {a[:2000]}\n  ref: {b[:2000]}")
    return len(mine), bad


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default=",".join(bench_extract.CORPORA))
    ap.add_argument("--haystacks", type=int, default=20, help="LongMemEval haystacks (the first N)")
    ap.add_argument("--ref", default="main", help="git ref of the reference version")
    ap.add_argument("--claims-cap", type=int, default=None,
                    help="also compare under extraction.max_rule_claims=N (not on LongMemEval: slow)")
    ap.add_argument("--show", type=int, default=3, help="mismatches to print in full")
    args = ap.parse_args(argv)
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    items = bench_extract.load_items(corpora, args.haystacks)
    total = mismatches = 0
    with tempfile.TemporaryDirectory() as tmp:
        ref = bench_extract.reference_package(args.ref, tmp)
        configs = [("default", ExtractionConfig())]
        if args.claims_cap is not None:
            configs.append((f"max_rule_claims={args.claims_cap}", ExtractionConfig(max_rule_claims=args.claims_cap)))
        for label, config in configs:
            ref_config = type(ref.RuleExtractor().config)(**dataclasses.asdict(config))
            new, old = RuleExtractor(config), ref.RuleExtractor(ref_config)
            assert new.descriptor_set == old.descriptor_set, (new.descriptor_set, old.descriptor_set)
            for corpus in corpora:
                if label != "default" and corpus == "longmemeval":
                    continue
                t0 = time.perf_counter()
                mine = items[corpus]
                n, bad = compare(new, old, mine, bench_extract.reference_items(ref, mine), args.show)
                total += n
                mismatches += len(bad)
                print(f"{label:<20} {corpus:<12} turns {n:>6}  mismatches {len(bad):>4}  "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"total: {total} turns compared, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
