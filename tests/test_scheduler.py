"""Closed-pool listwise scheduler: request format, validation, correction retries, later rounds."""

from __future__ import annotations

import json

import pytest

from memcompile_local.adapters.scripted import ScriptedBackend
from memcompile_local.errors import DataFormatError, TransportError
from memcompile_local.evidence.prompts import ANCHOR_SCHEDULER, FRONTIER_SELECTOR
from memcompile_local.evidence.scheduler import render_candidate, schedule_packets
from memcompile_local.llm.validate import ranking_problems
from memcompile_local.llm.client import LLMClient
from memcompile_local.llm.interface import RankingSpec
from memcompile_local.types import SourcePacket, content_sha256


def _packet(i: int, text: str | None = None, caption: str | None = None,
            speaker: str = "Ana") -> SourcePacket:
    text = text if text is not None else f"turn number {i} about topic {i}"
    return SourcePacket(
        namespace="ns", packet_id=f"D1:{i}", ordinal=i, session_index=1, session_id="session_1",
        session_time="8 May 2023", speaker=speaker, content=text, image_caption=caption,
        sha256=content_sha256(text, caption),
    )


def _pool(n: int) -> list[SourcePacket]:
    return [_packet(i) for i in range(1, n + 1)]


def _ranking(*labels) -> str:
    return json.dumps({"ranked_candidate_ids": list(labels)})


