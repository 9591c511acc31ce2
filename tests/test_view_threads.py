"""The query path's BLAS thread limit (memcompile_local/views/threads.py): who decides the
count, and that one thread scores exactly as several do."""

from __future__ import annotations

import numpy as np
import pytest

from memcompile_local.views import threads


@pytest.mark.parametrize("env, want", [
    ({}, 1),
    ({"MEMCOMPILE_BLAS_THREADS": "3"}, 3),
    ({"MEMCOMPILE_BLAS_THREADS": "0"}, None),
    ({"OMP_NUM_THREADS": "4"}, None),
    ({"OPENBLAS_NUM_THREADS": "2"}, None),
    ({"MKL_NUM_THREADS": "2", "MEMCOMPILE_BLAS_THREADS": "1"}, 1),  # the package's own variable wins
])
def test_the_count_follows_the_environment(env, want):
    assert threads.wanted_threads(env) == want


@pytest.mark.parametrize("raw", ["many", "-2", "1.5"])
def test_a_malformed_count_is_a_typed_error_that_names_the_variable(raw):
    from memcompile_local.errors import ConfigError

    with pytest.raises(ConfigError, match=f"MEMCOMPILE_BLAS_THREADS={raw!r}"):
        threads.wanted_threads({"MEMCOMPILE_BLAS_THREADS": raw})


def test_one_blas_thread_scores_a_view_sized_product_as_several_up_to_float32_rounding():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(3)
    m = rng.standard_normal((6000, 384)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    qs = rng.standard_normal((20, 384)).astype(np.float32)
    with threadpoolctl.threadpool_limits(limits=4, user_api="blas"):
        many = [m @ q for q in qs] + [m[:1500] @ qs[0], m @ qs.mean(axis=0)]
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        one = [m @ q for q in qs] + [m[:1500] @ qs[0], m @ qs.mean(axis=0)]
    for a, b in zip(many, one):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=0, atol=4 * np.finfo(np.float32).eps)


def test_the_limit_is_applied_once_at_the_first_view_load(tmp_path, monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from memcompile_local.adapters.scripted import HashEmbedder
    from memcompile_local.config import PipelineConfig
    from memcompile_local.memory import Memory
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.store import MemoryStore

    monkeypatch.setattr(threads, "_applied", [])
    monkeypatch.setenv(threads.ENV, "1")
    calls: list[int] = []
    real = threadpoolctl.threadpool_limits
    monkeypatch.setattr(threadpoolctl, "threadpool_limits", lambda limits, user_api: calls.append(limits) or real(
        limits=limits, user_api=user_api))
    mem = Memory(MemoryStore(tmp_path / "m.sqlite"), apply_preset("model-free", PipelineConfig()),
                 embedder=HashEmbedder(dim=32))
    mem.add("u", [{"time": "2024-01-02 10:00", "turns": [{"speaker": "Ida", "text": "My kiln arrived today."}]}])
    mem.view("u")
    mem.add("u", [{"time": "2024-01-03 10:00", "turns": [{"speaker": "Ida", "text": "First firing went well."}]}],
            in_place=False)
    mem.view("u")  # a second load applies nothing more
    assert calls == [1]
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert blas and all(i["num_threads"] == 1 for i in blas)
    mem.close()
