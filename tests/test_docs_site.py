"""The documentation site builds strictly, and its reference pages come from the code (issue 49, item 2).

``mkdocs build --strict`` runs on the real site: a broken link or anchor, or a page missing from
the navigation, fails it. The generators of ``docs/hooks/reference.py`` are checked against the
code they read: every config field, every command and option, every REST route appears.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / "docs" / "hooks" / "reference.py"


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


ref = _hook()


def _mkdocs(cwd: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _config_fields() -> list[str]:
    from memcompile_local.config import PipelineConfig

    out = []
    for section in dataclasses.fields(PipelineConfig):
        for f in dataclasses.fields(section.default_factory()):  # type: ignore[misc]
            out.append(f"{section.name}.{f.name}")
    return out


# ---------------------------------------------------------------- the real site

@pytest.mark.slow
def test_the_site_builds_strictly_with_the_reference_generated_from_the_code(tmp_path):
    site = tmp_path / "site"
    r = _mkdocs(REPO, site)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    config = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    for name in _config_fields():
        assert name in config, name
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("ingest", "ask", "eval", "serve", "mcp", "keygen", "copy", "forget", "scrub", "export"):
        assert f'id="{command}"' in cli, command
    rest = (site / "reference" / "rest" / "index.html").read_text(encoding="utf-8")
    assert "/v1/memories/{user_id}/search" in rest and "SearchResult" in rest
    assert (site / "reference" / "openapi.json").is_file()
    python = (site / "reference" / "python" / "index.html").read_text(encoding="utf-8")
    assert "delete_turn" in python and "MemoryClient" in python
    # nothing generated is committed, so nothing generated can be stale
    for uri in ref.GENERATED:
        assert not (REPO / "docs" / uri).exists(), uri


def test_every_page_of_the_docs_folder_is_in_the_navigation():
    # (the strict build says the same; this names the page without building)
    doc = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for v in node.values() for p in pages(v)]
        return [p for item in node for p in pages(item)]

    listed = set(pages(doc["nav"]))
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    generated = {u for u in ref.GENERATED if u.endswith(".md")}
    assert on_disk - listed == set()
    assert listed - on_disk - generated == set()
    for page in ("index.md", "getting-started.md", "concepts.md", "guides/service.md", "guides/stores.md",
                 "guides/benchmarks.md", "guides/gpu-replication.md", "guides/backends.md", "guides/model-free.md",
                 "guides/retention-and-rounds.md", "guides/inspector.md", "reference/config.md",
                 "reference/cli.md", "reference/rest.md", "reference/python.md", "results/index.md",
                 "results/locomo.md", "results/longmemeval.md", "results/realtalk.md", "results/beam.md",
                 "results/scale.md", "decisions/index.md"):
        assert page in listed, page
    records = [p for p in on_disk if p.startswith("decisions/") and p != "decisions/index.md"]
    assert records and all(Path(p).name[:11].count("-") == 3 for p in records)  # YYYY-MM-DD-slug.md


@pytest.mark.slow
def test_the_strict_settings_fail_a_broken_link_and_an_unlisted_page(tmp_path):
    real = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the guide](guide.md).\n", encoding="utf-8")
    (docs / "guide.md").write_text("# Guide\n\nBack [home](index.md#home).\n", encoding="utf-8")
    cfg = {"site_name": "t", "strict": True, "validation": real["validation"],
           "nav": [{"Home": "index.md"}, {"Guide": "guide.md"}]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert _mkdocs(tmp_path, tmp_path / "s1").returncode == 0

    (docs / "guide.md").write_text("# Guide\n\nSee [nothing](missing.md).\n", encoding="utf-8")
    r = _mkdocs(tmp_path, tmp_path / "s2")
    assert r.returncode != 0 and "missing.md" in r.stdout + r.stderr

    (docs / "guide.md").write_text("# Guide\n\nBack [home](index.md#no-such-heading).\n", encoding="utf-8")
    r = _mkdocs(tmp_path, tmp_path / "s3")
    assert r.returncode != 0 and "no-such-heading" in r.stdout + r.stderr

    (docs / "guide.md").write_text("# Guide\n", encoding="utf-8")
    (docs / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    r = _mkdocs(tmp_path, tmp_path / "s4")
    assert r.returncode != 0 and "orphan.md" in r.stdout + r.stderr


# ---------------------------------------------------------------- the generators

def test_the_config_page_lists_every_field_with_type_default_and_allowed_values():
    page = ref.config_page()
    for name in _config_fields():
        assert f"`{name}`" in page, name
    row = next(line for line in page.splitlines() if line.startswith("| `fusion.ranker` |"))
    assert "`auto`" in row and "`weighted`" in row and "`learned`" in row
    row = next(line for line in page.splitlines() if line.startswith("| `evidence.k0` |"))
    assert "| int |" in row and "`10`" in row and "≥ 1" in row
    row = next(line for line in page.splitlines() if line.startswith("| `routing.redundancy` |"))
    assert "0 to 1" in row
    row = next(line for line in page.splitlines() if line.startswith("| `evidence.max_schedule_pool` |"))
    assert "int or null" in row and "`null`" in row


def test_a_field_without_a_description_shows_an_empty_cell_and_does_not_fail():
    schema = {
        "properties": {"demo": {"$ref": "#/$defs/Demo"}},
        "$defs": {"Demo": {"description": "A section.", "properties": {
            "plain": {"type": "integer", "default": 3, "minimum": 0},
            "described": {"type": "string", "enum": ["a", "b|c"], "default": "a", "description": "Pick one [x]."},
            "maybe": {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}], "default": None},
        }}},
    }
    page = ref.config_markdown(schema)
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `demo.")}
    assert rows["`demo.plain`"].rstrip().endswith("| ≥ 0 |  |")
    assert "Pick one \\[x\\]." in rows["`demo.described`"] and "b\\|c" in rows["`demo.described`"]
    assert "float or null" in rows["`demo.maybe`"] and "> 0" in rows["`demo.maybe`"]
    assert "1 sections, 3 fields." in page


def test_the_cli_page_has_every_command_and_option_of_the_parser():
    from memcompile_local.cli.main import build_parser

    parser = build_parser()
    page = ref.cli_page()
    subs = ref._subcommands(parser)
    assert len(subs) >= 15
    for name, sub in subs.items():
        assert f"## {name}\n" in page, name
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in page, (name, option)
    # %(default)s is expanded, as --help prints it
    assert "(default 8765)" in page and "%(default)s" not in page


def test_the_cli_generator_expands_help_and_shows_choices_and_defaults():
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("go", help="go somewhere", description="Go, with [brackets].")
    p.add_argument("where", help="the place")
    p.add_argument("--speed", type=int, default=3, help="how fast (default %(default)s)")
    p.add_argument("--mode", choices=["a", "b"], default="a", help="one of %(choices)s")
    page = ref.cli_markdown(parser)
    assert "| [`go`](#go) | go somewhere |" in page
    assert "Go, with [brackets]." in page  # a description is prose, not a table cell
    assert "| `--speed SPEED` | `3` | how fast (default 3) |" in page
    assert "| `--mode {a,b}` | `a` | one of a, b |" in page
    assert "| `where` |  | the place |" in page


def test_the_rest_page_covers_every_route_and_schema_of_the_openapi_document():
    doc = ref.openapi_document()
    page = ref.rest_markdown(doc)
    for path, item in doc["paths"].items():
        for method in item:
            assert f"### {method.upper()} {path} " in page, (method, path)
    for name in doc["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in page, name
    assert "`Authorization`" in page or "bearer" in page


def test_links_to_repository_files_become_paths_and_missing_ones_stay_links():
    text = "See [the example](../examples/private_memory.jsonl) and [gone](../examples/nothing.json)."
    out = ref.repository_links(text, "guide.md", str(REPO / "docs"))
    assert "the example (`examples/private_memory.jsonl`)" in out
    assert "[gone](../examples/nothing.json)" in out
    inside = "[a page](concepts.md) and [away](https://example.org/x)"
    assert ref.repository_links(inside, "index.md", str(REPO / "docs")) == inside
