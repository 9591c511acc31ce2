"""Reader views: same packet sequence in every view; what each block shows."""

from __future__ import annotations

import re

import pytest

from memcompile_local.errors import ConfigError, DataFormatError
from memcompile_local.evidence.views import (
    VIEW_NAMES,
    render_claim_bundle,
    render_raw_packets,
    render_representative_claims,
    render_view,
    view_blocks,
)
from memcompile_local.types import Descriptor, SourcePacket, content_sha256


def _packet(pid, text, *, time="8 May 2023", speaker="Caroline", caption=None, query=None):
    return SourcePacket(
        namespace="ns", packet_id=pid, ordinal=0, session_index=1, session_id="s1",
        session_time=time, speaker=speaker, content=text, image_caption=caption,
        sha256=content_sha256(text, caption), image_query=query,
    )


def _claim(pid, idx, text):
    return Descriptor(
        descriptor_id=f"ns:{pid}:{idx}", namespace="ns", packet_id=pid, claim_index=idx, text=text,
        speaker="Caroline", session_index=1, session_time="8 May 2023",
    )


PACKETS = [
    _packet("D2:4", "I went to a support group yesterday, it was powerful.", time="8 May 2023"),
    _packet("D1:3", "Look at this!", speaker="Melanie", time="1 May 2023", caption="a pottery bowl",
            query="pottery bowl handmade"),
    _packet("D5:1", "Hey, how are you?", speaker="Melanie", time="3 June 2023"),  # no claims
    _packet("D3:9", "We camped near the lake with the kids.", speaker="Melanie", time="20 May 2023"),
]
# Claims given out of construction order on purpose: the bundle must sort them.
CLAIMS = {
    "D2:4": [_claim("D2:4", 1, "The support group was powerful for Caroline."),
             _claim("D2:4", 0, "Caroline attended an LGBTQ support group on 7 May 2023.")],
    "D1:3": [_claim("D1:3", 0, "Melanie made a pottery bowl.")],
    "D3:9": [_claim("D3:9", 0, "Melanie camped near a lake with her kids."),
             _claim("D3:9", 1, "The camping trip was in May 2023.")],
}
REPRESENTATIVE = {"D2:4": "ns:D2:4:1", "D1:3": "ns:D1:3:0"}  # D5:1 and D3:9: not address hits


def _headers(text):
    return re.findall(r"^\[(\d+)\] dia_id=(\S+) \| recorded: (.*?) \| speaker: (.*)$", text, flags=re.M)


def test_all_views_render_the_same_packet_sequence():
    texts = {
        "claim_bundle": render_claim_bundle(PACKETS, CLAIMS),
        "raw_packet": render_raw_packets(PACKETS),
        "representative_claim": render_representative_claims(PACKETS, REPRESENTATIVE, CLAIMS),
    }
    expected = [(str(i), p.packet_id, p.session_time, p.speaker) for i, p in enumerate(PACKETS, 1)]
    for name, text in texts.items():
        assert _headers(text) == expected, name
        assert render_view(name, PACKETS, CLAIMS, REPRESENTATIVE) == text
        assert [pid for pid, _ in view_blocks(name, PACKETS, CLAIMS, REPRESENTATIVE)] == [
            p.packet_id for p in PACKETS
        ]
    assert set(VIEW_NAMES) == set(texts)


def test_claim_bundle_lists_all_claims_in_construction_order_and_falls_back_to_raw():
    text = render_claim_bundle(PACKETS, CLAIMS)
    blocks = text.split("\n\n")
    assert blocks[0].splitlines()[1:] == [
        "> - Caroline attended an LGBTQ support group on 7 May 2023.",
        "> - The support group was powerful for Caroline.",
    ]
    assert blocks[2].splitlines()[1:] == ["> Hey, how are you?"]  # zero claims: raw text
    assert "camping trip was in May 2023" in blocks[3]


def test_raw_view_shows_text_caption_and_query():
    block = render_raw_packets(PACKETS).split("\n\n")[1]
    assert block.splitlines()[1:] == [
        "> Look at this!",
        "> (shared image: a pottery bowl)",
        "> (image search: pottery bowl handmade)",
    ]


def test_representative_view_uses_the_address_claim_then_fallbacks():
    blocks = render_representative_claims(PACKETS, REPRESENTATIVE, CLAIMS).split("\n\n")
    assert blocks[0].splitlines()[1:] == ["> - The support group was powerful for Caroline."]
    assert blocks[1].splitlines()[1:] == ["> - Melanie made a pottery bowl."]
    assert blocks[2].splitlines()[1:] == ["> Hey, how are you?"]  # no hit, no claim: raw text
    assert blocks[3].splitlines()[1:] == ["> - Melanie camped near a lake with her kids."]  # first claim
    # Descriptor objects are accepted as representatives too.
    rep = {"D2:4": CLAIMS["D2:4"][0]}
    text = render_representative_claims(PACKETS[:1], rep)
    assert text.splitlines()[1] == "> - The support group was powerful for Caroline."


def test_inconsistent_inputs_raise_typed_errors():
    with pytest.raises(DataFormatError):
        render_claim_bundle(PACKETS[:1], {"D2:4": [_claim("D1:3", 0, "wrong packet")]})
    with pytest.raises(DataFormatError):
        render_representative_claims(PACKETS[:1], {"D2:4": "ns:D2:4:7"}, CLAIMS)
    with pytest.raises(DataFormatError):
        render_raw_packets([PACKETS[0], PACKETS[0]])
    with pytest.raises(ConfigError):
        render_view("summary", PACKETS, CLAIMS, REPRESENTATIVE)


def test_empty_sequence_renders_empty_text():
    assert render_claim_bundle([], CLAIMS) == ""


def test_block_cap_cuts_a_huge_turn_with_a_visible_marker():
    huge = _packet("D9:1", "word " * 20000 + "THE END")
    small = PACKETS[0]
    for name in VIEW_NAMES:
        blocks = view_blocks(name, [huge, small], CLAIMS, REPRESENTATIVE, max_block_chars=2000)
        big, other = blocks[0][1], blocks[1][1]
        assert len(big) <= 2000
        assert "THE END" not in big
        last = big.splitlines()[-1]
        assert last.startswith("(… ") and last.endswith("more characters of this packet not shown)")
        n_cut = int(last.split()[1])
        assert 90000 < n_cut < 101000  # most of the ~100,000 characters were left out
        assert all(line.startswith(">") for line in big.splitlines()[1:-1])
        # A block under the cap renders exactly as without one.
        assert other == view_blocks(name, [huge, small], CLAIMS, REPRESENTATIVE)[1][1]


def test_block_cap_must_leave_room_for_a_header():
    with pytest.raises(ConfigError):
        render_raw_packets(PACKETS, max_block_chars=10)
    with pytest.raises(ConfigError):
        render_view("raw_packet", PACKETS, max_block_chars=True)
