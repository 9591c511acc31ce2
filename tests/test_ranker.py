"""The learned ranker of the fused selector (issue 25 item 5): the model file, the numpy tree
evaluator, the typed loading errors, and Memory.compile with ``fusion.ranker: learned`` on a
user-assistant chat written for these tests (tests/fixtures/ranker_chat.json)."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from _data_paths import PLAIN_TURN_MODEL
from memcompile_local import Memory, PipelineConfig
from memcompile_local.fused.documents import plain_turn_text
from memcompile_local.fused.features import FEATURE_NAMES, query_features
from memcompile_local.fused.ranker import (DEFAULT_MODEL, RankerModelError, load_model, ordered_total,
                                           parse_model)
from memcompile_local.fused.retriever import FusedRetriever, select_rows
from memcompile_local.pipeline.compile import query_intent
from memcompile_local.pipeline.presets import apply_preset

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "ranker_chat.json").read_text(encoding="utf-8"))
F = len(FEATURE_NAMES)


def _doc(trees, **over) -> dict:
    doc = {"format": "memcompile-ranker", "format_version": 1, "kind": "trees", "features": list(FEATURE_NAMES),
           "pool": 20, "trees": trees, "init_score": {"feature": "fused", "scale": 0.0}, "training": {}}
    doc.update(over)
    return doc


# Tree 0: lexical <= 0.5 -> leaf 1.0; else packet <= 0.3 (NaN goes left) -> 2.0, else 3.0.
# Tree 1: a single leaf, 0.25.
HAND_TREES = [
    {"feature": [0, 3], "threshold": [0.5, 0.3], "left": [-1, -2], "right": [1, -3],
     "default_left": [False, True], "missing": ["None", "NaN"], "leaf_value": [1.0, 2.0, 3.0]},
    {"feature": [], "threshold": [], "left": [], "right": [], "default_left": [], "missing": [], "leaf_value": [0.25]},
]


def _rows(pairs) -> np.ndarray:
    X = np.zeros((len(pairs), F))
    X[:, 0] = [a for a, _ in pairs]
    X[:, 3] = [b for _, b in pairs]
    return X


def test_the_evaluator_walks_a_hand_written_tree_file():
    model = parse_model(_doc(HAND_TREES))
    X = _rows([(0.2, 0.9), (0.5, 0.9), (0.9, 0.1), (0.9, 0.3), (0.9, 0.8), (0.9, np.nan), (np.nan, 0.8)])
    # A value equal to the threshold goes left; NaN takes the default way under "NaN" and is
    # read as 0 under "None" (LightGBM's rules).
    assert model.predict(X).tolist() == [1.25, 1.25, 2.25, 2.25, 3.25, 2.25, 1.25]


def test_the_init_score_adds_the_weighted_sum():
    model = parse_model(_doc(HAND_TREES, init_score={"feature": "fused", "scale": 2.0}))
    X = _rows([(0.2, 0.9)])
    X[0, FEATURE_NAMES.index("fused")] = 1.5
    assert model.predict(X).tolist() == [1.25 + 3.0]


def test_a_linear_model_file():
    lin = {"mean": [0.0] * F, "scale": [2.0] * F, "coef": [1.0] + [0.0] * (F - 1), "intercept": 0.5}
    model = parse_model(_doc(None, kind="linear", linear=lin))
    assert model.predict(_rows([(4.0, 0.0)])).tolist() == [2.5]


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(format_version=2), "format_version"),
    (lambda d: d.update(format="something-else"), "format"),
    (lambda d: d.update(features=list(FEATURE_NAMES) + ["tomorrow_cos"]), "features"),
    (lambda d: d.update(features=list(FEATURE_NAMES) + ["fused"]), "features"),
    (lambda d: d.update(features=[]), "features"),
    (lambda d: d.update(pool=0), "pool"),
    (lambda d: d.update(kind="forest"), "kind"),
    (lambda d: d["trees"][0].update(left=[-1, 5]), "trees[0].left"),
    (lambda d: d["trees"][0].update(left=[1, -2], right=[1, -3]), "trees[0].left/right"),
    (lambda d: d["trees"][0].update(feature=[0, F]), "trees[0].feature"),
    (lambda d: d["trees"][0].update(leaf_value=[1.0, 2.0]), "trees[0].leaf_value"),
    (lambda d: d["trees"][0].update(threshold=[0.5, float("nan")]), "trees[0].threshold"),
    (lambda d: d["trees"][0].update(missing=["None", "Sometimes"]), "trees[0].missing"),
    (lambda d: d.update(init_score={"feature": "nope", "scale": 1.0}), "init_score.feature"),
    (lambda d: d.update(calibration={"method": "isotonic"}), "calibration.method"),
    (lambda d: d.update(calibration={"method": "platt", "slope": "1", "intercept": 0.0}), "calibration.slope"),
    (lambda d: d.update(calibration={"method": "platt", "slope": -1.0, "intercept": 0.0}), "calibration.slope"),
    (lambda d: d.update(calibration={"method": "platt", "slope": 1.0}), "calibration.intercept"),
])
def test_a_malformed_model_file_names_the_file_and_the_field(tmp_path, change, field):
    doc = _doc(copy.deepcopy(HAND_TREES))
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(RankerModelError) as e:
        load_model(path)
    assert e.value.field == field and e.value.path == str(path)
    assert str(path) in str(e.value) and repr(field) in str(e.value) and "expected" in str(e.value)


def test_a_model_reads_its_own_columns_by_name():
    # A file of fewer columns (a model trained before a column was added, as ranker-v2 before
    # raw_cos) or of another order reads exactly the columns it names from query_features' matrix.
    names = ["packet", "fused", "lexical"]
    trees = copy.deepcopy(HAND_TREES)
    trees[0]["feature"] = [2, 0]  # lexical, then packet: the hand tree on the model's own columns
    model = parse_model(_doc(trees, features=names, init_score={"feature": "fused", "scale": 2.0}))
    assert model.columns == [FEATURE_NAMES.index(f) for f in names] and model.init_feature == 1
    full = _rows([(0.9, 0.8), (0.2, 0.1)])
    full[:, FEATURE_NAMES.index("fused")] = [1.0, 0.5]
    assert model.predict(full[:, model.columns]).tolist() == [3.25 + 2.0, 1.25 + 1.0]
    with pytest.raises(RankerModelError, match="trees\\[0\\].feature"):
        parse_model(_doc(HAND_TREES, features=["lexical", "packet"]))  # feature 3 is past its two columns
    with pytest.raises(RankerModelError, match="init_score.feature"):
        parse_model(_doc(HAND_TREES, features=list(FEATURE_NAMES[:5])))  # "fused" is not among them


def test_an_unreadable_or_non_json_model_file(tmp_path):
    with pytest.raises(RankerModelError, match="readable model file"):
        load_model(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(RankerModelError, match="JSON"):
        load_model(tmp_path / "broken.json")


def test_the_shipped_model_file_loads_with_its_training_record():
    model = load_model()
    assert model.path == str(DEFAULT_MODEL) and model.kind == "trees"
    t = model.training
    assert t["library"] == "lightgbm" and t["command"].startswith("python scripts/train_ranker.py")
    assert len(t["data_sha256"]) == 64 and set(t["cv"]) == {"locomo", "realtalk", "beam", "longmemeval"}
    X = np.random.default_rng(0).random((40, F))
    assert np.array_equal(model.predict(X), model.predict(X.copy()))
    # ranker-v4 (trained on the four development corpora): ten bagged boosters of 100 trees,
    # averaged, reading the first 27 columns (every column but the plain-turn cosine), with its
    # calibration to a probability of gold.
    assert t["kind"] == "lambdarank-bagged" and len(t["params"]["seeds"]) == 10 and len(model.scorer.root) == 1000
    assert model.features == FEATURE_NAMES[:27] and model.columns == list(range(27))
    assert model.calibration is not None and model.calibration[0] > 0
    # It is the only model file the package ships: no default reads another one.
    assert sorted(f.name for f in DEFAULT_MODEL.parent.glob("*.json")) == [DEFAULT_MODEL.name]


def test_the_evaluator_equals_lightgbm_on_the_same_rows():
    lgb = pytest.importorskip("lightgbm", reason="lightgbm (the train extra) is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from train_ranker import flatten

    rng = np.random.default_rng(7)
    X = rng.random((600, F))
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values take each split's default way
    y = (X[:, 0] + 0.5 * np.nan_to_num(X[:, 3]) + 0.2 * rng.random(600) > 0.9).astype(float)
    booster = lgb.train({"objective": "lambdarank", "num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1,
                         "deterministic": True, "num_threads": 1, "seed": 0},
                        lgb.Dataset(X, y, group=[30] * 20), num_boost_round=25)
    model = parse_model(_doc([flatten(t["tree_structure"]) for t in booster.dump_model()["tree_info"]]))
    rows = rng.random((200, F))
    rows[::7, 0] = np.nan
    assert np.allclose(model.predict(rows), booster.predict(rows, raw_score=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("leaves", [7, 40, 90])
def test_the_bitmask_evaluation_equals_the_walk_and_lightgbm(leaves):
    """Trees of up to 64 leaves are scored by bitmasks (uint8 / uint64 here); larger ones by
    walking; both must give LightGBM's sums, missing values included."""
    lgb = pytest.importorskip("lightgbm", reason="lightgbm (the train extra) is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from train_ranker import flatten

    rng = np.random.default_rng(leaves)
    X = rng.random((3000, F))
    X[rng.random(X.shape) < 0.05] = np.nan
    X[rng.random(X.shape) < 0.2] = 0.0  # zeros, so some splits get missing_type Zero
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 3]) * np.nan_to_num(X[:, 7]) + 0.3 * rng.random(3000)
         > 0.8).astype(float)
    booster = lgb.train({"objective": "lambdarank", "num_leaves": leaves, "min_data_in_leaf": 3, "verbose": -1,
                         "deterministic": True, "num_threads": 1, "seed": 0, "zero_as_missing": leaves == 40},
                        lgb.Dataset(X, y, group=[50] * 60), num_boost_round=30)
    model = parse_model(_doc([flatten(t["tree_structure"]) for t in booster.dump_model()["tree_info"]]))
    widest = model.scorer.leaf_value.shape[1]
    assert widest == leaves and (model.scorer.right_mask is None) == (leaves > 64)
    assert set(np.unique(model.scorer.missing)) == ({1} if leaves == 40 else {2})
    rows = rng.random((257, F))
    rows[::5, 3] = np.nan
    rows[::3, 7] = 0.0
    want = booster.predict(rows, raw_score=True)
    assert np.allclose(model.predict(rows), want, rtol=0, atol=1e-12)
    walk = dataclasses.replace(model.scorer, right_mask=None, leaf_at=None)
    assert np.allclose(walk.predict(rows), want, rtol=0, atol=1e-12)


