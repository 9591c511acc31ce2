"""Shared pytest fixtures: the shipped data fixtures and the real benchmark dev files.

``dev_locomo`` and ``dev_longmemeval`` give the path of a dev file of ``../shared/data``;
a test asking for one is skipped with a visible reason when the file is missing locally and
fails when ``CI`` is set (see ``tests/_data_paths.py``). ``locomo_mini`` and
``longmemeval_mini`` give the fixtures of ``tests/fixtures/``, which every clone has;
``conv`` is the shipped example conversation, parsed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


# ------------------------------------------------------------------------------ stores

@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL server for the session (tests/_postgres.py). Skipped with the
    reason when the server binaries or the driver are missing; failed instead when ``CI`` is set."""
    from _postgres import PostgresServer, find_bindir

    def missing(reason: str):
        if os.environ.get("CI"):
            pytest.fail(f"CI: {reason}; the PostgreSQL tests must run in CI", pytrace=False)
        pytest.skip(reason)

    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        missing("the postgres extra (psycopg, psycopg_pool) is not installed")
    bindir = find_bindir()
    if bindir is None:
        missing("no PostgreSQL server binaries (initdb, pg_ctl) found; install the Debian package postgresql")
    server = PostgresServer(bindir)
    try:
        server.start()
        server.make_template()
    except Exception as exc:
        server.remove()
        missing(f"could not start a throwaway PostgreSQL server ({exc})")
    yield server
    server.remove()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh database holding an empty store, dropped after the test."""
    url = pg_server.fresh_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request, tmp_path):
    """``open()`` a store at one location per test (call it again for a second connection to
    the same store), on each backend; ``.backend`` names it, ``.location`` is the path or URL.
    Every store it opened is closed after the test."""
    from memcompile_local.store import open_store

    if request.param == "postgres":
        location = request.getfixturevalue("pg_url")
    else:
        location = str(tmp_path / "mem.sqlite")
    opened = []

    class Factory:
        backend = request.param

        def __init__(self):
            self.location = location

        def __call__(self, **kw):
            store = open_store(location, **kw)
            opened.append(store)
            return store

    yield Factory()
    for store in opened:
        try:
            store.close()
        except Exception:
            pass


@pytest.fixture
def any_store(store_factory):
    """An open, empty store on each backend (``store_factory``)."""
    return store_factory()


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """A wheel built once per session from a copy of the tracked files (what a
    clean clone holds: setuptools reuses a build/ folder in the tree it builds, and a stale one
    there would put modules that have since moved into the wheel)."""
    pytest.importorskip("build")
    base = tmp_path_factory.mktemp("wheel")
    src, dist = base / "src", base / "dist"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, cwd=base)
    return next(dist.glob("memcompile_local-*.whl"))
