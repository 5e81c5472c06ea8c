#!/usr/bin/env bash
# One piece of a declared GPU sweep on a GPU machine, inside 9 minutes: the finished runs come back as one
# archive, $OUT/EXPERIMENT.tar.gz (unpack it here with `python benchmarks/gpu_sweeps.py unpack ARCHIVE`).
#
#   benchmarks/gpu_sweeps.sh paper_scale          # a piece of psattn sweep paper_scale --full (7 minutes of training)
#   benchmarks/gpu_sweeps.sh text_scale_pilot     # the real-text pilot, then text_scale
#   benchmarks/gpu_sweeps.sh --smoke paper_scale  # the tiny plan on the CPU: the script's own check
#
# A copy of a checkout records the revision named by PSATTN_GIT_REVISION=<commit> given with the command (it wins over a stale .git).
# Works offline from a plain checkout: the package is taken from src/ (no install), with the machine's own
# python3, torch and numpy. psattn also needs tqdm, and the real-text sweeps Hugging Face tokenizers; where the
# machine lacks them, install them here into .gpu-deps (git-ignored) and carry that folder along:
#   pip install --target .gpu-deps --no-deps tqdm tokenizers
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src:$PWD/.gpu-deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# the token cache beside the run directories (git-ignored), kept with them while the machine stays the same
export PSATTN_CACHE="${PSATTN_CACHE:-$PWD/gpu_runs/token-cache}"
SMOKE=()
if [ "${1:-}" = "--smoke" ]; then SMOKE=(--smoke); shift; fi
EXPERIMENT="${1:?usage: benchmarks/gpu_sweeps.sh [--smoke] EXPERIMENT [--time-limit SECONDS]}"
shift
missing=$("$PYTHON" - "$EXPERIMENT" <<'PY'
import importlib.util, sys
for m in ("torch", "numpy"):
    if importlib.util.find_spec(m) is None:
        sys.exit(f"this Python lacks {m}, which psattn is built on")
need = ["tqdm"] + (["tokenizers"] if sys.argv[1].startswith("text") else [])
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "this machine lacks $missing: run 'pip install --target .gpu-deps --no-deps $missing' in the checkout" \
       "and carry .gpu-deps along" >&2
  exit 1
fi
if [ -z "${PSATTN_GIT_REVISION:-}" ]; then
  echo "note: PSATTN_GIT_REVISION unset: the runs record this copy's git HEAD, if any (a copy's .git can be stale)" >&2
fi
if [ ${#SMOKE[@]} -eq 0 ]; then
  "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())"
fi
# exec: a SIGTERM to this script (a `timeout` around it) reaches timeout, which passes it on to the piece, and the
# script returns only once the piece has packed what it finished (bash would end at once and leave it running)
exec timeout 540 "$PYTHON" benchmarks/gpu_sweeps.py run "$EXPERIMENT" --out "${OUT:-gpu_sweeps_out}" "${SMOKE[@]}" "$@"
