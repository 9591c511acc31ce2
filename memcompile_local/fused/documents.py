"""What the fused index is computed from: packet documents, participant names, dated periods.

- the lexical document of a packet: the turn, its image caption and its claims, with the
  previous and next turn of the same session around it (an answer is often the reply to the
  turn that matched, or the turn a reply refers to); with ``bursts``
  "turn" means a burst, the run of consecutive messages one speaker sent in a row;
- the dense context document: previous, own and next turn of the session, each with its speaker;
- names as people write them in chat (lower case, shortened, one typo off);
- the (year, month, day) periods a question names and a packet is dated in.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Iterable, Sequence

from ..language.names import known_name
from ..language.roles import addressed_role
from ..language.timeparse import find_time_mentions, parse_session_time
from ..types import Descriptor, SourcePacket

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
_ISO_PERIOD = re.compile(r"(?<!\d)((?:19|20)\d{2})(?:-(0[1-9]|1[0-2])(?:-(0[1-9]|[12]\d|3[01]))?)?")
_MONTH_WORD = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")

Period = tuple[int | None, int | None, int | None]  # (year, month, day); None where left open


# ----------------------------------------------------------------------------- documents


def session_neighbours(packets: Sequence[SourcePacket], i: int) -> tuple[int, ...]:
    """Indices of the previous and next packet when they belong to the same session as ``i``."""
    return tuple(j for j in (i - 1, i + 1)
                 if 0 <= j < len(packets) and packets[j].session_index == packets[i].session_index)


def bursts(packets: Sequence[SourcePacket]) -> list[tuple[int, ...]]:
    """Runs of consecutive packets of one session sent by one speaker, in dialogue order."""
    out: list[list[int]] = []
    for i, p in enumerate(packets):
        prev = packets[i - 1] if i else None
        if prev is not None and prev.session_index == p.session_index and prev.speaker == p.speaker:
            out[-1].append(i)
        else:
            out.append([i])
    return [tuple(b) for b in out]


def lexical_documents(
    packets: Sequence[SourcePacket],
    descriptors_by_packet: Mapping[str, Sequence[Descriptor]],
    *,
    group_bursts: bool = False,
) -> list[str]:
    """The lexical document of each packet (packets in dialogue order).

    Own text (turn, caption, claims), with ``group_bursts`` preceded and followed by the raw
    text of the other messages of its burst; around that the raw text of the previous and next
    turn (burst) of the session. When every burst is one message the two settings give the
    same documents.
    """
    own = []
    for p in packets:
        parts = [p.content, p.image_caption or "", *(d.text for d in descriptors_by_packet.get(p.packet_id, ()))]
        own.append(" ".join(x for x in parts if x))
    if not group_bursts:
        docs = []
        for i in range(len(packets)):
            near = session_neighbours(packets, i)
            before = [raw_text(packets[j]) for j in near if j < i]
            after = [raw_text(packets[j]) for j in near if j > i]
            docs.append(" ".join([*before, own[i], *after]))
        return docs
    groups = bursts(packets)
    docs = [""] * len(packets)
    for g, members in enumerate(groups):
        before: list[str] = []
        after: list[str] = []
        if g > 0 and packets[groups[g - 1][0]].session_index == packets[members[0]].session_index:
            before = [raw_text(packets[j]) for j in groups[g - 1]]
        if g + 1 < len(groups) and packets[groups[g + 1][0]].session_index == packets[members[0]].session_index:
            after = [raw_text(packets[j]) for j in groups[g + 1]]
        for i in members:
            mates_before = [raw_text(packets[j]) for j in members if j < i]
            mates_after = [raw_text(packets[j]) for j in members if j > i]
            docs[i] = " ".join([*before, *mates_before, own[i], *mates_after, *after])
    return docs


def raw_text(p: SourcePacket) -> str:
    return f"{p.content} {p.image_caption}" if p.image_caption else p.content


def plain_turn_text(p: SourcePacket) -> str:
    """The turn as the plain dense baseline embeds it (no speaker, no claims): its content,
    then its image caption in brackets. The learned ranker's raw_cos columns read its vector."""
    return p.content + (f" [image: {p.image_caption}]" if p.image_caption else "")


