"""RoPE and the shear of one stream as one pass: x̂ = shear(rope(x)).

Written as two operations, rotating a stream and then shearing it reads and writes the stream twice
forward and twice backward. Both are elementwise along the feature axis (the shear also reads the
row before), so a compiler fuses them into one kernel each way: ``rope_shear`` compiles the
composition with ``torch.compile`` on CUDA, where each pass over the stream costs memory traffic,
and runs the two eager operations elsewhere, where each already is one pass (``psattn.ops.rope``,
``psattn.ops.shear``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from psattn.ops.rope import apply_rope
from psattn.ops.shear import check_gamma, shear
from psattn.ops.tracing import plain_ops_only

_compiled = None


def _rope_then_shear(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, starts: Tensor | None, prev: Tensor | None,
                     boundary: str) -> Tensor:
    return shear(apply_rope(x, cos, sin), gamma, starts=starts, prev=prev, boundary=boundary)


def rope_shear(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, *, starts: Tensor | None = None,
               prev: Tensor | None = None, boundary: str = "replicate", fused: bool | None = None) -> Tensor:
    """``shear(apply_rope(x, cos, sin), gamma, ...)`` (B, H, T, D), in one compiled pass where that pays.

    Args:
        x: the stream (B, H, T, D), before rotation.
        cos: RoPE's cosine table (B, 1, T, r), from ``RotaryEmbedding``.
        sin: RoPE's sine table (B, 1, T, r).
        gamma: the shear's coupling.
        starts: (B, T) booleans marking sequence starts (see ``psattn.ops.shear``).
        prev: the rotated row before ``x``'s first one (B, H, 1, D), continuing a cached stream.
        boundary: ``"replicate"`` or ``"zero"``.
        fused: ``True`` compiles the composition on any device, ``False`` runs the two operations;
            ``None`` (default) compiles on CUDA outside another trace or transform.

    Returns:
        The rotated, sheared stream (B, H, T, D).

    Examples:
        >>> import torch
        >>> from psattn.ops import RotaryEmbedding, apply_rope, shear
        >>> from psattn.ops.rope_shear import rope_shear
        >>> x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(0))
        >>> cos, sin = RotaryEmbedding(8)(torch.arange(5)[None])
        >>> torch.allclose(rope_shear(x, cos, sin, 0.8), shear(apply_rope(x, cos, sin), 0.8))
        True
    """
    gamma = check_gamma(gamma)
    if fused is None:
        fused = x.device.type == "cuda" and not plain_ops_only()
    if not fused or gamma == 0.0:
        return _rope_then_shear(x, cos, sin, gamma, starts, prev, boundary)
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(_rope_then_shear, dynamic=True)
    with torch._dynamo.config.patch(specialize_float=True):  # one graph per gamma: a model has few
        return _compiled(x, cos, sin, gamma, starts, prev, boundary)
