"""Memory as a service: REST (FastAPI) and MCP servers over the ``Memory`` API and the same store.

Needs the ``serve`` extra (``pip install 'memcompile-local[serve]'``); nothing here is imported by
``import memcompile_local``. Entry points: ``memcompile-local serve`` / ``mcp`` (``service/cli.py``),
``service.app.create_app`` and ``memcompile_local.service.client.MemoryClient``.
"""
