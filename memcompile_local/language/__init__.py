"""English-language helpers shared by both planes, the fused retriever and the adapters.

One home for what reading English text needs, so that extractors keep extraction only:

* :mod:`~memcompile_local.language.tokens`: words, content terms, token counts, Jaccard;
* :mod:`~memcompile_local.language.stemming`: Snowball stems of terms, one stemmer per thread;
* :mod:`~memcompile_local.language.lexicon`: the word lists (small talk, light verbs, time
  words) the rules share; :mod:`~memcompile_local.language.lemmas`: base forms of verbs;
* :mod:`~memcompile_local.language.names`: person names and nicknames;
* :mod:`~memcompile_local.language.cleaning`: cleaning phrase and name lists a model wrote;
* :mod:`~memcompile_local.language.phrases`: keyword phrases of a text;
* :mod:`~memcompile_local.language.negation`: the negation flag of a claim;
* :mod:`~memcompile_local.language.timeparse`: session times and time expressions;
* :mod:`~memcompile_local.language.timecues`: temporal questions and bare time phrases.

Every helper is a pure function (per-thread state at most), safe for question threads.
"""

from memcompile_local.language.cleaning import clean_people, clean_phrases
from memcompile_local.language.names import known_name, name_tokens, proper_names
from memcompile_local.language.negation import has_negation
from memcompile_local.language.phrases import keyword_phrases
from memcompile_local.language.stemming import stem_terms, stem_words
from memcompile_local.language.timecues import is_temporal_question, is_time_phrase
from memcompile_local.language.timeparse import (
    TimeMention,
    find_time_mentions,
    normalize_time,
    parse_session_time,
    session_date,
)
from memcompile_local.language.tokens import (
    STOPWORDS,
    count_tokens,
    jaccard,
    normalize_apostrophes,
    normalize_name,
    phrase_terms,
    term_set,
    terms,
    words,
)

__all__ = [
    "STOPWORDS",
    "TimeMention",
    "clean_people",
    "clean_phrases",
    "count_tokens",
    "find_time_mentions",
    "has_negation",
    "is_temporal_question",
    "is_time_phrase",
    "jaccard",
    "keyword_phrases",
    "known_name",
    "name_tokens",
    "normalize_apostrophes",
    "normalize_name",
    "normalize_time",
    "parse_session_time",
    "phrase_terms",
    "proper_names",
    "session_date",
    "stem_terms",
    "stem_words",
    "term_set",
    "terms",
    "words",
]
