"""The three-corpus cross-validation of research/cv_corpora.py: the protocols on hand-made
recall matrices, the shipping rule, and a whole run on the REALTALK and BEAM fixtures with
the hash embedder (builds cached: a second run builds nothing). Research code: marked
``research``, run in CI like the rest."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))

import cv_corpora  # noqa: E402
from memcompile_local.config import PipelineConfig  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402

from _data_paths import BEAM_MINI, REALTALK_MINI  # noqa: E402

pytestmark = pytest.mark.research


class Q:
    def __init__(self, ns, category):
        self.ns = ns
        self.q = type("QA", (), {"category": category})()


def test_protocols_on_hand_made_matrices():
    # corpus a: conversations x (2 questions) and y (2 questions); two grid points
    qa = [Q("x", 1), Q("x", 2), Q("y", 1), Q("y", 2)]
    Ra = np.array([[1.0, 1.0, 0.0, 0.0],    # point 0: good on x only
                   [0.5, 0.5, 0.5, 0.5]])   # point 1: even
    qb = [Q("z", "t"), Q("w", "t")]
    Rb = np.array([[0.0, 0.0], [1.0, 0.0]])
    row = cv_corpora.score_row("r", [{"p": 0}, {"p": 1}], {"a": (Ra, Ra), "b": (Rb, Rb)}, {"a": qa, "b": qb})
    a = row["corpora"]["a"]
    # in-sample: both points average 0.5 on a: the first (default) wins the tie
    assert a["in_sample"] == pytest.approx(50.0) and a["in_sample_setting"] == {"p": 0}
    # CV: held x -> fit on y picks point 1 (0.5 each on x); held y -> fit on x picks point 0 (0 on y)
    assert a["picks"] == {"x": {"p": 1}, "y": {"p": 0}}
    assert a["cv10"] == pytest.approx(100 * (0.5 + 0.5 + 0 + 0) / 4)
    assert a["folds"] == {"x": pytest.approx(50.0), "y": pytest.approx(0.0)}
    assert a["cats"] == {"1": pytest.approx(25.0), "2": pytest.approx(25.0)}
    # corpus out: a is scored with the point best on b (point 1: 0.5 mean on b)
    assert a["corpus_out"] == pytest.approx(50.0) and a["corpus_out_setting"] == {"p": 1}
    b = row["corpora"]["b"]
    assert b["corpus_out_setting"] == {"p": 0}  # tie on a: the first point
    assert b["corpus_out"] == pytest.approx(0.0)


def _row(**cv):
    return {"corpora": {c: {"cv10": v} for c, v in cv.items()}}


def test_the_shipping_rule():
    ref = _row(locomo=80.0, realtalk=50.0, beam=40.0)
    assert cv_corpora.shipping_rule(_row(locomo=80.5, realtalk=50.2, beam=40.0), ref)[0] == "ships"
    verdict, delta = cv_corpora.shipping_rule(_row(locomo=85.0, realtalk=55.0, beam=39.9), ref)
    assert verdict == "does not ship (loses on beam)" and delta["beam"] == pytest.approx(-0.1)
    assert cv_corpora.shipping_rule(_row(locomo=81.0, realtalk=50.0, beam=40.0), ref)[0] == \
        "does not ship (gains on 1)"


def test_a_run_on_the_fixtures_and_its_cache(tmp_path, capsys):
    import ablate_model_free

    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    args = argparse.Namespace(corpora="realtalk,beam", data=None, realtalk=str(REALTALK_MINI),
                              beam=str(BEAM_MINI), cache=str(tmp_path / "cache"), quiet=True, rows=None,
                              cv_json=str(tmp_path / "cv.json"))

    def rows():
        return [("component: speaker weight refit", "plain", [{}, {"speaker_weight": 0.0}]),
                ("package defaults (shipped)", "plain", [{}])]

    kw = dict(cfg=cfg, cv_rows=rows, eval_setting=ablate_model_free.eval_setting,
              default_variant=ablate_model_free.default_variant)
    assert cv_corpora.run(args, **kw) == 0
    out = capsys.readouterr().out
    assert "built 2 now" in out and "== Memory.compile on 5/5" in out and "on 7/7" in out
    assert "### REALTALK" in out and "### BEAM 100K" in out and "### The shipping rule" in out
    results = json.loads((tmp_path / "cv.json").read_text())
    assert [r["name"] for r in results][:3] == [*cv_corpora.BASELINES, "package defaults (shipped)"]
    assert results[2]["corpora"]["beam"]["n"] == 7 and results[2]["corpora"]["realtalk"]["n"] == 5
    per_q = results[2]["corpora"]["beam"]["questions"]  # what research/cv_builds.py reads
    assert len(per_q["r10"]) == len(per_q["ns"]) == 7
    assert np.mean(per_q["r10"]) * 100 == pytest.approx(results[2]["corpora"]["beam"]["cv10"])
    assert "| package defaults (shipped) |" in out and "| reference |" in out
    # a second run reuses every build
    assert cv_corpora.run(args, **kw) == 0
    assert "all cached" in capsys.readouterr().out
    assert len(list((tmp_path / "cache" / "beam").glob("*.sqlite"))) == 2


def _cv_json(path, r10: dict[str, list[float]], ns: dict[str, list[str]]):
    row = {"name": "package defaults (shipped)", "grid": 1, "corpora": {
        c: {"questions": {"ns": ns[c], "category": ["1"] * len(ns[c]), "r10": r, "r12": r}} for c, r in r10.items()}}
    path.write_text(json.dumps([{"name": "baseline", "grid": 1, "corpora": {}}, row]))
    return path


def test_cv_builds_cross_validates_one_run_per_value(tmp_path, capsys, monkeypatch):
    import cv_builds

    ns = {"locomo": ["x", "x", "y", "y"], "realtalk": ["z", "w"]}
    # value "b" is better on locomo's x and on realtalk's z, worse on locomo's y
    a = _cv_json(tmp_path / "a.json", {"locomo": [0.0, 0.0, 1.0, 1.0], "realtalk": [0.0, 0.0]}, ns)
    b = _cv_json(tmp_path / "b.json", {"locomo": [1.0, 1.0, 0.0, 0.0], "realtalk": [1.0, 0.0]}, ns)
    monkeypatch.setattr(sys, "argv", ["cv_builds.py", f"none={a}", f"c8={b}"])
    assert cv_builds.main() == 0
    out = capsys.readouterr().out
    # held x: fit on y picks "none" (x scores 0); held y: fit on x picks "c8" (y scores 0)
    assert "x none, y c8" in out
    assert "| package defaults: value chosen among none, c8 | 2 | 50.0 | 0.0 |" in out
    assert "| package defaults: none only | 1 |" in out and "| reference |" in out
    # runs that scored other questions are refused
    c = _cv_json(tmp_path / "c.json", {"locomo": [0.0, 0.0, 1.0], "realtalk": [0.0, 0.0]},
                 {"locomo": ["x", "x", "y"], "realtalk": ["z", "w"]})
    monkeypatch.setattr(sys, "argv", ["cv_builds.py", f"none={a}", f"bad={c}"])
    with pytest.raises(SystemExit, match="bad: corpus locomo scored other questions"):
        cv_builds.main()


def test_config_changes_keeps_ints_floats_and_literal_text():
    assert cv_corpora.config_changes(["ranker=weighted", "role_weight=0", "fusion.pool=40", "x.y=0.5"]) == {
        "fusion": {"ranker": "weighted", "role_weight": 0, "pool": 40}, "x": {"y": 0.5}}
