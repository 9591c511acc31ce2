"""The ``memcompile-local`` command line: ``main`` (ingest, build, ask, eval, ...), the service
commands (``serve``, ``mcp``, ``keygen``) and the demo."""

from .main import main

__all__ = ["main"]
