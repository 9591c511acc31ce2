"""Stored rows are type-checked on read: a bad column is named, a good row decodes."""

from __future__ import annotations

import pytest

from memcompile_local.errors import StoreError
from memcompile_local.store.codecs import descriptor_from_row

# Columns in DESCRIPTOR_COLS order.
GOOD = ("d1", "ns", "p1", 0, "Ana likes tea.", "Ana", 2, "2024-01-01", '["Ana"]', '["tea"]', "", "", 4, 0, "{}", 1)


def test_a_good_row_decodes():
    d = descriptor_from_row(GOOD, "rule")
    assert (d.descriptor_id, d.claim_index, d.people, d.keywords, d.n_tokens, d.needs_profile, d.negated) == (
        "d1", 0, ("Ana",), ("tea",), 4, False, True)


@pytest.mark.parametrize("column,value,name", [
    (3, "0", "claim_index"),  # an integer column holding text
    (4, None, "text"),  # a text column holding NULL
    (13, 2, "needs_profile"),  # a 0/1 column holding another integer
    (15, "1", "negated"),
])
def test_a_bad_column_is_named(column, value, name):
    row = list(GOOD)
    row[column] = value
    with pytest.raises(StoreError, match=f"column {name} holds"):
        descriptor_from_row(tuple(row), "rule")
