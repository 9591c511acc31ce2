"""LLMClient: cache identity, batching, token ledger, resume and faults.

Every test runs twice: with the SQLite store as ledger and with the in-memory ledger.
Expected token counts are computed by hand from ``count_tokens`` of the scripted texts.
"""

from __future__ import annotations

import threading
import time

import pytest

from memcompile_local.language.tokens import count_tokens
from memcompile_local.errors import (
    MissingExtraError,
    ModelError,
    OutputValidationError,
    TransportError,
    UnexpectedRequestError,
)
from memcompile_local.llm.client import InMemoryLedger, LLMClient, add_totals
from memcompile_local.llm.interface import (
    JsonSchemaSpec,
    LLMRequest,
    LLMResponse,
    Message,
    RankingSpec,
    TextSpec,
)
from memcompile_local.store import MemoryStore

from memcompile_local.adapters.scripted import ScriptedBackend, ScriptedReply

from _threads import run_threads

FACT_SCHEMA = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
}
SYSTEM = "Answer briefly."


def q(user: str, stage: str = "answer", output=None, **kw) -> LLMRequest:
    return LLMRequest(messages=(Message("system", SYSTEM), Message("user", user)), stage=stage,
                      output=output or TextSpec(), **kw)


def prompt_tokens(user: str) -> int:
    return count_tokens(SYSTEM) + count_tokens(user)


def answer_for(request: LLMRequest) -> str | None:
    """Deterministic replies: answers echo the question number, facts return JSON."""
    user = request.messages[-1].content
    if request.stage == "answer" and user.startswith("question"):
        return f"reply to {user}"
    if request.stage == "fact" and user.startswith("turn"):
        return '{"facts": ["%s happened"]}' % user
    return None


@pytest.fixture(params=["store", "memory"])
def ledger(request, tmp_path):
    """A factory: ``ledger()`` opens the ledger (a fresh MemoryStore object on the same file
    each time, like a new process would) or returns the one in-memory ledger."""
    opened: list[MemoryStore] = []
    memory_holder: dict[str, InMemoryLedger] = {}

    def make():
        if request.param == "store":
            store = MemoryStore(tmp_path / "mem.db")
            opened.append(store)
            return store
        return memory_holder.setdefault("l", InMemoryLedger())

    yield make
    for store in opened:
        store.close()


def client_for(backend, led, **kw) -> LLMClient:
    if isinstance(led, InMemoryLedger):
        client = LLMClient(backend, None, **kw)
        client._ledger = led  # share one in-memory ledger between clients, as a store would be
        return client
    return LLMClient(backend, led, **kw)


# --------------------------------------------------------------------------- cache identity


def test_identical_request_hits_with_zero_new_tokens(ledger):
    backend = ScriptedBackend(answer_for)
    client = client_for(backend, ledger())
    first = client.complete(q("question 1"))
    second = client.complete(q("question 1"))
    assert first.cached is False and second.cached is True
    assert first.text == second.text == "reply to question 1"
    assert second.parsed == "reply to question 1"
    assert (first.prompt_tokens, first.completion_tokens) == (prompt_tokens("question 1"),
                                                               count_tokens("reply to question 1"))
    assert (second.prompt_tokens, second.completion_tokens) == (0, 0)
    assert backend.calls == 1
    assert client.totals() == {"answer": {"prompt": first.prompt_tokens,
                                          "completion": first.completion_tokens, "calls": 1}}
    assert client.stats()["hits"] == 1


@pytest.mark.parametrize(
    "variant",
    [
        dict(user="question 2"),
        dict(stage="fact", user="turn 1"),
        dict(output=JsonSchemaSpec(schema=FACT_SCHEMA)),
        dict(max_tokens=100),
        dict(seed=7),
        dict(prompt_version="v2"),
    ],
    ids=["message", "stage", "spec", "max_tokens", "seed", "prompt_version"],
)
def test_any_change_is_a_miss(ledger, variant):
    def reply(request):
        if request.output.kind == "json":
            return '{"facts": ["x"]}'
        return answer_for(request)

    backend = ScriptedBackend(reply)
    client = client_for(backend, ledger())
    base = dict(user="question 1", stage="answer")
    client.complete(q(base["user"], base["stage"]))
    changed = {**base, **variant}
    user, stage = changed.pop("user"), changed.pop("stage")
    req = q(user, stage, **changed)
    assert client.cache_key(req) != client.cache_key(q("question 1"))
    assert client.complete(req).cached is False
    assert backend.calls == 2


