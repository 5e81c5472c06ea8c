#!/usr/bin/env bash
# The GPU-only checks, in one run or in pieces (below), each inside a wall clock of 9 minutes 40 seconds; results land in
# $OUT (or ./gpu_check).
# Works offline: the package is taken from src/ (no install), with the machine's own python3 and torch.
# `benchmarks/gpu_check.sh --smoke` runs gpu_check.py's tiny shapes on the CPU (the script's own check; no CUDA rows).
# A copy of a checkout records the revision named by PSATTN_GIT_REVISION=<commit> given with the command (it wins over a stale .git).
# Arguments go to gpu_check.py. On a GPU the whole check does not fit its 420-second budget (its sections' H200
# estimates, gpu_check.py's SECTION_S, add up to about 15 minutes): gpu_check.py skips, and records as skipped, a section
# that would not end inside what is left of it, so the timeout below does not cut one off halfway; a whole check runs
# commands, fused_correctness, fused_kernel and rope_shear. So it runs in pieces: --only fused_correctness fused_kernel
# rope_shear model_step (the kernel's rows alone, about 7 minutes by the 2026-12-04 run's section times and estimates
# since) leaves room in a 15-minute lease for a short piece of benchmarks/gpu_sweeps.sh (its --time-limit, in seconds,
# sets the piece's length); --only commands compile (about 7 minutes: every command on the device, and the trainer's
# step eager, compiled both ways and under CUDA graphs) and --only equivalence kernels host_overhead phase_transition
# (two minutes, what PSA adds to steps bound by the host among them, then the psa-92m phase transition for the rest of
# the budget) are best each its own call: OUT starts empty on each call, so copy the first call's gpu_check.json into
# the checkout and add --add-to THAT_FILE for the pieces to add up.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ -z "${PSATTN_GIT_REVISION:-}" ]; then
  echo "note: PSATTN_GIT_REVISION unset: the results record this copy's git HEAD, if any (a copy's .git can be stale)" >&2
fi
SMOKE=0  # --smoke (given on to gpu_check.py): its tiny shapes on the CPU, the script's own check
# attention_speed.py and hf_decode_speed.py (up to 130 s) run with a whole check, or with the --only piece that names
# fused_kernel (the kernel's rows), and not again in each other piece of a check run in several calls
EXTRAS=1 IN_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1; IN_ONLY=0 ;;
    --only) EXTRAS=0; IN_ONLY=1 ;;
    --only=fused_kernel) IN_ONLY=1 ;;
    --only=*) EXTRAS=0; IN_ONLY=1 ;;
    -*) IN_ONLY=0 ;;
    fused_kernel) if [ "$IN_ONLY" = 1 ]; then EXTRAS=1; fi ;;
  esac
done
if [ "$SMOKE" = 0 ]; then
  "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())"
fi
"$PYTHON" -c "import psattn, numpy, tqdm" || { echo "missing a dependency of psattn (see pyproject.toml)" >&2; exit 1; }
mkdir -p "${OUT:-gpu_check}"
if [ "$SMOKE" = 0 ] && [ "$EXTRAS" = 1 ]; then
  # the CPU benchmark's rows on the GPU (fp32; PSA by psa_attention's "auto": today the shear, then SDPA), then the rest
  timeout 90 "$PYTHON" benchmarks/attention_speed.py --device cuda --json "${OUT:-gpu_check}/attention_speed_cuda.json" || true
  # a transformers model's cached decode step with PSA against without, bf16 (needs transformers; skipped without it)
  if "$PYTHON" -c "import transformers" 2>/dev/null; then
    timeout 40 "$PYTHON" benchmarks/hf_decode_speed.py --device cuda --dtype bfloat16 --types llama qwen3 gemma3_text \
      --json > "${OUT:-gpu_check}/hf_decode_cuda.txt" 2>&1 || true
  fi
fi
# exec: a SIGTERM to this script reaches the check (through timeout), and the script returns when the check has ended
exec timeout 450 "$PYTHON" benchmarks/gpu_check.py --out "${OUT:-gpu_check}" "$@"