def test_ordered_total_keeps_the_rankers_order_then_the_weighted_tail():
    order = np.asarray([3, 0, 2, 1, 4])
    total = ordered_total(5, order[:3], np.asarray([0.1, 0.9, 0.1]), order)
    # Row 0 first; rows 3 and 2 tie and keep their weighted order; then 1, 4.
    assert np.lexsort((np.arange(5), -total)).tolist() == [0, 3, 2, 1, 4]


# ----------------------------------------------------------------------------- Memory.compile


RANKER_V3 = PLAIN_TURN_MODEL  # a model that reads the plain-turn columns (the shipped one does not)


def _cfg(ranker: str, model: Path | None = None) -> PipelineConfig:
    cfg = apply_preset("model-free", PipelineConfig())
    return dataclasses.replace(cfg, fusion=dataclasses.replace(
        cfg.fusion, ranker=ranker, ranker_model=str(model) if model else None))


@pytest.fixture(scope="module")
def learned():
    with Memory(":memory:", _cfg("learned")) as mem:
        mem.add(FIXTURE["namespace"], FIXTURE["sessions"])
        mem.build(FIXTURE["namespace"])
        yield mem


def _ids(mem, question: str) -> list[str]:
    return list(mem.compile(FIXTURE["namespace"], question).packet_ids)