def plain_turn_fits(packets: Sequence[SourcePacket], window: int) -> list[bool]:
    """Whether each packet's plain text has at most ``window`` words (whitespace runs; 0: no
    limit). Past the embedder's window a turn's plain text and its z(p) begin with the same
    words and are read only that far, so a longer turn's plain vector is its z(p) vector
    (``FusionIndex.assemble``) and the build does not embed it (``build.stages.raw_document_keys``)."""
    return [fits_window(plain_turn_text(p), window) for p in packets]


def fits_window(text: str, window: int) -> bool:
    """Whether ``text`` has at most ``window`` words (whitespace runs; 0: no limit)."""
    return not window or words_upto(text, window) <= window


def words_upto(text: str, limit: int) -> int:
    """The number of words (whitespace runs) in ``text`` when at most ``limit``, else
    ``limit + 1``: a window test needs no more, and splitting stops there (a reply can run to
    hundreds of thousands of characters)."""
    return len(text.split(maxsplit=limit))


ASSISTANT = "assistant"  # the speaker name the user-assistant loaders (BEAM, LongMemEval) give replies


def is_assistant(speaker: str) -> bool:
    """True for the assistant's turns of a user-assistant history."""
    return speaker.strip().lower() == ASSISTANT


def has_assistant(participants: Iterable[str]) -> bool:
    """True for a user-assistant history (some participant is the assistant)."""
    return any(is_assistant(s) for s in participants)


def _context_line(p: SourcePacket) -> str:
    return f"{p.speaker}: {raw_text(p)}"


def context_documents(packets: Sequence[SourcePacket]) -> list[str]:
    """The dense context document of each packet: previous, own and next turn of its session.

    Raw turns only (no claims), one line per turn prefixed by its speaker, so a reply embeds
    next to the question it answers. Packets are in dialogue order.
    """
    docs = []
    for i in range(len(packets)):
        rows = sorted((i, *session_neighbours(packets, i)))
        docs.append("\n".join(_context_line(packets[j]) for j in rows))
    return docs


def context_fits(packets: Sequence[SourcePacket], window: int) -> list[bool]:
    """Whether each packet's context document (``context_documents``) has at most ``window``
    words (whitespace runs; 0: no limit), the one rule by which the fused index gates the context
    cosine and the build skips embedding. Counted per turn line, without joining the documents:
    the lines are joined by a newline, so a document's words are its lines' words."""
    if not window:
        return [True] * len(packets)
    # Capped counts decide the same: a line past the window puts any sum it is in past it too.
    words = [words_upto(_context_line(p), window) for p in packets]
    return [words[i] + sum(words[j] for j in session_neighbours(packets, i)) <= window for i in range(len(packets))]


# ----------------------------------------------------------------------------- names


def _one_edit_apart(a: str, b: str) -> bool:
    """True when ``a`` becomes ``b`` by one substitution, insertion, deletion or swap of
    neighbours (the typos a thumb makes); False for equal strings."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long_[i]:
        i += 1
    return short[i:] == long_[i + 1:]


def tolerant_name(token: str, participants: Sequence[str]) -> str | None:
    """The participant a chat token names, allowing how people write names in chat.

    Capitalized tokens resolve as the rule extractor does (first name, or a nickname of 3+
    letters that starts it: "Mel"). A lower-case token must be the first name itself, a
    prefix of 4+ letters ("caro"), or, for names of 5+ letters, one typo away ("melanei");
    a short lower-case word ("car", "mel") is too often an ordinary word to count.
    """
    t = token.lower()
    if t.endswith("'s"):
        t = t[:-2]
    if len(t) < 3:
        return None
    if token[:1].isupper():
        name = known_name(t, participants)
        if name:
            return name
    for name in participants:
        first = (name.lower().split() or [""])[0]
        if not first:
            continue
        if t == first or (len(t) >= 4 and first.startswith(t)):
            return name
    for name in participants:
        first = (name.lower().split() or [""])[0]
        if len(first) >= 5 and len(t) >= 4 and _one_edit_apart(t, first):
            return name
    return None


def canonical_names(text: str, participants: Sequence[str]) -> str:
    """``text`` with every token that tolerantly names a participant replaced by that
    participant's first name, so "mel", "Mel" and "melanei" all index as "Melanie"."""
    def sub(m: re.Match) -> str:
        token = m.group(0)
        name = tolerant_name(token, participants)
        if not name:
            return token
        return name.split()[0] + ("'s" if token.lower().endswith("'s") else "")
    return _WORD.sub(sub, text or "")


