"""The ``serve``, ``mcp`` and ``keygen`` subcommands (registered by ``memcompile_local.cli.main``).

``serve`` runs REST + MCP (streamable HTTP) on uvicorn; ``mcp`` serves MCP over stdio for a
desktop agent that starts the process itself; ``keygen`` makes an API key and prints the line
for the keys file. The web stack is imported only when one of them runs.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import sys
from typing import Any, Callable

from ..errors import ConfigError, MissingExtraError
from ..store import describe_location
from .args import config_from_args
from ..service.auth import TENANT_RE, KeyRing, generate_key, hash_key
from ..service.embed_batch import DEFAULT_WINDOW_S
from ..service.limits import Limits, ServeOptions

log = logging.getLogger(__name__)

_ENV_ARGS = "MEMCOMPILE_SERVE_ARGS"  # how `serve --workers N` hands its arguments to each process


def add_service_commands(sub, *, add_store: Callable, add_model: Callable) -> None:
    """Add ``serve``, ``mcp`` and ``keygen`` to the ``memcompile-local`` subparsers."""
    p = sub.add_parser("serve", help="serve memories over REST and MCP (HTTP) with tenants and API keys")
    add_store(p)
    add_model(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port (default %(default)s)")
    p.add_argument("--keys", help="YAML keys file (tenants and SHA-256 key hashes); without it only loopback")
    p.add_argument("--workers", type=int, default=1, help="server processes sharing the store (default 1)")
    p.add_argument("--runs", metavar="DIR",
                   help="evaluation run folders under DIR that the inspector's Runs page may open (read-only)")
    _add_limits(p)
    g = p.add_argument_group("HTTP")
    g.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="an origin browsers may call from (repeatable; '*' for any); default: no CORS")
    g.add_argument("--rate-limit", type=float, metavar="PER_S",
                   help="requests per second per tenant (429 with Retry-After past it); default: no limit")
    g.add_argument("--rate-burst", type=int, help="requests a tenant may send at once (default: twice the rate)")
    g.add_argument("--failed-keys-per-minute", type=float, default=10.0,
                   help="refused API keys one address may send per minute after a burst of 20 (default %(default)s)")
    g.add_argument("--metrics-auth", action="store_true", help="/metrics needs a valid API key (of any tenant)")
    g.add_argument("--no-access-log", dest="access_log", action="store_false",
                   help="no per-request log line (method, path, status, duration, tenant)")

    p = sub.add_parser("mcp", help="serve memories over MCP on stdio (for a local agent)")
    add_store(p)
    add_model(p)
    _add_limits(p)

    p = sub.add_parser("keygen", help="make an API key and print its keys-file entry")
    p.add_argument("--tenant", required=True, help="tenant the key belongs to ([a-z0-9][a-z0-9_-]*)")
    p.add_argument("--label", help="name shown in logs instead of the key")


def _add_limits(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("request limits")
    g.add_argument("--max-body-bytes", type=int, help="largest request body (413 past it)")
    g.add_argument("--max-turns-per-request", type=int, help="most turns in one append (413 past it)")
    g.add_argument("--max-queue-turns", type=int, help="turns waiting for a background build (429 past it)")
    g.add_argument("--max-k", type=int, help="largest k a search may ask for")
    g.add_argument("--max-views", type=int,
                   help="users held loaded between searches (least recently searched leave first; default 10000)")
    g.add_argument("--max-view-mb", type=int,
                   help="estimated MiB of the users held loaded (default 1024)")
    g.add_argument("--max-text-chars", type=int,
                   help=f"most characters of one turn's text or a query (default {Limits().max_text_chars:,})")
    g.add_argument("--max-import-mb", type=int, help=f"largest import upload in MiB (default {Limits().max_import_mb})")
    g.add_argument("--max-metadata-bytes", type=int,
                   help=f"largest metadata object of one turn, as JSON (default {Limits().max_metadata_bytes})")
    g.add_argument("--query-batch-ms", type=float, default=DEFAULT_WINDOW_S * 1000,
                   help="how long a search waits for concurrent ones to share its query-embedding call "
                        "(default %(default)s; 0: no batching)")


def _limits(args) -> Limits:
    return Limits.from_dict({name: getattr(args, name) for name in
                             ("max_body_bytes", "max_turns_per_request", "max_queue_turns", "max_k",
                              "max_text_chars", "max_views", "max_view_mb", "max_import_mb", "max_metadata_bytes")
                             if getattr(args, name, None) is not None})


def _options(args) -> ServeOptions:
    return ServeOptions(cors_origins=tuple(getattr(args, "cors_origin", None) or ()),
                        rate_limit=getattr(args, "rate_limit", None), rate_burst=getattr(args, "rate_burst", None),
                        failed_keys_per_minute=getattr(args, "failed_keys_per_minute", 10.0),
                        metrics_auth=getattr(args, "metrics_auth", False),
                        access_log=getattr(args, "access_log", True))


def enable_access_log() -> None:
    """Send the access log (``memcompile_local.service.access``, INFO) to stderr, one line a request."""
    logger = logging.getLogger("memcompile_local.service.access")
    if not any(getattr(h, "_memcompile_access", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s access %(message)s"))
        handler._memcompile_access = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui_address(host: str, port: int) -> str:
    """The inspector's URL for a browser on this machine (a wildcard bind is reached on loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/ui/"


