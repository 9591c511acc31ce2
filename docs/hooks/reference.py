"""MkDocs hook: the reference pages, written from the code on every build.

Three pages are made here and never committed, so they cannot fall behind the code:

* ``reference/config.md`` from ``pydantic.TypeAdapter(PipelineConfig).json_schema()``: every
  field of every section with its type, default, allowed values and description (a field
  without a description shows an empty cell; ``tests/test_config*`` owns the rule that there
  is none);
* ``reference/cli.md`` from the ``memcompile-local`` argument parser (``cli.main.build_parser``);
* ``reference/rest.md`` (and ``reference/openapi.json``) from the service's OpenAPI document,
  built over a throwaway SQLite store.

The Python API page (``reference/python.md``) is committed: it holds mkdocstrings directives,
which read the docstrings at build time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import tempfile
from typing import Any, Callable, Iterator

GENERATED = ("reference/config.md", "reference/cli.md", "reference/rest.md", "reference/openapi.json")

_TYPE_NAMES = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "object": "mapping",
               "array": "list", "null": "null"}


# ---------------------------------------------------------------- shared helpers

def cell(text: Any) -> str:
    """``text`` made safe for one cell of a Markdown table (no pipe, no line break)."""
    s = " ".join(("" if text is None else str(text)).split())
    # Square brackets would read as Markdown links (or cross-references) in help texts; inside a
    # code span they are literal already, and an escape there would show.
    parts = re.split(r"(`+[^`]*?`+)", s)
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("[", "\\[").replace("]", "\\]")
    return "".join(parts).replace("|", "\\|")


def code(value: str) -> str:
    """An inline code span that survives backticks inside ``value``."""
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _json_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


# ---------------------------------------------------------------- configuration

def _resolve(schema: dict, root: dict) -> dict:
    ref = schema.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        return root["$defs"][ref.split("/")[-1]]
    return schema


def _range(s: dict) -> str:
    lo = ("≥ %s" % s["minimum"]) if "minimum" in s else ("> %s" % s["exclusiveMinimum"]) if "exclusiveMinimum" in s else ""
    hi = ("≤ %s" % s["maximum"]) if "maximum" in s else ("< %s" % s["exclusiveMaximum"]) if "exclusiveMaximum" in s else ""
    if "minimum" in s and "maximum" in s:
        return f"{s['minimum']} to {s['maximum']}"
    return ", ".join(p for p in (lo, hi) if p)


def describe_type(schema: dict) -> tuple[str, str]:
    """(type, allowed values) of one property of a JSON schema, in words a reader knows."""
    options = schema.get("anyOf") or schema.get("oneOf") or [schema]
    types: list[str] = []
    allowed: list[str] = []
    for opt in options:
        if "enum" in opt:
            types.append(_TYPE_NAMES.get(opt.get("type", "string"), opt.get("type", "string")))
            allowed.append(", ".join(code(_json_value(v)) for v in opt["enum"]))
        elif "const" in opt:
            types.append(_TYPE_NAMES.get(opt.get("type", "string"), "value"))
            allowed.append(code(_json_value(opt["const"])))
        else:
            t = opt.get("type", "any")
            for one in (t if isinstance(t, list) else [t]):
                name = _TYPE_NAMES.get(one, one)
                if name == "null":
                    allowed.append(code("null"))
                types.append(name)
            r = _range(opt)
            if r:
                allowed.append(r)
    seen: list[str] = []
    for t in types:
        if t not in seen:
            seen.append(t)
    return " or ".join(seen), "; ".join(a for a in allowed if a)


def config_markdown(schema: dict) -> str:
    """The configuration reference page for the JSON schema of ``PipelineConfig``."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from the code on every build (`pydantic.TypeAdapter(PipelineConfig).json_schema()`), "
        "so it lists exactly what the installed version accepts. Set values in a YAML file given with "
        "`--config`, one mapping per section, or in Python with `PipelineConfig.from_dict(...)` or "
        "`cfg.replace(section={...})`. Every value is checked; a wrong one is an error naming the field "
        "and what it allows. Presets (`--preset`, `memcompile-local presets`) set several fields at once; "
        "flags such as `--embedder` override both.",
        "",
        "```yaml",
        "# run.yaml: only the fields you change",
        "fusion:",
        "  ranker: weighted",
        "model:",
        "  embedder: hash",
        "```",
        "",
    ]
    sections = schema.get("properties", {})
    total = 0
    for name, ref in sections.items():
        section = _resolve(ref, schema)
        props = section.get("properties", {})
        total += len(props)
        lines += [f"## {name}", ""]
        if section.get("description"):
            lines += [" ".join(section["description"].split()), ""]
        lines += ["| field | type | default | allowed values | description |", "|---|---|---|---|---|"]
        for field, prop in props.items():
            prop = _resolve(prop, schema)
            kind, allowed = describe_type(prop)
            default = code(_json_value(prop["default"])) if "default" in prop else ""
            lines.append(f"| {code(name + '.' + field)} | {cell(kind)} | {cell(default)} | {cell(allowed)} | "
                         f"{cell(prop.get('description', ''))} |")
        lines.append("")
    lines.insert(2, f"{len(sections)} sections, {total} fields.\n")
    return "\n".join(lines)


