"""Question threads share one Memory: 16 threads must select exactly what one thread selects.

Issue 16.1: the lexical channel's shared Snowball stemmer corrupted stems under concurrent
questions, so runs crashed with IndexError or, worse, selected different packets from run
to run. This test compiles every question of a dev conversation serially, then all of them
again from 16 threads through one shared ``Memory`` (a fresh one over the same store, so the
first view is also built while the threads race for it), and requires the same packet ids in
the same order for every question.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from memcompile_local import Memory, PipelineConfig
from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.data import load_locomo
from memcompile_local.pipeline.presets import apply_preset

THREADS = 16


def test_model_free_selections_from_16_threads_equal_the_serial_ones(tmp_path, dev_locomo):
    conv = load_locomo(dev_locomo)[0]
    questions = [q.question for q in conv.questions]
    assert len(questions) >= 100  # the whole conversation's questions, not a sample
    cfg = apply_preset("model-free", PipelineConfig())
    store = tmp_path / "memory.sqlite"

    serial_mem = Memory(store, cfg, embedder=HashEmbedder(dim=256))
    try:
        serial_mem.add(conv.namespace, conv)
        serial = [serial_mem.compile(conv.namespace, q).packet_ids for q in questions]
    finally:
        serial_mem.close()
    assert all(len(ids) == cfg.evidence.k0 for ids in serial)

    shared = Memory(store, cfg, embedder=HashEmbedder(dim=256))
    start = threading.Barrier(THREADS)

    def compile_slice(offset: int) -> dict[int, tuple[str, ...]]:
        start.wait()  # all threads ask their first question at the same moment
        return {i: tuple(shared.compile(conv.namespace, questions[i]).packet_ids)
                for i in range(offset, len(questions), THREADS)}

    # Switch threads every few microseconds instead of every 5 ms, so that threads really
    # interleave inside the short stretches of shared work (stemming one question) where a
    # race shows.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            parts = list(pool.map(compile_slice, range(THREADS)))
    finally:
        sys.setswitchinterval(interval)
        shared.close()
    concurrent = {i: ids for part in parts for i, ids in part.items()}
    assert sorted(concurrent) == list(range(len(questions)))
    differing = [(questions[i], serial[i], concurrent[i]) for i in range(len(questions))
                 if tuple(serial[i]) != concurrent[i]]
    assert differing == [], f"{len(differing)} of {len(questions)} questions differ, e.g. {differing[:2]}"
