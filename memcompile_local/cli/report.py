"""The ``report`` subcommand: one eval run folder as a self-contained HTML page
(``bench/run_html.py``), the same figures the inspector's Runs page shows."""

from __future__ import annotations

import argparse
import sys


def add_report_command(sub) -> None:
    p = sub.add_parser("report", help="write a run folder's results as one self-contained HTML page "
                                      "(per-category recall and accuracy with plots, every question's gold "
                                      "turns against the selected ones)")
    p.add_argument("run_dir", help="a run folder written by eval (config.json, metrics.json, predictions.jsonl)")
    p.add_argument("--out", help="where to write the page (default: RUN_DIR/report.html)")


def cmd_report(args: argparse.Namespace) -> int:
    from ..bench.run_html import write_run_html

    path = write_run_html(args.run_dir, args.out)
    print(f"wrote {path}", file=sys.stderr)
    return 0