def test_system_message_change_is_a_miss(ledger):
    backend = ScriptedBackend(answer_for)
    client = client_for(backend, ledger())
    client.complete(q("question 1"))
    other = LLMRequest(messages=(Message("system", "Be verbose."), Message("user", "question 1")), stage="answer")
    assert client.complete(other).cached is False and backend.calls == 2


def test_model_identity_change_is_a_miss(ledger):
    led = ledger()
    client_for(ScriptedBackend(answer_for, model="m1"), led).complete(q("question 1"))
    same = ScriptedBackend(answer_for, model="m1")
    assert client_for(same, led).complete(q("question 1")).cached is True and same.calls == 0
    other = ScriptedBackend(answer_for, model="m2")
    assert client_for(other, led).complete(q("question 1")).cached is False and other.calls == 1


def test_sampled_requests_are_never_cached_but_counted(ledger):
    led = ledger()
    backend = ScriptedBackend(answer_for)
    client = client_for(backend, led)
    req = q("question 1", temperature=0.7)
    a, b = client.complete(req), client.complete(req)
    assert not a.cached and not b.cached and backend.calls == 2
    assert led.cache_get(client.cache_key(req)) is None
    assert client.totals()["answer"] == {"prompt": 2 * prompt_tokens("question 1"),
                                         "completion": 2 * count_tokens("reply to question 1"), "calls": 2}
    # identical sampled requests in one batch are not merged either
    client.complete_many([req, req])
    assert backend.calls == 4


def test_invalid_output_not_cached_and_counted_as_waste(ledger):
    led = ledger()
    bad = "I think the facts are: none"
    good = '{"facts": ["ok"]}'
    backend = ScriptedBackend({("fact", "turn"): [bad, good]})
    client = client_for(backend, led, run_id="r")
    req = q("turn 9", "fact", output=JsonSchemaSpec(schema=FACT_SCHEMA))
    with pytest.raises(OutputValidationError) as info:
        client.complete(req)
    assert info.value.text == bad
    assert led.cache_get(client.cache_key(req)) is None
    assert client.totals() == {}
    p = prompt_tokens("turn 9")
    assert client.waste_totals() == {"fact": {"prompt": p, "completion": count_tokens(bad), "calls": 1}}
    ok = client.complete(req)  # a caller's retry reaches the backend again
    assert ok.parsed == {"facts": ["ok"]} and backend.calls == 2
    assert client.complete(req).cached is True and backend.calls == 2
    assert client.totals() == {"fact": {"prompt": p, "completion": count_tokens(good), "calls": 1}}
    assert client.waste_totals()["fact"]["calls"] == 1


def test_truncated_and_empty_outputs_are_not_cached(ledger):
    led = ledger()
    backend = ScriptedBackend({
        ("fact", "turn"): ScriptedReply('{"facts": ["a lo', finish_reason="length"),
        ("answer", "question"): "   ",
    })
    client = client_for(backend, led)
    results = client.complete_many([q("turn 1", "fact", output=JsonSchemaSpec(schema=FACT_SCHEMA)),
                                    q("question 1")])
    assert all(isinstance(r, OutputValidationError) for r in results)
    assert "truncated" in str(results[0]) and "empty" in str(results[1])
    assert client.totals() == {}
    assert set(client.waste_totals()) == {"fact", "answer"}
    for r, req in zip(results, [q("turn 1", "fact", output=JsonSchemaSpec(schema=FACT_SCHEMA)), q("question 1")]):
        assert led.cache_get(client.cache_key(req)) is None


def test_ranking_hit_revalidates_into_label_list(ledger):
    spec = RankingSpec(labels=("C001", "C002", "C003"), k=2)
    backend = ScriptedBackend({("schedule", "rank"): '{"ranked_candidate_ids": ["C003", "C001"]}'})
    client = client_for(backend, ledger())
    req = q("rank these", "schedule", output=spec)
    assert client.complete(req).parsed == ["C003", "C001"]
    hit = client.complete(req)
    assert hit.cached and hit.parsed == ["C003", "C001"]


