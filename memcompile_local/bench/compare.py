"""``memcompile-local compare spec.yaml``: a grid of backbones x presets under one pipeline.

The spec (YAML)::

    benchmark: locomo                 # or longmemeval
    data: /path/to/locomo10.json
    store: compare.sqlite             # shared: identical builds are reused across runs
    limit: 20                         # optional, questions per conversation
    conversations: [conv-26]          # optional (LoCoMo)
    judge: {backend: openai, model: gpt-4o-mini}   # optional; `false` to skip judging
    retrieval_only: false             # true: evidence recall only, no answers
    config: {evidence: {k0: 10}}      # optional overrides of the pipeline config
    backbones:
      - {name: smollm2, backend: llamacpp, model: smollm2-135m}
      - {name: qwen7b, backend: openai, base_url: "http://127.0.0.1:8000/v1", model: Qwen/Qwen2.5-7B-Instruct}
    presets: [A0, A1, model-free]

Each (backbone, preset) pair runs as ``eval`` would, into ``<out>/<backbone>-<preset>/``.
Memory builds that are identical (same extractor, model and prompts) are built once: the
store's request cache answers the repeated calls. The grid ends with ``compare.md`` (one
table of all runs) and ``compare.png`` (quality against non-judge tokens per question).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config import PipelineConfig
from ..errors import ConfigError

SPEC_KEYS = {"benchmark", "data", "store", "limit", "conversations", "judge", "retrieval_only", "config",
             "backbones", "presets", "out"}
BACKBONE_KEYS = {"name", "backend", "model", "base_url", "concurrency", "embedder", "embed_model", "options",
                 "max_tokens"}


def load_spec(path: str) -> dict[str, Any]:
    import yaml

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
    return spec


def grid(spec: dict[str, Any]) -> list[tuple[str, PipelineConfig, str]]:
    """(run name, config, preset) for every backbone x preset pair, in spec order."""
    from ..evidence.presets import apply_preset

    base = PipelineConfig.from_dict(spec.get("config") or {})
    out = []
    for b in spec["backbones"]:
        model = {k: v for k, v in b.items() if k not in ("name",)}
        for preset in spec["presets"]:
            cfg = apply_preset(preset, base).replace(model=model)
            out.append((f"{b['name']}-{preset}", cfg, preset))
    return out


def run_compare(spec_path: str, *, out: str | None = None, progress: bool = True,
                echo=print) -> list[dict[str, Any]]:
    from .plots import quality_vs_tokens_plot
    from .report import compare_table
    from .runner import EvalRunner, EvalSpec

    spec = load_spec(spec_path)
    root = Path(out or spec.get("out") or Path("runs") / f"compare-{Path(spec_path).stem}")
    root.mkdir(parents=True, exist_ok=True)
    judge = spec.get("judge", True)
    runs = []
    for name, cfg, preset in grid(spec):
        echo(f"== {name}")
        es = EvalSpec(
            benchmark=spec["benchmark"], data=spec["data"], store=spec.get("store", str(root / "store.sqlite")),
            out=str(root / name), limit=spec.get("limit"),
            conversations=tuple(spec["conversations"]) if spec.get("conversations") else None,
            judge=bool(judge) and not spec.get("retrieval_only", False),
            judge_backend=(judge or {}).get("backend") if isinstance(judge, dict) else None,
            judge_model=(judge or {}).get("model") if isinstance(judge, dict) else None,
            preset=preset, progress=progress, answer=not spec.get("retrieval_only", False),
        )
        result = EvalRunner(es, cfg, echo=echo).run()
        runs.append({"name": name, "metrics": result["metrics"], "token_table": result["token_table"]})
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
