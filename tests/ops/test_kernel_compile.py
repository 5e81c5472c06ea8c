"""The fused kernels compile for a Hopper GPU (sm_90) on a machine without one.

The interpreter tests run the kernels' logic; only the compiler sees what it refuses (a global
read that is not a constexpr failed here once, after every interpreter test had passed) and what a
tile costs in shared memory."""

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
    shared = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) bytes of shared memory", done.stdout)]
    assert len(shared) == 3 and all(0 < n <= HOPPER_SHARED_BYTES for n in shared), done.stdout