# ----------------------------------------------------------------------------- batching


def test_complete_many_keeps_order_and_sends_misses_in_one_batch(ledger):
    backend = ScriptedBackend(answer_for)
    client = client_for(backend, ledger())
    client.complete(q("question 2"))
    batch = [q("question 1"), q("question 2"), q("question 3"), q("question 1"), q("turn 5", "fact",
             output=JsonSchemaSpec(schema=FACT_SCHEMA))]
    before = backend.generate_calls
    out = client.complete_many(batch)
    assert backend.generate_calls == before + 1
    sent = [r.messages[-1].content for r in backend.requests[1:]]
    assert sent == ["question 1", "question 3", "turn 5"]  # hit and duplicate not sent
    assert [r.text for r in out[:4]] == ["reply to question 1", "reply to question 2",
                                          "reply to question 3", "reply to question 1"]
    assert [r.cached for r in out] == [False, True, False, True, False]
    assert out[3].prompt_tokens == 0 and out[4].parsed == {"facts": ["turn 5 happened"]}
    assert client.totals()["answer"]["calls"] == 3


def test_transport_error_is_per_request_and_not_retried(ledger):
    led = ledger()
    fault = TransportError("503 from server", retryable=True, status=503)
    backend = ScriptedBackend([{("answer", "question 9"): fault}, answer_for])
    client = client_for(backend, led, run_id="t")
    client.complete(q("question 1"))
    out = client.complete_many([q("question 1"), q("question 9"), q("question 2")])
    assert out[0].cached is True
    # the backend failed the whole batch it was given (question 9 and question 2)
    assert out[1] is out[2] and isinstance(out[1], TransportError) and out[1].status == 503
    assert backend.generate_calls == 2  # no retry loop in the client
    with pytest.raises(TransportError):
        client.complete(q("question 9"))
    assert backend.generate_calls == 3
    assert client.waste_totals() == {"answer": {"prompt": 0, "completion": 0, "calls": 3}}
    assert client.totals()["answer"]["calls"] == 1


def test_backend_contract_violations_become_model_errors(ledger):
    class Short:
        def identity(self):
            return {"backend": "short"}

        def generate(self, requests):
            return [LLMResponse(text="x")]

    class Broken:
        def identity(self):
            return {"backend": "broken"}

        def generate(self, requests):
            raise ValueError("prompt too long for the context")

    out = client_for(Short(), ledger()).complete_many([q("question 1"), q("question 2")])
    assert all(type(r) is ModelError for r in out) and "1 responses for 2" in str(out[0])
    with pytest.raises(ModelError) as info:
        client_for(Broken(), ledger()).complete(q("question 1"))
    assert "prompt too long" in str(info.value) and isinstance(info.value.__cause__, ValueError)


def test_configuration_and_script_errors_propagate(ledger):
    class NoLib:
        def identity(self):
            return {"backend": "nolib"}

        def generate(self, requests):
            raise MissingExtraError("vllm", "vllm")

    with pytest.raises(MissingExtraError):
        client_for(NoLib(), ledger()).complete_many([q("question 1")])
    client = client_for(ScriptedBackend(answer_for), ledger())
    with pytest.raises(UnexpectedRequestError):
        client.complete_many([q("something unscripted")])
    # the key is released: a later call is not blocked waiting for it
    with pytest.raises(UnexpectedRequestError):
        client.complete(q("something unscripted"))


# ------------------------------------------------------------------------- ledger / resume

WORKLOAD = [q(f"question {i}") for i in range(6)] + [
    q(f"turn {i}", "fact", output=JsonSchemaSpec(schema=FACT_SCHEMA)) for i in range(4)
]


def expected_totals(requests) -> dict:
    out: dict = {}
    for r in requests:
        row = out.setdefault(r.stage, {"prompt": 0, "completion": 0, "calls": 0})
        row["prompt"] += prompt_tokens(r.messages[-1].content)
        row["completion"] += count_tokens(answer_for(r))
        row["calls"] += 1
    return out


