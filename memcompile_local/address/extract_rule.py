"""Rule-based descriptor extraction: atomic claims and metadata without any model.

This is the model-free implementation of the ``DescriptorExtractor`` interface (the LLM
implementation is :mod:`memcompile_local.address.extract_llm`). For one turn it

1. splits the text into sentences and drops the ones that carry nothing retrievable:
   greetings, thanks, acknowledgements, exclamations of approval and content-free questions
   ("How are you?", "Thanks!", "Wow, that's great!"); with ``max_rule_claims`` set, keeps
   at most that many, those with the most distinct content words;
2. rewrites each kept sentence as a standalone claim: first-person references become the
   speaker ("I" -> "Caroline", "my" -> "Caroline's"), second-person references become the
   addressee (the speaker of the preceding turn when that is someone else; otherwise "you"
   is left alone), "we" becomes "<speaker> and others" and "our" becomes "<speaker>'s"
   (in these dialogues "we" is more often the speaker's family or friends than the two
   speakers, so naming the addressee would often be wrong). Verbs next to a
   rewritten singular subject are put in the third person for the common cases
   ("I am" -> "Caroline is", "Are you" -> "Is Melanie", "I love" -> "Caroline loves").
   A sentence with no resolvable first/second-person reference is prefixed with
   "<speaker> said: " so the claim still names its source; a question with content becomes
   "<speaker> asked <addressee>: <question>", and so does a request that refers to the
   speaker ("Remind me that my manager is called Ines" -> "Ana asked Ben: Remind Ana that
   Ana's manager is called Ines"), whose subject is the addressee, not the speaker.
   A speaker or addressee recorded under a first-person label rather than a name ("me",
   as a personal assistant's log writes its user) is never put into a pronoun's place:
   the speaker's first-person words stay as written ("my manager", not "me's manager"),
   prefixes say "I said:" / "I asked ...:", and "you" addressed to such a label stays "you";
3. adds one claim per image caption: "<speaker> shared a photo of <caption>" ("I shared
   ..." for a first-person label);
4. attaches metadata: people (speaker, addressee when referred to, capitalized names),
   up to ``max_keywords`` keyword phrases (maximal runs of content words between
   stopwords, punctuation and time expressions, longest first then earliest), the event time
   of the first time expression normalized against the session date (rules in
   :mod:`memcompile_local.language.timeparse`), the event type and polarity from cue words,
   and the negation flag.

The output is a deterministic function of the (packet, preceding packet) pair, so builds
are reproducible and resumable batch by batch.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from memcompile_local.config import ExtractionConfig
from memcompile_local.language.lemmas import lemma
from memcompile_local.language.lexicon import COMMON_VERBS, FILLER, IRREGULAR_VERBS, PRESENT_VERBS, TIME_WORDS
from memcompile_local.language.names import known_name, name_tokens, proper_names
from memcompile_local.language.negation import has_negation
from memcompile_local.language.phrases import keyword_phrases
from memcompile_local.language.timeparse import find_time_mentions, parse_session_time, session_date
from memcompile_local.language.tokens import (
    STOPWORDS,
    count_tokens,
    cue_text,
    has_cue,
    normalize_apostrophes,
    normalize_name,
    words,
)
from memcompile_local.types import Descriptor, EventFields, SourcePacket, descriptor_id

__all__ = [
    "RULE_EXTRACTOR_VERSION",
    "RuleExtractor",
    "ResolvedSentence",
    "split_sentences",
    "resolve_references",
    "is_request",
    "is_first_person_label",
    "speaker_subject",
    "classify_event_type",
    "predicate_lemma",
    "is_low_value",
    "EVENT_TYPES",
    "POLARITIES",
]

logger = logging.getLogger(__name__)

# v4: requests that refer to the speaker are "<speaker> asked <addressee>: ..." claims, and
# first-person speaker labels ("me") keep the speaker's pronouns (no "me's manager").
RULE_EXTRACTOR_VERSION = "rule-v4"
EVENT_TYPES: tuple[str, ...] = ("occurrence", "plan", "state", "preference", "relationship")
POLARITIES: tuple[str, ...] = ("positive", "negative", "neutral", "unknown")

# Fixed confidence of a rule-derived event: the heuristics are cue-word guesses, so they
# claim middling certainty rather than pretending to a calibrated probability.
RULE_CONFIDENCE = 0.5


# --------------------------------------------------------------------------- sentence splitting

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e a.m p.m approx dept est inc ltd co mt ft".split()
)
_BOUNDARY = re.compile(r"(?:[.!?\u2026]+|\n)[\"')\]]*(?=\s|$)|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of a chat turn in order, stripped, without empty pieces.

    Splits after ``.``, ``!``, ``?``, ``…`` (runs count once) followed by whitespace, and at
    line breaks; a period after a known abbreviation (Mr., Dr., e.g.) or a single capital
    initial ("J. K.") does not end a sentence. Decimals ("3.5") are not split because no
    space follows the point.
    """
    text = (text or "").strip()
    if not text:
        return []
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        end = m.end()
        piece = text[start:end]
        if m.group(0).startswith(".") and "\n" not in m.group(0):
            before = text[start:m.start()].rsplit(None, 1)  # the last word is all that is read
            last = before[-1].lower().rstrip(".") if before else ""
            if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
                continue
        if piece.strip():
            out.append(piece.strip())
        start = end
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


