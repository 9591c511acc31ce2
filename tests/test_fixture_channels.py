"""The real-data checks of test_lexical.py and test_address_query.py, run on the shipped LoCoMo
fixture so that a clone without ../shared/data still exercises them (same helpers, smaller data)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memcompile_local.address.lexical import LexicalIndex, tokenize
from memcompile_local.config import RoutingConfig

from _data_paths import LOCOMO_MINI
from test_address_query import assert_address_consistent, dev_namespace
from test_lexical import assert_same_ranking, raw_turn_docs, reference_top

SAMPLES = json.loads(LOCOMO_MINI.read_text(encoding="utf-8"))


@pytest.mark.parametrize("which", [0, 1])
def test_bm25_matches_rank_bm25_on_fixture_turns(which):
    rank_bm25 = pytest.importorskip("rank_bm25")
    sample = SAMPLES[which]
    corpus = [tokenize(f"{speaker} {text} {caption}") for speaker, text, caption in raw_turn_docs(sample)]
    ours = LexicalIndex(corpus, k1=1.5, b=0.75)
    ref = rank_bm25.BM25Okapi(corpus, k1=1.5, b=0.75)
    checked = 0
    for qa in sample["qa"]:
        q = tokenize(qa["question"])
        theirs, ref_scores = reference_top(ref, q, 20)
        assert np.allclose(ours.scores(q), ref_scores, atol=1e-6)
        assert_same_ranking(ours.top_k(q, 20), theirs, ref_scores)
        checked += 1
    assert checked == len(sample["qa"]) >= 8


def test_address_query_is_deterministic_and_consistent_on_the_fixture():
    cfg = RoutingConfig()
    sample = SAMPLES[0]
    packets, descriptors = dev_namespace(sample)
    assert len(packets) == 36 and descriptors
    hits = assert_address_consistent(sample, sample["qa"], cfg)
    assert hits >= len(sample["qa"]) - 2  # nearly every question reaches some descriptor
