"""The development corpora as the ranker's training command and the research scripts read them.

LoCoMo dev4 (four conversations), REALTALK (four chats), BEAM 100K (ten chats) and a
LongMemEval file are loaded with the package's loaders, and each conversation is built once
with the ``model-free`` preset into a store of its own under a cache folder
(``open_memories``), so a second run only loads them. ``scored_questions`` gives the questions
recall is scored on: every question with reachable gold evidence (REALTALK: evidence ids that
name no turn left out; BEAM: abstention and questions without source ids left out).

    from dev_corpora import load_corpus, open_memories   # scripts/ on sys.path
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from memcompile_local import __version__
from memcompile_local.address import extract_rule
from memcompile_local.bench.corpora import split_reachable
from memcompile_local.data import (BEAM_CATEGORIES, LOCOMO_CATEGORY_NAMES, REALTALK_CATEGORY_NAMES, load_beam,
                                   load_locomo, load_longmemeval, load_realtalk)
from memcompile_local.llm.client import LLMClient, NoModelBackend
from memcompile_local.llm.interface import stable_hash
from memcompile_local.memory import Memory
from memcompile_local.store import MemoryStore
from memcompile_local.types import Conversation

CORPUS_NAMES = ("locomo", "realtalk", "beam", "longmemeval")
TITLES = {"locomo": "LoCoMo dev4", "realtalk": "REALTALK", "beam": "BEAM 100K", "longmemeval": "LongMemEval S"}
DEFAULT_DATA = {"locomo": "../shared/data/locomo/locomo_dev4.json", "realtalk": "../shared/data/realtalk",
                "beam": "../shared/data/beam/100K",
                "longmemeval": "../shared/data/longmemeval/longmemeval_s_dev100.json.gz"}
DEFAULT_CACHE = "~/.cache/memcompile-local/ablate"


@dataclass
class Corpus:
    name: str
    convs: list[Conversation]
    categories: dict[Any, str]  # the scored categories, in report order


def scored_categories(name: str) -> dict[Any, str]:
    """The scored categories of a corpus (not LongMemEval's: its file names them), in report order."""
    if name == "locomo":
        return {c: LOCOMO_CATEGORY_NAMES[c] for c in (1, 2, 3, 4)}
    if name == "realtalk":
        return dict(REALTALK_CATEGORY_NAMES)
    if name == "beam":
        return {c: c.replace("_", " ") for c in BEAM_CATEGORIES if c != "abstention"}
    raise ValueError(f"unknown corpus {name!r}; expected one of {', '.join(CORPUS_NAMES)}")


def load_corpus(name: str, data: str) -> Corpus:
    if name == "locomo":
        return Corpus(name, load_locomo(data), scored_categories(name))
    if name == "realtalk":
        return Corpus(name, load_realtalk(data), scored_categories(name))
    if name == "longmemeval":  # one haystack per question: a measurement, not a cross-validation
        convs = load_longmemeval(data)
        return Corpus(name, convs, {c: c for c in dict.fromkeys(q.category for cv in convs for q in cv.questions)})
    if name == "beam":
        # The released chats hold one 348,853-character reply: the study reads every turn.
        return Corpus(name, load_beam(data, max_turn_chars=None), scored_categories(name))
    raise ValueError(f"unknown corpus {name!r}; expected one of {', '.join(CORPUS_NAMES)}")


def scored_questions(corpus: Corpus, conv: Conversation):
    """The questions of ``conv`` that recall is scored on, with reachable gold as evidence."""
    known = {t.packet_id for _, t in conv.iter_turns()}
    out = []
    for q in conv.questions:
        if q.category not in corpus.categories or q.is_abstention:
            continue
        kept, _ = split_reachable(q.evidence, known)
        if kept:
            out.append(dataclasses.replace(q, evidence=tuple(kept)))
    return out


# Query-side FusionConfig fields: they change no build, so they stay out of the cache key and
# the stores already built are reused when only they change.
QUERY_ONLY_FUSION_FIELDS = ("name_term_weight", "name_term_scope", "context_window_words", "ranker", "ranker_model",
                            "answer_type_weight", "role_weight", "distinct_turns")


def _value(text: str) -> float | int | str:
    """A --set value: an int for a whole number (integer fields validate), else a float, else
    the text itself (a Literal field such as ranker=weighted)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def config_changes(pairs: Sequence[str]) -> dict[str, dict[str, float | int | str]]:
    """``--set`` pairs as ``PipelineConfig.replace`` sections: "SECTION.FIELD=VALUE", or
    "FIELD=VALUE" for a fusion field; values as ``_value`` reads them (whole numbers stay
    ints, so integer fields validate; text stays text)."""
    out: dict[str, dict[str, float | int | str]] = {}
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"--set {kv!r}: expected FIELD=VALUE")
        section, _, name = key.rpartition(".")
        out.setdefault(section or "fusion", {})[name] = _value(value)
    return out


UNSET_KEEPS_KEY = (("model", "embed_max_tokens"),)


def build_key(cfg) -> str:
    """What a cached build depends on besides the conversation: the configuration (without the
    query-only fusion fields) and the package's and rule extractor's versions."""
    config = cfg.to_dict()
    config["fusion"] = {k: v for k, v in config["fusion"].items() if k not in QUERY_ONLY_FUSION_FIELDS}
    # Fields added after the caches were made count only when set, so their default keeps the key.
    for section, name in UNSET_KEEPS_KEY:
        if config[section].get(name) is None:
            config[section].pop(name, None)
    return stable_hash({"config": config, "package": __version__,
                        "rule_extractor": extract_rule.RULE_EXTRACTOR_VERSION})[:12]


def store_path(cache: Path, corpus: str, namespace: str, cfg) -> Path:
    """Where ``open_memories`` keeps the build of one conversation under ``cfg``."""
    return cache / corpus / f"{namespace}-{build_key(cfg)}.sqlite"


def shared_store_path(cache: Path, corpus: str, cfg) -> Path:
    """Where ``open_memories`` keeps every conversation of a corpus built into one store
    (LongMemEval: one haystack per question, so vectors are shared by content across them)."""
    return cache / corpus / f"shared-{build_key(cfg)}.sqlite"


SHARED_STORE_CORPORA = ("longmemeval",)  # corpora built into one store per cache (shared_store_path)


def open_memories(corpora: list[Corpus], cfg, cache: Path, progress: bool, *,
                  build: bool = True) -> tuple[dict, dict]:
    """One built Memory per (corpus, conversation), each in its own store under ``cache``
    (LongMemEval's questions in one store, ``shared_store_path``); returns the memories and the
    build seconds of those built now (cached ones: absent). ``build=False``: conversations not
    built yet are left out instead of built (a study over what a build running elsewhere has
    finished)."""
    memories: dict[tuple[str, str], Memory] = {}
    built_s: dict[tuple[str, str], float] = {}
    embedder = None
    shared: dict[str, Memory] = {}
    todo = [(c, conv) for c in corpora for conv in c.convs]
    for corpus, conv in tqdm(todo, desc="build", unit="conv", disable=not progress):
        if corpus.name in SHARED_STORE_CORPORA and corpus.name in shared:
            mem = shared[corpus.name]
        else:
            path = (shared_store_path(cache, corpus.name, cfg) if corpus.name in SHARED_STORE_CORPORA
                    else store_path(cache, corpus.name, conv.namespace, cfg))
            path.parent.mkdir(parents=True, exist_ok=True)
            store = MemoryStore(path)
            mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store), embedder=embedder)
            if corpus.name in SHARED_STORE_CORPORA:
                shared[corpus.name] = mem
        if not build and not mem.store.packets(conv.namespace):
            continue
        mem.add(conv.namespace, conv)
        if not mem.is_built(conv.namespace):
            if not build:
                continue
            t0 = time.perf_counter()
            mem.build(conv.namespace)
            built_s[(corpus.name, conv.namespace)] = time.perf_counter() - t0
        embedder = mem.embedder
        memories[(corpus.name, conv.namespace)] = mem
    return memories, built_s


def open_longmemeval(corpus: Corpus, cfg, cache: Path, extra_stores: Sequence[str | Path] = (), *,
                     build: bool = False) -> dict:
    """LongMemEval's memories: the shared store under ``cache`` (``open_memories``; with
    ``build``, questions not built yet are built there), then each of ``extra_stores`` (other
    stores of the same configuration, e.g. an ``eval`` run's) for the questions built there.
    Questions built nowhere are left out; ``corpus.convs`` keeps only those found."""
    mems, _ = open_memories([corpus], cfg, cache, False, build=build)
    embedder = next(iter(mems.values())).embedder if mems else None
    for path in extra_stores:
        store = MemoryStore(Path(path))
        mem = Memory(store, cfg, client=LLMClient(NoModelBackend(), store), embedder=embedder)
        for conv in corpus.convs:
            key = (corpus.name, conv.namespace)
            if key not in mems and store.packets(conv.namespace) and mem.is_built(conv.namespace):
                mems[key] = mem
        embedder = mem.embedder
    corpus.convs = [cv for cv in corpus.convs if (corpus.name, cv.namespace) in mems]
    return mems


FOLDS = 4  # the four-fold plan of research/nested_cv.py and train_ranker.py --folds


def fold_plan(corpus: Corpus, folds: int = FOLDS):
    """``fold_of(conv, question) -> int`` (fixed before any figure was read): a conversation's
    position in the corpus modulo ``folds`` (LoCoMo, REALTALK, BEAM); for LongMemEval, one
    haystack per question, a question's position among the scored questions of its type in
    ``corpus.convs`` (file order; abstention questions are not counted) modulo ``folds``, so each
    fold holds a share of every type."""
    if corpus.name != "longmemeval":
        index = {conv.namespace: i for i, conv in enumerate(corpus.convs)}
        return lambda conv, q: index[conv.namespace] % folds
    seen: dict[str, int] = {}
    fold: dict[str, int] = {}
    for conv in corpus.convs:
        for q in conv.questions:
            if q.is_abstention:
                continue
            n = seen.get(str(q.category), 0)
            fold[q.question_id] = n % folds
            seen[str(q.category)] = n + 1
    return lambda conv, q: fold[q.question_id]


def plain_dense_order(mem: Memory, namespace: str, question: str, k: int) -> list[str]:
    """The plain dense baseline's first ``k`` turns (``eval --baseline dense``): the question
    embedded alone against each raw turn, ties in dialogue order."""
    from memcompile_local.bench.baselines import raw_turn_matrix

    packets = mem.store.packets(namespace)
    matrix = raw_turn_matrix(mem.store, mem.embedder, namespace, packets)
    q = np.asarray(mem.embedder.embed([question]), dtype=np.float32)[0]
    cos = matrix @ q
    return [packets[i].packet_id for i in np.lexsort((np.arange(len(packets)), -cos))[:k]]
