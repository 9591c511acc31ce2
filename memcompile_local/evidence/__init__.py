"""Evidence Plane: pure stages from a normalized packet pool to the reader's answer.

- ``scheduler``: closed-pool listwise packet scheduling with validation and repair
- ``frontier``: the anchor-preserving bounded frontier (append rule and pool union)
- ``pursuit``: MemPursuit, the model-free greedy simplex reconstruction selector
- ``views``: reader views over a fixed packet sequence
- ``relevance``: the scores in [0, 1] a search returns per selector, and ``explain``'s records
- ``answer`` and ``prompts``: the answer step and every Evidence Plane prompt

Only numpy is imported here; no model library is loaded.
"""

from .answer import AnswerResult, answer_question, postprocess_answer, use_temporal_prompt
from .frontier import bounded_frontier, frontier_pool
from .pursuit import PursuitResult, mem_pursuit
from .scheduler import ScheduleResult, schedule_packets
from .views import (
    VIEW_NAMES,
    render_claim_bundle,
    render_raw_packets,
    render_representative_claims,
    render_view,
)

__all__ = [
    "AnswerResult",
    "answer_question",
    "postprocess_answer",
    "use_temporal_prompt",
    "bounded_frontier",
    "frontier_pool",
    "PursuitResult",
    "mem_pursuit",
    "ScheduleResult",
    "schedule_packets",
    "VIEW_NAMES",
    "render_claim_bundle",
    "render_raw_packets",
    "render_representative_claims",
    "render_view",
]
