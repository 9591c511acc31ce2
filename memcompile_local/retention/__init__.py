"""Budgeted pre-query retention (EMBER): evidence capsules and the writers that
choose them during ingestion, before any question, under a retained-token budget.

- ``capsules``: the capsule (verbatim excerpt, sources, keys, supersession) and the retained
  memory as a conversation the normal query path reads
- ``writers``: model-free, LLM, recent, random and per-session summary writers
"""

from .capsules import Capsule, RetentionResult, capsules_conversation, covered_sources
from .writers import WRITERS, make_writer

__all__ = ["Capsule", "RetentionResult", "capsules_conversation", "covered_sources", "WRITERS", "make_writer"]
