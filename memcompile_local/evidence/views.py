"""Reader views over a fixed packet sequence (seed 000, Section 3.4.3, Table 4, Appendix C.3).

Every view renders the same packets in the same order; only what each block shows differs:

* ``claim_bundle`` (default, Eq. 15-16): every retained claim of the packet in construction
  order (``claim_index``). A packet without any retained claim (extraction dropped them
  all, e.g. a greeting that nevertheless got scheduled) shows its raw text instead, so no
  selected packet renders as an empty block.
* ``raw_packet``: the turn text plus image caption and image query when present.
* ``representative_claim``: the single highest-scoring address claim of the packet (the
  representative chosen at the normalization boundary). A packet that was not an address hit
  (a dense frontier addition) has no representative: it shows its first claim, or its raw
  text when it has no claim.

Each block starts with the same header in every view::

    [1] dia_id=D3:7 | recorded: 1:56 pm on 8 May, 2023 | speaker: Caroline

The number is the position in the packet sequence; blocks are joined by a blank line.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from memcompile_local.errors import ConfigError, DataFormatError
from memcompile_local.types import Descriptor, SourcePacket

__all__ = [
    "VIEW_NAMES",
    "render_claim_bundle",
    "render_raw_packets",
    "render_representative_claims",
    "render_view",
    "view_blocks",
    "block_header",
]

VIEW_NAMES: tuple[str, ...] = ("claim_bundle", "raw_packet", "representative_claim")

DescriptorMap = Mapping[str, Sequence[Descriptor]]
RepresentativeMap = Mapping[str, "str | Descriptor"]


def block_header(position: int, packet: SourcePacket) -> str:
    """Header line of the ``position``-th (1-based) block."""
    return (f"[{position}] dia_id={packet.packet_id} | recorded: {packet.session_time} "
            f"| speaker: {packet.speaker}")


def _raw_lines(packet: SourcePacket) -> list[str]:
    lines = [packet.content.strip()]
    if packet.image_caption:
        lines.append(f"(shared image: {packet.image_caption.strip()})")
    if packet.image_query:
        lines.append(f"(image search: {packet.image_query.strip()})")
    return [line for line in lines if line]


def _claims_of(packet: SourcePacket, descriptors_by_packet: DescriptorMap | None) -> list[Descriptor]:
    """The packet's retained claims sorted by construction order; checks their foreign key."""
    if not descriptors_by_packet:
        return []
    claims = list(descriptors_by_packet.get(packet.packet_id, ()))
    for i, d in enumerate(claims):
        if d.packet_id != packet.packet_id:
            raise DataFormatError(
                "<descriptors_by_packet>", f"[{packet.packet_id!r}][{i}]",
                f"a descriptor whose packet_id is {packet.packet_id!r}", f"got {d.packet_id!r}",
            )
    return sorted(claims, key=lambda d: (d.claim_index, d.descriptor_id))


def _bundle_body(packet: SourcePacket, descriptors_by_packet: DescriptorMap | None) -> list[str]:
    claims = _claims_of(packet, descriptors_by_packet)
    if not claims:
        return _raw_lines(packet)
    return [f"- {d.text.strip()}" for d in claims]


def _representative_body(
    packet: SourcePacket,
    representative_by_packet: RepresentativeMap | None,
    descriptors_by_packet: DescriptorMap | None,
) -> list[str]:
    claims = _claims_of(packet, descriptors_by_packet)
    rep = (representative_by_packet or {}).get(packet.packet_id)
    if isinstance(rep, Descriptor):
        if rep.packet_id != packet.packet_id:
            raise DataFormatError(
                "<representative_by_packet>", f"[{packet.packet_id!r}]",
                f"a descriptor of packet {packet.packet_id!r}", f"got one of {rep.packet_id!r}",
            )
        return [f"- {rep.text.strip()}"]
    if isinstance(rep, str):
        for d in claims:
            if d.descriptor_id == rep:
                return [f"- {d.text.strip()}"]
        raise DataFormatError(
            "<representative_by_packet>", f"[{packet.packet_id!r}]",
            f"the id of a retained claim of packet {packet.packet_id!r}", f"got {rep!r}",
        )
    if claims:  # not an address hit: fall back to the first claim
        return [f"- {claims[0].text.strip()}"]
    return _raw_lines(packet)


def _blocks(
    packets: Sequence[SourcePacket], body: Callable[[SourcePacket], list[str]]
) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for position, packet in enumerate(packets, start=1):
        if packet.packet_id in seen:
            raise DataFormatError("<packet sequence>", f"[{position - 1}]", "distinct packet ids",
                                  f"{packet.packet_id!r} appears twice")
        seen.add(packet.packet_id)
        lines = [block_header(position, packet), *body(packet)]
        out.append((packet.packet_id, "\n".join(lines)))
    return out


def _join(blocks: list[tuple[str, str]]) -> str:
    return "\n\n".join(text for _, text in blocks)


def render_claim_bundle(packets: Sequence[SourcePacket], descriptors_by_packet: DescriptorMap) -> str:
    """Claim-bundle view: per packet its header, then all retained claims in construction order."""
    return _join(_blocks(packets, lambda p: _bundle_body(p, descriptors_by_packet)))


def render_raw_packets(packets: Sequence[SourcePacket]) -> str:
    """Raw-source view: per packet its header, then turn text, image caption and image query."""
    return _join(_blocks(packets, _raw_lines))


def render_representative_claims(
    packets: Sequence[SourcePacket],
    representative_by_packet: RepresentativeMap,
    descriptors_by_packet: DescriptorMap | None = None,
) -> str:
    """Representative-claim view: per packet one claim (see the module docstring for fallbacks).

    ``representative_by_packet`` maps a packet id to its representative descriptor or to that
    descriptor's id (``PacketCandidate.representative``); ids are resolved through
    ``descriptors_by_packet``.
    """
    return _join(_blocks(
        packets, lambda p: _representative_body(p, representative_by_packet, descriptors_by_packet)
    ))


def view_blocks(
    name: str,
    packets: Sequence[SourcePacket],
    descriptors_by_packet: DescriptorMap | None = None,
    representative_by_packet: RepresentativeMap | None = None,
) -> list[tuple[str, str]]:
    """The (packet id, block text) pairs of a view, in sequence order (for audits and tests)."""
    if name == "claim_bundle":
        return _blocks(packets, lambda p: _bundle_body(p, descriptors_by_packet))
    if name == "raw_packet":
        return _blocks(packets, _raw_lines)
    if name == "representative_claim":
        return _blocks(
            packets, lambda p: _representative_body(p, representative_by_packet, descriptors_by_packet)
        )
    raise ConfigError(f"unknown reader view {name!r}; expected one of {list(VIEW_NAMES)}")


def render_view(
    name: str,
    packets: Sequence[SourcePacket],
    descriptors_by_packet: DescriptorMap | None = None,
    representative_by_packet: RepresentativeMap | None = None,
) -> str:
    """Render ``packets`` with the view called ``name`` (one of :data:`VIEW_NAMES`)."""
    return _join(view_blocks(name, packets, descriptors_by_packet, representative_by_packet))
