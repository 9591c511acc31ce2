"""LongMemEval haystacks share sessions under dates of their own: a run extracts a repeated turn
once (its template bound to each date) and links repeated vectors, and everything it stores and
selects equals building every question alone."""

from __future__ import annotations

import json

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.address import extract_memo
from memcompile_local.address.extract_memo import MemoizedExtractor, conversation_turn_keys, reuse_plan
from memcompile_local.address.extract_rule import RuleExtractor
from memcompile_local.bench.runner import EvalRunner, EvalSpec, read_jsonl
from memcompile_local.config import PipelineConfig
from memcompile_local.data import load_longmemeval
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import open_store
from memcompile_local.types import SourcePacket, content_sha256

from _lme_synth import longmemeval_file


def run(tmp_path, name: str, data, **kw) -> dict:
    spec = EvalSpec(benchmark="longmemeval", data=str(data), store=str(tmp_path / f"{name}.sqlite"),
                    out=str(tmp_path / name), progress=False, answer=False, **kw)
    cfg = apply_preset("model-free", PipelineConfig())
    return EvalRunner(spec, cfg, embedder=HashEmbedder(dim=64), echo=lambda s: None).run()


def stored(tmp_path, name: str) -> dict:
    store = open_store(str(tmp_path / f"{name}.sqlite"))
    try:
        dset = RuleExtractor(PipelineConfig().extraction).descriptor_set
        return {ns: store.descriptors(ns, dset) for ns in store.namespaces()}
    finally:
        store.close()


def rows(tmp_path, name: str) -> dict:
    return {r["question_id"]: (r["selected_ids"], r["recall_stages"], r["gold_evidence"])
            for r in read_jsonl(tmp_path / name / "predictions.jsonl")}


def test_a_run_over_shared_sessions_equals_building_every_question_alone(tmp_path):
    data = longmemeval_file(tmp_path / "lme.json", 9)
    convs = load_longmemeval(data)
    slots = [s.session_id for c in convs for s in c.sessions]
    assert len(set(slots)) < len(slots)  # the fixture shares sessions across questions...
    dates = {}
    for c in convs:
        for s in c.sessions:
            dates.setdefault(s.session_id, set()).add(s.time)
    repeated = [sid for sid in dates if slots.count(sid) > 1]
    assert repeated and all(len(dates[sid]) > 1 for sid in repeated)  # ...under other dates

    extract_memo.forget_memo()
    shared = run(tmp_path, "shared", data)
    assert extract_memo.memo_size() == 0  # the plan's entries leave with it
    build = shared["build"]
    turns = sum(len(s.turns) for c in convs for s in c.sessions)
    assert build["turns"] == build["extracted"] == turns
    assert build["extracted_fresh"] < turns  # repeats were bound, not extracted
    assert build["embedded"] < build["documents"]  # repeated texts (context documents) were linked

    alone_rows: dict = {}
    alone_desc: dict = {}
    for c in convs:
        qid = c.questions[0].question_id
        one = tmp_path / f"{qid}.json"
        one.write_text(json.dumps([q for q in json.loads(data.read_text()) if q["question_id"] == qid]))
        extract_memo.forget_memo()  # nothing carried over from another question
        run(tmp_path, f"alone-{qid}", one)
        alone_rows.update(rows(tmp_path, f"alone-{qid}"))
        alone_desc.update(stored(tmp_path, f"alone-{qid}"))
    assert rows(tmp_path, "shared") == alone_rows
    assert stored(tmp_path, "shared") == alone_desc
    # recall, from the same rows, is the same too
    assert shared["metrics"]["recall"] == run(tmp_path, "shared", data)["metrics"]["recall"]


def packet(i: int, text: str, time: str, ns: str = "n") -> SourcePacket:
    return SourcePacket(namespace=ns, packet_id=f"p{i}", ordinal=i, session_index=1, session_id="s1",
                        session_time=time, speaker="user", content=text, image_caption=None,
                        sha256=content_sha256(text))


def test_a_reuse_plan_keeps_only_planned_repeats_until_their_last_use():
    extract_memo.forget_memo()
    memo = MemoizedExtractor(RuleExtractor())
    texts = ["I moved to Porto last March.", "My dentist is on Rua Augusta.", "I sold the old van yesterday."]
    keys = [extract_memo.turn_key("user", t, None, None, None) for t in texts]
    # text 0 comes three times, text 1 twice, text 2 once
    with reuse_plan([keys[0]] * 3 + [keys[1]] * 2 + [keys[2]]):
        memo.extract([(packet(0, texts[0], "2023/05/01 (Mon) 10:00"), None)])
        memo.extract([(packet(1, texts[2], "2023/05/01 (Mon) 10:00"), None)])
        assert extract_memo.memo_size() == 1  # text 2 comes once: not kept
        memo.extract([(packet(2, texts[1], "2023/05/03 (Wed) 10:00"), None)])
        assert extract_memo.memo_size() == 2
        got = memo.extract([(packet(3, texts[0], "2024/01/09 (Tue) 10:00", ns="m"), None)])
        assert got == RuleExtractor().extract([(packet(3, texts[0], "2024/01/09 (Tue) 10:00", ns="m"), None)])
        assert got[0][0].event_time.startswith("2023-03")  # "last March", read from the new date
        memo.extract([(packet(4, texts[1], "2023/05/03 (Wed) 10:00"), None)])
        assert extract_memo.memo_size() == 1  # text 1's last use
        memo.extract([(packet(5, texts[0], "2023/05/01 (Mon) 10:00"), None)])
        assert extract_memo.memo_size() == 0
    assert memo.misses == 3 and memo.hits == 3


def test_conversation_turn_keys_are_the_keys_of_the_stored_packets(tmp_path):
    conv = load_longmemeval(longmemeval_file(tmp_path / "lme.json", 3))[2]
    store = open_store(str(tmp_path / "k.sqlite"))
    try:
        store.ingest(conv)
        packets = store.packets(conv.namespace)
    finally:
        store.close()
    built = [extract_memo.turn_key(p.speaker, p.content, p.image_caption, p.image_query,
                                   RuleExtractor.addressee(p, packets[i - 1] if i else None))
             for i, p in enumerate(packets)]
    assert list(conversation_turn_keys(conv)) == built
    assert any(k[4] is not None for k in built) and built[0][4] is None
