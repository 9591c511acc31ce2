"""The answer-type cue (language/answertype.py) and the fused selector's answer_type channel."""

import numpy as np

from memcompile_local.config import FusionConfig
from memcompile_local.fused.channels import CHANNELS, FusedQuery, answer_type_channel
from memcompile_local.fused.index import FusionIndex
from memcompile_local.language.answertype import asks_for_entity, names_entity
from memcompile_local.types import SourcePacket


def _packet(i, speaker, content):
    return SourcePacket(namespace="n", packet_id=f"p{i}", ordinal=i, session_index=1, session_id="s1",
                        session_time="1:00 pm on 8 May, 2023", speaker=speaker, content=content, image_caption=None, sha256="x")


def test_entity_questions():
    assert asks_for_entity("What novels did Ines lend out?")
    assert asks_for_entity("Which cities has Tomas cycled through?")
    assert asks_for_entity("Who did Ines go sailing with?")
    assert asks_for_entity("Where has Tomas kept his boat?")
    assert not asks_for_entity("What does Ines do after a long shift?")
    assert not asks_for_entity("When did Tomas start the pottery class?")


def test_turns_naming_entities():
    people = ("Ines", "Tomas")
    assert names_entity("We went to Paris last week!", people)
    assert names_entity('I finished "The Salt Road" at last.', people)
    assert not names_entity("Hey Ines! Good to see you. How have you been?", people)  # a participant, a greeting
    assert not names_entity("Thanks, Tomas! I went running on Friday.", people)  # date words do not count
    assert not names_entity("Paris was lovely.", people)  # the first word never counts


def test_channel_on_by_default_off_at_zero_and_on_assistant_histories():
    packets = [_packet(0, "Ines", "Hi! We sailed to Porto."), _packet(1, "Tomas", "Oh I saw Lisbon too.")]
    assert "answer_type" in CHANNELS
    assert FusionConfig().answer_type_weight == 0.75
    assert list(FusionIndex.build(packets, {}, FusionConfig()).entity_rows) == [1.0, 1.0]
    ix = FusionIndex.build(packets, {}, FusionConfig(answer_type_weight=0))
    assert ix.entity_rows is None
    on = FusionIndex.build(packets, {}, FusionConfig(answer_type_weight=0.75))
    assert list(on.entity_rows) == [1.0, 1.0]
    # Only the named participant's turns for a question naming one; every turn otherwise.
    assert list(answer_type_channel(on, FusedQuery("Which cities has Ines visited?", None))) == [1.0, 0.0]
    assert list(answer_type_channel(on, FusedQuery("Which cities have they visited?", None))) == [1.0, 1.0]
    assert not answer_type_channel(on, FusedQuery("How is Ines?", None)).any()
    assistant = [_packet(0, "user", "I went to Porto."), _packet(1, "assistant", "Porto is in Portugal.")]
    assert FusionIndex.build(assistant, {}, FusionConfig(answer_type_weight=0.75)).entity_rows is None
    assert not np.any(answer_type_channel(ix, FusedQuery("Which cities has Ines visited?", None)))