# --------------------------------------------------------------------------- reference resolution

_TOKEN_SPLIT = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|\s+|.", re.DOTALL)

# Auxiliaries that change form when their subject becomes a singular third person.
_SINGULAR_AUX = {
    "am": "is", "are": "is", "were": "was", "have": "has", "do": "does", "don't": "doesn't",
    "haven't": "hasn't", "aren't": "isn't", "weren't": "wasn't", "ain't": "isn't",
}
# Adverbs that may sit between a subject and its verb ("I really love").
_MID_ADVERBS = frozenset(
    """also really just still always never often usually sometimes totally actually definitely even
    truly absolutely honestly kinda finally already mostly only rarely""".split()
)
# Words after which "you" is an object, so the following word is not its verb.
_OBJECT_CONTEXT = frozenset(
    """with to for at about from of by on in into like than thank thanks love miss tell told see saw
    help helped ask asked give gave show showed let make made hear heard call called""".split()
)
# A pronoun right after one of these is inverted or governed: its verb keeps the base form.
_AUX_BLOCK = frozenset(
    """do does did don't doesn't didn't can can't cannot could couldn't will won't would wouldn't
    should shouldn't shall may might must to let make made help helped watch saw see hear heard
    have has had""".split()
)


# Speaker labels that are a first-person pronoun rather than a name.
_FIRST_PERSON_LABELS = frozenset({"me", "i", "myself"})
# The speaker's own first-person words ("we" words included): kept as written for such a label.
_FIRST_PERSON_WORDS = frozenset(
    "i i'm i've i'll i'd me my mine myself we us our ours ourselves we're we've we'll we'd".split()
)
# Every word that the loop of resolve_references rewrites or acts on.
_REFERENCE_WORDS = _FIRST_PERSON_WORDS | frozenset(
    "you you're you've you'll you'd your yours yourself".split()
)
# Verbs that open a request to the addressee ("Remind me ...", "Please send me ..."). Verbs
# that open an elliptical first-person statement as often ("Love it", "Hope you ...",
# "Miss you") and "let" ("Let me show you" is an offer) are left out.
_REQUEST_VERBS = frozenset(
    """remind tell send show give call text email message ping note save write add book schedule
    ask bring get find check keep make take pick buy put set help teach sign join meet wake
    forward share""".split()
)
_REQUEST_LEAD = re.compile(
    r"^\s*(?P<please>(?:(?:please|pls|kindly|just|and|also|so|now)\s*,?\s+)*)"
    r"(?:(?:do\s+not|don't|never)\s+)?(?P<verb>[A-Za-z]+)\b", re.IGNORECASE,
)


def is_request(sentence: str) -> bool:
    """True when a sentence opens like a request to the addressee: a request verb first
    ("Remind me ...", "Don't tell anyone"), or "please" and then any verb-like word."""
    m = _REQUEST_LEAD.match(normalize_apostrophes(sentence))
    if m is None:
        return False
    verb = m.group("verb").lower()
    if verb in _REQUEST_VERBS:
        return True
    return "please" in m.group("please").lower() and verb not in STOPWORDS


def _third_person(verb: str) -> str:
    v = verb.lower()
    if v == "have":
        out = "has"
    elif v == "do":
        out = "does"
    elif v == "go":
        out = "goes"
    elif v.endswith(("s", "sh", "ch", "x", "z", "o")):
        out = v + "es"
    elif v.endswith("y") and len(v) > 1 and v[-2] not in "aeiou":
        out = v[:-1] + "ies"
    else:
        out = v + "s"
    return out if not verb[:1].isupper() else out.capitalize()


def _match_case(original: str, replacement: str) -> str:
    return replacement.capitalize() if original[:1].isupper() else replacement


@dataclass(frozen=True)
class ResolvedSentence:
    """A sentence after reference resolution.

    ``first_person``/``second_person``: whether a reference to the speaker / the addressee
    was rewritten (a "we" counts as first person only).
    """

    text: str
    first_person: bool
    second_person: bool


@functools.lru_cache(maxsize=1024)  # a turn asks it of its speaker and addressee per sentence
def is_first_person_label(name: str | None) -> bool:
    """True when a speaker is recorded as "me", "I" or "myself" instead of by name."""
    return normalize_name(name or "") in _FIRST_PERSON_LABELS


def speaker_subject(speaker: str) -> str:
    """How a claim prefix names the speaker: the name, or "I" for a first-person label."""
    return "I" if is_first_person_label(speaker) else speaker