def test_resume_totals_equal_uninterrupted_run(ledger, tmp_path):
    # uninterrupted reference run on its own ledger
    with MemoryStore(tmp_path / "reference.db") as ref_store:
        ref = LLMClient(ScriptedBackend(answer_for), ref_store, run_id="run")
        ref.complete_many(WORKLOAD)
        reference = ref.totals()
    assert reference == expected_totals(WORKLOAD)

    # run A: does half, one request at a time, then "crashes"
    a = client_for(ScriptedBackend(answer_for), ledger(), run_id="run")
    for r in WORKLOAD[::2]:
        a.complete(r)
    # run B: a fresh backend and ledger object, same run id, does everything again
    backend_b = ScriptedBackend(answer_for)
    b = client_for(backend_b, ledger(), run_id="run")
    b.complete_many(WORKLOAD)
    assert backend_b.calls == len(WORKLOAD) - len(WORKLOAD[::2])
    assert b.totals() == reference
    # a repeated hit does not count twice
    b.complete_many(WORKLOAD)
    assert b.totals() == reference
    # run C: a different run id; every call is a hit, its totals are still the full workload
    backend_c = ScriptedBackend(answer_for)
    c = client_for(backend_c, ledger(), run_id="another-run")
    results = c.complete_many(WORKLOAD)
    assert backend_c.calls == 0 and backend_c.generate_calls == 0
    assert all(r.cached for r in results)
    assert c.totals() == reference


def test_run_totals_cover_only_the_keys_the_run_used(ledger):
    led = ledger()
    client_for(ScriptedBackend(answer_for), led, run_id="full").complete_many(WORKLOAD)
    partial = client_for(ScriptedBackend(answer_for), led, run_id="partial")
    partial.complete_many(WORKLOAD[:2])
    assert partial.totals() == expected_totals(WORKLOAD[:2])


def test_ledger_exact_under_faults_and_resume(ledger):
    bad = "not json at all"
    fault = TransportError("connection reset", retryable=True)
    script = [
        {("fact", "turn 1"): [bad, '{"facts": ["turn 1 happened"]}'],
         ("answer", "question 4"): [fault, "reply to question 4"]},
        answer_for,
    ]
    a = client_for(ScriptedBackend(script), ledger(), run_id="run")
    first = a.complete_many(WORKLOAD)
    failed = [i for i, r in enumerate(first) if isinstance(r, ModelError)]
    # the transport fault fails the whole first batch; the invalid output would have failed alone
    assert failed == list(range(len(WORKLOAD)))
    assert a.totals() == {}
    # the scripted backend stopped at the fault, so turn 1 meets its invalid answer now
    second = a.complete_many(WORKLOAD)
    failed = [WORKLOAD[i].messages[-1].content for i, r in enumerate(second) if isinstance(r, ModelError)]
    assert failed == ["turn 1"] and isinstance(second[7], OutputValidationError)
    ok = [r for r in WORKLOAD if r.messages[-1].content != "turn 1"]
    assert a.totals() == expected_totals(ok)
    third = a.complete_many(WORKLOAD)
    assert [r.cached for r in third] == [True] * 7 + [False] + [True] * 2
    assert a.totals() == expected_totals(WORKLOAD)
    waste = a.waste_totals()
    assert waste == {"answer": {"prompt": 0, "completion": 0, "calls": 6},
                     "fact": {"prompt": prompt_tokens("turn 1"), "completion": count_tokens(bad), "calls": 5}}

    # a fresh client on the same ledger and run id: nothing is recomputed, totals unchanged
    backend = ScriptedBackend(script)
    b = client_for(backend, ledger(), run_id="run")
    b.complete_many(WORKLOAD)
    assert backend.calls == 0 and b.totals() == expected_totals(WORKLOAD)
    assert b.waste_totals() == waste


