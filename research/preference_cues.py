"""Preference questions and the turns that answer them; questions that refer back to the assistant.

Research code: the cues of the ``preference`` and ``assistant`` components of
``research/nested_cv.py``, which the shipping rule did not take (settings log, batch 4), so they
live here rather than in the package.

A user who asks an assistant for a recommendation ("Can you suggest a weekend hike?", "Any tips
for my balcony garden?", "What should I cook tonight?") is best answered from the turns where
they said what they like, do or cannot have: a first-person statement of taste, habit or
constraint ("I love spicy food", "I've been getting into bouldering", "I'm allergic to nuts",
"my favourite author is ..."). ``asks_for_recommendation`` reads the question's cue,
``states_preference`` the statement in a turn's text, and ``preference_turn`` takes the turn's
role into account: only the user's own statements count (an assistant's "I'd suggest ..." is not
the user's taste). A question about what the assistant said earlier ("you recommended", "the
plan you put together") is read by ``refers_to_assistant``: the pronoun cue of
``language/roles.addressed_role`` plus the things an assistant makes for a user ("the list you
made"). English only, like the other cues here; pure functions, safe for question threads.
"""

from __future__ import annotations

import re

from memcompile_local.language.roles import Role, addressed_role
from memcompile_local.language.tokens import normalize_apostrophes

__all__ = ["asks_for_recommendation", "states_preference", "preference_turn", "refers_to_assistant"]

# A request for a recommendation, suggestion, tip, idea or advice, or a question of what the
# asker should do. Past forms ("did you suggest", "you recommended") are references to the
# assistant's earlier words, not requests: ``asks_for_recommendation`` leaves those out.
_REQUEST = re.compile(
    r"\b(?:suggest(?:ions?)?|recommend(?:ations?)?)\b"
    r"|\b(?:tips|advice|ideas|pointers)\b|\b(?:tip|idea) (?:for|on)\b"
    r"|\bshould I\b|\bwhat (?:else )?(?:can|could|might) I\b"
    r"|\bwhat (?:would|do) you (?:think|propose)\b"
    r"|\bhelp me (?:choose|pick|find|decide|plan|come up with|figure out|think of)\b"
    r"|\b(?:any|some) (?:good |other |new )?(?:options|thoughts|inspiration)\b"
    r"|\bworth (?:trying|reading|watching|visiting|buying|checking)\b",
    re.IGNORECASE)

_ADVERB = r"(?:(?:really|absolutely|just|also|actually|do|still|truly|totally|genuinely|mostly|generally|"\
          r"definitely|honestly|always|usually|often|kind of|sort of) )?"
# A first-person statement of taste, habit or constraint. "I" starts it (or "my favourite");
# one adverb may come between ("I really love", "I usually go").
_PREFERS = re.compile(
    r"\bI " + _ADVERB + r"(?:love|like|enjoy|prefer|adore|hate|dislike|detest|avoid|crave|"
    r"can't stand|cannot stand|can't eat|can't have|can't handle|can't do|don't eat|don't drink|"
    r"don't like|don't enjoy|don't care for|don't do well with|tend to|usually|always|never|"
    r"gravitate toward|lean toward|am into|am a (?:\w+ )?(?:fan|lover|enthusiast|person)|"
    r"am (?:allergic|intolerant|sensitive|passionate|obsessed|not a fan|not into|not big on|vegan|"
    r"vegetarian|pescatarian)|"
    r"have (?:a|an) (?:\w+ ){0,2}(?:allergy|intolerance|soft spot|weakness|thing for|preference))\b"
    r"|\bI'm " + _ADVERB + r"(?:into|a (?:\w+ )?(?:fan|lover|enthusiast|person)|allergic|intolerant|sensitive|"
    r"passionate|obsessed|not a fan|not into|not big on|big on|vegan|vegetarian|pescatarian)\b"
    r"|\bI've " + _ADVERB + r"(?:been (?:getting |really )?into|got(?:ten)? into|been loving|been enjoying|"
    r"always (?:loved|liked|enjoyed|preferred|wanted)|started|taken up|picked up)\b"
    r"|\bI'd (?:rather|prefer|love)\b"
    r"|\bmy (?:all-time |absolute )?favou?rites?\b"
    r"|\bI (?:really |also |just )?(?:loved|enjoyed|liked|hated|disliked)\b",
    re.IGNORECASE)

# Things an assistant makes for a user that a question names it by ("the itinerary you put
# together"): "you" directly before a verb of making, not a request ("can you make").
_MADE = re.compile(
    r"(?<!\bcan )(?<!\bcould )(?<!\bwould )(?<!\bwill )\byou(?: had|'d)? "
    r"(?:made|created|put together|drafted|designed|planned|compiled|generated|built|prepared|sent|"
    r"came up with|walked me through|showed me|taught me|helped me with)\b"
    r"|\byou(?: had|'d) (?:said|suggested|recommended|mentioned|told|given|listed|shared)\b"
    r"|\byou were (?:saying|telling|explaining|describing|suggesting|recommending)\b",
    re.IGNORECASE)


def asks_for_recommendation(question: str) -> bool:
    """True for a question asking the assistant for a recommendation, a suggestion, tips or
    advice, or what the asker should do; False for one about what the assistant said before."""
    text = normalize_apostrophes(question or "")
    return bool(_REQUEST.search(text)) and not refers_to_assistant(text)


def states_preference(text: str) -> bool:
    """True for a text with a first-person statement of taste, habit or constraint."""
    return bool(_PREFERS.search(normalize_apostrophes(text or "")))


def preference_turn(text: str, role: Role) -> bool:
    """True for a turn of the user (``role`` "user": in a history between people, every
    turn) that states a preference of its own; an assistant's turn never is one."""
    return role == "user" and states_preference(text)


def refers_to_assistant(question: str) -> bool:
    """True for a question about what the assistant said or made earlier ("you recommended",
    "your suggestion", "the plan you put together")."""
    text = normalize_apostrophes(question or "")
    return addressed_role(text) == "assistant" or bool(_MADE.search(text))