def config_page() -> str:
    import pydantic

    from memcompile_local.config import PipelineConfig

    return config_markdown(pydantic.TypeAdapter(PipelineConfig).json_schema())


# ---------------------------------------------------------------- command line

@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    # argparse wraps usage lines to the terminal; the page must not depend on who built it.
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _help_text(action: argparse.Action, prog: str) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    for key in ("choices",):
        if params.get(key) is not None:
            params[key] = ", ".join(map(str, params[key]))
    try:
        return action.help % params
    except (KeyError, TypeError, ValueError):
        return action.help


def _option_names(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices else
                                 action.dest.upper())
    return f"{names} {metavar}"


def _default(action: argparse.Action) -> str:
    d = action.default
    if d is None or d is argparse.SUPPRESS or action.nargs == 0 or d == [] or not action.option_strings:
        return ""
    return code(str(d))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _subcommand_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _argument_table(parser: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
                   and not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        title = group.title or "arguments"
        lines += [f"*{title}*", "", "| argument | default | what it does |", "|---|---|---|"]
        for a in actions:
            lines.append(f"| {code(_option_names(a))} | {cell(_default(a))} | {cell(_help_text(a, parser.prog))} |")
        lines.append("")
    return lines


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """The command-line reference page for the ``memcompile-local`` parser."""
    with _columns(96):
        subs = _subcommands(parser)
        helps = _subcommand_help(parser)
        lines = [
            "# Command-line reference",
            "",
            "Generated from the argument parser on every build; `memcompile-local COMMAND --help` prints "
            "the same. `-v` (repeatable) works before or after the command.",
            "",
            "| command | what it does |",
            "|---|---|",
        ]
        lines += [f"| [`{name}`](#{name}) | {cell(helps.get(name, ''))} |" for name in subs]
        lines += ["", "```text", parser.format_usage().rstrip(), "```", ""]
        for name, sub in subs.items():
            lines += [f"## {name}", ""]
            text = sub.description or helps.get(name, "")
            if text:
                lines += [" ".join(text.split()), ""]
            lines += ["```text", sub.format_usage().rstrip(), "```", ""]
            lines += _argument_table(sub)
    return "\n".join(lines)


def cli_page() -> str:
    from memcompile_local.cli.main import build_parser

    return cli_markdown(build_parser())


# ---------------------------------------------------------------- REST API

def openapi_document() -> dict:
    """The service's OpenAPI document as a keyed server publishes it (no server is started)."""
    from memcompile_local.config import PipelineConfig
    from memcompile_local.pipeline.presets import apply_preset
    from memcompile_local.service.app import create_app
    from memcompile_local.service.core import MemoryService
    from memcompile_local.service.openapi import build_document

    cfg = apply_preset("model-free", PipelineConfig()).replace(model={"embedder": "hash"})
    with tempfile.TemporaryDirectory(prefix="memcompile-docs-") as tmp:
        service = MemoryService(os.path.join(tmp, "docs.sqlite"), cfg, query_batch_ms=0)
        try:
            app = create_app(service, None, run_worker=False)
            doc = build_document(app, keyed=True, metrics_auth=False, limits=service.limits)
        finally:
            close = getattr(service, "close", None)
            if callable(close):
                close()
    return doc


def _schema_type(schema: dict) -> str:
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return f"[{name}](#schema-{name.lower()})"
    if "items" in schema and schema.get("type") == "array":
        return f"list of {_schema_type(schema['items'])}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_type(s) for s in schema[key])
    if "enum" in schema:
        return "one of " + ", ".join(code(_json_value(v)) for v in schema["enum"])
    t = schema.get("type", "any")
    names = [_TYPE_NAMES.get(x, x) for x in (t if isinstance(t, list) else [t])]
    return " or ".join(names)


def _bounds(schema: dict) -> str:
    parts = []
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
                      ("maxItems", "items ≤"), ("pattern", "pattern")):
        if key in schema:
            parts.append(f"{word} {code(str(schema[key])) if key == 'pattern' else schema[key]}")
    return "; ".join(parts)


