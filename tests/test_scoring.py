"""Candidate score r_i (Eq. 7) and the BM25 mapping of Appendix B.3."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from memcompile_local.address.scoring import DescriptorTerms, QueryTerms, bm25_bonus, candidate_score
from memcompile_local.config import RoutingConfig
from memcompile_local.types import Descriptor, QueryIntent

CFG = RoutingConfig()

INTENT = QueryIntent("When did Melanie buy a kiln?", people=("Melanie",), keywords=("kiln",), is_temporal=True)
KILN = Descriptor("ns:D1:1:0", "ns", "D1:1", 0, "Melanie bought a new kiln for pottery", "Melanie", 1, "t",
                  people=("Melanie",), keywords=("pottery kiln", "new kiln"), event_time="2023-05-07")


def test_query_and_descriptor_term_sets():
    q = QueryTerms.from_intent(INTENT)
    assert q.terms == frozenset({"melanie", "buy", "kiln"}) and q.people == frozenset({"melanie"}) and q.is_temporal
    d = DescriptorTerms.of(KILN)
    assert d.terms == frozenset({"melanie", "bought", "new", "kiln", "pottery"})
    assert d.keyword_terms == frozenset({"pottery", "kiln", "new"})
    assert d.people == frozenset({"melanie"}) and d.has_event_time


def test_bm25_mapping():
    assert bm25_bonus(3.0, 5.0) == pytest.approx(2 * math.log(4) / math.log(6))
    assert bm25_bonus(5.0, 5.0) == pytest.approx(2.0)
    assert bm25_bonus(0.0, 5.0) == 0.0
    assert bm25_bonus(1.0, 0.0) == 0.0 and bm25_bonus(1.0, -2.0) == 0.0


def test_candidate_score_hand_computed():
    q, d = QueryTerms.from_intent(INTENT), DescriptorTerms.of(KILN)
    b = bm25_bonus(3.0, 5.0)
    expected = 2.0 * (2 / 6) + 1.6 * (1 / 5) + 2.4 * 1.0 + 0.3 * 1 + 0.45 * (2 * math.log(4) / math.log(6))
    assert candidate_score(q, d, b, CFG) == pytest.approx(expected, abs=1e-12)
    assert candidate_score(q, d, b, CFG) == pytest.approx(4.3830015, abs=1e-6)
    # not returned by BM25, and a non-temporal query: the last two terms vanish
    plain = QueryTerms(q.terms, q.people, False)
    assert candidate_score(plain, d, 0.0, CFG) == pytest.approx(2.0 / 3 + 0.32 + 2.4)
    # temporal query but no event time on the descriptor
    untimed = DescriptorTerms.of(replace(KILN, event_time=" "))
    assert candidate_score(q, untimed, 0.0, CFG) == pytest.approx(2.0 / 3 + 0.32 + 2.4)
    # weights come from the config
    assert candidate_score(q, d, 0.0, replace(CFG, alpha_p=0.0, alpha_t=0.0)) == pytest.approx(2.0 / 3 + 0.32)
