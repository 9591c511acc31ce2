"""Fixture: llama-cpp-python's OpenAI-compatible server with SmolLM2 on 127.0.0.1.

Import ``llama_server`` into a test module to use it. The server runs in a subprocess on a
free loopback port for the module's tests and is stopped at teardown.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 180


@dataclass(frozen=True)
class LlamaServer:
    base_url: str
    model_alias: str
    process: subprocess.Popen


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(model_path: Path, log_path: Path, *, n_threads: int = 2, n_ctx: int = 2048,
                       alias: str = "smollm2") -> LlamaServer:
    """Start ``python -m llama_cpp.server`` and wait until ``/v1/models`` answers."""
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", alias,
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(n_threads),
           "--n_threads_batch", str(n_threads), "--n_ctx", str(n_ctx), "--seed", "0"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=2) as resp:
                ids = [m["id"] for m in json.load(resp)["data"]]
                if alias in ids:
                    log.close()
                    return LlamaServer(base, alias, proc)
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            pass
        time.sleep(0.3)
    stop_llama_server(proc)
    log.close()
    raise RuntimeError(f"llama_cpp.server did not answer within {STARTUP_TIMEOUT_S}s:\n{log_path.read_text()[-3000:]}")


def stop_llama_server(proc: subprocess.Popen) -> None:
    """Terminate the server process (kill if it does not exit within 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python server extras not installed")
    from memcompile_local.adapters.models import smollm2_gguf_path

    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    server = start_llama_server(smollm2_gguf_path(), log_path)
    try:
        yield server
    finally:
        stop_llama_server(server.process)
