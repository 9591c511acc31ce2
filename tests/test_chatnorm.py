"""Chat-log normalization (language/chatnorm.py, FusionConfig.chat_norm) on text of my own writing."""

from __future__ import annotations

import pytest

from memcompile_local.adapters.scripted import HashEmbedder
from memcompile_local.config import FusionConfig, PipelineConfig
from memcompile_local.errors import ConfigError
from memcompile_local.fused.channels import fused_scores
from memcompile_local.fused.index import FusionIndex
from memcompile_local.fused.retriever import select_fused
from memcompile_local.language.chatnorm import SLANG, emoji_words, normalize_chat, squash_elongation
from memcompile_local.language.stemming import stem_terms
from memcompile_local.memory import Memory
from memcompile_local.pipeline.presets import apply_preset
from memcompile_local.store import MemoryStore
from memcompile_local.types import SourcePacket


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

LEXICAL_ONLY = dict(packet_weight=0, speaker_weight=0, temporal_weight=0, time_match_weight=0,
                    neighbor_context=False, complement="none")


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


# ------------------------------------------------------------------------ the option

def test_the_option_reaches_the_lexical_channel():
    """'you' is a stopword, so 'u' -> 'you' changes no BM25 term; the rewrites that matter
    yield content words, as 'bday' -> 'birthday' and 'pic' -> 'picture' here."""
    off = FusionConfig(**LEXICAL_ONLY)
    on = FusionConfig(**LEXICAL_ONLY, chat_norm=True)
    plain, normed = FusionIndex.build(CHAT, {}, off), FusionIndex.build(CHAT, {}, on)
    assert normed.chat_norm and not plain.chat_norm
    for question, pid, row in (("When is Tova's birthday?", "D2:2", 2),
                               ("Who sent a picture of a kitten?", "D3:4", 4),
                               ("Is anyone going to bake something?", "D2:2", 2)):
        lex_on = fused_scores(normed, question, None, on).channels["lexical"]
        assert lex_on[row] == lex_on.max() > 0
        assert select_fused(normed, question, None, on, 1) == [pid]
    assert fused_scores(plain, "When is Tova's birthday?", None, off).channels["lexical"][2] == 0.0
    assert fused_scores(plain, "Is anyone going to bake something?", None, off).channels["lexical"][2] > 0  # "bake"
    assert "go" not in plain.query_terms("gonna") and normed.query_terms("gonna") == ["go"]  # questions too


def test_a_participant_named_like_an_abbreviation_keeps_the_name():
    on = FusionConfig(**LEXICAL_ONLY, chat_norm=True)
    index = FusionIndex.build(CHAT, {}, on)
    assert "ty" in index.query_terms("What did Ty say about the printer?")
    assert fused_scores(index, "What jammed for Ty?", None, on).channels["lexical"][1] == 1.0


def test_the_option_through_a_memory_and_an_append(tmp_path):
    cfg = apply_preset("model-free", PipelineConfig())
    on = cfg.replace(fusion={"chat_norm": True, "ranker": "weighted"})
    mem = Memory(MemoryStore(tmp_path / "m.sqlite"), on, embedder=HashEmbedder(dim=32))
    # Enough turns that the appended turn's terms are rare (BM25's idf is 0 at half the turns).
    mem.add("n", [{"time": "2024-03-04 09:00", "turns": [
        {"speaker": "Ana", "text": "the gym was packed tonight"},
        {"speaker": "Bea", "text": "ugh, same at mine"}]},
        {"time": "2024-03-04 18:00", "turns": [
            {"speaker": "Ana", "text": "did you finish the crossword"},
            {"speaker": "Bea", "text": "stuck on seven down as usual"}]},
        {"time": "2024-03-04 21:00", "turns": [
            {"speaker": "Ana", "text": "the neighbours' dog barked all evening"},
            {"speaker": "Bea", "text": "earplugs, trust me"}]}])
    mem.build("n")
    assert mem.view("n").fusion.chat_norm
    mem.add("n", [{"time": "2024-03-05 10:00", "turns": [
        {"speaker": "Ana", "text": "my fave bakery closes tmrw"},
        {"speaker": "Bea", "text": "nooo, the one with the rye bread?"}]}])
    mem.build("n")
    view = mem.view("n")
    row = view.fusion.row_of[view.packets[6].packet_id]
    assert view.packets[6].content.startswith("my fave")
    assert view.fusion.lexical.scores(stem_terms("favorite tomorrow"))[row] > 0  # the appended turn, normalized
    lexical = fused_scores(view.fusion, "Which bakery is Ana's favorite?", None, on.fusion).channels["lexical"]
    assert lexical[row] == lexical.max() > 0


def test_default_is_off_and_a_malformed_value_is_a_typed_error():
    assert FusionConfig().chat_norm is False
    assert PipelineConfig.from_dict({"fusion": {"chat_norm": True}}).fusion.chat_norm is True
    for bad in ("yes", 1, None, ["on"]):
        with pytest.raises(ConfigError, match=r"fusion\.chat_norm"):
            PipelineConfig.from_dict({"fusion": {"chat_norm": bad}})
    with pytest.raises(ConfigError, match=r"fusion\.chat_norm"):
        PipelineConfig().replace(fusion={"chat_norm": "on"})