class Replies:
    """Scripted callable: answers the n-th scheduler request with the n-th reply (last repeats)."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.n = 0

    def __call__(self, request):
        reply = self.replies[min(self.n, len(self.replies) - 1)]
        self.n += 1
        return reply


def _run(pool, k, *replies, **kw):
    backend = ScriptedBackend(Replies(*replies))
    client = LLMClient(backend)
    res = schedule_packets(client, "When did Ana go hiking?", pool, k=k, namespace="ns", **kw)
    return res, backend.requests


def _last_user(request) -> str:
    return [m.content for m in request.messages if m.role == "user"][-1]


def test_valid_first_answer_maps_labels_to_packets_and_renders_the_pool():
    pool = [_packet(1, 'she said "hi"\nthen left'), _packet(2, caption="a dog on a beach"), *_pool(5)[2:]]
    res, requests = _run(pool, 3, _ranking("C004", "C002", "C005"))
    assert res.packet_ids == ("D1:4", "D1:2", "D1:5")
    assert (res.attempts, res.rounds, res.repaired) == (1, 1, False)
    (req,) = requests
    assert req.stage == "schedule"
    assert req.namespace == "ns"
    assert req.output == RankingSpec(labels=("C001", "C002", "C003", "C004", "C005"), k=3)
    assert req.messages[0].content == ANCHOR_SCHEDULER.system
    user = req.messages[1].content
    assert "When did Ana go hiking?" in user
    assert "exactly 3 distinct labels" in user
    lines = [line for line in user.splitlines() if line.startswith("[C")]
    assert len(lines) == 5
    assert lines[0] == ('[C001] dia_id=D1:1 speaker=Ana recorded_date=8 May 2023 '
                        'content="she said \\"hi\\"\\nthen left"')
    assert lines[1].endswith('content="turn number 2 about topic 2 [shared image: a dog on a beach]"')
    assert [line[:6] for line in lines] == ["[C001]", "[C002]", "[C003]", "[C004]", "[C005]"]


def test_duplicates_are_corrected_in_the_same_conversation():
    pool = _pool(6)
    res, requests = _run(pool, 3, _ranking("C002", "C002", "C001"), _ranking("C002", "C006", "C001"))
    assert res.packet_ids == ("D1:2", "D1:6", "D1:1")
    assert (res.attempts, res.rounds, res.repaired) == (2, 1, True)
    second = requests[1]
    roles = [m.role for m in second.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert second.messages[2].content == _ranking("C002", "C002", "C001")
    correction = second.messages[3].content
    assert "duplicates C002" in correction and "exactly 3" in correction
    assert res.trace[0]["valid"] is False and res.trace[1]["valid"] is True


def test_unknown_labels_exhaust_retries_then_a_second_round_fills_the_gap():
    pool = _pool(5)
    bad = _ranking("C001", "C009", "C002")
    res, requests = _run(pool, 3, bad, bad, bad, bad, _ranking("C002"))
    # Round 1: 1 + 3 retries, keep C001, C002 (valid, in order). Round 2: remaining D1:3..D1:5
    # relabelled C001..C003, one more wanted; "C002" there is D1:4.
    assert res.packet_ids == ("D1:1", "D1:2", "D1:4")
    assert (res.attempts, res.rounds, res.repaired) == (5, 2, True)
    assert "unknown labels C009" in _last_user(requests[1])
    assert len(requests[3].messages) == 8  # system, user, then three (assistant, correction) pairs
    last = requests[4]
    assert last.output == RankingSpec(labels=("C001", "C002", "C003"), k=1)
    assert "exactly 1 distinct label " in _last_user(last)
    assert "dia_id=D1:4" in [line for line in _last_user(last).splitlines() if line.startswith("[C002]")][0]
    assert "D1:1" not in _last_user(last) and "D1:2" not in _last_user(last)


def test_too_few_labels_then_later_round():
    pool = _pool(6)
    res, _ = _run(pool, 3, _ranking("C003"), _ranking("C003"), _ranking("C003"), _ranking("C003"),
                  _ranking("C001", "C004"))
    # Round 2 pool: D1:1, D1:2, D1:4, D1:5, D1:6 -> C001=D1:1, C004=D1:5.
    assert res.packet_ids == ("D1:3", "D1:1", "D1:5")
    assert (res.attempts, res.rounds) == (5, 2)
    assert "count 1 instead of 3" in res.trace[0]["problems"]


def test_too_many_labels_are_truncated_after_the_last_retry():
    pool = _pool(6)
    many = _ranking("C005", "C001", "C002", "C003")
    res, requests = _run(pool, 2, many)
    assert res.packet_ids == ("D1:5", "D1:1")
    assert (res.attempts, res.rounds, res.repaired) == (4, 1, True)
    assert "count 4 instead of 2" in _last_user(requests[1])


def test_max_retries_zero_means_a_single_attempt_per_round():
    pool = _pool(4)
    res, _ = _run(pool, 2, _ranking("C004", "C004"), _ranking("C001"), max_retries=0)
    assert res.packet_ids == ("D1:4", "D1:1")
    assert (res.attempts, res.rounds) == (2, 2)


def test_unparseable_replies_fall_back_to_pool_order_and_are_traced():
    pool = _pool(5)
    res, _ = _run(pool, 3, "I think the best ones are the first three.")
    assert res.packet_ids == ("D1:1", "D1:2", "D1:3")
    assert (res.attempts, res.rounds, res.repaired) == (4, 1, True)
    assert res.trace[-1] == {"round": 1, "fill": ["D1:1", "D1:2", "D1:3"], "stage": "schedule"}


def test_target_is_capped_by_pool_size_and_empty_pool_makes_no_call():
    pool = _pool(2)
    res, requests = _run(pool, 10, _ranking("C002", "C001"))
    assert res.packet_ids == ("D1:2", "D1:1")
    assert requests[0].output.k == 2
    res, requests = _run([], 10, _ranking("C001"))
    assert res.packet_ids == () and res.attempts == 0 and requests == []


def test_frontier_stage_uses_its_own_prompt():
    pool = _pool(4)
    res, requests = _run(pool, 2, _ranking("C003", "C001"), stage="frontier")
    assert requests[0].stage == "frontier"
    assert requests[0].messages[0].content == FRONTIER_SELECTOR.system
    assert res.packet_ids == ("D1:3", "D1:1")


def test_cache_identity_binds_pool_order_and_content():
    pool = _pool(4)
    _, r1 = _run(pool, 2, _ranking("C001", "C002"))
    _, r2 = _run(list(reversed(pool)), 2, _ranking("C001", "C002"))
    changed = [*pool[:3], _packet(4, "different words")]
    _, r3 = _run(changed, 2, _ranking("C001", "C002"))
    versions = {r1[0].prompt_version, r2[0].prompt_version, r3[0].prompt_version}
    assert len(versions) == 3
    assert all(v.startswith(ANCHOR_SCHEDULER.version + "|") for v in versions)
    # Same inputs -> the same request, answered from the client's cache the second time.
    backend = ScriptedBackend(Replies(_ranking("C002", "C001")))
    client = LLMClient(backend)
    a = schedule_packets(client, "q?", pool, k=2)
    b = schedule_packets(client, "q?", pool, k=2)
    assert a.packet_ids == b.packet_ids and backend.calls == 1
    assert b.trace[0]["cached"] is True


def test_bad_pool_and_transport_errors():
    pool = _pool(3)
    with pytest.raises(DataFormatError):
        _run([pool[0], pool[1], pool[0]], 2, _ranking("C001", "C002"))
    with pytest.raises(ValueError):
        _run(pool, -1, _ranking("C001"))
    backend = ScriptedBackend(lambda r: TransportError("down", retryable=True))
    with pytest.raises(TransportError):
        schedule_packets(LLMClient(backend), "q?", pool, k=2)


def test_ranking_problems_messages():
    labels = ["C001", "C002", "C003"]
    assert ranking_problems(["C001", "C002"], labels, 2) == []
    probs = ranking_problems(["C001", "C001", "C007"], labels, 2)
    assert probs == ["unknown labels C007", "duplicates C001", "count 3 instead of 2"]
    assert ranking_problems(None, labels, 2)[0].startswith("the reply was not")


def test_render_candidate_truncates_long_content():
    line = render_candidate("C001", _packet(1, "x" * 50), max_content_chars=10)
    assert line.endswith('content="xxxxxxxxx…"')
