"""Chat-log normalization for the lexical channel (``FusionConfig.chat_norm``, off by default).

People chatting write "bday", "tmrw", "gonna", "sooo" and emoji; a question asks about a
"birthday" "tomorrow". :func:`normalize_chat` rewrites a text so that the BM25 terms of a turn
and of a question meet:

* **abbreviations and slang** (:data:`SLANG`): a short map of chat spellings to standard
  words, applied to whole words written in lower case or capitalized ("Gonna", never an
  all-caps acronym such as "BC" or "HR"), and never to a participant's own name;
* **elongation**: a run of three or more of one letter inside an alphabetic word of at least
  two distinct letters becomes one letter ("sooo" -> "so", "yesss" -> "yes"); a word spelled
  with a double letter loses it too ("goood" -> "god"), which is rare and no worse than the
  elongated spelling, which matched nothing before; words of one repeated letter ("www",
  "xxx", "mmm") and words with digits or underscores (code) are left alone;
* **emoji and emoticons** to words: an emoji code point becomes the words of its Unicode name
  ("\\U0001F382" -> "birthday cake"; generic words such as "face" and "sign" dropped), and a
  few emoticons (":)", "<3") a word. Without this the tokenizer drops emoji (they are not word
  characters).

Why hand-written: the lexical channel only gains from a rewrite that yields a *content* word
(stopwords and one-letter tokens are dropped by ``tokens.terms``), so "u" -> "you" or
"k" -> "okay" change no BM25 term and are left out; what matters is a short, unambiguous map.
The registry's candidates are a poorer fit: ``contractions`` expands apostrophe contractions
(stopwords here) and its slang table includes ambiguous entries; ``ekphrasis`` (last release
2022) brings a tokenizer, word statistics downloads and its own pipeline; the entries that
matter are a few dozen. Emoji names come from the standard library (``unicodedata``, the
Unicode character database): the ``emoji`` package's ``demojize`` would add names for
multi-code-point sequences (skin tones, ZWJ families), which the development corpora do not
contain, at the cost of a dependency. Entries that collide with code or math in the
user-assistant corpus were left out on purpose: "def" (Python), "cos", "nvm" (the Node version
manager), "min", "r", "k".

A pure function of its input; safe from many threads. Idempotent: every output word is
standard, so a second pass changes nothing.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable

__all__ = ["SLANG", "EMOTICONS", "normalize_chat", "squash_elongation", "emoji_words"]

# Chat spelling -> standard words. Keys are lower case; each value is plain English (so the
# map is idempotent: no value contains a key as a word).
SLANG: dict[str, str] = {
    # verbs run together
    "gonna": "going to", "wanna": "want to", "gotta": "got to", "gimme": "give me", "lemme": "let me",
    "kinda": "kind of", "sorta": "sort of", "dunno": "don't know",
    # initialisms
    "idk": "i don't know", "tbh": "to be honest", "imo": "in my opinion", "imho": "in my opinion",
    "btw": "by the way", "rn": "right now", "omg": "oh my god", "ngl": "not going to lie",
    "lol": "laughing out loud", "lmao": "laughing", "bff": "best friend", "bf": "boyfriend",
    "gf": "girlfriend",
    # clipped or respelled words
    "bc": "because", "cuz": "because", "coz": "because", "bcuz": "because",
    "thx": "thanks", "thnx": "thanks", "ty": "thank you", "tysm": "thank you so much",
    "pls": "please", "plz": "please", "bday": "birthday", "tmrw": "tomorrow", "tmr": "tomorrow",
    "tmrrw": "tomorrow", "2moro": "tomorrow", "2morrow": "tomorrow", "2day": "today", "tonite": "tonight",
    "b4": "before", "gr8": "great", "l8r": "later", "ppl": "people", "pic": "picture", "pics": "pictures",
    "vid": "video", "vids": "videos", "fav": "favorite", "fave": "favorite", "favs": "favorites",
    "faves": "favorites", "convo": "conversation", "convos": "conversations", "abt": "about",
    "mins": "minutes", "hr": "hour", "hrs": "hours", "yr": "year", "yrs": "years", "wknd": "weekend",
    "info": "information", "msg": "message", "msgs": "messages", "appt": "appointment",
    "rly": "really", "prolly": "probably", "probs": "probably", "obvi": "obviously",
    "uni": "university",
    # contractions written without the apostrophe (the stopword list has them with it)
    "dont": "don't", "doesnt": "doesn't", "didnt": "didn't", "cant": "can't", "isnt": "isn't",
    "wasnt": "wasn't", "im": "i'm", "ive": "i've", "youre": "you're", "thats": "that's", "whats": "what's",
}
# Spellings with a slash, which the tokenizer would split ("w/" -> "w", dropped).
_SLASHED = {"w/o": "without", "w/": "with", "b/c": "because"}
EMOTICONS: dict[str, str] = {":)": "smile", ":-)": "smile", ":D": "laugh", ":(": "sad", ":-(": "sad",
                             "<3": "love", ";)": "wink"}
# Words of emoji names that say nothing about the emoji.
# ("male"/"female" sign: the gender part of a joined sequence such as "woman shrugging").
_GENERIC = frozenset({"face", "sign", "symbol", "emoji", "with", "of", "and", "the", "a", "male", "female"})

_WORD = re.compile(r"\w+(?:'\w+)*")
# Alphabetic words with a run of three of one letter, the only ones elongation touches.
_ELONGATED = r"[A-Za-z]*([A-Za-z])\1\1[A-Za-z]*"
_NON_ASCII = re.compile(r"[\u2190-\U0010FFFF]")
_SLASH = re.compile(r"(?<![\w/])(w/o|w/|b/c)(?![\w/])", re.IGNORECASE)
_EMOTICON = re.compile(r"(?<!\S)(" + "|".join(re.escape(e) for e in sorted(EMOTICONS, key=len, reverse=True))
                       + r")(?!\S)")
_RUN = re.compile(r"([a-z])\1{2,}", re.IGNORECASE)


def _is_emoji(ch: str) -> bool:
    """A pictographic symbol: "other symbol" at or past the arrows block (leaves (c), (R), degrees)."""
    return ord(ch) >= 0x2190 and unicodedata.category(ch) == "So"


def emoji_words(ch: str) -> str:
    """The words of an emoji's Unicode name, generic ones dropped ("" for an unnamed one)."""
    name = unicodedata.name(ch, "").lower().replace("-", " ")
    return " ".join(w for w in name.split() if w not in _GENERIC)


