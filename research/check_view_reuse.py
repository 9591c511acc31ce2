"""Checks on a LoCoMo file that a view reloaded after appends selects exactly as a fresh one.

Each conversation is added to one Memory session by session, and its last session turn by
turn (so the documents of the turn before each new one change), with a question compiled
after every add: each of those loads reuses the previous load's work
(``memcompile_local/view_load.py``). Then every question of the conversation is compiled by
that Memory and by a new Memory on the same store, which loads from scratch, and the two
are compared: selected ids, rendered text, and the address trace (K_q and U_q, which
also builds the lazily built AddressIndex). Prints the count of identical questions; exits
1 on any difference.

    .venv/bin/python research/check_view_reuse.py --data ../shared/data/locomo/locomo_dev.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.data.locomo import load_locomo  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402
from memcompile_local.memory import Memory  # noqa: E402
from memcompile_local.types import Conversation  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a LoCoMo JSON file")
    ap.add_argument("--embedder", default="hash", help="hash (default) or sentence-transformers")
    ap.add_argument("--preset", default="model-free")
    args = ap.parse_args()
    cfg = apply_preset(args.preset, PipelineConfig()).replace(model={"embedder": args.embedder})
    live = Memory(Path(tempfile.mkdtemp(prefix="view_reuse_")) / "m.sqlite", cfg)
    total = same = 0
    for conv in load_locomo(args.data):
        ns = conv.namespace
        questions = [q.question for q in conv.questions] or ["What happened?"]
        *early, last = conv.sessions
        for i, session in enumerate(early):
            live.add(ns, Conversation(namespace=ns, sessions=(session,)))
            live.compile(ns, questions[i % len(questions)])
        for j in range(1, len(last.turns) + 1):
            grown = dataclasses.replace(last, turns=last.turns[:j])
            live.add(ns, Conversation(namespace=ns, sessions=(grown,)))
            live.compile(ns, questions[j % len(questions)])
        scratch = Memory(live.store, cfg)
        for q in questions:
            a = live.compile(ns, q, address_trace=True)
            b = scratch.compile(ns, q, address_trace=True)
            total += 1
            same += (a.packet_ids, a.text, a.address.candidates, a.pool) == \
                    (b.packet_ids, b.text, b.address.candidates, b.pool)
        print(f"{ns}: {live.store.packet_count(ns)} turns; {same}/{total} questions identical so far", flush=True)
    live.close()
    print("all identical" if same == total else f"{total - same} of {total} questions differ")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
