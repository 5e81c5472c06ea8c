"""The head widths the fused PSA kernel (``psattn.ops.fused_attention``) is built for, stated without
importing Triton: the kernel refuses a call with another width, and a layer or model built with
``backend="fused"`` refuses such a width when it is built (docs/kernel.md)."""

from __future__ import annotations

#: head dimensions the kernels are built for (q, k and v share one)
HEAD_DIMS: tuple[int, ...] = (16, 32, 64, 128)


def check_fused_head_dim(head_dim: int) -> None:
    """ValueError unless the fused kernel takes heads of width ``head_dim``."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"backend='fused' takes a head width of {', '.join(map(str, HEAD_DIMS))} (the fused kernel's), "
                         f"got {head_dim}: give the heads one of these widths, or use backend='auto'")
