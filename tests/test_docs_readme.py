"""The README's commands work as written (issue 49, item 1).

Every fenced block of README.md is preceded by a marker comment saying how it is exercised:

* ``run``: every line runs, in order, in a temporary folder holding a copy of ``examples/`` and
  ``tests/fixtures/`` (a Python block runs as one script);
* ``server``: the ``serve`` line is started on a free port, and the other lines (curl) run
  against it;
* ``site``: the documentation build, which ``tests/test_docs_site.py`` runs;
* ``not-run``: only ``make demo`` and ``make test`` (the suite itself, and the demo command that
  ``tests/test_demo.py`` covers). The set is pinned here so that it cannot grow unnoticed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from _service_util import env, free_port

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*([a-z-]+)\b[^>]*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
MAX_LINES = 350


@dataclass
class Block:
    marker: str | None
    lang: str
    text: str
    line: int

    def commands(self) -> list[str]:
        """The shell commands of the block: continuation lines joined, blank lines dropped."""
        out: list[str] = []
        pending = ""
        for raw in self.text.splitlines():
            line = raw.rstrip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            if line.strip():
                out.append(line.strip())
        return out


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.search(prev)
        blocks.append(Block(marker.group(1) if marker else None, m.group(1), "\n".join(lines[start + 1:j]), start + 1))
        i = j + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def _blocks(marker: str) -> list[Block]:
    return [b for b in BLOCKS if b.marker == marker]


def _cli(command: str) -> str:
    # The console script may not be on PATH under pytest; the module is the same program.
    assert command.startswith("memcompile-local "), command
    return f"{shlex.quote(sys.executable)} -m memcompile_local " + command[len("memcompile-local "):]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copytree(REPO / "tests" / "fixtures", tmp_path / "tests" / "fixtures")
    return tmp_path


def _run(command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- the README's shape

def test_the_readme_is_short_and_every_block_says_how_it_is_tested():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES
    unmarked = [b.line for b in BLOCKS if b.marker not in ("run", "server", "site", "not-run")]
    assert not unmarked, f"README blocks without a readme-test marker at lines {unmarked}"
    not_run = [c for b in _blocks("not-run") for c in b.commands()]
    assert [c.split("#")[0].strip() for c in not_run] == ["make demo", "make test"]
    assert len(_blocks("run")) == 2 and len(_blocks("server")) == 1 and len(_blocks("site")) == 1


def test_the_site_block_is_the_build_the_site_test_runs():
    (block,) = _blocks("site")
    assert block.commands() == ["pip install -e '.[docs]'", "mkdocs build --strict"]
    assert "docs = [" in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_every_relative_link_of_the_readme_exists():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    for target in targets:
        if "://" in target or target.startswith("#"):
            continue
        path = target.split("#")[0]
        assert (REPO / path).exists(), f"README links to {target}, which is not in the repository"


def _figures(row: str) -> list[str]:
    return re.findall(r"\d+\.\d", row)


def test_the_readme_table_cites_the_published_held_out_figures():
    text = README.read_text(encoding="utf-8")
    for figure in ("79.1", "57.8", "55.8", "40.2", "88.2", "94.5"):  # published to us, held out
        assert f"**{figure}**" in text, figure
    assert "previous" in text and "held out" in text.lower() and "nested" in text


def test_the_readme_development_figures_are_the_results_pages_nested_ones():
    # The README's development column and the results index's nested column must not drift apart.
    index = (README.parent / "docs" / "results" / "index.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    for corpus in ("LoCoMo", "REALTALK", "BEAM 100K", "LongMemEval"):
        mine = [r for r in readme.splitlines() if r.startswith(f"| {corpus}")]
        theirs = [r for r in index.splitlines() if r.startswith("| [") and corpus.split()[0] in r
                  and (corpus != "BEAM 100K" or "100K" in r)]
        assert len(mine) == 1 and len(theirs) == 1, corpus
        dev_readme = _figures(mine[0])[-2:] if corpus == "LongMemEval" else _figures(mine[0])[-1:]
        cells = theirs[0].split("|")
        dev_index = _figures(cells[3])
        assert dev_readme == dev_index[:len(dev_readme)], (corpus, dev_readme, dev_index)


# ---------------------------------------------------------------- running the blocks

@pytest.mark.slow
def test_the_python_example_runs_as_written(workdir):
    (block,) = [b for b in _blocks("run") if b.lang == "python"]
    script = workdir / "example.py"
    script.write_text(block.text, encoding="utf-8")
    r = _run(f"{shlex.quote(sys.executable)} example.py", workdir)
    assert r.returncode == 0, r.stderr[-3000:]
    first = r.stdout.splitlines()[0].split()
    assert first[0] == "1" and first[2] == "S1:1" and "Halden" in r.stdout.splitlines()[0]
    assert 0.0 <= float(first[1])
    assert "Ines visited Alice in Bergen" in r.stdout or "Ines visited me in Bergen" in r.stdout
    # the example ends by forgetting the namespace: nothing of it is left in the file
    with sqlite3.connect(workdir / "memory.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM packets").fetchone()[0] == 0


@pytest.mark.slow
def test_the_command_line_lines_run_as_written(workdir):
    (block,) = [b for b in _blocks("run") if b.lang == "bash"]
    commands = block.commands()
    assert all(c.startswith("memcompile-local ") for c in commands)
    outputs = {}
    for command in commands:
        r = _run(_cli(command), workdir)
        assert r.returncode == 0, f"{command}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        outputs[command.split()[1]] = r.stdout
    assert "Ines" in outputs["ask"]                       # the manager's name is in the evidence
    assert "my-assistant" in outputs["stats"]
    assert (workdir / "runs" / "mini" / "metrics.json").is_file()
    rows = (workdir / "mini.jsonl").read_text(encoding="utf-8").splitlines()
    assert rows and all(json.loads(row) for row in rows)
    with sqlite3.connect(workdir / "backup.sqlite") as db:   # copied, then forgotten there
        assert db.execute("SELECT COUNT(*) FROM packets").fetchone()[0] == 0
    with sqlite3.connect(workdir / "mem.sqlite") as db:       # the original keeps its turns
        assert db.execute("SELECT COUNT(*) FROM packets").fetchone()[0] > 0


@pytest.mark.slow
def test_the_service_lines_run_against_a_real_server(workdir):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    (block,) = _blocks("server")
    commands = block.commands()
    serve = [c for c in commands if c.startswith("memcompile-local serve")]
    assert len(serve) == 1
    port = free_port()
    argv = shlex.split(serve[0].split("#")[0]) + ["--port", str(port)]
    argv = [sys.executable, "-m", "memcompile_local"] + argv[1:]
    log = open(workdir / "serve.log", "w")
    proc = subprocess.Popen(argv, cwd=workdir, env=env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (workdir / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.3)
        answers = []
        for command in commands:
            if command is serve[0]:
                continue
            assert "localhost:8765" in command
            r = _run(command.replace("localhost:8765", f"127.0.0.1:{port}"), workdir, timeout=120)
            assert r.returncode == 0, r.stderr
            body = json.loads(r.stdout)
            assert "error" not in body, body
            answers.append(body)
        added, found, listed = answers
        assert added["ids"] and found["packets"] and "Lisbon" in json.dumps(found["packets"][0])
        assert listed["total"] == 1
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
