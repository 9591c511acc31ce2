"""Model backends (installed as ``memcompile_local.adapters``). One file per backend.

Nothing here imports a heavy library at import time; see ``memcompile_local.llm.registry``.
"""
