#!/usr/bin/env bash
# The GPU-only checks in one run (under 10 minutes on one large GPU); results land in $OUT (or ./gpu_check).
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import psattn" 2>/dev/null || python -m pip install -q -e .
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
timeout 570 python benchmarks/gpu_check.py --out "${OUT:-gpu_check}" "$@"
