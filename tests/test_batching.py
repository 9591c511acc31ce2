import threading

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.errors import TransportError
from memcompile_local.llm.batching import MicroBatcher
from memcompile_local.llm.interface import LLMRequest, Message


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

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: [f"echo q{i}a", f"echo q{i}b"] for i in range(6)}
    # 12 requests from 6 threads reached the backend in fewer calls than 6.
    assert backend.generate_calls < 6
    assert batcher.batches == backend.generate_calls


def test_a_backend_failure_reaches_every_caller_in_the_batch():
    backend = ScriptedBackend(lambda r: TransportError("down", retryable=True))
    batcher = MicroBatcher(backend)
    try:
        batcher.generate([req("x")])
    except TransportError as exc:
        assert exc.retryable
    else:  # pragma: no cover
        raise AssertionError("expected TransportError")
