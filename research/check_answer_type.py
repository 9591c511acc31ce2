"""Recall@10 of Memory.compile (the package's own path) on the three development corpora with
``fusion.answer_type_weight`` set, beside the weighted default; per category.

    PYTHONPATH=. python research/check_answer_type.py [--weight 0.75] [--ranker weighted]
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import cv_corpora as cc  # noqa: E402
from memcompile_local import PipelineConfig  # noqa: E402
from memcompile_local.bench.coverage import gold_recall  # noqa: E402
from memcompile_local.pipeline.presets import apply_preset  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--weight", type=float, default=0.75)
ap.add_argument("--ranker", default="weighted")
a = ap.parse_args()
for w in (0.0, a.weight):
    cfg = apply_preset("model-free", PipelineConfig()).replace(fusion={"ranker": a.ranker, "answer_type_weight": w})
    corpora = [cc.load_corpus(n, cc.DEFAULT_DATA[n]) for n in ("locomo", "realtalk", "beam")]
    mems, built = cc.open_memories(corpora, cfg, Path("~/.cache/memcompile-local/ablate").expanduser(), False)
    if built:  # the figures are meant for the study's cached builds (ablate_model_free.py --cv --corpora ...)
        print(f"built {len(built)} conversations now (no cached build under this config)", flush=True)
    for corpus in corpora:
        r, cats = [], []
        for conv in corpus.convs:
            mem = mems[(corpus.name, conv.namespace)]
            for q in cc.scored_questions(corpus, conv):
                r.append(gold_recall(list(mem.compile(conv.namespace, q.question).packet_ids)[:10], q.evidence))
                cats.append(str(q.category))
        r, cats = np.asarray(r), np.asarray(cats)
        print(f"w={w} ranker={a.ranker} {corpus.name}: R@10 {100 * r.mean():.1f} | " + " ".join(
            f"{k}:{100 * r[cats == k].mean():.1f}" for k in dict.fromkeys(cats)), flush=True)
    for m in mems.values():
        m.store.close()