def resolve_references(sentence: str, speaker: str, addressee: str | None, *,
                       resolve_second: bool = True) -> ResolvedSentence:
    """Rewrite first/second-person references of ``sentence`` to names (see module doc).

    ``addressee=None`` leaves "you"/"your" as written. "we" becomes "<speaker> and others"
    and "our" "<speaker>'s". ``resolve_second=False`` leaves "you" alone even with a known
    addressee (questions and requests keep "you" because the caller names the addressee in
    a prefix). A first-person speaker label ("me") keeps the speaker's first-person words
    as written (they are still reported as ``first_person``); a first-person addressee
    label leaves "you" as written.
    """
    keep_first = is_first_person_label(speaker)
    if is_first_person_label(addressee):
        addressee = None
    s = normalize_apostrophes(sentence)
    toks = _TOKEN_SPLIT.findall(s)
    out = list(toks)
    word_at = [i for i, t in enumerate(toks) if t[:1].isalpha()]
    speaker_poss = f"{speaker}'s"
    group = f"{speaker} and others"
    first = second = False

    def adjacent(a: int, b: int) -> bool:
        """Only whitespace between token positions a < b."""
        return all(toks[j].isspace() for j in range(a + 1, b))

    def prev_word(k: int) -> tuple[int, str] | None:
        if k > 0 and adjacent(word_at[k - 1], word_at[k]):
            return word_at[k - 1], toks[word_at[k - 1]]
        return None

    def agree_next(k: int) -> None:
        """Put the verb after subject word k (skipping mid adverbs) in the third person."""
        j = k + 1
        while j < len(word_at) and adjacent(word_at[j - 1], word_at[j]):
            w = toks[word_at[j]]
            lw = w.lower()
            if lw in _MID_ADVERBS:
                j += 1
                continue
            if lw in _SINGULAR_AUX:
                out[word_at[j]] = _match_case(w, _SINGULAR_AUX[lw])
            elif lw in PRESENT_VERBS:
                out[word_at[j]] = _third_person(w)
            return

    def invert_prev(k: int) -> bool:
        """'Are you' -> 'Is <name>'; True when the pronoun follows an auxiliary."""
        pw = prev_word(k)
        if pw is None:
            return False
        i, w = pw
        lw = w.lower()
        if lw in _SINGULAR_AUX:
            out[i] = _match_case(w, _SINGULAR_AUX[lw])
            return True
        return lw in _AUX_BLOCK

    for k, i in enumerate(word_at):
        w = toks[i]
        lw = w.lower()
        if lw not in _REFERENCE_WORDS:
            continue  # no rule below rewrites it (most words)
        if (i > 0 and toks[i - 1] == "-") or (i + 1 < len(toks) and toks[i + 1] == "-"):
            continue  # part of a compound such as "me-time"
        if keep_first and lw in _FIRST_PERSON_WORDS and (w == "I" or lw != "i") and w not in ("ME", "US"):
            first = True  # the label is no name to put in the pronoun's place: keep the pronoun
            continue
        if lw == "i" and w == "I":
            out[i] = speaker
            first = True
            if not invert_prev(k):
                agree_next(k)
        elif lw in ("i'm", "i've", "i'll", "i'd"):
            out[i] = speaker + {"i'm": " is", "i've": " has", "i'll": " will", "i'd": " would"}[lw]
            first = True
        elif lw in ("me", "myself") and w != "ME":
            out[i] = speaker
            first = True
        elif lw in ("my", "mine"):
            out[i] = speaker_poss
            first = True
        elif lw in ("we", "us", "ourselves") and w != "US":
            out[i] = group
            first = True
        elif lw in ("our", "ours"):
            out[i] = speaker_poss
            first = True
        elif lw in ("we're", "we've", "we'll", "we'd"):
            out[i] = group + {"we're": " are", "we've": " have", "we'll": " will", "we'd": " would"}[lw]
            first = True
        elif addressee and resolve_second:
            if lw == "you":
                nxt = toks[word_at[k + 1]].lower() if k + 1 < len(word_at) and adjacent(i, word_at[k + 1]) else ""
                if nxt in ("two", "both", "guys", "all", "folks"):
                    continue  # plural "you": not the one addressee
                out[i] = addressee
                second = True
                pw = prev_word(k)
                if not invert_prev(k) and (pw is None or pw[1].lower() not in _OBJECT_CONTEXT):
                    agree_next(k)
            elif lw in ("you're", "you've", "you'll", "you'd"):
                out[i] = addressee + {"you're": " is", "you've": " has", "you'll": " will",
                                      "you'd": " would"}[lw]
                second = True
            elif lw in ("your", "yours"):
                out[i] = f"{addressee}'s"
                second = True
            elif lw == "yourself":
                out[i] = addressee
                second = True
    text = "".join(out)
    return ResolvedSentence(text=text, first_person=first, second_person=second)


# --------------------------------------------------------------------------- low-value sentences

