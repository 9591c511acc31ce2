#!/usr/bin/env bash
# Short GPU check (about a minute): documents/s of the torch CUDA embedding path (fp16) on
# randomly initialised BERT-sized encoders (no weights, no network needed); prints SKIP and
# exits 0 without CUDA.   PYTHON=.venv/bin/python bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
export HF_HUB_OFFLINE=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)"
exec timeout 300 "$PY" scripts/gpu_check.py "$@"
