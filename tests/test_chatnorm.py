"""Chat-log normalization (research/chatnorm.py; ``FusionConfig.chat_norm`` until issue 49
removed it, measured and not shipped) on text of my own writing, and research/dropped.py's
chat-normalized fused index. Research code: marked ``research``, run in CI like the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))

from chatnorm import SLANG, emoji_words, normalize_chat, squash_elongation  # noqa: E402
from dropped import chat_norm_index  # noqa: E402
from memcompile_local.config import FusionConfig  # noqa: E402
from memcompile_local.fused.channels import fused_scores  # noqa: E402
from memcompile_local.fused.index import FusionIndex  # noqa: E402
from memcompile_local.fused.retriever import FusedRetriever  # noqa: E402
from memcompile_local.language.stemming import stem_terms  # noqa: E402
from memcompile_local.types import SourcePacket  # noqa: E402

pytestmark = pytest.mark.research


def turn(i: int, session: int, speaker: str, text: str) -> SourcePacket:
    return SourcePacket(namespace="ns", packet_id=f"D{session}:{i}", ordinal=i, session_index=session,
                        session_id=f"s{session}", session_time="3 March, 2024", speaker=speaker, content=text,
                        image_caption=None, sha256="x")


CHAT = [
    turn(0, 1, "Tova", "ugh my shift ran late again"),
    turn(1, 1, "Ty", "same, the printer jammed twice"),
    turn(2, 2, "Tova", "its my bday tmrw!! \U0001F382 we're gonna bake a lemon tart"),
    turn(3, 2, "Ty", "sooo jealous, save me a slice"),
    turn(4, 3, "Tova", "sent u a pic of the new kitten"),
    turn(5, 3, "Ty", "she's adorable, what color are her eyes"),
]

LEXICAL_ONLY = dict(packet_weight=0, speaker_weight=0, temporal_weight=0, time_match_weight=0)


# ------------------------------------------------------------------------ the rewrite itself

def test_chat_spellings_become_standard_words():
    assert normalize_chat("see u tmrw, gonna be late bc of the bus") == \
        "see u tomorrow, going to be late because of the bus"
    assert normalize_chat("Gonna call ya l8r") == "going to call ya later"  # capitalized at the start
    assert normalize_chat("dinner w/ Ona, then home w/o the car") == "dinner with Ona, then home without the car"
    assert stem_terms(normalize_chat("my bday pics")) == stem_terms("my birthday pictures")


def test_acronyms_and_names_are_left_alone():
    assert normalize_chat("BC and HR signed it") == "BC and HR signed it"  # all caps: not chat spelling
    assert normalize_chat("ty for the lift, Ty") == "thank you for the lift, Ty"  # mid-sentence: a name
    assert normalize_chat("Ok. Ty for the lift") == "Ok. thank you for the lift"  # a sentence's first word
    assert normalize_chat("ty for the lift", keep=["Ty"]) == "ty for the lift"  # a participant's name


def test_elongations_are_squashed_but_code_and_single_letters_are_not():
    assert squash_elongation("sooo") == "so"
    assert squash_elongation("Yesssss") == "Yes"
    assert squash_elongation("whyyy") == "why"
    for word in ("www", "mmm", "xxx1", "aaa_bbb", "coffee", "bookkeeper"):
        assert squash_elongation(word) == word
    assert normalize_chat("that was sooo good, ppl loved it") == "that was so good, people loved it"
    assert normalize_chat("tmrwww") == "tomorrow"  # squashed, then expanded


def test_emoji_and_emoticons_become_words():
    assert emoji_words("\U0001F382") == "birthday cake"
    assert emoji_words("\U0001F602") == "tears joy"  # "face", "with", "of" dropped
    assert normalize_chat("party \U0001F389").split() == ["party", "party", "popper"]
    assert normalize_chat("see you there :) <3") == "see you there smile love"
    assert stem_terms("cake \U0001F382") == ["cake"]  # without the option the tokenizer drops emoji


def test_ordinary_text_is_unchanged():
    for text in ("We planted tomatoes in the garden last April.",
                 "The meeting is at 10:30 in room B2; bring the (c) notice.",
                 "def f(x):\n    return cos(x) ** 2  # k = 3",
                 "", "Coffee? Bookkeeper. Mississippi."):
        assert normalize_chat(text) == text


def test_idempotent():
    for text in [p.content for p in CHAT] + ["omg sooo sorry, thx!! \U0001F602 :)", "idk tbh, w/ ppl rn"]:
        once = normalize_chat(text)
        assert normalize_chat(once) == once


def test_the_map_is_lower_case_and_maps_to_no_key():
    for key, value in SLANG.items():
        assert key == key.lower()
        assert not set(value.split()) & set(SLANG), key


# ------------------------------------------------------------------------ the dropped option

def test_the_chat_normalized_index_reaches_the_lexical_channel():
    """'you' is a stopword, so 'u' -> 'you' changes no BM25 term; the rewrites that matter
    yield content words, as 'bday' -> 'birthday' and 'pic' -> 'picture' here."""
    cfg = FusionConfig(**LEXICAL_ONLY)
    plain = FusionIndex.build(CHAT, {}, cfg)
    normed = chat_norm_index(plain, CHAT, {}, cfg)
    for question, pid, row in (("When is Tova's birthday?", "D2:2", 2),
                               ("Who sent a picture of a kitten?", "D3:4", 4),
                               ("Is anyone going to bake something?", "D2:2", 2)):
        lex_on = fused_scores(normed, question, None, cfg).channels["lexical"]
        assert lex_on[row] == lex_on.max() > 0
        assert list(FusedRetriever(normed, cfg).retrieve(question, None, 1).packet_ids) == [pid]
    assert fused_scores(plain, "When is Tova's birthday?", None, cfg).channels["lexical"][2] == 0.0
    assert "go" not in plain.query_terms("gonna") and normed.query_terms("gonna") == ["go"]  # questions too


def test_a_participant_named_like_an_abbreviation_keeps_the_name():
    cfg = FusionConfig(**LEXICAL_ONLY)
    index = chat_norm_index(FusionIndex.build(CHAT, {}, cfg), CHAT, {}, cfg)
    assert "ty" in index.query_terms("What did Ty say about the printer?")
    assert fused_scores(index, "What jammed for Ty?", None, cfg).channels["lexical"][1] == 1.0


def test_chat_norm_is_not_package_config():
    assert "chat_norm" not in FusionConfig.__dataclass_fields__
