"""Which side of a user-assistant history a question is about, read from its pronouns.

In a chat between a user and an assistant the user asks about their own past in the first
person ("When did I move my standup?", "What did I decide about my logo?"): the facts sit in
the user's turns. A question about what the assistant said names it as "you" in the past
("What did you recommend for my sleep schedule?", "your suggestion"). A request addressed to
the assistant now ("Can you list ...", "Could you remind me ...") is neither: its "you" is the
one answering, so only past-tense verbs of saying count. ``addressed_role`` returns the role
the question points at; the fused selector's role channel gives that side's turns a bonus, and
the learned ranker's speaker columns treat it as the participant the question names
(fused/documents.role_side, question_speakers). English only, like the other cues here.
"""

from __future__ import annotations

import re
from typing import Literal

Role = Literal["user", "assistant"]

_SAID = (r"said|suggested|recommended|told|mentioned|gave|provided|proposed|explained|listed|shared|described|"
         r"advised|offered|outlined|wrote|came up with|pointed out")
_SAY = r"say|suggest|recommend|mention|tell|give|provide|propose|explain|list|share|describe|advise|offer|outline|write"
# "you recommended", "you also suggested", "did you say", "your advice"; not "can you list".
_ASSISTANT = re.compile(
    rf"(?<!\bcan )(?<!\bcould )(?<!\bwould )(?<!\bwill )\byou\s+(?:\w+ly\s+|also\s+|once\s+)?(?:{_SAID})\b"
    rf"|\b(?:did|do|have|had) you (?:ever )?(?:{_SAY}|{_SAID})\b"
    r"|\byour (?:suggestion|recommendation|advice|answer|response|explanation|reply|idea|tip)s?\b",
    re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me|mine|myself)\b", re.IGNORECASE)


def addressed_role(question: str) -> Role | None:
    """"assistant" for a question about what the assistant said, "user" for one in the first
    person, None otherwise ("What did we decide?", "Which libraries are used?")."""
    if _ASSISTANT.search(question):
        return "assistant"
    if _FIRST_PERSON.search(question):
        return "user"
    return None