def test_compile_with_the_learned_ranker_is_sensible_and_stable(learned):
    questions = [q["question"] for q in FIXTURE["questions"]]
    first = {q: _ids(learned, q) for q in questions}
    assert first == {q: _ids(learned, q) for q in questions}
    # Every question's evidence is among its first two picks. The weighted sum puts it first;
    # the learned ranker may put the assistant's reply that repeats the fact ("Snails love young
    # lettuce") before the user's own report (ranker-v2 did on two of the six).
    assert all(set(first[q["question"]][:2]) & set(q["evidence"]) for q in FIXTURE["questions"]), first
    assert sum(first[q["question"]][0] in q["evidence"] for q in FIXTURE["questions"]) >= 4, first


def test_sixteen_threads_select_what_one_thread_selects(learned):
    questions = [q["question"] for q in FIXTURE["questions"]] * 8
    serial = [_ids(learned, q) for q in questions]
    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(lambda q: _ids(learned, q), questions)) == serial


def test_the_training_scripts_features_give_what_compile_selects(learned):
    """The training script scores a question from ``query_features`` and the model (as below);
    Memory.compile must select the same turns."""
    cfg = learned.config
    view = learned.view(FIXTURE["namespace"])
    retriever = FusedRetriever(view.fusion, cfg.fusion, view.packets)
    model = load_model()
    for q in FIXTURE["questions"]:
        intent = query_intent(q["question"], cfg, None, view)
        qvec = retriever.query_vector(learned.embedder, q["question"], intent.lexical_query())
        qf = query_features(view.fusion, view.packets, q["question"], qvec, cfg.fusion, model.pool)
        assert qf.matrix.shape == (min(model.pool, len(view.packets)), F) and np.isfinite(qf.matrix).all()
        total = ordered_total(len(view.packets), qf.rows, model.predict(qf.matrix[:, model.columns]), qf.order)
        rows = select_rows(view.fusion, q["question"], total, qvec, cfg.fusion, cfg.evidence.k0)
        assert [view.packets[i].packet_id for i in rows] == _ids(learned, q["question"])


