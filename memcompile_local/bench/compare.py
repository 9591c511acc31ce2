"""``memcompile-local compare spec.yaml``: a grid of backbones x presets under one pipeline.

The spec (YAML)::

    benchmark: locomo                 # or longmemeval
    data: /path/to/locomo10.json
    store: compare.sqlite             # shared: identical builds are reused across runs
    limit: 20                         # optional, questions per conversation
    conversations: [conv-26]          # optional (LoCoMo)
    judge: {backend: openai, model: gpt-4o-mini}   # the judge's own model; `false` to skip judging
                                      # (also base_url, api_key_env, allow_self_judge)
    retrieval_only: false             # true: evidence recall only, no answers
    config: {evidence: {k0: 10}}      # optional overrides of the pipeline config
    backbones:
      - {name: smollm2, backend: llamacpp, model: smollm2-135m}
      - {name: qwen7b, backend: openai, base_url: "http://127.0.0.1:8000/v1", model: Qwen/Qwen2.5-7B-Instruct}
    presets: [A0, A1, model-free]
    baselines: [bm25, dense]          # optional: raw-turn baselines per backbone

Each (backbone, preset) pair runs as ``eval`` would, into ``<out>/<backbone>-<preset>/``.
Memory builds that are identical (same extractor, model and prompts) are built once: the
store's request cache answers the repeated calls; ``--dry-run`` lists the runs and which
builds they share without running anything. The store's folder is created when missing.
The grid ends with ``compare.md`` (one table of all runs, naming each run's judge) and
``compare.png`` (quality against non-judge tokens per question; colour = backbone,
marker = preset, N on each point).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from ..config import PipelineConfig
from ..errors import ConfigError
from ..pipeline.presets import apply_preset
from ..store import describe_location, is_database_url
from .baselines import BASELINES
from .judge_model import resolve_judge
from .plots import quality_vs_tokens_plot
from .report import compare_table
from .runner import EvalRunner, EvalSpec

SPEC_KEYS = {"benchmark", "data", "store", "limit", "conversations", "judge", "retrieval_only", "config",
             "backbones", "presets", "baselines", "out"}
BACKBONE_KEYS = {"name", "backend", "model", "base_url", "api_key_env", "concurrency", "embedder", "embed_model",
                 "options", "max_tokens", "timeout_s", "context_window"}
JUDGE_KEYS = {"backend", "model", "base_url", "api_key_env", "allow_self_judge"}


def load_spec(path: str) -> dict[str, Any]:
    """Read and check a grid spec (unknown keys and missing ones are errors naming the place)."""
    with open(path, encoding="utf-8") as fh:
        spec = yaml.safe_load(fh) or {}
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; expected some of {sorted(SPEC_KEYS)}")
    for key in ("benchmark", "data", "backbones", "presets"):
        if key not in spec:
            raise ConfigError(f"{path}: missing key {key!r}")
    if not isinstance(spec["backbones"], list) or not spec["backbones"]:
        raise ConfigError(f"{path}: at backbones: expected a non-empty list")
    names = set()
    for i, b in enumerate(spec["backbones"]):
        if not isinstance(b, dict) or "name" not in b or "backend" not in b:
            raise ConfigError(f"{path}: at backbones[{i}]: expected a mapping with name and backend")
        bad = set(b) - BACKBONE_KEYS
        if bad:
            raise ConfigError(f"{path}: at backbones[{i}]: unknown key(s) {sorted(bad)}")
        if b["name"] in names:
            raise ConfigError(f"{path}: at backbones[{i}]: duplicate name {b['name']!r}")
        names.add(b["name"])
    if not isinstance(spec["presets"], list) or not spec["presets"]:
        raise ConfigError(f"{path}: at presets: expected a non-empty list")
    baselines = spec.get("baselines", [])
    if not isinstance(baselines, list) or any(b not in BASELINES for b in baselines):
        raise ConfigError(f"{path}: at baselines: expected a list of {', '.join(BASELINES)}, got {baselines!r}")
    judge = spec.get("judge", True)
    if isinstance(judge, dict):
        bad = set(judge) - JUDGE_KEYS
        if bad:
            raise ConfigError(f"{path}: at judge: unknown key(s) {sorted(bad)}; expected some of {sorted(JUDGE_KEYS)}")
    elif not isinstance(judge, bool):
        raise ConfigError(f"{path}: at judge: expected a mapping (backend, model, ...) or false")
    return spec


def grid(spec: dict[str, Any]) -> list[tuple[str, PipelineConfig, str]]:
    """(run name, config, preset) for every backbone x preset pair, in spec order, then each
    backbone's baselines (preset ``baseline-<kind>``, run with the base configuration).

    A ``judge`` mapping of the spec becomes each run's judge section.
    """
    base = PipelineConfig.from_dict(spec.get("config") or {})
    judge = spec.get("judge", True)
    if isinstance(judge, dict):
        base = base.replace(judge=dict(judge))
    out = []
    for b in spec["backbones"]:
        model = {k: v for k, v in b.items() if k not in ("name",)}
        for preset in spec["presets"]:
            cfg = apply_preset(preset, base).replace(model=model)
            out.append((f"{b['name']}-{preset}", cfg, preset))
        for kind in spec.get("baselines", []):
            out.append((f"{b['name']}-baseline-{kind}", base.replace(model=model), f"baseline-{kind}"))
    return out


def _baseline_of(preset: str) -> str | None:
    return preset[len("baseline-"):] if preset.startswith("baseline-") else None


def _judging(spec: dict[str, Any]) -> bool:
    return bool(spec.get("judge", True)) and not spec.get("retrieval_only", False)


def build_key(cfg: PipelineConfig) -> tuple:
    """What makes two runs' memory builds the same: extractor (and its model when it is the
    LLM), embedder and Cell placement. Runs with equal keys share one build through the
    store's request cache and embedding table."""
    ex = cfg.extraction
    extractor: tuple = ("rule",) if ex.extractor == "rule" else (
        "llm", cfg.model.backend, cfg.model.model, cfg.model.base_url, ex.combined_call)
    p = cfg.placement
    return (extractor, (cfg.model.embedder, cfg.model.embed_model), (p.layout, p.token_cap, p.item_cap))


