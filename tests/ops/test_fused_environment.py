"""Where Triton's interpreter cannot run the fused kernel with the installed packages, the kernel is
refused with the reason, before a launch fails inside the interpreter."""

import pytest
import torch

pytest.importorskip("triton")
import numpy  # noqa: E402
import triton  # noqa: E402

from psattn.ops import fused_attention  # noqa: E402
from psattn.ops.attention import psa_attention  # noqa: E402


@pytest.mark.parametrize(("triton_version", "numpy_version", "usable"), [
    ("3.6.0", "2.5.2", False),  # torch 2.11's Triton beside a current NumPy
    ("3.6.0", "2.5.0rc1", False),
    ("3.2.0", "2.6.1", False),
    ("3.6.0", "2.4.6", False),
    ("3.6.0", "2.3.5", True),
    ("3.7.0", "2.5.2", True),
    ("3.10.1", "3.0.0", True),
])
def test_the_interpreter_is_declared_unusable_for_triton_before_3_7_with_numpy_2_4(
        monkeypatch, triton_version, numpy_version, usable):
    monkeypatch.setattr(triton, "__version__", triton_version)
    monkeypatch.setattr(numpy, "__version__", numpy_version)
    reason = fused_attention.interpreter_unusable()
    assert (reason is None) == usable
    if not usable:
        assert f"Triton {triton_version}" in reason and f"NumPy {numpy_version}" in reason


def test_the_fused_backend_names_the_reason_instead_of_failing_in_the_interpreter(monkeypatch):
    if not fused_attention.interpreted():
        pytest.skip("the kernels were built for a GPU in this process")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.5.2")
    q, k, v = (torch.randn(1, 2, 8, 16, dtype=torch.float64) for _ in range(3))
    with pytest.raises(ValueError, match=r"fused PSA kernel cannot run this call: Triton 3\.6\.0's interpreter"):
        psa_attention(q, k, v, gamma_k=0.8, is_causal=True, backend="fused")
    assert psa_attention(q, k, v, gamma_k=0.8, is_causal=True, backend="sdpa").shape == q.shape  # the others still run


def test_the_kernel_pages_older_triton_sentence_is_what_its_saved_log_says():
    """docs/kernel.md said the interpreter tests passed "40 of 40" under Triton 3.6.0 with no log behind it; the
    saved log of a rerun gives the versions and the count the page now quotes, and it ran every test of the file."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    log = (root / "docs" / "results" / "cpu" / "triton_interpreter" / "2026-12-08-triton-3.6.0.txt").read_text()
    versions = dict(re.findall(r"(torch|triton|numpy) ([^,\s]+)", log.splitlines()[1]))
    passed = int(re.search(r"^(\d+) passed", log, flags=re.MULTILINE).group(1))
    assert "failed" not in log and "skipped" not in log
    page = " ".join((root / "docs" / "kernel.md").read_text().split())
    assert (f"On 2026-12-08 they also passed ({passed} of {passed}) under Triton {versions['triton']}, the version the "
            f"GPU rows below were measured with, with NumPy {versions['numpy']} and torch "
            f"{versions['torch'].split('+')[0]}") in page
    tests = Path(__file__).with_name("test_fused_attention.py").read_text()
    assert passed >= len(re.findall(r"^def test_", tests, flags=re.MULTILINE))  # every test, some of them parametrized