def _require_web_stack() -> None:
    for module, package in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("mcp", "mcp")):
        try:
            __import__(module)
        except ImportError as exc:
            raise MissingExtraError(package, "serve", "the memory service") from exc


def _arg_dict(args) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items()
            if k not in ("func",) and (isinstance(v, (str, int, float, bool, type(None)))
                                       or (isinstance(v, list) and all(isinstance(x, str) for x in v)))}


def build_app_from_args(args, *, keyring=None):
    """The app for parsed ``serve`` arguments (also used by each process of ``--workers N``)."""
    # app and core load the web stack and the pipeline; only the commands that serve pay for them.
    from ..service.app import create_app
    from ..service.core import MemoryService

    if keyring is None and getattr(args, "keys", None):
        keyring = KeyRing(args.keys)
    options = _options(args)
    service = MemoryService(args.store, config_from_args(args), limits=_limits(args),
                            query_batch_ms=getattr(args, "query_batch_ms", DEFAULT_WINDOW_S * 1000))
    if options.access_log:
        enable_access_log()
    return create_app(service, keyring, host=args.host, options=options, runs_dir=getattr(args, "runs", None))


def app_from_env():
    """uvicorn factory for ``serve --workers N``: the arguments come through the environment."""
    args = argparse.Namespace(**json.loads(os.environ[_ENV_ARGS]))
    # A worker process does not run the CLI's main(), so its logging is set here as main() sets it.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # bm25s sets its own logger to DEBUG on import
        handler.addFilter(lambda record: record.levelno >= logging.WARNING)
    return build_app_from_args(args)


def cmd_serve(args) -> int:
    _require_web_stack()
    import uvicorn

    _options(args)  # a bad flag fails here, before anything starts
    _limits(args)
    if args.runs is not None and not os.path.isdir(args.runs):
        raise ConfigError(f"--runs {args.runs}: not a directory (expected a folder of eval run folders)")
    if args.runs is not None:
        args.runs = os.path.abspath(args.runs)  # the same folder for every worker process

    keyring = None
    if args.keys:
        keyring = KeyRing(args.keys)  # fail at start on a bad keys file
        print(f"memcompile-local serve: API keys from {args.keys} ({len(keyring.tenants())} tenants)", file=sys.stderr)
    elif not is_loopback(args.host):
        raise ConfigError(f"refusing to bind {args.host} without --keys: without API keys the server "
                          "only listens on loopback (127.0.0.1, ::1, localhost)")
    else:
        print(f"memcompile-local serve: no --keys, so every request is the single 'local' tenant without "
              f"authentication; listening on loopback only ({args.host}:{args.port})", file=sys.stderr)
    print(f"memcompile-local serve: store {describe_location(args.store)}; REST at http://{args.host}:{args.port}/v1, "
          f"docs at /docs, MCP at /mcp", file=sys.stderr)
    model = config_from_args(args).model
    print(f"memcompile-local serve: answer model {model.backend} {model.model} (loaded on the first /answer)",
          file=sys.stderr)
    runs = f"; run folders of {args.runs} on its Runs page" if args.runs else ""
    print(f"memcompile-local serve: memory inspector at {ui_address(args.host, args.port)}{runs}", file=sys.stderr)
    if args.workers > 1:
        os.environ[_ENV_ARGS] = json.dumps(_arg_dict(args))
        uvicorn.run("memcompile_local.cli.service:app_from_env", factory=True, host=args.host, port=args.port,
                    workers=args.workers, log_level="warning")
        return 0
    app = build_app_from_args(args, keyring=keyring)
    # uvicorn's access log would print request lines; keys travel in headers, never in URLs.
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_mcp(args) -> int:
    _require_web_stack()
    # (loaded here for the same reason as in build_app_from_args)
    from ..service.core import MemoryService
    from ..service.mcp_server import build_mcp
    from ..service.worker import BuildWorker

    service = MemoryService(args.store, config_from_args(args), limits=_limits(args), query_batch_ms=0)
    worker = BuildWorker(service)
    worker.start()
    try:
        build_mcp(service, keyring=None, stdio=True).run("stdio")
    finally:
        worker.stop()
        service.close()
    return 0


def cmd_keygen(args) -> int:
    if TENANT_RE.fullmatch(args.tenant) is None:
        raise ConfigError(f"--tenant {args.tenant!r}: expected [a-z0-9][a-z0-9_-]{{0,31}}")
    key = generate_key()
    print("the last line is the new API key: give it to the client; it is not stored anywhere", file=sys.stderr)
    entry = {"sha256": hash_key(key)}
    if args.label:
        entry["label"] = args.label
    print(f"# add under tenants.{args.tenant}.keys in the keys file:")
    print("- " + json.dumps(entry))
    print(key)
    return 0


SERVICE_COMMANDS = {"serve": cmd_serve, "mcp": cmd_mcp, "keygen": cmd_keygen}
