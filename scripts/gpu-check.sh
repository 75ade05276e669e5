#!/usr/bin/env bash
# The prepared GPU check: the worker's tests on CUDA, SmolLM2 log-probs CUDA vs CPU (float32),
# bf16 LoRA generate/update throughput, 5 MAGE iterations on Kuhn (16 compact trials each) through the TypeScript
# trainer (when node and dist/ are there), and with the time left the paper-shaped run
# (configs/experiments/kuhn-gpu-paper.yaml: warm start, MAGE and GRPO, 64 trials x 3 attempts, vs CFR); one summary at the end, also written as JSON to
# --out FILE, else $OUT/gpu-check.json when $OUT is set, else ./gpu-check.json. Step logs go to
# gpu-check-logs/ next to the JSON. Exit status 0 when every step passed or was skipped with a
# reason, 1 when one failed.
#
#   scripts/gpu-check.sh [--model DIR] [--out FILE] [--budget SECONDS]
#   scripts/gpu-check.sh --device cpu --quick      # dry run on CPU, tiny sizes (a few minutes)
#
# Python: $MAGE_PYTHON, else the project's .venv/bin/python, else python3 (it needs torch,
# transformers and peft; Node is only needed for the training step).
set -euo pipefail

root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -n "${MAGE_PYTHON:-}" ]]; then
  python="$MAGE_PYTHON"
elif [[ -x "$root/.venv/bin/python" ]]; then
  python="$root/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then
  python="$(command -v python3)"
else
  echo "gpu-check: no Python found (set MAGE_PYTHON, or create .venv with node scripts/python-env.mjs)" >&2
  exit 2
fi

# The training step's worker uses the same interpreter.
export MAGE_PYTHON="$python"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"

exec "$python" -m mage_learner.gpu_check --root "$root" "$@"
