import threading

import pytest

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.errors import TransportError
from memcompile_local.llm.batching import MicroBatcher
from memcompile_local.llm.interface import LLMRequest, Message

from _threads import run_threads


def req(text: str) -> LLMRequest:
    return LLMRequest(messages=(Message("user", text),), stage="answer")


def test_concurrent_calls_are_merged_and_answers_go_back_to_their_callers():
    backend = ScriptedBackend(lambda r: "echo " + r.messages[-1].content)
    batcher = MicroBatcher(backend, max_wait_s=0.2)
    barrier = threading.Barrier(6)
    out: dict[int, list[str]] = {}

    def worker(i: int) -> None:
        barrier.wait()
        out[i] = [r.text for r in batcher.generate([req(f"q{i}a"), req(f"q{i}b")])]

    assert run_threads(worker, 6) == []
    assert out == {i: [f"echo q{i}a", f"echo q{i}b"] for i in range(6)}
    # 12 requests from 6 threads reached the backend in fewer calls than 6.
    assert backend.generate_calls < 6
    assert batcher.batches == backend.generate_calls


def test_a_backend_failure_reaches_every_caller_in_the_batch():
    """Several threads whose calls are merged into one failing backend call all get the error."""
    backend = ScriptedBackend(lambda r: TransportError("down", retryable=True))
    # A long window so that every caller joins the first batch.
    batcher = MicroBatcher(backend, max_wait_s=0.5)
    n = 5
    barrier = threading.Barrier(n)
    caught: dict[int, BaseException | None] = {}

    def worker(i: int) -> None:
        barrier.wait()
        try:
            batcher.generate([req(f"caller {i}")])
        except BaseException as exc:  # noqa: BLE001 - the test records what each caller got
            caught[i] = exc
        else:
            caught[i] = None

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a caller is still waiting"
    assert sorted(caught) == list(range(n))
    assert all(isinstance(exc, TransportError) and exc.retryable for exc in caught.values()), caught
    # The callers shared batches: fewer backend calls than callers, each one failed.
    assert backend.generate_calls < n and batcher.batches == backend.generate_calls
    # The batcher still serves a later call after a failed batch.
    with pytest.raises(TransportError):
        batcher.generate([req("after")])
