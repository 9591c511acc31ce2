"""A second process writing to a store, driven over stdin (tests/test_view_catchup.py).

    python tests/_catchup_writer.py STORE FUSION_JSON

Reads one JSON command per line and answers one JSON line each:

- ``{"op": "view", "ns": N}``: load the namespace's view (so later adds extend it in place);
- ``{"op": "add", "ns": N, "batch": [...], "in_place": bool}``: ``Memory.add``;
- ``{"op": "build", "ns": N}``: ``Memory.build``;
- ``{"op": "search", "ns": N, "q": Q}``: ``Memory.search``, answered as [[id, score], ...],
  with how this process made its view (``loads``, ``catch_ups``);
- ``{"op": "delete", "ns": N, "turn": T}``: ``Memory.delete_turn``;
- ``{"op": "forget", "ns": N}``: ``Memory.forget``.

The Memory is the tests' model-free one (hash embedder, no model), under the preset plus the
fusion fields given, exactly as the test process makes its own.
"""

from __future__ import annotations

import json
import sys

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import PipelineConfig
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import open_store


def make_memory(location: str, fusion: dict) -> Memory:
    store = open_store(location)
    cfg = apply_preset("model-free", PipelineConfig())
    if fusion:
        cfg = cfg.replace(fusion=fusion)
    return Memory(store, cfg, embedder=HashEmbedder(dim=64), client=LLMClient(NoModelBackend(), store))


def main() -> int:
    mem = make_memory(sys.argv[1], json.loads(sys.argv[2]))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op, ns = cmd["op"], cmd.get("ns")
        try:
            out: dict = {"ok": True}
            if op == "view":
                out["turns"] = len(mem.view(ns).packets)
            elif op == "add":
                got = mem.add(ns, cmd["batch"], in_place=cmd.get("in_place", True))
                out["added"] = got.added
            elif op == "build":
                mem.build(ns)
            elif op == "search":
                out["hits"] = [[h.packet.packet_id, h.score] for h in mem.search(ns, cmd["q"])]
                out["loads"], out["catch_ups"] = mem.views.loader.loads, mem.views.loader.catch_ups
            elif op == "delete":
                mem.delete_turn(ns, cmd["turn"])
            elif op == "forget":
                mem.forget(ns)
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:  # answered, so the test sees what failed
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
    mem.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
