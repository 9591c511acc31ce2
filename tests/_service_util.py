"""Start ``memcompile-local serve`` in a subprocess on a free loopback port (service tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml

from memcompile_local.service.auth import hash_key

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

MODEL_FREE = {
    "extraction": {"extractor": "rule", "intent_source": "rule", "use_intent": True},
    "evidence": {"anchor_selector": "fused", "frontier": "none"},
    "model": {"embedder": "hash"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_keys(path: Path, tenants: dict[str, list[tuple[str, bool]]]) -> Path:
    """Keys file of ``{tenant: [(key, revoked), ...]}``, storing only hashes."""
    doc = {"tenants": {t: {"keys": [{"sha256": hash_key(k), "label": f"{t}-{i}", "revoked": r}
                                    for i, (k, r) in enumerate(keys)]} for t, keys in tenants.items()}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["HF_HUB_OFFLINE"] = "1"
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), e.get("PYTHONPATH", "")])
    return e


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


def start(store: Path | str, *args: str, config: Path | None = None, log: Path | None = None,
          timeout: float = 90.0) -> Server:
    """Start a server over ``store`` (a file or a database URL) and wait for ``/healthz``; raises
    with its log when it does not come up."""
    port = free_port()
    if log is None:
        from memcompile_local.store import is_database_url

        log = (Path(tempfile.mkdtemp(prefix="serve-log-")) / f"serve.{port}.log" if is_database_url(str(store))
               else Path(store).with_suffix(f".{port}.log"))
    cmd = [sys.executable, "-m", "memcompile_local", "serve", "--store", str(store), "--port", str(port), *args]
    if config is not None:
        cmd += ["--config", str(config)]
    fh = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env(), cwd=str(REPO))
    fh.close()
    server = Server(proc, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log_text()}")
        try:
            if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"server did not answer /healthz in {timeout}s:\n{server.log_text()}")


@contextmanager
def running(store: Path, *args: str, **kw):
    server = start(store, *args, **kw)
    try:
        yield server
    finally:
        server.stop()