_LEADING_INTERJECTION = re.compile(
    r"^\s*(?:(?:hey|hi|hello|oh|ooh|wow|whoa|woah|yeah|yes|yep|yup|well|so|ah|aw+|omg|haha+|lol|um+|"
    r"hmm+|ok|okay|sure|totally|absolutely|definitely|honestly|thanks|thank\s+you|true|right|gosh|"
    r"man|dude|congrats|congratulations)(?:,?\s+[A-Z][a-z]+)?\s*[,!.\u2026-]+\s*)+",
    re.IGNORECASE,
)


def _strip_interjection(sentence: str) -> str:
    """Drop a leading interjection/vocative chunk that ends in punctuation ("Yeah, ...")."""
    stripped = _LEADING_INTERJECTION.sub("", sentence, count=1)
    if not stripped.strip():
        return sentence
    return stripped[:1].upper() + stripped[1:]


_LEADING_VOCATIVE = re.compile(r"\s*([A-Z][a-z]+)\s*,\s+(?=\S)")
_TRAILING_VOCATIVE = re.compile(r",\s*([A-Z][a-z]+)\s*([.!?\u2026]*)\s*$")


def _strip_vocative(sentence: str, known: Sequence[str]) -> str:
    """Drop a leading "<known name>, " or trailing ", <known name>" form of address."""
    if "," not in sentence:
        return sentence  # both forms need a comma
    m = _LEADING_VOCATIVE.match(sentence)
    if m and known_name(m.group(1), known) is not None:
        rest = sentence[m.end():]
        sentence = rest[:1].upper() + rest[1:]
    tail = _TRAILING_VOCATIVE.search(sentence)
    if tail and known_name(tail.group(1), known) is not None and sentence[:tail.start()].strip():
        sentence = sentence[:tail.start()] + tail.group(2)
    return sentence


# Words that are never content (``_content_words``), as one set: one lookup per word.
_NOT_CONTENT = STOPWORDS | FILLER | TIME_WORDS
_NOT_CONTENT_OR_VERB = _NOT_CONTENT | COMMON_VERBS


def _content_words(sentence: str, names: Sequence[str], *, drop_verbs: bool = True,
                   toks: Sequence[str] | None = None) -> list[str]:
    """Content words of ``sentence`` in order (see ``is_low_value``); ``toks``: its
    ``words(normalize_apostrophes(sentence))`` when the caller has them already."""
    stop = _NOT_CONTENT_OR_VERB if drop_verbs else _NOT_CONTENT
    name_words: set[str] | None = None  # read only when some word passes the word lists
    out = []
    for w in (words(normalize_apostrophes(sentence)) if toks is None else toks):
        base = w[:-2] if w.endswith("'s") else w
        if base in stop or len(base) < 2 or base.isdigit():
            continue
        if name_words is None:
            name_words = {w for n in names for w in words(n)} | name_tokens(sentence, names)
        if base in name_words:
            continue
        out.append(base)
    return out


def is_low_value(sentence: str, names: Sequence[str] = ()) -> bool:
    """True for greetings, thanks, acknowledgements and content-free questions.

    A statement is low-value when none of its words is content (not a stopword, not a
    small-talk word, not a participant name in ``names``; other proper names are content). A question needs two content words that are
    not light verbs ("Have you tried the pottery class?" stays; "How are you?" and "What
    made you choose that?" go). Light verbs do not count for statements either ("I got it!").
    Names include nickname prefixes of ``names`` ("Mel" for "Melanie").
    """
    s = normalize_apostrophes(sentence).strip()
    if not s:
        return True
    known = list(names)
    toks = words(s)  # once: both passes below and the small-talk test read the same words
    content = _content_words(s, known, toks=toks)
    # Other proper names are content ("I went to Paris!" is a fact) unless the sentence is
    # small talk addressed to someone ("Hey Mel!", "Thanks, Jon!"): then they are vocatives.
    if content and not FILLER.isdisjoint(toks):
        content = _content_words(s, known + proper_names(s, known), toks=toks)
    if s.rstrip(" \"')").endswith("?"):
        return len(content) < 2
    return not content


# --------------------------------------------------------------------------- event heuristics

_PLAN = re.compile(
    r"\b(?:will|won't|shall|gonna|going\s+to|plan|plans|planning|planned\s+to|intend|intends|"
    r"hoping\s+to|hope\s+to|looking\s+forward|about\s+to|next\s+(?:week|month|year|weekend)|tomorrow|"
    r"can't\s+wait|should|let's|want\s+to|wanna|would\s+like\s+to|thinking\s+of|thinking\s+about)\b|'ll\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(?:favorite|favourite|prefer|prefers|fan\s+of|passionate\s+about|obsessed\s+with|"
    r"can't\s+stand)\b|"
    r"\b(?:[Ii]|[Yy]ou|[Ww]e|[Tt]hey|[Hh]e|[Ss]he|[A-Z][a-z]+)\s+(?:really\s+|also\s+|just\s+|totally\s+|"
    r"absolutely\s+)?(?:like|likes|love|loves|enjoy|enjoys|adore|adores|hate|hates|dislike|dislikes)\b",
)
_RELATIONSHIP = re.compile(
    r"\b(?:married|engaged|divorced|dating|boyfriend|girlfriend|husband|wife|fianc[eé]e?|"
    r"best\s+friends?|in\s+a\s+relationship|broke\s+up|break\s*up|single\s+parent)\b",
    re.IGNORECASE,
)
_PAST_WORD = re.compile(
    r"\b(?:was|were|went|did|had|got|made|took|saw|came|gave|found|told|felt|met|left|bought|began|"
    r"ran|wrote|won|lost|spent|yesterday|ago|last)\b",
    re.IGNORECASE,
)
_ED_WORD = re.compile(r"([\w']+)\s+(\w{3,}ed)\b", re.IGNORECASE)
_FIRST_ED_WORD = re.compile(r"\s*(\w{3,}ed)\b")
_PRESENT_BE = frozenset("am is are i'm you're we're they're he's she's it's be being get gets".split())