def squash_elongation(word: str) -> str:
    """``word`` with each run of 3+ of one letter made one letter (see the module docstring)."""
    if not word.isalpha() or len(set(word.lower())) < 2 or not _RUN.search(word):
        return word
    return _RUN.sub(r"\1", word)


_SENTENCE_END = re.compile(r"(?:^|[.!?\n])[ \t\"'(]*$")


def _written_as_word(word: str, before: str) -> bool:
    """Lower case, or capitalized where a sentence starts (``before``: the text before it): a
    chat spelling, not an acronym ("BC", "HR") nor a name ("Ty" mid-sentence)."""
    if word.islower():
        return True
    return word[:1].isupper() and word[1:].islower() and bool(_SENTENCE_END.search(before[-8:]))


def normalize_chat(text: str, keep: Iterable[str] = ()) -> str:
    """``text`` with chat spellings, elongations, emoji and emoticons rewritten as words.

    ``keep``: words never rewritten (the participants' names, compared in lower case).
    Characters other than the rewritten words are kept as they are."""
    if not text:
        return text or ""
    kept = {k.lower() for name in keep for k in _WORD.findall(name)}
    if not text.isascii():
        text = _NON_ASCII.sub(lambda m: f" {emoji_words(m.group(0))} " if _is_emoji(m.group(0)) else m.group(0), text)
    if ":" in text or ";" in text or "<" in text:
        text = _EMOTICON.sub(lambda m: EMOTICONS[m.group(1)], text)
    if "/" in text:
        text = _SLASH.sub(lambda m: _SLASHED[m.group(1).lower()], text)

    def word(m: re.Match) -> str:
        w = m.group(0)
        low = w.lower()
        if low in kept:
            return w
        before = m.string[max(0, m.start() - 8):m.start()]
        if low in SLANG and _written_as_word(w, before):
            return SLANG[low]
        squashed = squash_elongation(w)
        if squashed is not w and squashed.lower() not in kept:
            low2 = squashed.lower()
            return SLANG[low2] if low2 in SLANG and _written_as_word(squashed, before) else squashed
        return w

    # Most words of a text are left as they are: find the ones a rewrite can touch first
    # (distinct words in the map; any run of three letters), and rewrite only those.
    hits = sorted({w for w in _WORD.findall(text) if w.lower() in SLANG}, key=len, reverse=True)
    alternatives = [re.escape(w) for w in hits] + ([_ELONGATED] if _RUN.search(text) else [])
    if not alternatives:
        return text
    return re.sub(r"(?<![\w'])(?:" + "|".join(alternatives) + r")(?![\w'])", word, text)