def test_invalid_output_waste_carries_its_tokens(ledger):
    bad = "Sorry, no JSON"
    script = [{("fact", "turn 2"): [bad, '{"facts": ["turn 2 happened"]}']}, answer_for]
    client = client_for(ScriptedBackend(script), ledger(), run_id="w")
    out = client.complete_many(WORKLOAD)
    assert [i for i, r in enumerate(out) if isinstance(r, ModelError)] == [8]
    ok = [r for i, r in enumerate(WORKLOAD) if i != 8]
    assert client.totals() == expected_totals(ok)
    assert client.waste_totals() == {"fact": {"prompt": prompt_tokens("turn 2"), "completion": count_tokens(bad),
                                              "calls": 1}}
    client.complete_many(WORKLOAD)
    assert client.totals() == expected_totals(WORKLOAD)


def test_store_rows_hold_the_response(tmp_path):
    with MemoryStore(tmp_path / "m.db") as store:
        client = LLMClient(ScriptedBackend(answer_for), store, run_id="x")
        req = q("turn 3", "fact", output=JsonSchemaSpec(schema=FACT_SCHEMA), namespace="conv-1")
        client.complete(req)
        row = store.cache_get(client.cache_key(req))
        assert row["text"] == '{"facts": ["turn 3 happened"]}'
        assert row["parsed"] == {"facts": ["turn 3 happened"]}
        assert row["stage"] == "fact" and row["finish_reason"] == "stop"
        assert store.token_totals(namespace="conv-1")["fact"]["calls"] == 1


# ------------------------------------------------------------------------------ threads


def test_concurrent_clients_compute_each_key_once(ledger):
    class Slow(ScriptedBackend):
        def generate(self, requests):
            time.sleep(0.02)  # widen the window in which other threads see the key in flight
            return super().generate(requests)

    backend = Slow(answer_for)
    client = client_for(backend, ledger(), run_id="threads")
    barrier = threading.Barrier(6)
    outputs: list = [None] * 6

    def work(i: int) -> None:
        barrier.wait()
        order = WORKLOAD if i % 2 == 0 else list(reversed(WORKLOAD))
        res = client.complete_many(order)
        outputs[i] = {r.messages[-1].content: x.text for r, x in zip(order, res)}

    assert run_threads(work, 6) == []
    sent = [r.messages[-1].content for r in backend.requests]
    assert sorted(sent) == sorted(r.messages[-1].content for r in WORKLOAD)  # each exactly once
    assert all(o == outputs[0] for o in outputs)
    assert client.totals() == expected_totals(WORKLOAD)
    assert client.stats()["requests"] == 6 * len(WORKLOAD)


# ------------------------------------------------------------------------------- misc


def test_add_totals_and_default_run_id():
    assert add_totals({"a": {"prompt": 1, "completion": 2, "calls": 1}},
                      {"a": {"prompt": 3, "completion": 0, "calls": 2}, "b": {"prompt": 1, "completion": 1,
                                                                              "calls": 1}}) == {
        "a": {"prompt": 4, "completion": 2, "calls": 3}, "b": {"prompt": 1, "completion": 1, "calls": 1}}
    c1, c2 = LLMClient(ScriptedBackend(answer_for)), LLMClient(ScriptedBackend(answer_for))
    assert c1.run_id != c2.run_id


def test_progress_bar_counts_requests(capsys):
    with LLMClient(ScriptedBackend(answer_for), progress=True) as client:
        client.complete_many([q("question 1"), q("question 2")])
    assert "2" in capsys.readouterr().err


def test_child_clients_split_tokens_per_sub_run_and_keep_parent_exact(tmp_path):
    store = MemoryStore(tmp_path / "s.sqlite")
    backend = ScriptedBackend(answer_for)
    parent = LLMClient(backend, store, run_id="run")
    a, b = parent.child("run/q1"), parent.child("run/q2")
    a.complete(q("question 1"))
    b.complete(q("question 1"))  # hit: zero new tokens, but used by q2 as well
    b.complete(q("question 2"))
    one = prompt_tokens("question 1")
    two = prompt_tokens("question 2")
    assert a.totals()["answer"]["prompt"] == one
    assert b.totals()["answer"]["prompt"] == one + two
    # The parent counts each unique call once, whichever child made it.
    assert parent.totals()["answer"]["prompt"] == one + two
    assert parent.totals()["answer"]["calls"] == 2
    assert len(backend.requests) == 2
    store.close()