def rest_markdown(doc: dict) -> str:
    """The REST reference page for an OpenAPI document."""
    lines = [
        "# REST API reference",
        "",
        f"Generated on every build from the service's OpenAPI document ({doc.get('openapi', '')}; "
        "[download it](openapi.json)). A running server serves the same document at `/openapi.json` and "
        "a browsable form at `/docs`. Routes under `/v1/` need a key (`Authorization: Bearer KEY` or "
        "`X-API-Key: KEY`) when the server runs with `--keys`; without it one `local` tenant is served "
        "on loopback only. The [service guide](../guides/service.md) explains tenants, filters and imports.",
        "",
        "| method | path | summary |",
        "|---|---|---|",
    ]
    ops: list[tuple[str, str, dict]] = []
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                ops.append((method.upper(), path, op))
    for method, path, op in ops:
        anchor = (op.get("operationId") or f"{method}-{path}").lower()
        anchor = "".join(ch if ch.isalnum() else "-" for ch in anchor).strip("-")
        op["_anchor"] = anchor
        lines.append(f"| {method} | [{code(path)}](#{anchor}) | {cell(op.get('summary', ''))} |")
    lines.append("")
    lines += ["## Operations", ""]
    for method, path, op in ops:
        lines += [f"### {method} {path} {{#{op['_anchor']}}}", ""]
        if op.get("summary"):
            lines += [cell(op["summary"]), ""]
        if op.get("description"):
            lines += [op["description"].strip(), ""]
        params = op.get("parameters", [])
        if params:
            lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
            for p in params:
                schema = p.get("schema", {})
                kind = _schema_type(schema)
                b = _bounds(schema)
                lines.append(f"| {code(p['name'])} | {p.get('in', '')} | {cell(kind + ('; ' + b if b else ''))} | "
                             f"{'yes' if p.get('required') else 'no'} | {cell(p.get('description', ''))} |")
            lines.append("")
        body = op.get("requestBody")
        if body:
            for media, content in body.get("content", {}).items():
                lines += [f"Request body ({code(media)}): {_schema_type(content.get('schema', {}))}", ""]
        responses = op.get("responses", {})
        if responses:
            lines += ["| status | meaning | body |", "|---|---|---|"]
            for status, resp in responses.items():
                schema = next(iter(resp.get("content", {}).values()), {}).get("schema")
                lines.append(f"| {status} | {cell(resp.get('description', ''))} | "
                             f"{_schema_type(schema) if schema else ''} |")
            lines.append("")
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name, schema in schemas.items():
            lines += [f"### {name} {{#schema-{name.lower()}}}", ""]
            if schema.get("description"):
                lines += [cell(schema["description"]), ""]
            props = schema.get("properties")
            if not props:
                lines += [f"Type: {_schema_type(schema)}", ""]
                continue
            required = set(schema.get("required", []))
            lines += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, prop in props.items():
                b = _bounds(prop)
                lines.append(f"| {code(field)} | {cell(_schema_type(prop) + ('; ' + b if b else ''))} | "
                             f"{'yes' if field in required else 'no'} | {cell(prop.get('description', ''))} |")
            lines.append("")
    security = doc.get("components", {}).get("securitySchemes", {})
    if security:
        lines += ["## Authentication", "", "| scheme | how the key is sent |", "|---|---|"]
        for name, s in security.items():
            how = f"`{s.get('in', '')}` {s.get('name', '')}".strip() if s.get("type") == "apiKey" else \
                f"HTTP `{s.get('scheme', '')}`"
            lines.append(f"| {code(name)} | {cell(how)} {cell(s.get('description', ''))} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- the hook

def generated_pages() -> dict[str, Callable[[], str]]:
    doc: dict[str, Any] = {}

    def rest() -> str:
        doc.setdefault("d", openapi_document())
        return rest_markdown(doc["d"])

    def openapi_json() -> str:
        doc.setdefault("d", openapi_document())
        return json.dumps(doc["d"], indent=2, ensure_ascii=False) + "\n"

    return {"reference/config.md": config_page, "reference/cli.md": cli_page,
            "reference/rest.md": rest, "reference/openapi.json": openapi_json}


_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def repository_links(markdown: str, page_path: str, docs_dir: str) -> str:
    """Links from a page to files of the repository outside the site, written as their paths.

    A page may point at ``../examples/private_memory.jsonl`` or a script; the site cannot hold
    those files, so the link becomes the file's repository path in code. A target that exists
    nowhere is left as it is, and the strict build then fails on it.
    """
    root = os.path.dirname(os.path.abspath(docs_dir))
    docs = os.path.abspath(docs_dir)

    def swap(m: re.Match) -> str:
        text, target = m.group(1), m.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        path = os.path.normpath(os.path.join(docs, os.path.dirname(page_path), target))
        if path.startswith(docs + os.sep) or not path.startswith(root + os.sep) or not os.path.exists(path):
            return m.group(0)
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        return code(rel) if text.strip("`") == rel else f"{text} ({code(rel)})"

    return _LINK.sub(swap, markdown)


def on_page_markdown(markdown, page, config, files):
    return repository_links(markdown, page.file.src_path, config["docs_dir"])


def on_files(files, config):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    for uri, make in generated_pages().items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} is generated at build time; remove the committed copy")
        files.append(File.generated(config, uri, content=make()))
    return files