def named_participants(question: str, participants: Sequence[str], *, tolerant: bool = False) -> list[str]:
    """Participants the question names: the name as a word (possessives included), or a
    capitalized nickname the rule extractor also resolves ("Mel" for Melanie); with
    ``tolerant``, also lower-case, shortened and one-typo spellings (``tolerant_name``)."""
    out = []
    for name in participants:
        if name and re.search(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", question, re.IGNORECASE):
            out.append(name)
    pattern = _WORD if tolerant else re.compile(r"(?<!\w)[A-Z][a-z]+(?!\w)")
    for token in pattern.findall(question):
        name = tolerant_name(token, participants) if tolerant else known_name(token, participants)
        if name and name not in out:
            out.append(name)
    return out


def question_speakers(question: str, participants: Sequence[str], *, tolerant: bool = False,
                      roles: bool = False) -> list[str]:
    """The participants a question is about: those it names (``named_participants``); with
    ``roles``, in a user-assistant history that names none, the side its pronouns point at
    (``language/roles.addressed_role``: the user for "I"/"my", the assistant for "you said"),
    when exactly one participant plays that role."""
    named = named_participants(question, participants, tolerant=tolerant)
    return named if named or not roles else role_side(question, participants)


def role_side(question: str, participants: Sequence[str]) -> list[str]:
    """The one participant of a user-assistant history who plays the role the question's
    pronouns point at (``language/roles.addressed_role``); [] without an assistant, without a
    role, or when several participants play it."""
    role = addressed_role(question) if has_assistant(participants) else None
    if role is None:
        return []
    side = [p for p in participants if is_assistant(p) == (role == "assistant")]
    return side if len(side) == 1 else []


# ----------------------------------------------------------------------------- time


def periods(value: str) -> list[Period]:
    """The (year, month, day) periods a normalized time value names.

    "2023-05-08", "the week before 2023-05-08" -> [(2023, 5, 8)]; "2023-05" -> [(2023, 5, None)];
    "2022" -> [(2022, None, None)]; "in june" -> [(None, 6, None)]. A value with an ISO date is
    read from that date only.
    """
    out: list[Period] = []
    for m in _ISO_PERIOD.finditer(value or ""):
        out.append(tuple(int(g) if g else None for g in m.groups()))  # type: ignore[arg-type]
    if not out:
        out = [(None, _MONTHS.index(m.group(1).lower()) + 1, None) for m in _MONTH_WORD.finditer(value or "")]
    return list(dict.fromkeys(out))


def question_periods(question: str, anchor: dt.datetime | None = None) -> list[Period]:
    """Periods named by the question's time expressions, relative ones ("last week") resolved
    against ``anchor`` (the date the question is asked) or dropped without one."""
    out: list[Period] = []
    for mention in find_time_mentions(question or "", anchor):
        out.extend(periods(mention.value))
    return list(dict.fromkeys(out))


def packet_periods(packet: SourcePacket, descriptors: Sequence[Descriptor]) -> set[Period]:
    """Dates of a packet: its session date and its claims' resolved event times."""
    out: set[Period] = set()
    when = parse_session_time(packet.session_time) if packet.session_time else None
    if when is not None:
        out.add((when.year, when.month, when.day))
    for d in descriptors:
        out.update(periods(d.event_time))
    return out


def period_key(packet: SourcePacket, descriptors: Sequence[Descriptor]) -> tuple:
    """What a packet's periods are computed from: its session time and its claims' event times."""
    return (packet.session_time, tuple(d.event_time for d in descriptors))


def period_matches(asked: Period, have: Period) -> bool:
    """Every part the question names (year, month, day) equals the packet date's."""
    if all(a is None for a in asked):
        return False
    return all(a is None or a == h for a, h in zip(asked, have))
