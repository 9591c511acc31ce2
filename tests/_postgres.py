"""A throwaway PostgreSQL server for the tests, started from the installed server binaries.

``find_bindir`` looks for ``initdb``/``pg_ctl`` ($MEMCOMPILE_PG_BINDIR, ``pg_config --bindir``,
then Debian's ``/usr/lib/postgresql/<version>/bin``, newest first). ``PostgresServer`` makes a
cluster in a fresh folder of /tmp and serves it on a unix socket inside that folder only (no
TCP port, so parallel sessions never collide), with ``fsync`` off: the tests check what the store
does, not the disk (a killed server process loses nothing the OS has). ``initdb`` refuses to run as root, so under root the cluster belongs to the
``postgres`` user (or ``nobody``) and the server runs as that user; the tests still connect
through the socket (trust authentication) as role ``memcompile``.

One server per test session; each test gets a database of its own, copied from a template that
already holds the store's schema (``fresh_database``).
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

ROLE = "memcompile"
TEMPLATE = "memcompile_template"


def find_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None."""
    candidates = []
    if os.environ.get("MEMCOMPILE_PG_BINDIR"):
        candidates.append(os.environ["MEMCOMPILE_PG_BINDIR"])
    if shutil.which("pg_config"):
        try:
            candidates.append(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                                             timeout=10).stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def _server_user() -> str | None:
    """Under root, the unprivileged user the cluster runs as; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder (see the module doc)."""

    def __init__(self, bindir: Path, *, durable: bool = False):
        self.bindir = bindir
        self.durable = durable  # fsync on: for benchmarks that compare with SQLite's synchronous=FULL
        self.user = _server_user()
        self.dir = Path(tempfile.mkdtemp(prefix="memcompile-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._names = itertools.count(1)
        self.running = False
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        kw: dict = {}
        if self.user is not None:
            kw["user"] = self.user
            kw["group"] = pwd.getpwnam(self.user).pw_gid
            kw["extra_groups"] = []
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=True,
                              cwd=str(self.dir), **kw)

    def start(self) -> "PostgresServer":
        if not self.data.exists():
            self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", ROLE, "--auth=trust",
                      "-E", "UTF8", "--no-locale", "--no-sync")
        # fsync off: a killed server's commits are still in the OS's page cache, so a restart
        # loses nothing acknowledged (the store asks for synchronous_commit itself).
        speed = "" if self.durable else "-c fsync=off -c full_page_writes=off "
        opts = f"-k {self.dir} -c listen_addresses='' {speed}-c max_connections=300 -c shared_buffers=128MB"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w",
                  "-t", "60", "start")
        self.running = True
        return self

    def stop(self, mode: str = "fast") -> None:
        if self.running:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
            self.running = False

    def restart(self) -> None:
        self.stop("immediate")
        self.start()

    def remove(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{ROLE}@/{database}?host={self.dir}"

    def admin(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            for s in statements:
                conn.execute(s)

    def make_template(self) -> None:
        """A database holding an empty store's schema, for ``fresh_database`` to copy."""
        from memcompile_local.store import open_store

        self.admin(f"CREATE DATABASE {TEMPLATE}")
        open_store(self.url(TEMPLATE)).close()

    def fresh_database(self, *, with_schema: bool = True) -> str:
        """A new database (the store's schema in it, or empty); returns its URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE if with_schema else 'template0'}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
