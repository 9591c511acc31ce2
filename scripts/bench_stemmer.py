"""Snowball stemmers side by side on the words of a LoCoMo file: agreement, speed, thread safety.

Compares the pure-Python ``snowballstemmer`` with ``PyStemmer`` (the C build of the same
Snowball algorithms) in one process:

1. agreement: every distinct lowercased content term of the file's turns, captions and
   questions is stemmed by both; the script prints how many stems differ (and a few);
2. speed: the median wall time of stemming the file's whole term stream (all occurrences,
   in order, one ``stemWords`` call per text as the lexical channels do), over ``--runs``;
3. thread safety: ``--threads`` threads stem the stream at the same time through one
   shared stemmer object and through per-thread stemmers; wrong stems and exceptions are
   counted against the serial result.

Figures are ratios of timings taken in the same process; absolute times depend on the
machine (2 shared cores when these were first measured).

    python scripts/bench_stemmer.py --data ../shared/data/locomo/locomo_dev.json
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

import Stemmer
from snowballstemmer.english_stemmer import EnglishStemmer

from memcompile_local.data import load_locomo
from memcompile_local.language.tokens import terms

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


def texts_of(path: Path) -> list[str]:
    """Turn texts, image captions and questions of every conversation, in file order."""
    out: list[str] = []
    for conv in load_locomo(path):
        for _session, turn in conv.iter_turns():
            out.append(turn.text)
            if turn.image_caption:
                out.append(turn.image_caption)
        out.extend(q.question for q in conv.questions)
    return out


def snowball_factory():
    # The pure-Python class itself: snowballstemmer.stemmer() hands out PyStemmer's C class
    # whenever PyStemmer is installed, which would compare PyStemmer with itself.
    return EnglishStemmer()


def pystemmer_factory():
    return Stemmer.Stemmer("english")


def time_stream(make, streams: list[list[str]], runs: int) -> float:
    """Median seconds to stem every stream with a fresh stemmer (cold cache each run)."""
    times = []
    for _ in range(runs):
        stemmer = make()
        t0 = time.perf_counter()
        for words in streams:
            stemmer.stemWords(words)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hammer(make, streams: list[list[str]], expected: list[list[str]], threads: int, shared: bool) -> tuple[int, int]:
    """(wrong stems, exceptions) when ``threads`` threads stem all streams at once."""
    common = make() if shared else None
    wrong = errors = 0
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work() -> None:
        nonlocal wrong, errors
        stemmer = common if shared else make()
        bad = exc = 0
        start.wait()
        for words, want in zip(streams, expected):
            try:
                got = stemmer.stemWords(words)
            except Exception:  # the failure being counted: a shared object raises mid-word
                exc += 1
                continue
            bad += sum(g != w for g, w in zip(got, want))
        with lock:
            wrong += bad
            errors += exc

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return wrong, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON file (default: the dev file)")
    ap.add_argument("--runs", type=int, default=7, help="timing repetitions (median reported)")
    ap.add_argument("--threads", type=int, default=16, help="threads of the thread-safety check")
    args = ap.parse_args()

    streams = [t for t in (terms(x) for x in texts_of(args.data)) if t]
    vocab = sorted({w for s in streams for w in s})
    n_terms = sum(len(s) for s in streams)
    print(f"{args.data.name}: {len(streams)} texts, {n_terms} term occurrences, {len(vocab)} distinct terms")

    a = snowball_factory().stemWords(vocab)
    b = pystemmer_factory().stemWords(vocab)
    diff = [(w, x, y) for w, x, y in zip(vocab, a, b) if x != y]
    print(f"agreement: {len(vocab) - len(diff)}/{len(vocab)} distinct terms stem identically"
          + (f"; differences (first 10): {diff[:10]}" if diff else ""))

    slow = time_stream(snowball_factory, streams, args.runs)
    fast = time_stream(pystemmer_factory, streams, args.runs)
    print(f"speed (median of {args.runs}): snowballstemmer {1000 * slow:.1f} ms, PyStemmer {1000 * fast:.1f} ms, "
          f"ratio {slow / fast:.1f}x")

    want = [snowball_factory().stemWords(s) for s in streams]
    for name, make in (("snowballstemmer", snowball_factory), ("PyStemmer", pystemmer_factory)):
        for shared in (True, False):
            wrong, errors = hammer(make, streams, want, args.threads, shared)
            kind = "one shared object" if shared else "per-thread objects"
            print(f"{args.threads} threads, {name}, {kind}: {wrong} wrong stems, {errors} exceptions")


if __name__ == "__main__":
    main()
