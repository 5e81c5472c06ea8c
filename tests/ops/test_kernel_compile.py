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
    assert _forward_products(done.stdout) == ["wgmma m64n128k16 bf16", "wgmma m64n64k16 bf16"]  # P·V, q̂ k̂ᵀ: both bf16


def _forward_products(printed: str) -> list[str]:
    """The tensor-core instructions compile_kernels.py found in the causal forward kernel at its first tile (128
    query rows, a key tile 64 wide): a product's n is its output's width, D (128) for P·V, the key tile's for q̂ k̂ᵀ."""
    line = next(line for line in printed.splitlines() if " causal forward tile 128x64 " in line)
    return re.search(r"tensor cores: (.*), compiled", line).group(1).split(", ")


def test_fp16_scores_multiply_the_scores_on_fp16_tensor_cores_and_p_v_on_bf16_ones():
    """docs/kernel.md says the fp16-scores forward multiplies q̂ k̂ᵀ with fp16 ``wgmma`` instructions and P·V with bf16
    ones (the test above: without fp16 scores both are bf16); the forward kernel's PTX says which, by each product's
    output width."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "scripts/compile_kernels.py", "--causal", "yes", "--fp16-scores"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _forward_products(done.stdout) == ["wgmma m64n128k16 bf16", "wgmma m64n64k16 f16"]