# Cheap pre-checks before the scans above (``cue_text``/``has_cue``): every match of a
# pattern holds one of its cues, so a sentence without them is not scanned (most are not
# plans, preferences or relationships).
_PLAN_CUES = ("will", "won't", "shall", "gonna", "going", "plan", "intend", "hoping", "hope", "looking",
              "about", "next", "tomorrow", "can't", "should", "let's", "want", "wanna", "would",
              "thinking", "'ll")
# _PREFERENCE is case-sensitive: its cues are looked for in the sentence as written.
_PREFERENCE_CUES = ("favorite", "favourite", "prefer", "fan", "passionate", "obsessed", "can't", "like",
                    "love", "enjoy", "adore", "hate")
_RELATIONSHIP_CUES = ("married", "engaged", "divorced", "dating", "boyfriend", "girlfriend", "husband",
                      "wife", "fianc", "best", "relationship", "broke", "break", "single")
_PAST_CUES = ("was", "were", "went", "did", "had", "got", "made", "took", "saw", "came", "gave", "found",
              "told", "felt", "met", "left", "bought", "began", "ran", "wrote", "won", "lost", "spent",
              "yesterday", "ago", "last")


def _has_past_cue(s: str, low: str | None) -> bool:
    """Past-tense cue words, or an -ed verb not used as an adjective after a present "be".
    ``low``: ``cue_text(s)``."""
    if has_cue(low, _PAST_CUES) and _PAST_WORD.search(s):
        return True
    if not has_cue(low, ("ed",)):
        return False  # both tests below need an "ed"
    first = _FIRST_ED_WORD.match(s)
    if first:
        return True
    return any(m.group(1).lower() not in _PRESENT_BE for m in _ED_WORD.finditer(s))


def classify_event_type(sentence: str) -> str:
    """Cue-word event type: plan, then preference, relationship, occurrence (past), else state."""
    s = normalize_apostrophes(sentence)
    low = cue_text(s)
    if has_cue(low, _PLAN_CUES) and _PLAN.search(s):
        return "plan"
    if any(c in s for c in _PREFERENCE_CUES) and _PREFERENCE.search(s):
        return "preference"
    past = _has_past_cue(s, low)
    if not past and has_cue(low, _RELATIONSHIP_CUES) and _RELATIONSHIP.search(s):
        return "relationship"  # a relationship word in the past tense is an occurrence
    return "occurrence" if past else "state"


_AUX_LEMMA = {
    "am": "be", "is": "be", "are": "be", "was": "be", "were": "be", "been": "be", "be": "be",
    "have": "have", "has": "have", "had": "have", "do": "do", "does": "do", "did": "do",
}
_MODALS = frozenset(
    """will would can could should shall may might must won't wouldn't can't couldn't shouldn't
    don't doesn't didn't isn't aren't wasn't weren't hasn't haven't hadn't not never to going gonna
    wanna""".split()
)


def predicate_lemma(sentence: str) -> str:
    """Base-form verb of the first clause after a pronoun or name subject (heuristic).

    Skips auxiliaries, modals, negation and mid-sentence adverbs; falls back to the
    auxiliary's lemma ("I am tired" -> "be") and to "" when no subject is found.
    """
    return _predicate_of_words(words(normalize_apostrophes(sentence)))


def _predicate_of_words(toks: Sequence[str]) -> str:
    """``predicate_lemma`` of a sentence from its words."""
    subjects = {"i", "we", "you", "he", "she", "they", "it"}
    start = None
    for idx, w in enumerate(toks):
        if w in subjects or w in ("i'm", "i've", "we're", "we've", "you're", "you've", "it's"):
            start = idx
            break
    if start is None:
        return ""
    aux = _AUX_LEMMA.get({"i'm": "am", "we're": "are", "you're": "are", "it's": "is"}.get(toks[start], ""), "")
    if toks[start] in ("i've", "we've", "you've"):
        aux = "have"
    for w in toks[start + 1:start + 7]:
        if w in _AUX_LEMMA:
            aux = aux or _AUX_LEMMA[w]
            continue
        if w in _MODALS or w in _MID_ADVERBS or w in ("so", "very"):
            continue
        if w in IRREGULAR_VERBS or w in PRESENT_VERBS or w in COMMON_VERBS or w.endswith(("ed", "ing")) or (
                w.endswith("s") and (w[:-1] in PRESENT_VERBS or w[:-1] in COMMON_VERBS)):
            return lemma(w)
        return aux
    return aux


