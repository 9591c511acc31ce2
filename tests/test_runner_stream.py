"""A run builds and answers one conversation at a time: the view a build just made is used
without reading it back from the store and equals a load from the store; at most the configured
number of views is held; the selections equal those of a run that holds every view."""

from __future__ import annotations

import numpy as np
import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.build.stages import BuildOutputs, build_memory
from memcompile_local.config import PipelineConfig
from memcompile_local.data import load_longmemeval
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.views.cache import ViewCache
from memcompile_local.views.fresh import BuiltStore, view_after_build

from _lme_synth import longmemeval_file

QUESTIONS = ["How much did I pay for my kayak?", "Who is my piano teacher?", "What did I plant in October?",
             "Where is the wedding?"]


def model_free(**over) -> PipelineConfig:
    cfg = apply_preset("model-free", PipelineConfig())
    return cfg.replace(**over) if over else cfg


class CountingStore:
    """Counts the namespace reads a view load makes on the wrapped store."""

    READS = ("packets", "descriptors", "cells", "embeddings")

    def __init__(self, store) -> None:
        self._store = store
        self.reads: dict[str, int] = {}

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if name in self.READS:
            def counted(*a, **kw):
                self.reads[name] = self.reads.get(name, 0) + 1
                return attr(*a, **kw)
            return counted
        return attr


def built(tmp_path, cfg: PipelineConfig, n_questions: int = 1):
    data = longmemeval_file(tmp_path / "lme.json", n_questions)
    conv = load_longmemeval(data)[0]
    mem = Memory(tmp_path / "m.sqlite", cfg, embedder=HashEmbedder(dim=64))
    mem.add(conv.namespace, conv)
    out = BuildOutputs()
    spec = mem.spec
    build_memory(mem.store, conv.namespace, mem.extractor(), cfg.placement, mem.embedder, dense=spec.dense,
                 keep=out)
    return mem, conv.namespace, out


@pytest.mark.parametrize("over", [{}, {"placement": {"layout": "flat"}},
                                  {"fusion": {"passage_words": 8, "passage_overlap_words": 2}}])
def test_the_view_after_a_build_reads_nothing_back_and_equals_a_load(tmp_path, over):
    cfg = model_free(**over)
    mem, ns, out = built(tmp_path, cfg)
    counting = CountingStore(mem.store)
    cache = ViewCache()
    view, generation = view_after_build(cache, mem.spec, counting, mem.embedder, out)
    assert counting.reads == {}  # packets, descriptors, Cells and vectors came from the build
    assert generation == mem.store.generation(ns)
    assert cache.held(ns, mem.spec, generation=generation)[0] is view
    loaded, g2 = ViewCache().load(mem.spec, mem.store, mem.embedder, ns)
    assert g2 == generation
    assert view.packets == loaded.packets and view.row_of == loaded.row_of
    assert view.descriptors_by_packet == loaded.descriptors_by_packet
    assert np.array_equal(view.packet_matrix, loaded.packet_matrix)
    assert np.array_equal(view.fusion.context_matrix, loaded.fusion.context_matrix)
    if over.get("fusion"):
        assert view.fusion.passage_matrix is not None and len(view.fusion.passage_matrix)
        assert np.array_equal(view.fusion.passage_matrix, loaded.fusion.passage_matrix)
        assert np.array_equal(view.fusion.passage_owner, loaded.fusion.passage_owner)
    assert list(view.index.cells) == list(loaded.index.cells)
    for q in QUESTIONS:
        a = mem.compile_view(view, q, address_trace=True)
        b = mem.compile_view(loaded, q, address_trace=True)
        assert a.packet_ids == b.packet_ids and a.text == b.text
        assert [c.packet_id for c in a.address.candidates] == [c.packet_id for c in b.address.candidates]


