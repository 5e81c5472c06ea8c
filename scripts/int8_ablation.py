"""What each quantized tensor costs: INT8 one group of operators at a time, for each run directory.

For every run, dynamic and static (calibrated) INT8 of each group alone (projections, the LM head, the
two attention activation products, the embedding table) and of the whole model, measured against fp32 on held-out windows
(teacher-forced top-1 agreement, KL, bits per byte) and greedy continuations of 16 held-out prompts;
see psattn.export.int8_ablation. Needs the export extra. About a minute a run on one core.

    python scripts/int8_ablation.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from psattn.export.int8_ablation import format_ablation, int8_ablation


def main(run_dirs: list[str]) -> None:
    for run_dir in run_dirs:
        for mode in ("dynamic", "static"):
            with tempfile.TemporaryDirectory() as out:
                rows = int8_ablation(run_dir, out, mode=mode)
            print(f"\n{Path(run_dir).name}, {mode} INT8:\n")
            print("\n".join(format_ablation(rows)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
