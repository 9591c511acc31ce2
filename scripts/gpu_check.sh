#!/usr/bin/env bash
# Short GPU check (about a minute): documents/s of the torch CUDA embedding path (fp16) on
# randomly initialised BERT-sized encoders (no weights, no network needed); prints SKIP and
# exits 0 without CUDA. Then MERA and EMBER on a small model (SmolLM2-135M through llama.cpp,
# the smollm2-cpu config; 2 fixture questions each, retrieval only): the `mera` preset (LLM
# planner and verifier over A0), `model-free+mera`, and the LLM retention writer under a 25%
# budget; each prints its recall table (MERA_CHECK=0 skips them).
#   PYTHON=.venv/bin/python bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
export HF_HUB_OFFLINE=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)"
timeout 300 "$PY" scripts/gpu_check.py "$@"
[ "${MERA_CHECK:-1}" = 0 ] && exit 0
TMP="$(mktemp -d)"
EVAL=("$PY" -m memcompile_local eval locomo --data tests/fixtures/locomo_mini.json --limit 1
      --store "$TMP/m.sqlite" --retrieval-only --quiet)
# Each step reports a failure or timeout and the next one still runs. The A0 path with rounds
# makes a few dozen SmolLM2 calls per question (intent, scheduler, frontier, planner, verifier): it did
# not finish within 15 minutes on 2 loaded CPU cores.
timeout 150 "${EVAL[@]}" --out "$TMP/mf-mera" --preset model-free+mera || echo "FAIL model-free+mera (rc $?)"
timeout 240 "${EVAL[@]}" --out "$TMP/ember-llm" --config examples/smollm2-cpu.yaml --preset model-free \
    --retain-budget 0.25 --writer llm || echo "FAIL retention writer llm (rc $?)"
timeout 420 "${EVAL[@]}" --out "$TMP/mera" --config examples/smollm2-cpu.yaml --preset mera \
    || echo "FAIL mera (rc $?)"
grep -h -A9 "MERA rounds: cumulative\|Budgeted retention" "$TMP"/*/report.md || true