# --------------------------------------------------------------------------- extractor

_PROFILE_CUES = re.compile(
    r"\b(?:job|work(?:s|ed)?\s+(?:as|at)|occupation|career|profession|identity|identif(?:y|ies)|"
    r"transgender|gay|lesbian|bisexual|religio\w*|believe|married|single|divorced|hobby|"
    r"hobbies|favorite|favourite|allergic|health|diagnos\w*|goal|dream|passion|passionate|"
    r"personality|values?|born|grew\s+up|live[sd]?\s+in|moved\s+(?:to|from))\b",
    re.IGNORECASE,
)
_PROFILE_CUE_WORDS = ("job", "work", "occupation", "career", "profession", "identi", "transgender", "gay",
                      "lesbian", "bisexual", "religio", "believe", "married", "single", "divorced", "hobb",
                      "favorite", "favourite", "allergic", "health", "diagnos", "goal", "dream", "passion",
                      "personality", "value", "born", "grew", "live", "moved")


def _has_profile_cue(source: str) -> bool:
    """``_PROFILE_CUES`` found in ``source`` (scanned only when one of its cue words is there)."""
    return has_cue(cue_text(source), _PROFILE_CUE_WORDS) and _PROFILE_CUES.search(source) is not None


_CAPTION_PREFIX = re.compile(
    r"^\s*(?:(?:a|an|the)\s+)?(?:photo|picture|image|photograph|pic|screenshot)\s+of\s+|^\s*there\s+is\s+|"
    r"^\s*this\s+is\s+", re.IGNORECASE,
)


@dataclass(frozen=True)
class _Claim:
    text: str  # the standalone claim
    source: str  # the sentence it came from (before resolution), used for metadata
    people: tuple[str, ...]
    is_question: bool = False
    is_caption: bool = False
    extra_keywords: tuple[str, ...] = ()


_END_MARKS = re.compile(r"[!\u2026:;,]+$")
_END_DOTS = re.compile(r"\.{2,}$")


def _finish(sentence: str, question: bool) -> str:
    s = sentence.strip()
    if question:
        return s
    s = _END_MARKS.sub(".", s)
    s = _END_DOTS.sub(".", s)
    if s and s[-1] not in ".?\"')":
        s += "."
    return s