def test_the_raw_cos_columns_read_each_turns_plain_text_vector():
    """raw_cos is the query vector's cosine with the turn's plain text embedded alone (the plain
    dense baseline's document), raw_cos_gap that minus the question's best; under a model that
    reads them the plain vectors are built and stored with the memory, and an index without them
    reads zeros."""
    with Memory(":memory:", _cfg("learned", RANKER_V3)) as mem:
        mem.add(FIXTURE["namespace"], FIXTURE["sessions"])
        mem.build(FIXTURE["namespace"])
        _check_raw_cos(mem)
        questions = [q["question"] for q in FIXTURE["questions"]]
        # Compile with that model is what its features and weights select, and stable.
        assert [_ids(mem, q) for q in questions] == [_ids(mem, q) for q in questions]
    # The shipped ranker-v4 reads no plain-turn cosine, so its builds embed no plain turn.
    with Memory(":memory:", _cfg("learned")) as mem:
        mem.add(FIXTURE["namespace"], FIXTURE["sessions"])
        mem.build(FIXTURE["namespace"])
        assert mem.view(FIXTURE["namespace"]).fusion.raw_matrix is None


def _check_raw_cos(learned):
    cfg = learned.config
    view = learned.view(FIXTURE["namespace"])
    raw = view.fusion.raw_matrix
    want = np.asarray(learned.embedder.embed([plain_turn_text(p) for p in view.packets]), dtype=np.float32)
    assert raw is not None and raw.shape == want.shape and np.allclose(raw, want, atol=1e-6)
    assert not np.allclose(raw, view.fusion.packet_matrix, atol=1e-3)  # not z(p): no speaker, no claims
    q = FIXTURE["questions"][0]["question"]
    intent = query_intent(q, cfg, None, view)
    qvec = FusedRetriever(view.fusion, cfg.fusion, view.packets).query_vector(learned.embedder, q,
                                                                               intent.lexical_query())
    qf = query_features(view.fusion, view.packets, q, qvec, cfg.fusion, 8)
    cos = (raw @ qvec).astype(np.float64)
    col, gap = FEATURE_NAMES.index("raw_cos"), FEATURE_NAMES.index("raw_cos_gap")
    assert np.array_equal(qf.matrix[:, col], cos[qf.rows])
    assert np.allclose(qf.matrix[:, gap], cos[qf.rows] - cos.max()) and qf.matrix[:, gap].max() <= 0
    bare = dataclasses.replace(view.fusion, raw_matrix=None)
    assert not query_features(bare, view.packets, q, qvec, cfg.fusion, 8).matrix[:, [col, gap]].any()