# ------------------------------------------------------------------ streamed batches (issue 16.4)


class _StreamingBackend:
    """Answers through ``iter_generate``, one request at a time; stops with ``interrupt`` after
    ``stop_after`` responses (the batch is cut short the way Ctrl-C cuts it)."""

    def __init__(self, stop_after: int | None = None, interrupt: type[BaseException] = KeyboardInterrupt,
                 fail: set[int] = frozenset()):
        self.stop_after = stop_after
        self.interrupt = interrupt
        self.fail = set(fail)
        self.sent: list[str] = []

    def identity(self):
        return {"backend": "streaming-test", "model": "m"}

    def generate(self, requests):  # pragma: no cover - the client must prefer iter_generate
        raise AssertionError("a backend with iter_generate is streamed")

    def iter_generate(self, requests):
        for i, r in enumerate(requests):
            if self.stop_after is not None and len(self.sent) >= self.stop_after:
                raise self.interrupt("stopped")
            user = r.messages[-1].content
            self.sent.append(user)
            if i in self.fail:
                yield i, TransportError("one request failed", retryable=True)
            else:
                yield i, LLMResponse(text=f"reply to {user}", prompt_tokens=3, completion_tokens=2)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_batch_keeps_the_responses_it_finished(tmp_path, interrupt):
    store = MemoryStore(tmp_path / "s.sqlite")
    batch = [q(f"question {i}") for i in range(16)]
    first = LLMClient(_StreamingBackend(stop_after=5, interrupt=interrupt), store)
    if interrupt is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            first.complete_many(batch)
    else:  # a backend crash mid-batch: the finished five are answered, the rest are errors
        out = first.complete_many(batch)
        assert [r.text for r in out[:5]] == [f"reply to question {i}" for i in range(5)]
        assert all(isinstance(r, ModelError) for r in out[5:])
    # A fresh client (a rerun) finds the five finished responses in the cache.
    backend = _StreamingBackend()
    again = LLMClient(backend, store).complete_many(batch)
    assert [r.cached for r in again] == [True] * 5 + [False] * 11
    assert backend.sent == [f"question {i}" for i in range(5, 16)]
    assert [r.text for r in again] == [f"reply to question {i}" for i in range(16)]


def test_a_failed_request_in_a_streamed_batch_fails_alone(tmp_path):
    store = MemoryStore(tmp_path / "s.sqlite")
    client = LLMClient(_StreamingBackend(fail={2}), store)
    out = client.complete_many([q(f"question {i}") for i in range(4)])
    assert isinstance(out[2], TransportError)
    assert [out[i].text for i in (0, 1, 3)] == ["reply to question 0", "reply to question 1", "reply to question 3"]
    assert client.waste_totals()["answer"]["calls"] == 1


def test_an_openai_server_batch_keeps_the_responses_that_finished(tmp_path):
    """Real HTTP on 127.0.0.1: one request of four fails; the three others are cached at once."""
    pytest.importorskip("openai")
    from _fake_openai import FakeOpenAIServer, Reply, chat_body

    from memcompile_local.adapters.openai_compat import OpenAICompatBackend

    def reply(path, body, hit):
        user = body["messages"][-1]["content"]
        if user == "question 1":
            return Reply(400, {"error": {"message": "no"}})
        return Reply(body=chat_body(f"reply to {user}"), delay=0.05)

    store = MemoryStore(tmp_path / "s.sqlite")
    batch = [q(f"question {i}") for i in range(4)]
    with FakeOpenAIServer(reply) as srv:
        backend = OpenAICompatBackend("fake-model", base_url=srv.base_url, max_retries=0, timeout=10.0,
                                      concurrency=4)
        out = LLMClient(backend, store).complete_many(batch)
        assert isinstance(out[1], TransportError)
        assert [out[i].text for i in (0, 2, 3)] == ["reply to question 0", "reply to question 2",
                                                     "reply to question 3"]
        sent = len(srv.requests)
        again = LLMClient(backend, store).complete_many(batch)
        assert [r.cached for r in again if not isinstance(r, ModelError)] == [True, True, True]
        assert len(srv.requests) == sent + 1  # only the failed request is asked again
