"""Preference cues (research/preference_cues.py): a request for a recommendation, a user turn that
states the user's own taste, habit or constraint, and a question that refers back to what the
assistant said or made. The sentences are written for these tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))
from preference_cues import (  # noqa: E402
    asks_for_recommendation,
    preference_turn,
    refers_to_assistant,
    states_preference,
)

pytestmark = pytest.mark.research


@pytest.mark.parametrize("question", [
    "Can you suggest a weekend hike near the coast?",
    "Any tips for keeping basil alive on a windy balcony?",
    "What should I cook for a rainy Sunday dinner?",
    "Do you have any recommendations for a podcast about shipwrecks?",
    "I'd love some suggestions for a birthday gift for my uncle.",
    "Could you recommend a board game for four players?",
    "Which camera should I buy for night photography?",
    "Got any ideas for a cheap date night?",
    "I need advice on arranging a tiny studio flat.",
    "What else could I try to fall asleep faster?",
    "Is there a novel worth reading on a long train ride?",
    "Help me pick a colour for the hallway.",
    "Any tip for removing wax from a tablecloth?",
])
def test_requests_for_a_recommendation_are_read(question):
    assert asks_for_recommendation(question)


@pytest.mark.parametrize("question", [
    "When did I move my standup meeting?",
    "How many plants did I buy in spring?",
    "What is the name of my landlord's dog?",
    "Where did I go on holiday last year?",
    # About what the assistant said before: a reference, not a request.
    "What did you recommend for my sleep schedule?",
    "Which podcast did you suggest last week?",
    "Remind me of your advice about the leaking tap.",
    "What was the third tip you gave me for the garden?",
    "Any idea when I last saw the dentist?",  # "any idea" asks for a fact
    "",
])
def test_other_questions_are_not_requests(question):
    assert not asks_for_recommendation(question)


@pytest.mark.parametrize("text", [
    "I love spicy noodles, the hotter the better.",
    "Honestly I really prefer trains to planes.",
    "I've been getting into bouldering since March.",
    "I'm allergic to hazelnuts, so be careful with desserts.",
    "I can't stand crowded beaches.",
    "My favourite author is a retired sailor who writes mysteries.",
    "My favorite snack is salted popcorn.",
    "I usually run before work, around six.",
    "I'm a huge fan of old silent films.",
    "I'm vegetarian and my partner eats everything.",
    "I don't eat anything with cilantro in it.",
    "I have a mild gluten intolerance.",
    "I've taken up pottery on Thursday evenings.",
    "I'd rather stay somewhere quiet than in the old town.",
    "i really enjoy long walks",  # lower case, no full stop
    "I\u2019m into jazz piano these days.",  # a curly apostrophe
])
def test_first_person_preferences_are_read(text):
    assert states_preference(text)


@pytest.mark.parametrize("text", [
    "The museum opens at ten on weekdays.",
    "My sister lives in Porto.",
    "She loves spicy noodles.",  # someone else's taste
    "You might enjoy the lake trail.",
    "Could you list three quiet campsites?",
    "Hi, how are you today?",
    "I moved the meeting to Thursday.",
    "I've been wondering whether the bus runs on holidays.",
    "",
])
def test_other_texts_state_no_preference(text):
    assert not states_preference(text)


def test_only_the_users_own_statements_are_preference_turns():
    text = "I love quiet beaches and I'd rather avoid long drives."
    assert preference_turn(text, "user")
    assert not preference_turn(text, "assistant")  # an assistant's "I love" is not the user's taste
    assert not preference_turn("The beach is quiet in May.", "user")


@pytest.mark.parametrize("question, expected", [
    ("What did you recommend for my sleep schedule?", True),
    ("You mentioned a bread recipe; which flour was it?", True),
    ("Which of your suggestions did I try?", True),
    ("Can you remind me of the itinerary you put together for Lisbon?", True),
    ("What was the second step of the plan you'd drafted for my thesis?", True),
    ("In the workout you had suggested, how many squats were there?", True),
    ("What would you suggest for dinner tonight?", False),  # a request now
    ("You were explaining compound interest; what was the formula?", True),
    ("Can you make me a plan for learning Spanish?", False),  # a request now
    ("Could you put together a shopping list?", False),
    ("When did I move my standup meeting?", False),
    ("What did I tell my brother about the trip?", False),
    ("Can you suggest a weekend hike?", False),
])
def test_questions_that_refer_back_to_the_assistant(question, expected):
    assert refers_to_assistant(question) is expected