def test_the_learned_ranker_needs_the_packets(learned):
    view = learned.view(FIXTURE["namespace"])
    with pytest.raises(Exception, match="packets"):
        FusedRetriever(view.fusion, learned.config.fusion).scores("Who is allergic to cats?", None)


def test_the_package_reads_the_model_without_the_training_libraries():
    import subprocess
    code = ("import sys, numpy as np; from memcompile_local.fused.ranker import load_model; "
            "m = load_model(); m.predict(np.zeros((3, len(m.features)))); "
            "print(sorted(x for x in ('lightgbm', 'sklearn') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.stdout.strip() == "[]"


def _train_ranker():
    pytest.importorskip("lightgbm", reason="lightgbm (the train extra) is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import train_ranker
    return train_ranker


# ----------------------------------------------------------------------------- ranker "auto"


def _selections(ranker: str, sessions) -> dict[str, list[str]]:
    with Memory(":memory:", _cfg(ranker)) as mem:
        mem.add(FIXTURE["namespace"], sessions)
        mem.build(FIXTURE["namespace"])
        return {q["question"]: _ids(mem, q["question"]) for q in FIXTURE["questions"]}


def _two_people(sessions):
    """The fixture as a chat between two people: "assistant" renamed, nothing else changed."""
    return [dict(s, turns=[dict(t, speaker="Ines" if t["speaker"] == "assistant" else "Tomas")
                           for t in s["turns"]]) for s in sessions]


def test_auto_is_the_learned_ranker_on_a_user_assistant_history_and_the_weighted_sum_on_alternating_people():
    with_assistant = {r: _selections(r, FIXTURE["sessions"]) for r in ("auto", "learned", "weighted")}
    assert with_assistant["auto"] == with_assistant["learned"]
    assert with_assistant["learned"] != with_assistant["weighted"]  # else this test could not tell them apart
    people = {r: _selections(r, _two_people(FIXTURE["sessions"])) for r in ("auto", "learned", "weighted")}
    assert people["auto"] == people["weighted"]
    assert PipelineConfig().fusion.ranker == "auto"


def _in_bursts(sessions):
    """The two-person chat with every pair of turns sent by one person (Tomas, Tomas, Ines, Ines,
    ...), as messaging-app chats are written: half the turns follow their own speaker."""
    return [dict(s, turns=[dict(t, speaker="Tomas" if (i // 2) % 2 == 0 else "Ines") for i, t in enumerate(s["turns"])])
            for s in _two_people(sessions)]


def test_speaker_run_share_counts_turns_that_follow_their_own_speaker_within_a_session():
    from memcompile_local.fused.index import speaker_run_share
    from memcompile_local.types import SourcePacket

    def packets(spec):  # "AB|BA": sessions split by "|", one letter per turn's speaker
        out = []
        for s, turns in enumerate(spec.split("|")):
            for who in turns:
                out.append(SourcePacket("ns", f"D{s}:{len(out)}", len(out), s, f"S{s}", "", who, "x", None, ""))
        return out

    assert speaker_run_share([]) == 0.0
    assert speaker_run_share(packets("ABAB|ABAB")) == 0.0
    # A session that opens with the speaker who closed the last one is not a burst.
    assert speaker_run_share(packets("ABAB|BABA")) == 0.0
    assert speaker_run_share(packets("AABB|ABBB")) == pytest.approx(4 / 8)


def test_auto_is_the_learned_ranker_on_a_chat_between_people_sent_in_bursts():
    from memcompile_local.fused.retriever import AUTO_BURST_SHARE, uses_learned_ranker

    bursty = _in_bursts(FIXTURE["sessions"])
    chosen = {r: _selections(r, bursty) for r in ("auto", "learned", "weighted")}
    assert chosen["learned"] != chosen["weighted"]  # else this test could not tell them apart
    assert chosen["auto"] == chosen["learned"]
    with Memory(":memory:", _cfg("auto")) as mem:
        mem.add("bursty", bursty)
        mem.add("alternating", _two_people(FIXTURE["sessions"]))
        mem.build("bursty"), mem.build("alternating")
        assert mem.view("bursty").fusion.burst_share >= AUTO_BURST_SHARE
        assert mem.view("alternating").fusion.burst_share < AUTO_BURST_SHARE
        assert uses_learned_ranker(mem.view("bursty").fusion, mem.config.fusion)
        assert not uses_learned_ranker(mem.view("alternating").fusion, mem.config.fusion)


def test_an_append_in_place_that_makes_the_history_bursty_moves_auto_to_the_learned_ranker():
    from memcompile_local.fused.retriever import uses_learned_ranker

    alternating = _two_people(FIXTURE["sessions"])
    burst = {"time": "2024-06-01 20:00", "id": "s-late",
             "turns": [{"speaker": "Tomas", "text": text, "id": f"L:{n}"} for n, text in enumerate(
                 ["back from the market", "they had the seedlings", "got four tomato plants", "and basil",
                  "the cello teacher called too", "lesson moved to thursday"] * 4)]}
    with Memory(":memory:", _cfg("auto")) as mem:
        mem.add("n", alternating)
        mem.build("n")
        assert not uses_learned_ranker(mem.view("n").fusion, mem.config.fusion)
        assert mem.add("n", [burst]).added == len(burst["turns"])  # in place
        view = mem.view("n")
        assert len(view.packets) == sum(len(s["turns"]) for s in alternating) + len(burst["turns"])
        assert view.fusion.burst_share >= 0.1
        assert uses_learned_ranker(view.fusion, mem.config.fusion)


def test_auto_reads_the_role_from_the_index_not_the_config():
    from memcompile_local.fused.retriever import uses_learned_ranker

    with Memory(":memory:", _cfg("auto")) as mem:
        mem.add("a", _two_people(FIXTURE["sessions"]))
        mem.add("b", FIXTURE["sessions"])
        mem.build("a"), mem.build("b")
        fusion = mem.config.fusion
        assert not uses_learned_ranker(mem.view("a").fusion, fusion)
        assert uses_learned_ranker(mem.view("b").fusion, fusion)
        assert not uses_learned_ranker(mem.view("b").fusion, dataclasses.replace(fusion, ranker="weighted"))


def test_a_bagged_ensemble_exports_as_one_tree_list_with_the_members_mean(tmp_path):
    tr = _train_ranker()
    n = len(tr.FEATURES)
    assert tr.FEATURES == FEATURE_NAMES[:27]  # the shipped model's columns: no plain-turn cosine
    rng = np.random.default_rng(3)
    X = rng.random((1200, n))
    y = (X[:, tr.FUSED_COL] + 0.3 * X[:, 5] + 0.3 * rng.random(1200) > 0.9).astype(float)
    groups = [40] * 30
    model = tr.LambdaRankBagged().fit(X, y, groups)
    assert len(model.boosters) == len(tr.BAGGED_SEEDS) > 1
    rows = rng.random((300, n))
    members = [b.predict(rows, raw_score=True) for b in model.boosters]
    assert not np.allclose(members[0], members[1])  # the seeds really draw different rows
    calibration = {"method": "platt", "slope": 0.5, "intercept": -2.0}
    doc = tr.export(model, tmp_path / "bagged.json", 50, {"command": "test"}, calibration)
    assert len(doc["trees"]) == sum(b.num_trees() for b in model.boosters)
    loaded = load_model(tmp_path / "bagged.json")
    want = tr.INIT_SCALE * rows[:, tr.FUSED_COL] + np.mean(members, axis=0)
    assert np.allclose(loaded.predict(rows), want, rtol=0, atol=1e-9)
    assert np.allclose(model.predict(rows), want, rtol=0, atol=1e-12)
    assert loaded.calibration == (0.5, -2.0)
    assert np.allclose(loaded.probability(want), 1 / (1 + np.exp(-(0.5 * want - 2.0))))


def test_the_calibration_recovers_a_known_logistic_curve():
    tr = _train_ranker()
    rng = np.random.default_rng(11)
    scores = rng.normal(0.0, 2.0, 40_000)
    labels = (rng.random(40_000) < 1 / (1 + np.exp(-(1.3 * scores - 2.5)))).astype(float)
    held = [(scores[i:i + 50], labels[i:i + 50]) for i in range(0, 40_000, 50)]  # 800 "questions" of 50 rows
    got = tr.calibrate(held)
    assert got["method"] == "platt" and got["rows"] == 40_000 and got["gold_rows"] == int(labels.sum())
    assert got["slope"] == pytest.approx(1.3, abs=0.05) and got["intercept"] == pytest.approx(-2.5, abs=0.08)
    for b in got["bins"]:  # a well-fit curve: predicted close to observed in every score bin
        assert abs(b["predicted"] - b["observed"]) < 0.03, b
    # The package reads it back as the model's probability.
    model = parse_model(_doc(HAND_TREES, calibration=got))
    assert model.calibration == (got["slope"], got["intercept"])


def test_a_turn_table_grown_by_appends_equals_one_made_afresh():
    """TurnTable.grown (an append in place) against TurnTable.of over the final turns, column by
    column and bit for bit: neighbours across a session that gains a turn after another session,
    positions when the last session index grows, captions, assistant turns, raw BM25 scores."""
    from memcompile_local.config import FusionConfig
    from memcompile_local.fused.features import TurnTable
    from memcompile_local.types import SourcePacket

    lines = [(1, "user", "I repotted the fig tree on the balcony", None),
             (1, "assistant", "Figs like a deep pot and a sunny corner", None),
             (2, "user", "The ferry to the island left late again", "a photo of a harbour"),
             (2, "assistant", "Late ferries are common in windy weather", None),
             (1, "user", "Back to the fig: two leaves turned yellow", None),  # session 1 again, after 2
             (3, "user", "My sister starts at the bakery on Monday", None),
             (3, "user", "She will bake rye bread and fig rolls", None),
             (5, "assistant", "", "a drawing of a kiln")]
    packets = [SourcePacket("ns", f"p{i}", i, s, f"S{s}", "2024-01-01", who, text, cap, "")
               for i, (s, who, text, cap) in enumerate(lines)]
    cfg = FusionConfig()
    for n_old in (1, 3, 4, 5):
        table = TurnTable.of(packets[:n_old], cfg)
        for end in (n_old + 1, len(packets)):
            table = table.grown(packets[:end], n_old)
            n_old = end
        fresh = TurnTable.of(packets, cfg)
        for name in ("prev_row", "next_row", "log_words", "is_assistant", "has_caption", "session_position",
                     "turn_position", "sessions"):
            got, want = getattr(table, name), getattr(fresh, name)
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        for query in (["fig"], ["ferri", "harbour"], ["bakeri", "rye", "fig"], ["kiln"], ["absent"]):
            assert np.array_equal(table.raw_lexical.scores(query), fresh.raw_lexical.scores(query))
    assert fresh.prev_row.tolist() == [-1, 0, -1, 2, -1, -1, 5, -1]
    assert fresh.next_row.tolist() == [1, -1, 3, -1, -1, 6, -1, -1]
    # Session 1's turns are rows 0, 1 and 4: their positions are row distances from row 0 over 2.
    assert fresh.turn_position.tolist() == [0.0, 0.5, 0.0, 1.0, 2.0, 0.0, 1.0, 0.0]
    assert fresh.session_position.tolist() == [0.0, 0.0, 0.25, 0.25, 0.0, 0.5, 0.5, 1.0]
    with pytest.raises(ValueError, match="not the 3 old turns"):
        TurnTable.of(packets[:2], cfg).grown(packets, 3)