def _describe_build(key: tuple) -> str:
    if key == ("none",):
        return "no build (baselines index the raw turns)"
    extractor, (embedder, embed_model), (layout, token_cap, item_cap) = key
    ex = "rule extractor" if extractor[0] == "rule" else (
        f"LLM extractor {extractor[1]} {extractor[2]}" + (" (combined call)" if extractor[4] else ""))
    emb = "hash" if embedder == "hash" else f"{embedder} {embed_model}"  # the hash embedder has no model
    return f"{ex}; embedder {emb}; layout {layout} ({token_cap} tokens, {item_cap} items)"


@dataclass(frozen=True)
class GridPlan:
    """The runs of a grid (name, preset, backbone, answer model, judge) and its shared builds."""

    runs: list[dict[str, Any]]
    builds: list[dict[str, Any]]

    def describe(self) -> str:
        lines = [f"{len(self.runs)} runs:"]
        for r in self.runs:
            lines.append(f"  {r['name']:28s} answer {r['answer_model']}; judge {r['judge']}; build B{r['build']}")
        lines.append(f"{len(self.builds)} builds (each made once, then reused from the store):")
        for i, b in enumerate(self.builds, 1):
            lines.append(f"  B{i}: {b['what']} <- {', '.join(b['runs'])}")
        return "\n".join(lines)


def plan_grid(spec: dict[str, Any]) -> GridPlan:
    """The runs and shared builds of a spec, resolving every judge (a refused self-judge raises)."""
    runs, builds, index = [], [], {}
    for name, cfg, preset in grid(spec):
        key = ("none",) if _baseline_of(preset) else build_key(cfg)  # a baseline builds nothing
        if key not in index:
            index[key] = len(builds) + 1
            builds.append({"what": _describe_build(key), "runs": []})
        builds[index[key] - 1]["runs"].append(name)
        if _judging(spec):
            j = resolve_judge(cfg.model, cfg.judge)
            judge = f"{j.backend} {j.model}" + (f" at {j.base_url}" if j.base_url else "")
        else:
            judge = "none"
        answer = "none (retrieval only)" if spec.get("retrieval_only") else f"{cfg.model.backend} {cfg.model.model}"
        runs.append({"name": name, "preset": preset, "backbone": name[: -len(preset) - 1],
                     "answer_model": answer, "judge": judge, "build": index[key]})
    return GridPlan(runs, builds)


def run_compare(spec_path: str, *, out: str | None = None, progress: bool = True, dry_run: bool = False,
                limit: int | None = None, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run (or, with ``dry_run``, only plan) the grid of ``spec_path``; ``limit`` replaces the
    spec's questions per conversation.

    Returns one ``{"name", "backbone", "preset", "metrics", "token_table", "judge"}`` per run
    (a dry run returns the planned runs without metrics).
    """
    spec = load_spec(spec_path)
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--limit: expected at least 1 question per conversation, got {limit}")
        spec["limit"] = limit
    root = Path(out or spec.get("out") or Path("runs") / f"compare-{Path(spec_path).stem}")
    given = spec.get("store")
    store = given if given and is_database_url(str(given)) else Path(given or root / "store.sqlite")
    data = str(spec["data"])
    if not data.startswith("hf:") and not Path(data).exists():
        # Checked before the plan, so a dry run says so too instead of promising runs that fail.
        raise ConfigError(f"{spec_path}: at data: {data} does not exist"
                          + ("" if Path(data).is_absolute() else f" (a relative path is read from {Path.cwd()})"))
    plan = plan_grid(spec)
    echo(plan.describe())
    if dry_run:
        echo(f"dry run: nothing was run; results would go to {root}, the store to {describe_location(store)}")
        return plan.runs
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(store, Path):
        store.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    for (name, cfg, preset), planned in zip(grid(spec), plan.runs):
        echo(f"== {name}")
        es = EvalSpec(
            benchmark=spec["benchmark"], data=spec["data"], store=str(store),
            out=str(root / name), limit=spec.get("limit"),
            conversations=tuple(spec["conversations"]) if spec.get("conversations") else None,
            judge=_judging(spec), preset=None if _baseline_of(preset) else preset, progress=progress,
            answer=not spec.get("retrieval_only", False), baseline=_baseline_of(preset),
        )
        result = EvalRunner(es, cfg, echo=echo).run()
        runs.append({"name": name, "backbone": planned["backbone"], "preset": preset,
                     "metrics": result["metrics"], "token_table": result["token_table"], "judge": result["judge"],
                     "context_tokens_per_question": result["context_tokens_per_question"]})
    table = compare_table(runs)
    (root / "compare.md").write_text(table + "\n", encoding="utf-8")
    (root / "compare.json").write_text(json.dumps(runs, indent=2, default=str), encoding="utf-8")
    echo(table)
    try:
        png = quality_vs_tokens_plot(runs, root / "compare.png")
        echo(f"wrote {root / 'compare.md'} and {png}")
    except Exception as exc:  # noqa: BLE001 - a plot must not lose the table (e.g. no matplotlib)
        echo(f"wrote {root / 'compare.md'}; no plot: {exc}")
    return runs
