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
