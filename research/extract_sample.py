#!/usr/bin/env python
"""Print rule-extracted descriptors for a few dialogue turns, for eyeballing.

Usage::

    python research/extract_sample.py [--data PATH] [--conv conv-26] [--start 0] [--n 12]
                                     [--timing]

Reads a LoCoMo-layout file, turns the selected conversation into SourcePackets in dialogue
order (as the store would), runs the RuleExtractor on turns ``start .. start+n`` with their
preceding turns, and prints each turn followed by its claims and metadata. ``--timing``
also extracts the whole conversation once and prints the wall time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memcompile_local.address.extract_rule import RuleExtractor  # noqa: E402
from memcompile_local.data.locomo import load_locomo  # noqa: E402
from memcompile_local.types import Conversation, SourcePacket, content_sha256  # noqa: E402


def packets_of(conv: Conversation) -> list[SourcePacket]:
    """The conversation's turns as SourcePackets, ordinal = dialogue position."""
    out: list[SourcePacket] = []
    for session, turn in conv.iter_turns():
        out.append(SourcePacket(
            namespace=conv.namespace,
            packet_id=turn.packet_id,
            ordinal=len(out),
            session_index=session.index,
            session_id=session.session_id,
            session_time=session.time,
            speaker=turn.speaker,
            content=turn.text,
            image_caption=turn.image_caption,
            sha256=content_sha256(turn.text, turn.image_caption),
            image_query=turn.image_query,
        ))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/locomo/locomo_dev.json"),
                    help="LoCoMo-layout file (default: ../shared beside the clone)")
    ap.add_argument("--conv", default="conv-26")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--timing", action="store_true")
    args = ap.parse_args(argv)

    conv = load_locomo(args.data, conversations=[args.conv])[0]
    packets = packets_of(conv)
    items = [(p, packets[i - 1] if i > 0 else None) for i, p in enumerate(packets)]
    extractor = RuleExtractor()
    print(f"# {conv.namespace}: {len(packets)} turns, descriptor set {extractor.descriptor_set}")
    chosen = items[args.start:args.start + args.n]
    for (packet, _prev), descriptors in zip(chosen, extractor.extract(chosen)):
        print(f"\n[{packet.packet_id}] {packet.speaker} ({packet.session_time}): {packet.content}")
        if packet.image_caption:
            print(f"    (image: {packet.image_caption})")
        if not descriptors:
            print("    -- no claims")
        for d in descriptors:
            print(f"  {d.claim_index}. {d.text}")
            print(f"     people={list(d.people)} keywords={list(d.keywords)} "
                  f"event_time={d.event_time!r} interaction={d.interaction_time} "
                  f"type={d.event.event_type} pred={d.event.predicate!r} "
                  f"polarity={d.event.polarity} negated={d.negated} profile={d.needs_profile} "
                  f"tokens={d.n_tokens}")
    if args.timing:
        t0 = time.perf_counter()
        results = extractor.extract(items)
        elapsed = time.perf_counter() - t0
        n_desc = sum(len(r) for r in results)
        print(f"\n# timing: {len(items)} turns -> {n_desc} descriptors in {elapsed:.3f} s "
              f"({1000 * elapsed / max(1, len(items)):.2f} ms/turn)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
