"""Questions whose answer is a list: several things spread over the conversation ("What
hobbies does Ana have?", "In what ways ...", "... both ..."). The fused retriever gives them
complementary selection, and the learned ranker reads the cue as a feature."""

from __future__ import annotations

import re

LIST_QUESTION = re.compile(
    r"^(?:what|which)\s+(?:\S+\s+){0,2}?(?:\w+(?:s|es)|people|children)\s+(?:has|have|does|do|did|is|are|were)\b"
    r"|^(?:in )?what (?:ways|kinds?|types?|sorts?)\b|\bboth\b", re.IGNORECASE)


def is_list_question(question: str) -> bool:
    """True for a question whose answer is several things spread over the conversation."""
    return LIST_QUESTION.search(question or "") is not None
