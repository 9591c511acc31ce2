"""Session times and event-time expressions.

Two jobs:

* :func:`parse_session_time` reads the recorded time of a session as the datasets write it
  (LoCoMo ``"1:56 pm on 8 May, 2023"``, LongMemEval ``"2023/05/20 (Sat) 02:21"``, ISO
  strings) into a ``datetime``; :func:`session_date` turns it into ``YYYY-MM-DD``.
* :func:`find_time_mentions` locates time expressions in a text and normalizes each against
  the session datetime (the anchor); :func:`normalize_time` does the same for one expression
  (for example the event time a model returned).

Normalization rules. The granularity of the expression is kept, and expressions that are
anchored to a week or a weekday are *not* turned into an exact date (a weekday named in
conversation is ambiguous by up to a week, so the anchored phrase is the honest value):

====================================  ======================================  =====================
expression (anchor 2023-05-08)        value                                   granularity
====================================  ======================================  =====================
``7 May 2023``, ``May 7th, 2023``     ``2023-05-07``                          day
``2023-05-07``, ``2023/05/07``        ``2023-05-07``                          day
``May 7`` / ``7 May`` (no year)       most recent such date not after the      day
                                      anchor (``prefer="past"``) or the next
                                      one not before it (``prefer="future"``)
``yesterday``, ``last night``         ``2023-05-07``                          day
``today``, ``tonight``, ``this        ``2023-05-08``                          day
morning``
``tomorrow``                          ``2023-05-09``                          day
``3 days ago`` / ``in 3 days``        ``2023-05-05`` / ``2023-05-11``         day
``a few days ago``                    ``a few days before 2023-05-08``        relative
``last week``, ``a week ago``         ``the week before 2023-05-08``          week
``this week`` / ``next week``         ``the week of 2023-05-08`` / ``the      week
                                      week after 2023-05-08``
``two weeks ago``                     ``two weeks before 2023-05-08``         week
``last weekend`` / ``next weekend``   ``the weekend before/after 2023-05-08``  week
``last Saturday`` / ``next Saturday`` ``the Saturday before/after             week
                                      2023-05-08``
``on Saturday``, ``this Saturday``    as *last* (past) or *next* (future)     week
``May 2023``                          ``2023-05``                             month
``in May``, ``this May``              most recent May (past) / next May       month
                                      (future), e.g. ``2023-05``
``last May`` / ``next May``           ``2022-05`` / ``2024-05``               month
``last month`` / ``next month``       ``2023-04`` / ``2023-06``               month
``two months ago``                    ``2023-03``                             month
``in 2022``, ``since 2022``           ``2022``                                year
``last year`` / ``next year``         ``2022`` / ``2024``                     year
``3 years ago``                       ``2020``                                year
``summer 2022``                       ``summer 2022``                         season
``last summer`` / ``this summer``     ``the summer before 2023-05-08`` /      season
                                      ``summer 2023``
====================================  ======================================  =====================

Without an anchor, absolute expressions are still normalized and relative ones are returned
as written (lowercased). Month names that double as ordinary words (``May``, ``March``) are
only read as months when capitalized in free text. A bare four-digit year counts only after
a preposition (``in 2022``), so counts such as ``2000 people`` are not read as years.
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import logging
import re
from dataclasses import dataclass
from typing import Callable, Literal

from memcompile_local.language.tokens import cue_text

__all__ = [
    "TimeMention",
    "parse_session_time",
    "numeric_date_problem",
    "session_date",
    "find_time_mentions",
    "normalize_time",
    "MONTH_NAMES",
    "WEEKDAY_NAMES",
]

logger = logging.getLogger(__name__)

Prefer = Literal["past", "future"]

MONTH_NAMES: tuple[str, ...] = tuple(calendar.month_name[1:])
WEEKDAY_NAMES: tuple[str, ...] = tuple(calendar.day_name)

_MONTH_BY_TOKEN: dict[str, int] = {}
for _i, _name in enumerate(MONTH_NAMES, start=1):
    _MONTH_BY_TOKEN[_name.lower()] = _i
    _MONTH_BY_TOKEN[_name[:3].lower()] = _i
_MONTH_BY_TOKEN["sept"] = 9

_NUMBER_WORDS: dict[str, int] = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a couple": 2, "couple of": 2,
}

# Month tokens that are also common English words: read as months only when capitalized.
_AMBIGUOUS_MONTHS = {"may", "march", "mar", "jan", "sep", "oct", "nov", "dec", "jun", "jul", "aug", "apr", "feb"}

_MONTH = (r"(?P<mon>January|February|March|April|May|June|July|August|September|October|November|"
          r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?")
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_NUM = (r"(?P<num>\d+|a\s+couple\s+of|a\s+couple|couple\s+of|a\s+few|few|several|an|a|one|two|three|"
        r"four|five|six|seven|eight|nine|ten|eleven|twelve)")
_WEEKDAY = r"(?P<wd>Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_SEASON = r"(?P<season>summer|winter|spring|fall|autumn)"


@dataclass(frozen=True)
class TimeMention:
    """One time expression found in a text.

    ``start``/``end`` index the text; ``value`` is the normalized form (see the module
    table); ``granularity`` is one of day, week, month, year, season, relative.
    """

    start: int
    end: int
    text: str
    value: str
    granularity: str


# ----------------------------------------------------------------------------- session times

_SESSION_FORMATS: tuple[str, ...] = (
    "%I:%M %p on %d %B, %Y",  # LoCoMo: 1:56 pm on 8 May, 2023
    "%I:%M %p on %d %b, %Y",
    "%I:%M %p on %B %d, %Y",
    "%Y/%m/%d (%a) %H:%M",  # LongMemEval: 2023/05/20 (Sat) 02:21
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%d %B, %Y",
    "%d %B %Y",
    "%B %d, %Y",
    "%B %d %Y",
)
_HAS_YEAR = re.compile(r"(?<!\d)(?:19|20)\d{2}(?!\d)")

# A date written in digits only, at the start of the string: year first (2024-05-08, 2024/5/8,
# 2024.05.08, or a year and month, 2024-05) or year last (05/08/2024). What may follow is a time.
_YEAR_FIRST = re.compile(r"(?P<y>\d{4})(?P<sep>[-/.])(?P<a>\d{1,2})(?:(?P=sep)(?P<b>\d{1,2}))?(?=$|[T\s,])")
_YEAR_LAST = re.compile(r"(?P<a>\d{1,2})(?P<sep>[-/.])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4})(?=$|[T\s,])")


def numeric_date_problem(s: str) -> str | None:
    """Why ``s``, which starts with a date written in digits, is not a real date; None when it
    is one or when ``s`` does not start that way.

    Each digit layout has one reading: year first is always year-month(-day), year last is
    month/day/year (``05/08/2024`` is 8 May, as dateparser's English default reads it).
    ``dateparser`` alone would swap the fields of an impossible date until something fits
    (``2025-13-01`` as 13 January, ``2024-31-12`` as 31 December, ``13/01/2025`` as 13
    January while ``12/01/2025`` is 1 December), so the same string layout would mean
    different field orders from one value to the next. A date that is not a date is refused
    instead (``parse_session_time`` gives None, and the callers report it).
    """
    if not isinstance(s, str):
        return None
    text = s.strip()
    m = _YEAR_FIRST.match(text)
    if m is not None:
        layout = "year-month-day" if m["b"] is not None else "year-month"
        month, day = int(m["a"]), int(m["b"]) if m["b"] is not None else 1
    else:
        m = _YEAR_LAST.match(text)
        if m is None:
            return None
        layout, month, day = "month/day/year", int(m["a"]), int(m["b"])
    year = int(m["y"])
    if not 1 <= month <= 12:
        return f"{m.group(0)!r} read as {layout} has month {month}; a month is 1 to 12"
    if year < 1:
        return f"{m.group(0)!r} read as {layout} has year 0; years start at 1"
    if _safe_date(year, month, day) is None:
        return f"{m.group(0)!r} read as {layout} has day {day}, which {calendar.month_name[month]} {year} does not have"
    return None


@functools.lru_cache(maxsize=4096)
def parse_session_time(s: str) -> dt.datetime | None:
    """Parse a recorded session time; None when it cannot be read.

    Known dataset layouts are tried first with ``strptime`` (exact and locale-free for
    English month names), then ISO 8601, then ``dateparser`` as a fallback. The fallback
    is only used when the string contains a four-digit year, because a relative string
    such as "yesterday" would otherwise be resolved against the wall clock and make the
    result depend on the day the code runs. A string that starts with an impossible date
    in digits (``2025-13-01``, see :func:`numeric_date_problem`) is not handed to it.
    """
    if not isinstance(s, str):
        return None
    text = " ".join(s.split())
    if not text:
        return None
    for fmt in _SESSION_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
    try:
        parsed = dt.datetime.fromisoformat(text)
        return parsed.replace(tzinfo=None)
    except ValueError:
        pass
    if not _HAS_YEAR.search(text) or numeric_date_problem(text) is not None:
        return None
    import dateparser  # core dependency; imported here because it is slow to import

    parsed = dateparser.parse(
        text,
        languages=["en"],
        settings={
            "RELATIVE_BASE": dt.datetime(2000, 1, 1),
            "PREFER_DAY_OF_MONTH": "first",
            "RETURN_AS_TIMEZONE_AWARE": False,
        },
    )
    return parsed.replace(tzinfo=None) if parsed is not None else None


def session_date(s: str) -> str:
    """``YYYY-MM-DD`` of a recorded session time, or the raw string when it cannot be parsed."""
    parsed = parse_session_time(s) if isinstance(s, str) else None
    if parsed is None:
        return s if isinstance(s, str) else ""
    return parsed.date().isoformat()


# ----------------------------------------------------------------------------- date helpers


def _iso(d: dt.date) -> str:
    return d.isoformat()


def _ym(year: int, month: int) -> str:
    return f"{year:04d}-{month:02d}"


def _add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _safe_date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _number(token: str) -> int | None:
    """Integer value of a count token, None for vague counts (a few, several)."""
    t = " ".join(token.lower().split())
    if t.isdigit():
        return int(t)
    return _NUMBER_WORDS.get(t)


def _month_of(token: str) -> int:
    return _MONTH_BY_TOKEN[token.lower().rstrip(".")]


# ----------------------------------------------------------------------------- expression finder

# A handler gets (match, anchor datetime or None, prefer) and returns (value, granularity)
# or None when the match turns out not to be a time expression.
Handler = Callable[[re.Match, "dt.datetime | None", str], "tuple[str, str] | None"]


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern
    handler: Handler
    needs_cap_month: bool = False  # ambiguous month words must be capitalized in free text
    cues: frozenset[str] = frozenset()  # cue groups: every match holds one cue of each (see _CUES)


# A pre-check that lets find_time_mentions skip patterns: every match of a pattern holds, for
# each cue group the pattern names, one of the group's substrings (case-insensitively; "\d"
# stands for any decimal digit), so a text that lacks a group cannot match it. Most
# sentences hold no time expression, and the 37 regex scans were most of the cost of one.
_DIGIT_CUE = r"\d"  # stands for "a decimal digit" among the cues found (not a substring)
_CUES: dict[str, frozenset[str]] = {name: frozenset(cues) for name, cues in {
    "digit": (_DIGIT_CUE,),
    "year_digits": ("19", "20"),  # a year as _YEAR reads one
    "month_name": ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    "day": ("day",),  # yesterday, today, days, every weekday name
    "day_night": ("day", "night"),
    "day_part": ("day", "night", "morning", "afternoon", "evening"),
    "tomorrow": ("tomorrow",),
    "week": ("week",),
    "month_word": ("month",),
    "year_word": ("year",),
    "season": ("summer", "winter", "spring", "fall", "autumn"),
}.items()}
_WORD_CUES = tuple(sorted(set().union(*_CUES.values()) - {_DIGIT_CUE}))
_ANY_DIGIT = re.compile(r"\d")


def _cue_groups(text: str) -> set[str] | None:
    """The cue groups ``text`` has a cue of; None when lowercasing cannot tell (then every
    pattern runs)."""
    low = cue_text(text)
    if low is None:
        return None
    found = {c for c in _WORD_CUES if c in low}
    if _ANY_DIGIT.search(text) is not None:
        found.add(_DIGIT_CUE)
    return {name for name, cues in _CUES.items() if not found.isdisjoint(cues)}


def _raw(m: re.Match) -> str:
    return " ".join(m.group(0).lower().split())


def _h_iso(m, anchor, prefer):
    d = _safe_date(int(m["year"]), int(m["m"]), int(m["d"]))
    return (_iso(d), "day") if d else None


def _h_full_date(m, anchor, prefer):
    d = _safe_date(int(m["year"]), _month_of(m["mon"]), int(m["day"]))
    return (_iso(d), "day") if d else None


def _h_month_year(m, anchor, prefer):
    return _ym(int(m["year"]), _month_of(m["mon"])), "month"


def _h_day_month(m, anchor, prefer):
    month, day = _month_of(m["mon"]), int(m["day"])
    if not 1 <= day <= 31:
        return None
    if anchor is None:
        return _raw(m), "day"
    ref = anchor.date()
    # Nearest such date on the preferred side of the anchor (a few years cover 29 February).
    step = -1 if prefer == "past" else 1
    for k in range(5):
        d = _safe_date(ref.year + step * k, month, day)
        if d is not None and (d <= ref if prefer == "past" else d >= ref):
            return _iso(d), "day"
    return None


def _h_prep_month(m, anchor, prefer):
    month = _month_of(m["mon"])
    prep = " ".join(m["prep"].lower().split())
    if anchor is None:
        return _raw(m), "month"
    year, cur = anchor.year, anchor.month
    if prep == "last":
        y = year if month < cur else year - 1
    elif prep == "next":
        y = year if month > cur else year + 1
    elif prefer == "future":
        y = year if month >= cur else year + 1
    else:
        y = year if month <= cur else year - 1
    return _ym(y, month), "month"


def _h_year(m, anchor, prefer):
    return m["year"], "year"


def _h_season_year(m, anchor, prefer):
    return f"{m['season'].lower()} {m['year']}", "season"


def _relative(handler: Handler) -> Handler:
    """A handler of an expression relative to the anchor ("yesterday", "last month"): without an
    anchor the expression is kept as written, lower-cased, with granularity "relative"."""

    @functools.wraps(handler)
    def anchored(m, anchor, prefer):
        if anchor is None:
            return _raw(m), "relative"
        return handler(m, anchor, prefer)

    return anchored


def _vague_count(m: re.Match, sign: int, units: str, since: str) -> tuple[str, str]:
    """A count that is not a number ("a few months ago"): said relative to ``since``."""
    word = "before" if sign < 0 else "after"
    return f"{' '.join(m['num'].lower().split())} {units} {word} {since}", "relative"


def _day_offset(days: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        return _iso(anchor.date() + dt.timedelta(days=days)), "day"

    return handler


def _h_days_count(sign: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        n = _number(m["num"])
        if n is None:
            return _vague_count(m, sign, "days", _iso(anchor.date()))
        return _iso(anchor.date() + dt.timedelta(days=sign * n)), "day"

    return handler


def _week_phrase(template: str) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        return template.format(d=_iso(anchor.date())), "week"

    return handler


def _h_weeks_count(sign: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        unit = "weekend" if m["unit"].lower().startswith("weekend") else "week"
        word = "before" if sign < 0 else "after"
        count = " ".join(m["num"].lower().split())
        d = _iso(anchor.date())
        if _number(count) == 1:
            return f"the {unit} {word} {d}", "week"
        return f"{count} {unit}s {word} {d}", "week"

    return handler


@_relative
def _h_weekday(m, anchor, prefer):
    rel = " ".join((m["rel"] or "").lower().split())
    if rel in ("last", "past", "this past"):
        word = "before"
    elif rel in ("next", "this coming", "coming"):
        word = "after"
    else:  # "on Saturday", "this Saturday": direction from the caller's preference
        word = "after" if prefer == "future" else "before"
    return f"the {m['wd'].capitalize()} {word} {_iso(anchor.date())}", "week"


def _month_offset(delta: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        y, mo = _add_months(anchor.year, anchor.month, delta)
        return _ym(y, mo), "month"

    return handler


def _h_months_count(sign: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        n = _number(m["num"])
        if n is None:
            return _vague_count(m, sign, "months", _ym(anchor.year, anchor.month))
        y, mo = _add_months(anchor.year, anchor.month, sign * n)
        return _ym(y, mo), "month"

    return handler


def _year_offset(delta: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        return f"{anchor.year + delta:04d}", "year"

    return handler


def _h_years_count(sign: int) -> Handler:
    @_relative
    def handler(m, anchor, prefer):
        n = _number(m["num"])
        if n is None:
            return _vague_count(m, sign, "years", f"{anchor.year:04d}")
        return f"{anchor.year + sign * n:04d}", "year"

    return handler


@_relative
def _h_season_rel(m, anchor, prefer):
    rel = " ".join(m["rel"].lower().split())
    season = m["season"].lower()
    d = _iso(anchor.date())
    if rel in ("last", "this past", "past"):
        return f"the {season} before {d}", "season"
    if rel == "next":
        return f"the {season} after {d}", "season"
    return f"{season} {anchor.year:04d}", "season"


def _p(pattern: str, handler: Handler, *, cue: str | tuple[str, ...], cap_month: bool = False) -> _Pattern:
    groups = frozenset((cue,) if isinstance(cue, str) else cue)
    if not groups <= _CUES.keys():
        raise ValueError(f"unknown cue group(s) {sorted(groups - _CUES.keys())}")
    return _Pattern(re.compile(pattern, re.IGNORECASE), handler, cap_month, groups)


_PATTERNS: tuple[_Pattern, ...] = (
    # absolute dates
    _p(r"(?<![\d/.-])(?P<year>(?:19|20)\d{2})[-/.](?P<m>[01]?\d)[-/.](?P<d>[0-3]?\d)(?![\d/.-])", _h_iso,
       cue="year_digits"),
    _p(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", _h_full_date, cue=("month_name", "year_digits")),
    _p(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", _h_full_date, cue=("month_name", "year_digits")),
    _p(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", _h_month_year, cue=("month_name", "year_digits")),
    _p(r"(?<![\d/.-])(?P<year>(?:19|20)\d{2})-(?P<mon>0[1-9]|1[0-2])(?![\d/-])",
       lambda m, a, p: (_ym(int(m["year"]), int(m["mon"])), "month"), cue="year_digits"),
    _p(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?![\w])", _h_day_month, cap_month=True, cue=("digit", "month_name")),
    _p(rf"\b{_MONTH}\s+{_DAY}\b(?![:\d])", _h_day_month, cap_month=True, cue=("digit", "month_name")),
    _p(rf"\b(?P<prep>in|during|since|until|till|by|from|of|through|last|next|this|early|late|mid-?|"
       rf"around|before|after|(?:the\s+)?(?:beginning|end|start|middle)\s+of)\s+(?:the\s+month\s+of\s+)?"
       rf"{_MONTH}(?![\w])(?!,?\s+(?:of\s+)?(?:19|20)\d{{2}})(?!\s+[0-3]?\d\b)", _h_prep_month, cap_month=True,
       cue="month_name"),
    _p(rf"\b{_SEASON}\s+(?:of\s+)?{_YEAR}\b", _h_season_year, cue=("season", "year_digits")),
    _p(rf"\b(?:in|since|during|from|until|till|by|of|back\s+in|around|circa|year|early|late|mid-?|"
       rf"before|after)\s+(?:the\s+year\s+)?{_YEAR}\b", _h_year, cue="year_digits"),
    # days
    _p(r"\b(?:the\s+)?day\s+before\s+yesterday\b", _day_offset(-2), cue="day"),
    _p(r"\b(?:the\s+)?day\s+after\s+tomorrow\b", _day_offset(2), cue="day"),
    _p(r"\byesterday\b|\blast\s+night\b", _day_offset(-1), cue="day_night"),
    _p(r"\b(?:earlier\s+)?today\b|\btonight\b|\bthis\s+(?:morning|afternoon|evening)\b", _day_offset(0),
       cue="day_part"),
    _p(r"\btomorrow\b", _day_offset(1), cue="tomorrow"),
    _p(rf"\b{_NUM}\s+days?\s+ago\b", _h_days_count(-1), cue="day"),
    _p(rf"\bin\s+{_NUM}\s+days?\b", _h_days_count(1), cue="day"),
    # weeks and weekdays
    _p(r"\blast\s+week\b|\b(?:this|the)\s+past\s+week\b", _week_phrase("the week before {d}"), cue="week"),
    _p(r"\bthis\s+week\b", _week_phrase("the week of {d}"), cue="week"),
    _p(r"\bnext\s+week\b", _week_phrase("the week after {d}"), cue="week"),
    _p(r"\blast\s+weekend\b|\b(?:this|the)\s+past\s+weekend\b", _week_phrase("the weekend before {d}"),
       cue="week"),
    _p(r"\bthis\s+weekend\b|\bover\s+the\s+weekend\b", _week_phrase("the weekend of {d}"), cue="week"),
    _p(r"\bnext\s+weekend\b", _week_phrase("the weekend after {d}"), cue="week"),
    _p(rf"\b{_NUM}\s+(?P<unit>weeks?|weekends?)\s+ago\b", _h_weeks_count(-1), cue="week"),
    _p(rf"\bin\s+{_NUM}\s+(?P<unit>weeks?)\b", _h_weeks_count(1), cue="week"),
    _p(rf"\b(?P<rel>last|next|this\s+past|this\s+coming|coming|this|on|past)\s+{_WEEKDAY}(?![\w])", _h_weekday,
       cue="day"),
    # months
    _p(r"\blast\s+month\b|\b(?:this|the)\s+past\s+month\b", _month_offset(-1), cue="month_word"),
    _p(r"\bthis\s+month\b", _month_offset(0), cue="month_word"),
    _p(r"\bnext\s+month\b", _month_offset(1), cue="month_word"),
    _p(rf"\b{_NUM}\s+months?\s+ago\b", _h_months_count(-1), cue="month_word"),
    _p(rf"\bin\s+{_NUM}\s+months?\b", _h_months_count(1), cue="month_word"),
    # years
    _p(r"\blast\s+year\b|\b(?:this|the)\s+past\s+year\b", _year_offset(-1), cue="year_word"),
    _p(r"\bthis\s+year\b", _year_offset(0), cue="year_word"),
    _p(r"\bnext\s+year\b", _year_offset(1), cue="year_word"),
    _p(rf"\b{_NUM}\s+years?\s+ago\b", _h_years_count(-1), cue="year_word"),
    _p(rf"\bin\s+{_NUM}\s+years?\b", _h_years_count(1), cue="year_word"),
    # seasons
    _p(rf"\b(?P<rel>last|this\s+past|past|this|next)\s+{_SEASON}\b", _h_season_rel, cue="season"),
)


def _month_case_ok(m: re.Match) -> bool:
    """Free text: ambiguous month words (May, March...) count only when capitalized."""
    try:
        token = m["mon"]
    except IndexError:
        return True
    if token is None:
        return True
    base = token.rstrip(".").lower()
    return base not in _AMBIGUOUS_MONTHS or token[0].isupper()


def find_time_mentions(text: str, anchor: dt.datetime | None, *, prefer: Prefer = "past",
                       strict_case: bool = True) -> list[TimeMention]:
    """Time expressions of ``text`` in text order, normalized against ``anchor``.

    Overlapping candidates are resolved leftmost-longest ("last Saturday" wins over
    "Saturday", "8 May, 2023" over "8 May"). ``prefer`` picks the direction for
    expressions without one (``May 7``, ``on Saturday``): the extractor passes "future"
    for plans. ``strict_case=False`` lifts the capitalization rule for month words (used
    for short expressions such as a model's event-time field).
    """
    if not text:
        return []
    groups = _cue_groups(text)
    found: list[tuple[int, int, int, str, str]] = []
    for order, pat in enumerate(_PATTERNS):
        if groups is not None and not pat.cues <= groups:
            continue  # no match possible (see _CUES); skipping leaves the others' order as it was
        for m in pat.regex.finditer(text):
            if pat.needs_cap_month and strict_case and not _month_case_ok(m):
                continue
            result = pat.handler(m, anchor, prefer)
            if result is None:
                continue
            found.append((m.start(), -(m.end() - m.start()), order, result[0], result[1]))
    found.sort()
    out: list[TimeMention] = []
    last_end = -1
    for start, neg_len, _order, value, gran in found:
        end = start - neg_len
        if start < last_end:
            continue
        out.append(TimeMention(start, end, text[start:end], value, gran))
        last_end = end
    return out


_ISO_FULL = re.compile(r"(?:19|20)\d{2}(?:-(?:0[1-9]|1[0-2])(?:-(?:0[1-9]|[12]\d|3[01]))?)?")
_BARE_WEEKDAY = re.compile(rf"{_WEEKDAY}", re.IGNORECASE)
_BARE_MONTH = re.compile(rf"{_MONTH}", re.IGNORECASE)
_NO_TIME = {"", "none", "null", "unknown", "n/a", "na", "not specified", "not mentioned", "-"}


def normalize_time(expr: str, anchor: str | dt.datetime | None, *, prefer: Prefer = "past") -> str:
    """Normalize one event-time expression against a session time (see the module table).

    ``anchor`` is the recorded session time as written (or an already parsed datetime).
    Returns ``""`` for empty or placeholder values ("none", "unknown"), the normalized value
    when the expression is recognized (its first time expression if it holds several), and
    otherwise the expression itself, trimmed: an unrecognized phrase is kept rather than
    guessed.
    """
    if not isinstance(expr, str):
        return ""
    s = " ".join(expr.split()).strip(" .,;")
    if s.lower() in _NO_TIME:
        return ""
    if _ISO_FULL.fullmatch(s):
        return s  # already normalized (YYYY, YYYY-MM or YYYY-MM-DD)
    if isinstance(anchor, dt.datetime):
        anchor_dt: dt.datetime | None = anchor
    elif isinstance(anchor, str):
        anchor_dt = parse_session_time(anchor)
    else:
        anchor_dt = None
    probe = s
    if _BARE_WEEKDAY.fullmatch(s):
        probe = f"on {s}"
    elif _BARE_MONTH.fullmatch(s):
        probe = f"in {s}"
    mentions = find_time_mentions(probe, anchor_dt, prefer=prefer, strict_case=False)
    if mentions:
        return mentions[0].value
    fallback = _dateparser_fallback(s, anchor_dt)
    return fallback if fallback else s


_MONTH_PLAIN = _MONTH.replace("?P<mon>", "?:")
_FALLBACK_GATE = re.compile(rf"\d.*(?:[/-]|\b{_MONTH_PLAIN})|\b{_MONTH_PLAIN}.*\d", re.IGNORECASE)


def _dateparser_fallback(s: str, anchor: dt.datetime | None) -> str:
    """Last resort for date-like strings the finder does not know (e.g. ``05/08/2023``).

    Only strings with a digit next to a month name or a date separator are handed to
    dateparser: on arbitrary words it happily invents dates ("the one" -> a January).
    Without an anchor only strings carrying a year are tried, against a fixed base.
    """
    if not _FALLBACK_GATE.search(s):
        return ""
    if anchor is None and not _HAS_YEAR.search(s):
        return ""
    if numeric_date_problem(s) is not None:
        return ""  # kept as written: dateparser would read its fields in another order
    from dateparser.date import DateDataParser

    base = anchor or dt.datetime(2000, 1, 1)
    parser = DateDataParser(languages=["en"], settings={
        "RELATIVE_BASE": base,
        "PREFER_DATES_FROM": "past",
        "RETURN_AS_TIMEZONE_AWARE": False,
    })
    data = parser.get_date_data(s)
    if data is None or data.date_obj is None:
        return ""
    d = data.date_obj
    if data.period == "year":
        return f"{d.year:04d}"
    if data.period == "month":
        return _ym(d.year, d.month)
    if data.period == "day" or data.period == "time":
        return _iso(d.date())
    return ""
