#!/usr/bin/env bash
# The GPU replication recipe (scripts/replicate_gpu.py) from a checkout that is not installed:
# LoCoMo and LongMemEval-S end to end on vLLM, the paper's tables printed, resumable by
# rerunning the same command. Every argument goes to the script (--help lists them), e.g.
#   bash scripts/replicate_gpu.sh --locomo data/locomo10.json --longmemeval data/longmemeval_s.json.gz
# Paths are read from the current folder. PYTHON picks the interpreter that has the package's
# extras (default: python).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" "$REPO/scripts/replicate_gpu.py" "$@"
