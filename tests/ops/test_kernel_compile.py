"""The fused kernels compile for a Hopper GPU (sm_90) on a machine without one.

The interpreter tests run the kernels' logic; only the compiler sees what it refuses (a global
read that is not a constexpr failed here once, after every interpreter test had passed) and what a
tile costs in shared memory and registers (docs/kernel.md tabulates them)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
#: shared memory one block may use on a Hopper GPU (227 KiB)
HOPPER_SHARED_BYTES = 227 * 1024


@pytest.mark.slow
def test_the_kernels_compile_for_sm90_within_its_shared_memory():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "scripts/compile_kernels.py", "--causal", "yes"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {name: (int(shared.replace(",", "")), int(registers), spilled) for name, shared, registers, spilled in re.findall(
        r"(forward|dkdv|dq|delta|transpose)\b.*?([\d,]+) bytes of shared memory, (\d+) registers(, \d+ bytes of stack)?",
        done.stdout)}
    assert set(rows) == {"forward", "dkdv", "dq", "delta", "transpose"}, done.stdout
    assert all(0 < rows[name][0] <= HOPPER_SHARED_BYTES for name in ("forward", "dkdv", "dq")), done.stdout  # tiled products
    assert all(0 < registers <= 255 for _, registers, _ in rows.values()), done.stdout  # what spills varies by Triton
