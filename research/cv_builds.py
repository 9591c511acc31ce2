#!/usr/bin/env python
"""Cross-validate a build-time constant from one ``--cv-json`` run per value.

A constant that changes what a build stores (``extraction.max_rule_claims``, the embedder)
cannot be a grid of ``ablate_model_free.cv_rows``: every value is its own set of builds. Run
the three-corpus study once per value, each with ``--cv-json``, then read the runs here as the
grid points of one row: the same protocols as ``research/cv_corpora.py`` (in-sample; leave one
conversation out within each corpus, the value picked on the corpus's other conversations;
leave one corpus out), the per-category and per-fold tables, and the shipping rule against the
first run (the shipped value, first so that it wins ties).

    python research/ablate_model_free.py --cv --corpora locomo,realtalk,beam --rows "package defaults" \\
        --cv-json /tmp/cv_none.json
    python research/ablate_model_free.py --cv --corpora locomo,realtalk,beam --rows "package defaults" \\
        --set extraction.max_rule_claims=8 --cv-json /tmp/cv_c8.json
    python research/cv_builds.py unbounded=/tmp/cv_none.json c8=/tmp/cv_c8.json

Each run's row (``--row``, default the shipped "package defaults" row) must hold one grid
point; the runs must have scored the same questions in the same order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from cv_corpora import REFERENCE_PREFIX, TITLES, print_tables, score_row, scored_categories


def read_run(label: str, path: Path, row_prefix: str) -> dict:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{label}={path}: not a --cv-json file ({e})") from e
    found = [r for r in rows if r["name"].startswith(row_prefix)]
    if len(found) != 1:
        raise SystemExit(f"{label}={path}: expected one row named {row_prefix!r}..., found {len(found)}")
    row = found[0]
    if row["grid"] != 1:
        raise SystemExit(f"{label}={path}: row {row['name']!r} has {row['grid']} grid points, expected 1")
    for c, x in row["corpora"].items():
        if "questions" not in x:
            raise SystemExit(f"{label}={path}: corpus {c} has no per-question figures (rerun with this "
                             "package's cv_corpora.py)")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=CV_JSON",
                    help="one --cv-json file per value of the constant, the shipped value first")
    ap.add_argument("--row", default=REFERENCE_PREFIX, help="the row read from each file (name prefix)")
    args = ap.parse_args()
    labels, rows = [], []
    for spec in args.runs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            ap.error(f"{spec!r}: expected LABEL=CV_JSON")
        labels.append(label)
        rows.append(read_run(label, Path(path), args.row))
    corpora_names = list(rows[0]["corpora"])
    per_corpus, questions = {}, {}
    for c in corpora_names:
        first = rows[0]["corpora"][c]["questions"]
        for label, row in zip(labels, rows):
            q = row["corpora"].get(c, {}).get("questions")
            if q is None or q["ns"] != first["ns"] or q["category"] != first["category"]:
                raise SystemExit(f"{label}: corpus {c} scored other questions than {labels[0]}")
        per_corpus[c] = (np.asarray([r["corpora"][c]["questions"]["r10"] for r in rows]),
                         np.asarray([r["corpora"][c]["questions"]["r12"] for r in rows]))
        questions[c] = [SimpleNamespace(ns=ns, q=SimpleNamespace(category=cat))
                        for ns, cat in zip(first["ns"], first["category"])]
    results = [score_row(f"{args.row}: {label} only", [label], {c: (R10[[i]], R12[[i]]) for c, (R10, R12)
                                                                   in per_corpus.items()}, questions)
               for i, label in enumerate(labels)]
    results.append(score_row(f"{args.row}: value chosen among {', '.join(labels)}", labels, per_corpus, questions))
    # print_tables reads a corpus's name, conversations (their count) and category names.
    corpora = [SimpleNamespace(name=c, convs=list(dict.fromkeys(Q.ns for Q in questions[c])),
                               categories=scored_categories(c)) for c in corpora_names]
    print_tables(results, corpora, results[0])
    print("\nvalue picked per held-out conversation (CV) and for each corpus held out:")
    chosen = results[-1]["corpora"]
    for c in corpora_names:
        print(f"  {TITLES[c]}: " + ", ".join(f"{ns} {p}" for ns, p in chosen[c]["picks"].items())
              + f"; corpus out {chosen[c]['corpus_out_setting']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