def test_after_another_write_the_reads_go_to_the_store(tmp_path):
    mem, ns, out = built(tmp_path, model_free())
    generation = mem.store.generation(ns)
    mem.store.set_meta(ns, "note", "moved on")  # any write moves the generation
    assert mem.store.generation(ns) != generation
    counting = CountingStore(mem.store)
    stale = BuiltStore(counting, out, generation)
    assert stale.packets(ns) == mem.store.packets(ns)
    assert stale.descriptors(ns, out.descriptor_set) == mem.store.descriptors(ns, out.descriptor_set)
    assert counting.reads == {"packets": 1, "descriptors": 1} and stale.served == 0
    fresh = BuiltStore(counting, out, mem.store.generation(ns))
    fresh.packets(ns)
    assert fresh.served == 1 and counting.reads["packets"] == 1


def run(tmp_path, name: str, data, **kw) -> dict:
    spec = EvalSpec(benchmark="longmemeval", data=str(data), store=str(tmp_path / f"{name}.sqlite"),
                    out=str(tmp_path / name), progress=False, answer=False, **kw)
    return EvalRunner(spec, model_free(), embedder=HashEmbedder(dim=64), echo=lambda s: None).run()


def selections(tmp_path, name: str) -> dict:
    return {r["question_id"]: (r["selected_ids"], r["recall_stages"])
            for r in read_jsonl(tmp_path / name / "predictions.jsonl")}


def test_a_run_holds_at_most_max_views_and_selects_as_one_holding_all(tmp_path, monkeypatch):
    data = longmemeval_file(tmp_path / "lme.json", 7)
    held: list[int] = []
    put = ViewCache.put

    def spy(self, key, view):
        put(self, key, view)
        held.append(len(self))

    monkeypatch.setattr(ViewCache, "put", spy)
    bounded = run(tmp_path, "bounded", data, max_views=2)
    assert held and max(held) == 2 and len(held) == 7  # one view made per question, none reloaded
    held.clear()
    run(tmp_path, "wide", data, max_views=50)
    assert max(held) == 7
    assert selections(tmp_path, "bounded") == selections(tmp_path, "wide")
    turns = sum(len(s.turns) for c in load_longmemeval(data) for s in c.sessions)
    assert bounded["build"]["namespaces"] == 7 and bounded["build"]["turns"] == turns


def test_a_resumed_run_builds_only_the_questions_left(tmp_path):
    data = longmemeval_file(tmp_path / "lme.json", 4)
    first = run(tmp_path, "r", data)
    assert first["build"]["namespaces"] == 4
    again = run(tmp_path, "r", data)  # everything answered: nothing to build
    assert again["build"]["namespaces"] == 0 and again["questions"] == 4
    assert again["metrics"] == first["metrics"]


def test_concurrent_answers_while_building_equal_the_serial_run(tmp_path, monkeypatch):
    from memcompile_local.adapters.scripted import ScriptedBackend

    data = longmemeval_file(tmp_path / "lme.json", 6)
    held: list[int] = []
    put = ViewCache.put

    def spy(self, key, view):
        put(self, key, view)
        held.append(len(self))

    monkeypatch.setattr(ViewCache, "put", spy)
    rows = {}
    for name, concurrency in (("serial", 1), ("threads", 4)):
        cfg = model_free(model={"backend": "openai", "concurrency": concurrency})
        spec = EvalSpec(benchmark="longmemeval", data=str(data), store=str(tmp_path / f"{name}.sqlite"),
                        out=str(tmp_path / name), progress=False, judge=False, max_views=3)
        EvalRunner(spec, cfg, backend=ScriptedBackend(lambda req: "an answer"), embedder=HashEmbedder(dim=64),
                   echo=lambda s: None).run()
        rows[name] = {r["question_id"]: (r["selected_ids"], r["prediction"])
                      for r in read_jsonl(tmp_path / name / "predictions.jsonl")}
    assert rows["serial"] == rows["threads"] and len(rows["serial"]) == 6
    assert max(held) <= 3
