"""Shared pytest fixtures: the shipped data fixtures and the real benchmark dev files.

``dev_locomo`` and ``dev_longmemeval`` give the path of a dev file of ``../shared/data``;
a test asking for one is skipped with a visible reason when the file is missing locally and
fails when ``CI`` is set (see ``tests/_data_paths.py``). ``locomo_mini`` and
``longmemeval_mini`` give the fixtures of ``tests/fixtures/``, which every clone has;
``conv`` is the shipped example conversation, parsed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memcompile_local.data import example_conversation_path, load_locomo
from memcompile_local.types import Conversation

from _data_paths import LOCOMO_DEV, LOCOMO_MINI, LONGMEMEVAL_DEV, LONGMEMEVAL_MINI, require_dev


@pytest.fixture
def dev_locomo() -> Path:
    """The LoCoMo dev file (conv-26 and conv-30), or skip / fail as ``require_dev`` says."""
    return require_dev(LOCOMO_DEV)


@pytest.fixture
def dev_longmemeval() -> Path:
    """The one-question LongMemEval S dev file, or skip / fail as ``require_dev`` says."""
    return require_dev(LONGMEMEVAL_DEV)


@pytest.fixture
def locomo_mini() -> Path:
    """Two short LoCoMo-layout conversations of our own writing (every category, an image)."""
    return LOCOMO_MINI


@pytest.fixture
def longmemeval_mini() -> Path:
    """Two LongMemEval-layout questions of our own writing (one answerable, one _abs)."""
    return LONGMEMEVAL_MINI


@pytest.fixture
def conv() -> Conversation:
    """The shipped example conversation (examples/, our own writing), loaded for each test."""
    return load_locomo(example_conversation_path())[0]


@pytest.fixture(scope="module", autouse=True)
def _restore_environment_after_module():
    """The same at the end of every module, for module-scoped fixtures that run the CLI
    in-process (their setup runs before any one test's snapshot is taken)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _restore_environment():
    """Put ``os.environ`` back after every test: the CLI's ``--quiet`` sets process-wide
    variables (TQDM_DISABLE, ...) that would otherwise leak into later tests."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
