"""Where the tests find their data: the fixtures shipped in ``tests/fixtures/`` and the
benchmark dev files of ``../shared/data`` beside the clone.

The fixtures are small conversations written for these tests (LoCoMo, LongMemEval, REALTALK
and BEAM layouts); every test that only needs *some* data of a layout uses them. The dev files hold
real benchmark samples and are only used by tests that check figures of that real data.
:func:`require_dev` makes such a test skip, with the reason shown in the summary, when the
file is absent from a local clone, and fail when the ``CI`` environment variable is set
(CI checks out ``../shared`` beside the clone, so a missing file there is a broken setup,
not a reason to run fewer tests).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOCOMO_MINI = FIXTURES / "locomo_mini.json"
LONGMEMEVAL_MINI = FIXTURES / "longmemeval_mini.json"
LONGMEMEVAL_QUIRKS = FIXTURES / "longmemeval_quirks.json"  # each published-file quirk, one question each
REALTALK_MINI = FIXTURES / "realtalk"  # two chats in the REALTALK layout
BEAM_MINI = FIXTURES / "beam" / "100K"  # two chat folders in the BEAM layout
BEAM_QUIRKS = FIXTURES / "beam_quirks" / "1M"  # one chat whose questions carry the released files' quirks
# A learned-ranker model file of our own that reads every feature column, the plain-turn cosine
# included (the shipped ranker-v4 does not), so a build under it embeds each turn's plain text.
PLAIN_TURN_MODEL = FIXTURES / "ranker_plain_turns.json"

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOCOMO_DEV = SHARED_DATA / "locomo" / "locomo_dev.json"
LONGMEMEVAL_DEV = SHARED_DATA / "longmemeval" / "longmemeval_s_single.json"
LONGMEMEVAL_S_DEV100 = SHARED_DATA / "longmemeval" / "longmemeval_s_dev100.json.gz"
LONGMEMEVAL_ORACLE_DEV100 = SHARED_DATA / "longmemeval" / "longmemeval_oracle_dev100.json"
LOCOMO_DEV4 = SHARED_DATA / "locomo" / "locomo_dev4.json"
REALTALK_DEV = SHARED_DATA / "realtalk"
BEAM_DEV = SHARED_DATA / "beam" / "100K"


def in_ci() -> bool:
    """Whether the tests run in CI (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_dev(path: Path) -> Path:
    """``path`` if it exists; else skip the calling test (locally) or fail it (in CI)."""
    if path.exists():
        return path
    message = f"benchmark dev file {path} is not present (it comes from ../shared/data beside the clone)"
    if in_ci():
        pytest.fail(f"{message}; CI must provide it", pytrace=False)
    pytest.skip(message)