class RuleExtractor:
    """Model-free ``DescriptorExtractor`` (see the module docstring for the rules).

    ``descriptor_set`` names the rule version, the keyword cap and the claim bound (when
    set), so a change of any builds a new descriptor set instead of mixing outputs.
    """

    def __init__(self, config: ExtractionConfig = ExtractionConfig()) -> None:
        self.config = config
        cap = "" if config.max_rule_claims is None else f":c{config.max_rule_claims}"
        self.descriptor_set = f"{RULE_EXTRACTOR_VERSION}:k{config.max_keywords}{cap}"

    # -- public -------------------------------------------------------------------------------
    def extract(self, items: Sequence[tuple[SourcePacket, SourcePacket | None]]) -> list[list[Descriptor]]:
        """One descriptor list per (packet, preceding packet) item, in order."""
        return [self.extract_one(packet, previous) for packet, previous in items]

    def extract_one(self, packet: SourcePacket, previous: SourcePacket | None) -> list[Descriptor]:
        """Descriptors of one packet, claim index in extraction order."""
        return self.extract_with_template(packet, addressee_of(packet.speaker,
                                                               previous.speaker if previous else None))[0]

    @staticmethod
    def addressee(packet: SourcePacket, previous: SourcePacket | None) -> str | None:
        """All that the preceding packet contributes to ``packet``'s descriptors: the addressee."""
        return addressee_of(packet.speaker, previous.speaker if previous is not None else None)

    def extract_with_template(self, packet: SourcePacket, addressee: str | None
                              ) -> tuple[list[Descriptor], "RuleTemplate"]:
        """(``packet``'s descriptors, the part of them that does not depend on its session
        time or identity), for ``addressee`` (``addressee_of``). ``bind`` of the template to
        another packet with the same speaker, text and image fields gives exactly what
        ``extract_one`` gives for it."""
        speaker = packet.speaker.strip() or "Someone"
        claims = self._claims(packet, speaker, addressee)
        anchor = parse_session_time(packet.session_time)
        interaction = session_date(packet.session_time)
        out: list[Descriptor] = []
        parts: list[_ClaimTemplate] = []
        seen: set[str] = set()
        for claim in claims:
            key = " ".join(words(claim.text))
            if not key or key in seen:
                continue
            seen.add(key)
            descriptor, part = self._descriptor(packet, len(out), claim, speaker, anchor, interaction)
            out.append(descriptor)
            parts.append(part)
        return out, RuleTemplate(speaker, tuple(parts))

    def bind(self, template: "RuleTemplate", packet: SourcePacket) -> list[Descriptor]:
        """The descriptors of ``packet`` from a template made for a packet with the same speaker,
        text and image fields (and addressee): the time expressions are read again against
        ``packet``'s session time, and the keywords recomputed only when that finds other
        expressions (they are what keywords are masked by)."""
        anchor = parse_session_time(packet.session_time)
        interaction = session_date(packet.session_time)
        limit = max(0, int(self.config.max_keywords))
        out: list[Descriptor] = []
        for index, part in enumerate(template.claims):
            mentions = [] if part.is_caption else find_time_mentions(part.source, anchor, prefer=part.prefer)
            spans = tuple((m.start, m.end) for m in mentions)
            keywords = part.keywords if spans == part.spans else _keywords(
                part.source, mentions, part.people, template.speaker, part.extra_keywords, limit)
            out.append(_make_descriptor(packet, index, part, keywords, mentions[0].value if mentions else "",
                                        interaction))
        return out

    # -- claims -------------------------------------------------------------------------------
    def _claims(self, packet: SourcePacket, speaker: str, addressee: str | None) -> list[_Claim]:
        known = [speaker] + ([addressee] if addressee else [])
        claims: list[_Claim] = []
        for sentence in self._kept_sentences(packet.content, known):
            question = sentence.rstrip(" \"')").endswith("?")
            names = proper_names(sentence, known)
            asked = f"{speaker_subject(speaker)} asked {addressee}: " if addressee else \
                f"{speaker_subject(speaker)} asked: "
            res = resolve_references(sentence, speaker, addressee, resolve_second=not question)
            if not question and res.first_person and is_request(sentence):
                # "Remind me that ...": the addressee is the subject, so no "you" is resolved
                # and the claim says who asked whom.
                question_like = True
                res = resolve_references(sentence, speaker, addressee, resolve_second=False)
            else:
                question_like = question
            if question_like:
                text = asked + res.text
                people = [speaker] + ([addressee] if addressee else [])
            else:
                if res.first_person or res.second_person:
                    text = res.text
                else:
                    text = f"{speaker_subject(speaker)} said: {res.text}"
                people = [speaker]
                if res.second_person and addressee:
                    people.append(addressee)
            people += names
            claims.append(_Claim(_finish(text, question), sentence, _dedupe_names(people), question))
        caption = (packet.image_caption or "").strip()
        if caption:
            body = _CAPTION_PREFIX.sub("", normalize_apostrophes(caption), count=1).strip().rstrip(".")
            if body:
                extra = ()
                if packet.image_query and packet.image_query.strip():
                    extra = (" ".join(packet.image_query.lower().split()),)
                claims.append(_Claim(
                    f"{speaker_subject(speaker)} shared a photo of {body}.", body,
                    _dedupe_names([speaker] + proper_names(body, known)), False, True, extra,
                ))
        return claims

    def _kept_sentences(self, content: str, known: Sequence[str]) -> list[str]:
        """The sentences that become claims: low-value ones dropped; with ``max_rule_claims``
        set, at most that many, the ones with the most distinct content words (ties: the
        earlier), in turn order. The bound applies before reference resolution and metadata,
        which are the per-claim cost; a long reply's raw text still reaches BM25 and the
        dense passages whole."""
        kept = []
        for raw in split_sentences(normalize_apostrophes(content)):
            if is_low_value(raw, known):
                continue
            sentence = _strip_vocative(_strip_interjection(raw), known)
            # Nothing stripped: the same sentence, already found worth keeping.
            if sentence == raw or not is_low_value(sentence, known):
                kept.append(sentence)
        cap = self.config.max_rule_claims
        if cap is None or len(kept) <= cap:
            return kept
        richness = [len(set(_content_words(s, known))) for s in kept]
        best = sorted(range(len(kept)), key=lambda i: (-richness[i], i))[:cap]
        return [kept[i] for i in sorted(best)]

    # -- metadata -----------------------------------------------------------------------------
    def _descriptor(self, packet: SourcePacket, index: int, claim: _Claim, speaker: str,
                    anchor, interaction: str) -> tuple[Descriptor, "_ClaimTemplate"]:
        source = claim.source
        toks = [] if claim.is_caption else words(normalize_apostrophes(source))  # for subject and predicate
        if claim.is_caption:
            event_type = "occurrence"
            mentions = []
        else:
            event_type = classify_event_type(source)
            mentions = find_time_mentions(source, anchor, prefer="future" if event_type == "plan" else "past")
        limit = max(0, int(self.config.max_keywords))
        kws = _keywords(source, mentions, claim.people, speaker, claim.extra_keywords, limit)
        negated = has_negation(claim.text)
        if claim.is_question:
            polarity = "unknown"
        else:
            polarity = "negative" if negated else "positive"
        needs_profile = event_type in ("preference", "relationship") or (
            not claim.is_question and _has_profile_cue(source))
        part = _ClaimTemplate(
            text=claim.text, source=source, people=claim.people, is_caption=claim.is_caption,
            extra_keywords=claim.extra_keywords, prefer="future" if event_type == "plan" else "past",
            spans=tuple((m.start, m.end) for m in mentions), keywords=kws, event_type=event_type,
            polarity=polarity, subject=self._subject(source, claim, speaker, toks),
            predicate="share" if claim.is_caption else _predicate_of_words(toks),
            needs_profile=needs_profile, negated=negated, n_tokens=count_tokens(claim.text))
        return _make_descriptor(packet, index, part, kws, mentions[0].value if mentions else "", interaction), part

    @staticmethod
    def _subject(source: str, claim: _Claim, speaker: str, toks: Sequence[str] | None = None) -> tuple[str, ...]:
        """Who a claim is about; ``toks``: the words of ``source`` when the caller has them."""
        if claim.is_caption:
            return (speaker,)
        first = (words(normalize_apostrophes(source)) if toks is None else toks)[:1]
        if not first:
            return ()
        w = first[0]
        if w in ("i", "i'm", "i've", "i'll", "i'd", "my"):
            return (speaker,) if w != "my" else ()
        own = normalize_name(speaker)
        people = [p for p in claim.people if normalize_name(p) != own]
        if w in ("we", "we're", "we've", "we'll", "we'd"):
            return (speaker, people[0]) if people else (speaker,)
        if w in ("you", "you're", "you've", "you'll", "you'd") and people:
            return (people[0],)
        for p in claim.people:
            if words(p)[:1] == [w.removesuffix("'s")]:
                return (p,)
        return ()


