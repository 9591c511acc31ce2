"""The rule extractor's exact output, pinned: a change of speed must not change one byte of it.

Stored builds are keyed on the extractor's identity (``RULE_EXTRACTOR_VERSION``), so a faster
extractor must give exactly the descriptors, templates and bindings the slower one gave. The
turns below are our own writing and cover what the rules read (dates and relative times,
names and nicknames, negation, lists, long assistant replies with code and markdown,
questions and requests, small talk, first-person speaker labels, image captions); the
expected output in ``fixtures/extract_rule_identity.json`` was recorded with the extractor as
it was before its speed work (``rule-v4``), and so were the language helpers' answers pinned
here. ``research/extract_identity.py`` makes the same comparison over every development turn.

To record the file again after a deliberate change of behaviour (with a new
``RULE_EXTRACTOR_VERSION``): ``PYTHONPATH=. python tests/test_extract_rule_identity.py --record``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import threading
from pathlib import Path

import pytest

from memcompile_local.address.extract_rule import (
    RULE_EXTRACTOR_VERSION,
    RuleExtractor,
    addressee_of,
    classify_event_type,
    is_low_value,
    is_request,
    predicate_lemma,
    split_sentences,
)
from memcompile_local.config import ExtractionConfig
from memcompile_local.language.names import name_tokens, proper_names
from memcompile_local.language.phrases import keyword_phrases
from memcompile_local.language.timecues import is_time_phrase
from memcompile_local.language.timeparse import find_time_mentions, normalize_time, parse_session_time
from memcompile_local.language.tokens import count_tokens, terms, words
from memcompile_local.types import SourcePacket

EXPECTED = Path(__file__).resolve().parent / "fixtures" / "extract_rule_identity.json"

LOCOMO_TIME = "1:56 pm on 8 May, 2023"
LME_TIME = "2023/05/20 (Sat) 02:21"
ISO_TIME = "2024-02-29"
OTHER_TIME = "10:05 am on 3 January, 2022"  # what each template is bound to again

# (speaker, previous speaker, session time, text, image caption, image query)
TURNS: list[tuple[str, str | None, str, str, str | None, str | None]] = [
    ("Ines", None, LOCOMO_TIME, "Hey Tomas! How are you?", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Hi Ines! I'm good, thanks. I just got back from Porto yesterday, "
     "we stayed with my aunt Beatriz for a week.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Oh wow, that sounds lovely! Did you visit the Livraria Lello while you "
     "were there?", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Yes! I didn't buy anything though. Nobody warned me about the queue.",
     None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Haha, classic. Thanks for sharing!", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "I'm planning to run the Lisbon half marathon next month. Tom, my brother, "
     "is coming too.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Tomas, that's amazing. I can't stand running, but I love cycling. "
     "My favorite route goes along the river.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Here's the view from my balcony.", "a photo of a sunset over red roofs",
     "sunset balcony Porto"),
    ("Ines", "Tomas", LOCOMO_TIME, "", "There is a golden retriever sleeping on a blue sofa", None),
    ("Ines", "Tomas", LOCOMO_TIME, "We're adopting a puppy on Saturday! We've wanted one since 2019.",
     None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Remind me that my dentist appointment is on June 3rd. Please send me "
     "the address of Dr. Okafor's clinic.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Don't tell anyone about the surprise party for Marta on 14 July.",
     None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Are you still working at the bakery? You said you started there "
     "3 weeks ago.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "May I ask what made you choose that?", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "In May we moved to Braga. It was the start of march madness at work... "
     "I was exhausted… Anyway!", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "You two should come over this weekend. You guys would love the garden; "
     "I need some me-time though.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Wow, Ines, great!", None, None),
    ("Tomas", "Tomas", LOCOMO_TIME, "Also: I got engaged to Lucia last summer!!", None, None),
    ("", "Ines", LOCOMO_TIME, "Someone left a note saying the meeting moved to 2023-06-12.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "My grandmother was born in 1947 and grew up in Coimbra. She married "
     "my grandfather in the spring of 1968, two years after they met.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "I\u2019m so proud of you! You\u2019ve worked really hard \u201cfor "
     "years\u201d and it shows.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Things I packed:\n- a tent\n- two sleeping bags\n- the camping stove "
     "\n1. maps\n2. a first-aid kit", None, None),
    ("me", "assistant", LME_TIME, "I adopted a cat named Pixel a few months ago and my manager is called "
     "Ana. Can you remind me what I should buy for her?", None, None),
    ("assistant", "me", LME_TIME, "Congratulations on adopting Pixel! Here are some essentials you may "
     "need:\n\n## Basics\n\n1. **Litter box**: place it somewhere quiet.\n2. **Food and water bowls**: "
     "stainless steel is easy to clean.\n3. **Scratching post** (e.g. a sisal one, about 3.5 ft tall).\n\n"
     "### Tips\n\n- Schedule a vet visit within the first week.\n- Keep the cat indoors for 2 weeks "
     "so it learns its new home.\n\nIf you'd like, I can also suggest toys. Let me know!", None, None),
    ("user", "assistant", LME_TIME, "Can you fix my Python function? It fails on empty lists.\n\n```python\n"
     "def mean(xs):\n    return sum(xs) / len(xs)\n```\n\nI tried it on Monday and again last Tuesday.",
     None, None),
    ("assistant", "user", LME_TIME, "Sure! The division fails when `xs` is empty, because `len(xs)` is 0. "
     "Here is a fixed version:\n\n```python\ndef mean(xs):\n    if not xs:\n        return 0.0\n    "
     "return sum(xs) / len(xs)\n```\n\n| input | output |\n|---|---|\n| [] | 0.0 |\n| [1, 2] | 1.5 |\n\n"
     "You could also raise a `ValueError` instead; see https://docs.python.org/3/library/statistics.html "
     "for `statistics.mean`, which does that. Wouldn't that be cleaner? I'd avoid silent defaults.",
     None, None),
    ("user", "assistant", LME_TIME, "Thanks, that works! I'll use statistics.mean from now on.", None, None),
    ("user", "assistant", ISO_TIME, "My flight to Osaka is on the 29th of February, and I return in "
     "10 days. We'll stay near Dotonbori with the Nakamura family.", None, None),
    ("user", "assistant", ISO_TIME, "What's a good itinerary for three days in Kyoto next week? I "
     "prefer temples over shopping and I don't eat pork.", None, None),
    ("Ines", "Tomas", "sometime in spring", "I finished the course the day before yesterday and I start "
     "the new role tomorrow.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "ok", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Hmm... yeah. Sure. LOL", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "NASA and the UN published a report in 2021; Mr. Silva read it on the "
     "train to Faro with Ana Sousa and J. K. Rowling's new book.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "Have you tried the pottery class near Elm Street? It starts in 2 "
     "months and it's every Thursday evening.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "I never really liked horror movies, but my wife adores them; we "
     "watched three last night and I barely slept.", None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Our team won the regional final on 21st April 2023 in Guimar\u00e3es "
     "\U0001f389 Mel says we're going to nationals in September!", None, None),
    ("Ines", "me", LOCOMO_TIME, "You should call your sister; you're always happier after talking to her.",
     None, None),
    ("Ines", "Tomas", LOCOMO_TIME, "Are you two coming to the reunion? Please bring the photos from "
     "last year.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "I've been volunteering at the shelter since January and I'd like to "
     "foster a dog by the end of June.", None, None),
    ("Tomas", "Ines", LOCOMO_TIME, "By the way, Ines, the book you lent me, \u201cThe Glass Orchard\u201d, "
     "was wonderful. I read it in two evenings, Ines.", None, None),
]

# Sentences for the language helpers the extractor calls (each also a public function).
SENTENCES = [
    "I just got back from Porto yesterday, we stayed with my aunt Beatriz for a week.",
    "On 12 March 2021 I moved to Lisbon, and in may I started at Farfetch.",
    "We fly out next Friday at 6 am; the conference is from 4 to 7 June 2024.",
    "Three years ago, in 2020, Tom and Mel sold the house on Rua Augusta.",
    "Last summer the kids learned to swim; this summer they want to surf.",
    "The invoice dated 2022/11/05 was paid 2022-11-30 (2,000 people attended in 2022-11).",
    "a few weeks ago we hiked with a couple of friends, and in a couple of weeks we hike again",
    "Next May? Or this coming Monday, or the Monday after, or since December, or during the month of March?",
    "How are you doing today, Ines?",
    "Thanks so much, Tomas!",
    "Is it true that the Rose Garden at the Botanical Park opens at 9?",
    "Nobody told me the 10:30 train to Sintra was cancelled earlier today.",
    "",
    "   ",
    "12345 67.8 90%",
    "The winter of 2019 was brutal; summer 2023 was mild.",
    "She'll be 30 in 3 days; her birthday is Jan. 5th.",
    "I was going to go, but I didn't.",
]
ANCHORS = [None, LOCOMO_TIME, LME_TIME, ISO_TIME]


def _packet(i: int, turn: tuple, time: str | None = None) -> SourcePacket:
    speaker, _prev, session_time, text, caption, query = turn
    return SourcePacket(namespace="pin", packet_id=f"t{i}", ordinal=i, session_index=1 + i % 3,
                        session_id=f"s{1 + i % 3}", session_time=time or session_time, speaker=speaker,
                        content=text, image_caption=caption, sha256="", image_query=query)


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _extractor_outputs(extractor: RuleExtractor, *, full: bool) -> list:
    """Per turn: the descriptors in full (``full``) or their digest, and digests of the template
    and of its binding to another session time (kept as digests to keep the file small)."""
    out = []
    for i, turn in enumerate(TURNS):
        packet = _packet(i, turn)
        addressee = addressee_of(turn[0], turn[1])
        descriptors, template = extractor.extract_with_template(packet, addressee)
        bound = extractor.bind(template, _packet(i, turn, OTHER_TIME))
        shown = [dataclasses.asdict(d) for d in descriptors]
        out.append({"descriptors": shown if full else _digest(shown),
                    "template": _digest(dataclasses.asdict(template)),
                    "bound": _digest([dataclasses.asdict(d) for d in bound])})
    return out


def _mentions(text: str, anchor: str | None, **kw) -> list:
    return [dataclasses.asdict(m) for m in find_time_mentions(text, parse_session_time(anchor) if anchor else None,
                                                              **kw)]


def _helper_outputs() -> dict:
    known = ["Tomas", "Melanie"]
    return {
        "split_sentences": [split_sentences(t[3]) for t in TURNS],
        "is_low_value": [[is_low_value(s), is_low_value(s, known)] for t in TURNS for s in split_sentences(t[3])]
        + [[is_low_value(s), is_low_value(s, known)] for s in SENTENCES],
        "is_request": [is_request(s) for s in SENTENCES],
        "classify_event_type": [classify_event_type(s) for s in SENTENCES],
        "predicate_lemma": [predicate_lemma(s) for s in SENTENCES],
        "proper_names": [[proper_names(s), proper_names(s, known)] for s in SENTENCES],
        "name_tokens": [sorted(name_tokens(s, known)) for s in SENTENCES],
        "keyword_phrases": [list(keyword_phrases(s, exclude=["Tomas"], known_names=known, limit=5)) for s in SENTENCES],
        "words": [words(s) for s in SENTENCES],
        "terms": [terms(s) for s in SENTENCES],
        "count_tokens": [count_tokens(s) for s in SENTENCES],
        "find_time_mentions": [[_mentions(s, a, prefer=p) for a in ANCHORS for p in ("past", "future")]
                               + [_mentions(s, None, strict_case=False), _mentions(s, LOCOMO_TIME, strict_case=False)]
                               for s in SENTENCES],
        "normalize_time": [normalize_time(e, LOCOMO_TIME) for e in
                           ("may", "Saturday", "last week", "in 3 days", "summer 2021", "unknown", "2023-05",
                            "the 5th of may", "next march")],
        "is_time_phrase": [is_time_phrase(p) for p in ("last week", "may 2023", "2023-05", "march madness",
                                                      "pottery class", "this coming monday")],
    }


def _record() -> dict:
    return {
        "version": RULE_EXTRACTOR_VERSION,
        "default": _extractor_outputs(RuleExtractor(), full=True),
        "max_keywords=2": _extractor_outputs(RuleExtractor(ExtractionConfig(max_keywords=2)), full=False),
        "max_rule_claims=2": _extractor_outputs(RuleExtractor(ExtractionConfig(max_rule_claims=2)), full=False),
        "helpers": _helper_outputs(),
    }


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads(EXPECTED.read_text(encoding="utf-8"))


def test_the_pinned_file_is_of_this_extractor_version(expected):
    assert expected["version"] == RULE_EXTRACTOR_VERSION


@pytest.mark.parametrize("config", ["default", "max_keywords=2", "max_rule_claims=2"])
def test_extractor_output_is_exactly_the_pinned_one(expected, config):
    kwargs = {} if config == "default" else {config.split("=")[0]: int(config.split("=")[1])}
    got = json.loads(json.dumps(_extractor_outputs(RuleExtractor(ExtractionConfig(**kwargs)),
                                                   full=config == "default")))
    assert len(got) == len(expected[config]) == len(TURNS)
    for i, (g, e) in enumerate(zip(got, expected[config])):
        assert g == e, f"turn {i}: {TURNS[i][3][:60]!r}"


def test_language_helpers_answer_exactly_as_pinned(expected):
    got = json.loads(json.dumps(_helper_outputs()))
    for name, values in expected["helpers"].items():
        assert got[name] == values, name


def test_threads_at_once_give_the_serial_output(expected):
    """Caches inside the extractor and its helpers are shared by threads: 16 threads at once
    must each give exactly the pinned output."""
    results: list = [None] * 16
    barrier = threading.Barrier(16)

    def work(k: int) -> None:
        barrier.wait()
        results[k] = json.loads(json.dumps(_extractor_outputs(RuleExtractor(), full=True)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected["default"] for r in results)


# --------------------------------------------------------------------------- pre-checks
# The speed work skips regex scans when a cheap test says they cannot match (cue words in the
# lowercased text). These tests hold each pre-checked function to the plain scans it stands
# for, on phrases that exercise every cue (any case, other scripts, characters that a
# case-insensitive regex folds to ASCII letters).

CUE_PHRASES = [
    # time expressions
    "on 7 May 2023", "May 7th, 2023", "2023-05-07", "2023/5/7", "7 may", "May 7", "in May", "this MAY",
    "last March", "the end of June", "mid-Sept", "summer 2022", "in 2021", "back in 1999", "yesterday",
    "LAST NIGHT", "earlier today", "tonight", "this Afternoon", "tomorrow", "the day before yesterday",
    "the day after tomorrow", "3 days ago", "a few days ago", "in 2 days", "last week", "this past week",
    "next week", "last weekend", "over the weekend", "two weeks ago", "in three weeks", "last Saturday",
    "this coming Monday", "on Friday", "last month", "this month", "next month", "a couple of months ago",
    "in 6 months", "last year", "the past year", "next year", "five years ago", "in 10 years",
    "last summer", "this past winter", "next spring", "this fall", "past autumn", "2023-05",
    "on \uff17 May", "7 May \uff12\uff10\uff12\uff13", "version 3.12 in May", "1920s", "20 people",
    # plan, preference, relationship, past, profile, negation cues
    "I WILL go", "we won't", "Shall we", "gonna try", "Going To start", "planned to", "our plans",
    "I intend", "hoping to", "hope to", "looking forward", "about to", "can't wait", "you should",
    "LET'S go", "want to", "wanna", "would like to", "thinking of", "thinking about", "We'll see",
    "my favorite", "Favourite", "I prefer", "a fan of", "passionate about", "obsessed with",
    "can't stand", "I really like it", "She loves it", "They enjoy it", "Ana adores it", "I hate it",
    "we dislike it", "He's married", "ENGAGED", "divorced", "dating", "my boyfriend", "a girlfriend",
    "her husband", "his wife", "my fiancée", "a fiance", "best friends", "in a relationship",
    "broke up", "the breakup", "a single parent", "it was", "they were", "I went", "did", "had",
    "got", "made", "took", "saw", "came", "gave", "found", "told", "felt", "met", "left", "bought",
    "began", "ran", "wrote", "won", "lost", "spent", "ago", "last", "Baked bread", "we finished it",
    "she is excited", "my job", "works as a nurse", "worked at a bank", "occupation", "career",
    "profession", "identity", "identifies as", "transgender", "gay", "lesbian", "bisexual",
    "religious", "believe", "single", "hobby", "hobbies", "allergic", "health", "diagnosed",
    "a goal", "dream", "passion", "passionate", "personality", "values", "born", "grew up",
    "lives in", "moved to", "moved from", "not", "no", "never", "nobody", "nothing", "none",
    "neither", "nor", "nowhere", "cannot", "don't", "WON'T",
]
# Characters a case-insensitive regex matches to ASCII letters (İ ı ſ K), and other scripts.
FOLDED = [("s", "\u017f"), ("k", "\u212a"), ("i", "\u0131"), ("I", "\u0130")]


def _cue_texts() -> list[str]:
    out = []
    for phrase in CUE_PHRASES:
        for variant in (phrase, phrase.upper(), phrase.title(), f"Well, {phrase} \u2014 caf\u00e9 \u2019x\u2019.",
                        f"\u00bfY {phrase}?"):
            out.append(variant)
        for ascii_letter, folded in FOLDED:
            if ascii_letter in phrase:
                out.append(phrase.replace(ascii_letter, folded))
    return out + [t[3] for t in TURNS] + SENTENCES


def test_folds_to_ascii_lists_every_character_a_case_insensitive_regex_reads_as_ascii():
    import re

    from memcompile_local.language import tokens

    letter = re.compile("[a-z0-9]", re.IGNORECASE)  # letters and digits (cues such as "19")
    found = {chr(c) for c in range(128, sys.maxunicode + 1) if letter.fullmatch(chr(c))}
    assert found == set(tokens._FOLDS_TO_ASCII)


def test_time_pattern_precheck_changes_no_mention(monkeypatch):
    from memcompile_local.language import timeparse

    texts = _cue_texts()
    anchors = [None, parse_session_time(LOCOMO_TIME)]
    checked = [[find_time_mentions(t, a, prefer=p, strict_case=c) for a in anchors for p in ("past", "future")
                for c in (True, False)] for t in texts]
    assert sum(bool(m) for row in checked for m in row) > 200  # the phrases do hold time expressions
    monkeypatch.setattr(timeparse, "_cue_groups", lambda text: None)  # every pattern scanned
    scanned = [[find_time_mentions(t, a, prefer=p, strict_case=c) for a in anchors for p in ("past", "future")
                for c in (True, False)] for t in texts]
    assert checked == scanned


def test_event_profile_and_negation_prechecks_change_no_answer():
    from memcompile_local.address import extract_rule as er
    from memcompile_local.language import negation
    from memcompile_local.language.tokens import normalize_apostrophes

    def past(s: str) -> bool:  # _has_past_cue without pre-checks
        return bool(er._PAST_WORD.search(s) or er._FIRST_ED_WORD.match(s)
                    or any(m.group(1).lower() not in er._PRESENT_BE for m in er._ED_WORD.finditer(s)))

    def event_type(sentence: str) -> str:  # classify_event_type without pre-checks
        s = normalize_apostrophes(sentence)
        if er._PLAN.search(s):
            return "plan"
        if er._PREFERENCE.search(s):
            return "preference"
        if er._RELATIONSHIP.search(s) and not past(s):
            return "relationship"
        return "occurrence" if past(s) else "state"

    texts = _cue_texts()
    assert [classify_event_type(t) for t in texts] == [event_type(t) for t in texts]
    assert len({classify_event_type(t) for t in texts}) == 5
    assert [er._has_profile_cue(t) for t in texts] == [er._PROFILE_CUES.search(t) is not None for t in texts]
    assert [negation.has_negation(t) for t in texts] == [
        negation._NEGATION.search(normalize_apostrophes(t)) is not None for t in texts]


def test_cached_answers_are_fresh_lists():
    first = proper_names("I met Ana Sousa and Tomas in Porto.", ["Tomas"])
    first.append("changed")
    assert proper_names("I met Ana Sousa and Tomas in Porto.", ["Tomas"]) == ["Ana Sousa", "Tomas", "Porto"]


def _dump(record: dict) -> str:
    """JSON with one list item per line (short lines for a readable diff, no deep indent)."""
    lines = ["{"]
    for n, key in enumerate(sorted(record)):
        value = record[key]
        end = "," if n + 1 < len(record) else ""
        if isinstance(value, dict):
            value = sorted(value.items())
            items = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True, ensure_ascii=False)}" for k, v in value]
            lines += [f"{json.dumps(key)}: {{"] + [f" {x}," for x in items[:-1]] + [f" {items[-1]}", f"}}{end}"]
        elif isinstance(value, list):
            items = [json.dumps(v, sort_keys=True, ensure_ascii=False) for v in value]
            lines += [f"{json.dumps(key)}: ["] + [f" {x}," for x in items[:-1]] + [f" {items[-1]}", f"]{end}"]
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}{end}")
    return "\n".join(lines) + "\n}\n"


if __name__ == "__main__" and "--record" in sys.argv:
    EXPECTED.write_text(_dump(_record()), encoding="utf-8")
    print(f"wrote {EXPECTED}")
