"""Whether the one-pass eager kernels may run: not while torch.compile / torch.export trace the code,
nor under a torch.func transform (vmap, jvp, grad), where kernels that write with ``out=`` or carry
their own backward do not apply and the same maths is written with ordinary ops instead.

PyTorch has no public query for an active torch.func transform; the private one is read here, in one
place, and a PyTorch without it counts as "maybe transformed" (the ordinary ops are always correct).
"""

from __future__ import annotations

import torch

_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)


def plain_ops_only() -> bool:
    """True under torch.compile / torch.export tracing or a torch.func transform."""
    if torch.compiler.is_compiling():
        return True
    return True if _functorch_active is None else bool(_functorch_active())