@dataclass(frozen=True)
class _ClaimTemplate:
    """What one claim's descriptor holds apart from its packet's identity and session time,
    with the time-expression spans its keywords were masked by (``RuleExtractor.bind``)."""

    text: str
    source: str
    people: tuple[str, ...]
    is_caption: bool
    extra_keywords: tuple[str, ...]
    prefer: str
    spans: tuple[tuple[int, int], ...]
    keywords: tuple[str, ...]
    event_type: str
    polarity: str
    subject: tuple[str, ...]
    predicate: str
    needs_profile: bool
    negated: bool
    n_tokens: int


@dataclass(frozen=True)
class RuleTemplate:
    """A turn's rule extraction without its session time and identity (``RuleExtractor.bind``)."""

    speaker: str
    claims: tuple[_ClaimTemplate, ...]

    def text_chars(self) -> int:
        """Characters of text held (a size estimate for a memo)."""
        return sum(len(c.text) + len(c.source) + sum(map(len, c.keywords)) + sum(map(len, c.people))
                   for c in self.claims)


def addressee_of(speaker: str, previous_speaker: str | None) -> str | None:
    """The addressee of a turn: the preceding turn's speaker when that is someone else."""
    if previous_speaker is not None and normalize_name(previous_speaker) != normalize_name(speaker.strip()
                                                                                           or "Someone"):
        return previous_speaker.strip() or None
    return None


def _keywords(source: str, mentions: Sequence, people: Sequence[str], speaker: str,
              extra: tuple[str, ...], limit: int) -> tuple[str, ...]:
    """Keyword phrases of a claim's source sentence, its time expressions and names blanked out."""
    masked = source
    if mentions:
        chars = list(source)
        for m in mentions:
            chars[m.start:m.end] = [","] * (m.end - m.start)
        masked = "".join(chars)
    kws = keyword_phrases(masked, exclude=list(people) + [speaker], known_names=people, limit=limit)
    if extra:
        kws = tuple(dict.fromkeys(extra + kws))[:limit]
    return kws


def _make_descriptor(packet: SourcePacket, index: int, part: _ClaimTemplate, keywords: tuple[str, ...],
                     event_time: str, interaction: str) -> Descriptor:
    event = EventFields(
        subject_people=part.subject,
        predicate=part.predicate,
        focus_terms=tuple(keywords[:2]),
        goal_context_terms=(),
        event_type=part.event_type,
        event_time=event_time,
        polarity=part.polarity,
        confidence=RULE_CONFIDENCE,
    )
    return Descriptor(
        descriptor_id=descriptor_id(packet.namespace, packet.packet_id, index),
        namespace=packet.namespace,
        packet_id=packet.packet_id,
        claim_index=index,
        text=part.text,
        speaker=packet.speaker,
        session_index=packet.session_index,
        session_time=packet.session_time,
        people=part.people,
        keywords=keywords,
        event_time=event_time,
        interaction_time=interaction,
        n_tokens=part.n_tokens,
        needs_profile=part.needs_profile,
        event=event,
        negated=part.negated,
    )


def _dedupe_names(names: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    seen: set[str] = set()
    for n in names:
        key = normalize_name(n)
        if key and key not in seen:
            seen.add(key)
            out.append(n.strip())
    return tuple(out)
