"""The shared English helpers of memcompile_local.language: stems (also under 16 threads),
temporal cues, time phrases, name and phrase cleaning, lemmas, and the layering rule that
the language package sits below both planes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest

from memcompile_local.language import (
    clean_people,
    clean_phrases,
    is_temporal_question,
    is_time_phrase,
    keyword_phrases,
    known_name,
    name_tokens,
    stem_terms,
    stem_words,
)
from memcompile_local.language import stemming
from memcompile_local.language.lemmas import lemma

from _threads import run_threads

# Inflected forms of my own choosing; the many shapes (-ies, -ing, -ed, doubled consonants,
# long derivations) exercise different Snowball steps, where a shared stemmer's state breaks.
_FORMS = """camping camped campers hiking hiked hikes painting painted paintings studies studied
studying running runner happily happiness generously generational organizations organizing
volunteering volunteered relationships adoption adopting adopted conferences counseling
counselors transitioning transitioned friendships celebrations celebrating photography
photographs pottery potteries marathons skateboarding sculptures sculpting vacations""".split()


def _texts(n: int = 600) -> list[str]:
    """Deterministic sentences, each a different rotation of the forms above."""
    out = []
    for i in range(n):
        k = i % len(_FORMS)
        words = _FORMS[k:] + _FORMS[:k]
        out.append(" ".join(words[: 8 + i % 17]))
    return out


def hammer(stem, texts: list[str], threads: int = 16, rounds: int = 3) -> tuple[int, list[BaseException]]:
    """(texts stemmed differently from the serial result, exceptions) with ``threads`` threads
    stemming all ``texts`` at once, ``rounds`` times each."""
    expected = [stem(t) for t in texts]
    wrong = 0
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work(offset: int) -> None:
        nonlocal wrong
        bad = 0
        start.wait()
        for r in range(rounds):
            for j in range(len(texts)):
                i = (j + offset * 37 + r) % len(texts)  # threads walk the texts out of step
                try:
                    got = stem(texts[i])
                except Exception as exc:  # what the test counts: a shared stemmer raises mid-word
                    with lock:
                        errors.append(exc)
                    continue
                bad += got != expected[i]
        with lock:
            wrong += bad

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return wrong, errors


def test_stems_from_16_threads_equal_the_serial_stems():
    wrong, errors = hammer(stem_terms, _texts())
    assert errors == [] and wrong == 0, f"{wrong} wrong stem lists, {len(errors)} exceptions: {errors[:3]}"


def test_each_thread_gets_its_own_stemmer_object():
    seen = []

    def grab() -> None:
        seen.append(id(stemming._stemmer()))
        stemming._stemmer()  # the second call on a thread reuses that thread's object

    assert run_threads(lambda _: grab(), 4) == []
    assert len(set(seen)) == 4
    assert stemming._stemmer() is stemming._stemmer()


def test_stems_of_inflections_meet():
    assert stem_terms("We camped; camping is fun and campers agree") == ["camp", "camp", "fun", "camper", "agre"]
    assert stem_words(["studies", "studying", "studied"]) == ["studi", "studi", "studi"]
    assert stem_terms("") == [] and stem_words([]) == []


# (question, whether it asks about time): the one table of the temporal-question classifier,
# which test_answer.py also runs through the answer step's prompt choice.
TEMPORAL_QUESTIONS = [
    ("When is the bake sale?", True),
    ("How long has Ravi kept bees?", True),
    ("In which month did the lease end?", True),
    ("How many weeks was the trip?", True),
    ("When did Caroline go to the support group?", True),
    ("When did Caroline go to the LGBTQ support group?", True),
    ("What date is the concert?", True),
    ("How long ago did Melanie start painting?", True),
    ("How long has Melanie been married?", True),
    ("How long has Melanie been practicing art?", True),
    ("In which year did they meet?", True),
    ("Which year did Caroline move from Sweden?", True),
    ("Which month did Sam move?", True),
    ("How many weeks did the course last?", True),
    ("How many days did the trip take?", True),
    ("Did she call when the storm hit?", True),
    ("What colour is Ravi's kayak?", False),
    ("How many bees does Ravi keep?", False),
    ("What is Caroline's favorite book?", False),
    ("How many kids does Melanie have?", False),
    ("Where did they go camping?", False),
    ("What is Caroline's identity?", False),
    ("Would Caroline likely pursue writing as a career?", False),
    ("May I know what Melanie's kids like?", False),
    ("", False),
]


@pytest.mark.parametrize("question, temporal", TEMPORAL_QUESTIONS)
def test_temporal_question_cues(question, temporal):
    assert is_temporal_question(question) is temporal


@pytest.mark.parametrize("phrase, is_time", [
    ("last week", True), ("May 2023", True), ("2022-07", True), ("next Saturday", True),
    ("beekeeping course", False), ("May", False), ("the week-long hike", False),
])
def test_time_phrase(phrase, is_time):
    assert is_time_phrase(phrase) is is_time


def test_cleaning_drops_pronouns_roles_duplicates_and_padding():
    assert clean_people(["me", " Ravi ", "ravi", "assistant", "Joan  Li", 3, ""]) == ["Ravi", "Joan Li"]
    assert clean_phrases(["Kayak trip.", "kayak trip", "bees", "Ravi"], drop=["ravi"]) == ["Kayak trip", "bees"]


def test_names_and_nicknames():
    known = ["Ravindra", "Joan"]
    assert known_name("Rav", known) == "Ravindra"
    assert known_name("Ra", known) is None  # two letters are too few for a nickname
    assert name_tokens("Rav's hive and the ravine", known) == {"rav"}  # lower-case words are not names
    assert keyword_phrases("Rav showed Joan the new observation hive", known_names=known) == ("observation hive",)


@pytest.mark.parametrize("word, base", [
    ("went", "go"), ("baking", "bake"), ("tries", "try"), ("stopped", "stop"), ("hive", "hive"),
])
def test_lemmas(word, base):
    assert lemma(word) == base


def _fresh_modules(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_language_package_sits_below_both_planes_and_no_extractor_imports_another():
    below = _fresh_modules("""
        import json, sys
        import memcompile_local.language
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("memcompile_local.")
                                and not m.startswith("memcompile_local.language"))))
    """)
    assert below == []
    for module, other in (("intent", "extract_"), ("extract_llm", "extract_rule"), ("extract_rule", "extract_llm")):
        loaded = _fresh_modules(f"""
            import json, sys
            import memcompile_local.address.{module}
            print(json.dumps(sorted(m for m in sys.modules if "{other}" in m and not m.endswith(".{module}"))))
        """)
        assert loaded == [], f"importing address.{module} loads {loaded}"
