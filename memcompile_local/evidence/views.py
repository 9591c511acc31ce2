"""Reader views over a fixed packet sequence (MemCompile paper, Section 3.4.3, Table 4, Appendix C.3).

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

Each block starts with the same header in every view, then its content quoted line by line::

    [1] dia_id=D3:7 | recorded: 1:56 pm on 8 May, 2023 | speaker: Caroline
    > - Caroline went to an LGBTQ support group on 7 May 2023.

The number is the position in the packet sequence; blocks are joined by a blank line.

Fencing: the header is built only from the packet id, session time and speaker,
each rendered by :func:`memcompile_local.fence.header_value` (bare when a plain single-line
label, else a JSON string), and every content line starts with ``"> "``
(:func:`memcompile_local.fence.quote_block`). So whatever a stored turn or claim says, the
context holds exactly one header line per packet, and no content line can pass for a header,
a ``Question:`` line or a system message.

Size: ``max_block_chars`` caps one rendered block (header included). Content
past the cap is cut and the block ends with a marker line saying how many characters were
left out, so a huge turn can neither crowd out the other evidence nor vanish silently.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from memcompile_local.errors import ConfigError, DataFormatError
from memcompile_local.fence import header_value, quote_block
from memcompile_local.types import Descriptor, SourcePacket

__all__ = [
    "VIEW_NAMES",
    "render_claim_bundle",
    "render_raw_packets",
    "render_representative_claims",
    "render_view",
    "view_blocks",
    "block_header",
    "cut_marker",
    "MIN_BLOCK_CHARS",
]

VIEW_NAMES: tuple[str, ...] = ("claim_bundle", "raw_packet", "representative_claim")

DescriptorMap = Mapping[str, Sequence[Descriptor]]
RepresentativeMap = Mapping[str, "str | Descriptor"]

# The smallest block cap accepted: the longest possible header (three fields of at most
# fence.HEADER_MAX_CHARS each), the cut marker and some content must still fit.
MIN_BLOCK_CHARS = 1000


def block_header(position: int, packet: SourcePacket) -> str:
    """Header line of the ``position``-th (1-based) block; one line whatever the fields hold."""
    return (f"[{position}] dia_id={header_value(packet.packet_id)} "
            f"| recorded: {header_value(packet.session_time)} "
            f"| speaker: {header_value(packet.speaker)}")


def cut_marker(n_chars: int) -> str:
    """The line that ends a block whose content was cut (not quoted: it is our structure)."""
    return f"(… {n_chars} more characters of this packet not shown)"


def _raw_lines(packet: SourcePacket) -> list[str]:
    """The packet's own items, unquoted: turn text, then image caption and image query."""
    lines = [packet.content.strip()]
    if packet.image_caption and packet.image_caption.strip():
        lines.append(f"(shared image: {packet.image_caption.strip()})")
    if packet.image_query and packet.image_query.strip():
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


def _check_cap(max_block_chars: int | None) -> None:
    if max_block_chars is None:
        return
    if isinstance(max_block_chars, bool) or not isinstance(max_block_chars, int) \
            or max_block_chars < MIN_BLOCK_CHARS:
        raise ConfigError(f"max_block_chars must be an integer >= {MIN_BLOCK_CHARS} or None, "
                          f"got {max_block_chars!r}")


def _fenced_block(header: str, items: list[str], max_block_chars: int | None) -> str:
    """Header, then every item quoted line by line, cut to ``max_block_chars`` when set."""
    body = [line for item in items for line in quote_block(item)]
    text = "\n".join([header, *body])
    if max_block_chars is None or len(text) <= max_block_chars:
        return text
    # Keep whole lines while they fit; cut the first one that does not (keeping its quote
    # prefix), then say how much was left out. The marker's own length is reserved first.
    total = sum(len(line) for line in body) + len(body)  # each line plus its newline
    room = max_block_chars - len(header) - len(cut_marker(total)) - 2
    kept: list[str] = []
    used = 0
    for line in body:
        if used + len(line) + 1 <= room:
            kept.append(line)
            used += len(line) + 1
            continue
        part = line[: max(0, room - used - 1)]
        if len(part) > 2:  # more than the bare "> " prefix
            kept.append(part)
            used += len(part) + 1
        break
    return "\n".join([header, *kept, cut_marker(total - used)])


