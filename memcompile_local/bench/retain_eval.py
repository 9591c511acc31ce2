"""``eval --retain-budget``: the benchmark read from retained capsules instead of the raw history.

After the full memories are built (the writers read each turn with its extracted claims,
as during ingestion), a writer keeps capsules of each conversation within the budget; the
capsules are recorded in the store's capsule table under the conversation's namespace and
written as a namespace of their own (``<namespace>.keep.<writer>.<budget>``), which the
questions are then compiled against. The query path never reads the rest of the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import ConfigError
from ..retention import capsules_conversation, make_writer
from ..retention.writers import source_tokens
from .coverage import gold_recall
from .retention import read_recall

__all__ = ["RetainedMemory", "budget_tokens", "retained_namespace", "retain_memories", "retention_row",
           "retention_summary", "retention_summary_markdown"]


@dataclass(frozen=True)
class RetainedMemory:
    source_namespace: str
    namespace: str  # the namespace the questions read
    writer: str
    budget: int
    sources_of: Mapping[str, tuple[str, ...]]  # capsule id -> source packet ids
    retained: frozenset[str]
    tokens: int
    source_tokens: int


def budget_tokens(budget: float, total: int) -> int:
    """A budget below 1 is a share of the conversation's tokens; otherwise a number of tokens."""
    if budget < 0:
        raise ConfigError(f"--retain-budget must be >= 0, got {budget}")
    return int(budget * total) if budget < 1 else int(budget)


def retained_namespace(namespace: str, writer: str, budget: float) -> str:
    return f"{namespace}.keep.{writer}.{budget:g}"


def retain_memories(mem: Any, namespaces: Sequence[tuple[str, Sequence[str]]], writer: str, budget: float, *,
                    client: Any = None, seed: int = 0) -> dict[str, RetainedMemory]:
    """Write and build the retained memory of each ``(namespace, speakers)``; built full first."""
    w = make_writer(writer, client=client, seed=seed)
    out: dict[str, RetainedMemory] = {}
    for ns, speakers in namespaces:
        view = mem.view(ns)
        total = source_tokens(view.packets)
        res = w.retain(view.packets, view.descriptors_by_packet, budget_tokens(budget, total), namespace=ns)
        mem.store.put_capsules(ns, res.writer, res.budget, [c.to_dict() for c in res.capsules])
        keep = retained_namespace(ns, writer, budget)
        if mem.store.packet_count(keep):
            # What an earlier run kept (another writer version, or other data) is not reread.
            mem.forget(keep)
        if res.capsules:
            mem.add(keep, capsules_conversation(keep, res.capsules, speakers))
            mem.build(keep)
        out[ns] = RetainedMemory(ns, keep, writer, res.budget, {c.capsule_id: c.sources for c in res.capsules},
                                 frozenset(res.retained_sources()), res.tokens, total)
    return out


def retention_row(r: RetainedMemory, capsule_ids: Sequence[str], gold: Sequence[str]) -> dict[str, Any]:
    """The ``retention`` field of a prediction row."""
    return {"writer": r.writer, "budget": r.budget, "capsules": list(capsule_ids),
            "retain_recall": gold_recall(r.retained, gold), "read_recall": read_recall(capsule_ids, r.sources_of, gold)}


def sources_in_order(r: RetainedMemory, capsule_ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(s for c in capsule_ids for s in r.sources_of.get(c, (c,))))


def retention_summary(rows: Sequence[Mapping[str, Any]], retained: Mapping[str, RetainedMemory]) -> dict[str, Any]:
    def pct(key: str) -> float | None:
        v = [r["retention"][key] for r in rows if r.get("retention") and r["retention"][key] is not None]
        return round(100 * sum(v) / len(v), 2) if v else None

    first = next(iter(retained.values()))
    return {"writer": first.writer, "budget_tokens": {ns: r.budget for ns, r in retained.items()},
            "retained_tokens": sum(r.tokens for r in retained.values()),
            "source_tokens": sum(r.source_tokens for r in retained.values()),
            "retain_recall": pct("retain_recall"), "read_recall": pct("read_recall")}


def retention_summary_markdown(s: Mapping[str, Any]) -> str:
    return ("## Budgeted retention\n\n"
            f"Writer `{s['writer']}`; {s['retained_tokens']} of {s['source_tokens']} source tokens retained "
            "(questions read only the retained capsules).\n\n"
            "| Metric | Value |\n|---|---:|\n"
            f"| Retain-Recall (gold evidence turns that survived retention) | {s['retain_recall']} |\n"
            f"| Read-Recall (gold evidence turns in the final context) | {s['read_recall']} |\n")
