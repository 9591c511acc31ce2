"""The request frame of a question addressed to an assistant, and what is left without it.

A user who asks an assistant about their own history wraps the subject in words about the
asking itself: "Could you walk me through the order in which I raised the parts of my garden
plan across our chats? Name only four items." What the turns to find share with that question
is "my garden plan"; the rest (the request, the ordering, the reference to the conversation,
the answer format) says how to answer, and its words pull a question embedding towards every
turn that asks for something. ``question_content`` removes those pieces; the fused selector's
dense channel can embed what remains (``FusionConfig.request_frame``). Questions in the third
person ("What did Nora buy?") carry no frame and come back unchanged. English only, like the
other cues here.
"""

from __future__ import annotations

import re

_CONVERSATION = r"(?:conversations?|chats?|discussions?|sessions?|exchanges?|talks?|requests?)"
_COUNT = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|\d+)"
_SAID = r"(?:brought\s+up|mentioned|discussed|talked\s+about|raised|asked\s+about|covered|shared)"

# Each piece of a frame, removed wherever it stands.
_PIECES = tuple(re.compile(p, re.IGNORECASE) for p in (
    # A request to the assistant at the start: "Can you list", "Could you remind me of".
    r"^\s*(?:hey,?\s+|so,?\s+)?(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?|please\s+)"
    r"(?:list|tell\s+me(?:\s+about)?|remind\s+me(?:\s+(?:of|about))?|walk\s+me\s+through|give\s+me|show\s+me|"
    r"provide(?:\s+me\s+with)?|summari[sz]e|recap|recall|describe|outline|go\s+over|"
    r"help\s+me\s+(?:remember|recall))\b",
    # "a comprehensive summary of", "an overview of".
    r"\b(?:a|an|the)\s+(?:\w+\s+)?(?:summary|overview|recap|rundown)\s+of\b",
    # The ordering: "the order in which I brought up", "in what order we discussed", "in order".
    r"\b(?:the\s+order\s+in\s+which|in\s+(?:what|which)\s+order)\s+(?:i|we)\s+(?:first\s+)?" + _SAID + r"\b",
    r"\bin\s+(?:chronological\s+|the\s+right\s+)?order\b",
    # "different aspects of", "the various parts of": the subject follows.
    r"\b(?:the\s+)?(?:different|various)\s+(?:aspects|parts|stages|steps|things|topics|concepts)\s+(?:of|related\s+to)\b",
    # The conversation itself: "throughout our conversations", "across my sessions".
    r"\b(?:throughout|across|during|over|in|through|from)\s+(?:all\s+)?(?:of\s+)?(?:our|my|these|this)\s+"
    r"(?:\w+\s+)?" + _CONVERSATION + r"\b",
    r"\b(?:that\s+|which\s+)?(?:we|you\s+and\s+i)(?:'ve|\s+have)?\s+(?:discussed|covered|talked\s+about)(?:\s+so\s+far)?",
    # The answer's format: "Mention only and only five items", "in three sentences".
    r"\b(?:mention|list|name|give)\s+only(?:\s+and\s+only)?\s+" + _COUNT + r"\s+(?:items?|things?|points?)\b",
    r"\bin\s+(?:" + _COUNT + r"|a\s+few)\s+(?:words|sentences|bullet\s+points)\b",
))
_MIN_CONTENT_WORDS = 2  # a frame with (almost) nothing left was the question: keep it whole


def question_content(question: str) -> str:
    """``question`` without its request frame (module docstring); the question unchanged when
    it has none or when fewer than two words would remain."""
    out = question
    for piece in _PIECES:
        out = piece.sub(" ", out)
    if out == question:
        return question
    out = re.sub(r"\s+([,?.!])", r"\1", re.sub(r"\s+", " ", out))
    out = re.sub(r"([,?.!])(?:\s*[,?.!])+", r"\1", out).strip(" ,")
    words = re.findall(r"[A-Za-z0-9']+", out)
    return out if len(words) >= _MIN_CONTENT_WORDS else question