def _blocks(
    packets: Sequence[SourcePacket],
    body: Callable[[SourcePacket], list[str]],
    max_block_chars: int | None = None,
) -> list[tuple[str, str]]:
    _check_cap(max_block_chars)
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for position, packet in enumerate(packets, start=1):
        if packet.packet_id in seen:
            raise DataFormatError("<packet sequence>", f"[{position - 1}]", "distinct packet ids",
                                  f"{packet.packet_id!r} appears twice")
        seen.add(packet.packet_id)
        block = _fenced_block(block_header(position, packet), body(packet), max_block_chars)
        out.append((packet.packet_id, block))
    return out


def _join(blocks: list[tuple[str, str]]) -> str:
    return "\n\n".join(text for _, text in blocks)


def render_claim_bundle(packets: Sequence[SourcePacket], descriptors_by_packet: DescriptorMap,
                        *, max_block_chars: int | None = None) -> str:
    """Claim-bundle view: per packet its header, then all retained claims in construction order."""
    return _join(_blocks(packets, lambda p: _bundle_body(p, descriptors_by_packet), max_block_chars))


def render_raw_packets(packets: Sequence[SourcePacket], *, max_block_chars: int | None = None) -> str:
    """Raw-source view: per packet its header, then turn text, image caption and image query."""
    return _join(_blocks(packets, _raw_lines, max_block_chars))


def render_representative_claims(
    packets: Sequence[SourcePacket],
    representative_by_packet: RepresentativeMap,
    descriptors_by_packet: DescriptorMap | None = None,
    *,
    max_block_chars: int | None = None,
) -> str:
    """Representative-claim view: per packet one claim (see the module docstring for fallbacks).

    ``representative_by_packet`` maps a packet id to its representative descriptor or to that
    descriptor's id (``PacketCandidate.representative``); ids are resolved through
    ``descriptors_by_packet``.
    """
    return _join(_blocks(
        packets, lambda p: _representative_body(p, representative_by_packet, descriptors_by_packet),
        max_block_chars,
    ))


def view_blocks(
    name: str,
    packets: Sequence[SourcePacket],
    descriptors_by_packet: DescriptorMap | None = None,
    representative_by_packet: RepresentativeMap | None = None,
    *,
    max_block_chars: int | None = None,
) -> list[tuple[str, str]]:
    """The (packet id, block text) pairs of a view, in sequence order (for audits and tests)."""
    if name == "claim_bundle":
        return _blocks(packets, lambda p: _bundle_body(p, descriptors_by_packet), max_block_chars)
    if name == "raw_packet":
        return _blocks(packets, _raw_lines, max_block_chars)
    if name == "representative_claim":
        return _blocks(
            packets, lambda p: _representative_body(p, representative_by_packet, descriptors_by_packet),
            max_block_chars,
        )
    raise ConfigError(f"unknown reader view {name!r}; expected one of {list(VIEW_NAMES)}")


def render_view(
    name: str,
    packets: Sequence[SourcePacket],
    descriptors_by_packet: DescriptorMap | None = None,
    representative_by_packet: RepresentativeMap | None = None,
    *,
    max_block_chars: int | None = None,
) -> str:
    """Render ``packets`` with the view called ``name`` (one of :data:`VIEW_NAMES`).

    ``max_block_chars`` caps each block (see the module docstring); None renders blocks whole.
    """
    return _join(view_blocks(name, packets, descriptors_by_packet, representative_by_packet,
                             max_block_chars=max_block_chars))
