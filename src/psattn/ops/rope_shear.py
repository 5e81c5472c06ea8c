"""RoPE and the shear of one stream as one pass: x̂ = shear(rope(x)), rounded once.

Written as two operations, rotating a stream and then shearing it reads and writes the stream twice
forward and twice backward. Both are elementwise along the feature axis (the shear also reads the
row before), so a compiler fuses them into one kernel each way: ``rope_shear`` compiles the
composition with ``torch.compile`` on CUDA, where each pass over a large stream costs memory
traffic, and runs the eager kernels of the two operations elsewhere (``psattn.ops.rope``,
``psattn.ops.shear``). Where a gradient flows through a stream whose only start is t = 0 (training),
those kernels form one autograd node (``_RotateShear``): both maps are linear, so its backward is the
transposed pass, the transposed shear followed by the rotation by the opposite angle. With it, PSA's
training step dispatches 10 operations a layer more than plain attention's, where the two casts, the
rotation and the shear as four nodes took 23 (``benchmarks/step_overhead.py``): the host's work that a
small model's step on a GPU waits for.

Precision. In bfloat16 or float16, rounding the rotated stream and then the sheared one would round
twice, and the shear's gain (1 + 2γ) amplifies the first rounding. Both steps run in float32
instead (``wide_dtype``, tables included), and only x̂ is rounded to the stream's dtype; with γ = 0,
the rotated stream is. The rotated stream a cache keeps stays in float32: the next chunk shears
against exactly the row the full sequence would have, so cached decoding equals the full forward.

Gradients. The compiled pass has first-order gradients only (torch.compile's limit); the eager
operations and the one node have gradients of any order, and forward-mode tangents that reverse mode
differentiates in turn. Setting ``COMPILE_FROM`` above any stream's size keeps a model on the eager ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

from psattn.ops.rope import check_tables, rotate_kernels, rotated
from psattn.ops.shear import (
    MAX_GAMMA,
    check_boundary,
    check_gamma,
    check_stream,
    lag_one_shear_kernels,
    lag_one_transposed_kernels,
    sheared,
)
from psattn.ops.tracing import plain_ops_only

#: dtypes whose rotation and shear run in float32 (and are rounded once, at the end)
LOW_PRECISION = (torch.float16, torch.bfloat16)

#: the smallest stream (elements) compiled by default: below it, the passes a compiled kernel saves cost
#: less than its fixed cost (guards, the first call's compilation, seconds per graph); a starting
#: value for GPU runs to tune, not a measured one
COMPILE_FROM = 1 << 20

_compiled = None


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype RoPE and the shear compute in for a stream of ``dtype``: float32 for 16-bit floats."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


class _RotateShear(torch.autograd.Function):
    """x̂ = shear(rotate(x)) of a stream whose only start is t = 0, rotated and sheared in ``wide_dtype`` and
    rounded once to x's dtype, as one autograd node; with ``transposed``, its transpose g ↦ rotate(shearᵀ(g),
    -angle). Each is the other's backward (both maps are linear), so gradients of any order stay on these
    kernels. The tables are constants: they get no gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, gamma: float, replicate: bool, transposed: bool = False) -> Tensor:
        ctx.gamma, ctx.replicate, ctx.transposed = gamma, replicate, transposed
        ctx.save_for_backward(cos, sin)
        ctx.save_for_forward(cos, sin)
        return _rotate_shear_kernels(x, cos, sin, gamma, replicate, transposed)

    @staticmethod
    def backward(ctx, g: Tensor):
        cos, sin = ctx.saved_tensors
        return _RotateShear.apply(g, cos, sin, ctx.gamma, ctx.replicate, not ctx.transposed), None, None, None, None, None

    @staticmethod
    def jvp(ctx, x_dot: Tensor, *_) -> Tensor:  # forward-mode AD: the pass is linear
        cos, sin = ctx.saved_tensors
        return _differentiable_pass(x_dot, cos, sin, ctx.gamma, ctx.replicate, ctx.transposed)


def _rotate_shear_kernels(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, replicate: bool, transposed: bool) -> Tensor:
    """shear(rotate(x)), or with ``transposed`` rotate(shearᵀ(x), -angle), (B, H, T, D) in ``wide_dtype``,
    rounded once to x's dtype, without autograd."""
    dtype, wide = x.dtype, wide_dtype(x.dtype)
    x, cos, sin = x.to(wide), cos.to(wide), sin.to(wide)
    if transposed:
        return rotate_kernels(lag_one_transposed_kernels(x, gamma, replicate), cos, sin, transposed=True).to(dtype)
    return lag_one_shear_kernels(rotate_kernels(x, cos, sin), gamma, replicate).to(dtype)  # in x's layout


def _differentiable_pass(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, replicate: bool, transposed: bool) -> Tensor:
    """``_RotateShear``'s pass (or, ``transposed``, its transpose) in ordinary operations, in ``wide_dtype`` and
    rounded once: the node's forward-mode tangent, through which reverse mode can differentiate in turn."""
    dtype, wide = x.dtype, wide_dtype(x.dtype)
    x, cos, sin = x.to(wide), cos.to(wide), sin.to(wide)
    h = x.shape[-1] // 2

    def rotate(y: Tensor, sin: Tensor) -> Tensor:
        return y * cos + torch.cat([-y[..., h:], y[..., :h]], dim=-1) * sin  # (B, H, T, D)

    gain = torch.full((x.shape[-2], 1), 1.0 + gamma, dtype=wide, device=x.device)  # (T, 1): x̂_t's weight on x_t
    if replicate:
        gain[:1] = 1.0  # x̂_0 = x_0
    zero_row = torch.zeros_like(x[..., :1, :])  # (B, H, 1, D), or (B, H, 0, D) for an empty stream
    if transposed:  # g_t gain_t - gamma g_{t+1}, then the rotation by the opposite angle
        g_next = torch.cat([x[..., 1:, :], zero_row], dim=-2)  # (B, H, T, D)
        return rotate(gain * x - gamma * g_next, -sin).to(dtype)
    y = rotate(x, sin)
    y_prev = torch.cat([zero_row, y[..., :-1, :]], dim=-2)  # (B, H, T, D); row 0's weight is in gain
    return (gain * y - gamma * y_prev).to(dtype)


def _one_node(x: Tensor, cos: Tensor, sin: Tensor, starts: Tensor | None, prev: Tensor | None, keep_rotated: bool) -> bool:
    """Whether ``_RotateShear`` applies: a gradient flows through x (not through the tables), every channel
    rotates, the only start is t = 0, the rotated stream is not kept, and no trace or transform is active."""
    if starts is not None or prev is not None or keep_rotated or plain_ops_only():
        return False
    if not (torch.is_grad_enabled() and x.requires_grad):
        return False
    return cos.shape[-1] == x.shape[-1] and not (cos.requires_grad or sin.requires_grad)


def _rotate_then_shear(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, starts: Tensor | None, prev: Tensor | None,
                       boundary: str, keep_rotated: bool) -> tuple[Tensor | None, Tensor]:
    wide = wide_dtype(x.dtype)
    x_rot = rotated(x.to(wide), cos.to(wide), sin.to(wide))  # (B, H, T, D), in the wide dtype
    x_hat = sheared(x_rot, gamma, starts, None if prev is None else prev.to(wide), boundary)
    return (x_rot if keep_rotated else None), x_hat.to(x.dtype)


def rotate_and_shear(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, *, starts: Tensor | None = None,
                     prev: Tensor | None = None, boundary: str = "replicate", keep_rotated: bool = True,
                     fused: bool | None = None) -> tuple[Tensor | None, Tensor]:
    """The rotated stream and its shear, ``(apply_rope(x), shear(apply_rope(x), gamma, ...))``, each
    (B, H, T, D): x̂ in ``x``'s dtype, the rotated stream in ``wide_dtype(x.dtype)`` (what x̂ was computed
    from, for a cache to continue from) when ``keep_rotated`` and gamma != 0, else None.

    Args:
        x: the stream (B, H, T, D), floating point, before rotation (an integer one is a TypeError).
        cos: RoPE's cosine table (B, 1, T, r), from ``RotaryEmbedding`` (float32 is best: see the module).
        sin: RoPE's sine table (B, 1, T, r).
        gamma: the shear's coupling.
        starts: (B, T) booleans marking sequence starts (see ``psattn.ops.shear``).
        prev: the rotated row before ``x``'s first one (B, H, 1, D), continuing a cached stream.
        boundary: ``"replicate"`` or ``"zero"``.
        keep_rotated: also return the rotated stream.
        fused: ``True`` compiles the composition on any device, ``False`` runs the two operations;
            ``None`` (default) compiles on CUDA for streams of at least ``COMPILE_FROM`` elements and
            more than one row, outside another trace or transform (a one-row decode step or a small
            model's stream is cheaper eager than through a compiled call).
    """
    gamma = check_gamma(gamma)
    check_stream(x, starts, prev)
    if not x.is_floating_point():  # rounded back to integers at the end (gamma = 0), or lerp's NotImplementedError
        raise TypeError(f"rotate_and_shear needs a floating-point stream, got {x.dtype}")
    check_boundary(boundary)
    check_tables(x, cos, sin)
    return rotated_and_sheared(x, cos, sin, gamma, starts=starts, prev=prev, boundary=boundary,
                               keep_rotated=keep_rotated, fused=fused)


def rotated_and_sheared(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, *, starts: Tensor | None, prev: Tensor | None,
                        boundary: str, keep_rotated: bool, fused: bool | None = None) -> tuple[Tensor | None, Tensor]:
    """``rotate_and_shear`` for a PSA layer's streams (B, H, T, D): its checks cost a decode step's row more than
    its arithmetic, so only what a few comparisons can see is looked at first (the tables' and ``starts``' length,
    ``starts``' shape and dtype, a ``prev`` row's shape, device and dtype, gamma and the boundary rule), and
    what fails there gets ``rotate_and_shear``'s checks and their messages: a context or a cache that does not
    fit the stream (another batch, length or device) is refused as it is there."""
    if type(gamma) is not float or not -MAX_GAMMA <= gamma <= MAX_GAMMA:  # also NaN
        gamma = check_gamma(gamma)
    check_boundary(boundary)
    B, H, T, D = x.shape
    if (cos.shape[-2] != T or sin.shape[-2] != T
            or (starts is not None and (starts.shape != (B, T) or starts.dtype != torch.bool))
            or (prev is not None and (prev.shape != (B, H, 1, D) or prev.device != x.device or not prev.is_floating_point()))):
        check_stream(x, starts, prev)  # raises, naming what does not fit
        check_tables(x, cos, sin)
    if gamma == 0.0:  # no shear, and nothing for a cache to keep: the rotation alone, rounded once
        wide = wide_dtype(x.dtype)
        return None, rotated(x.to(wide), cos.to(wide), sin.to(wide)).to(x.dtype)  # (B, H, T, D)
    if fused is None and prev is not None and x.shape[-2] == 1:  # a decode step's row: eager, one lerp after the rotation
        return _rotate_then_shear(x, cos, sin, gamma, starts, prev, boundary, keep_rotated)
    if fused is None:
        fused = (x.device.type == "cuda" and x.shape[-2] > 1 and x.numel() >= COMPILE_FROM
                 and not plain_ops_only())
    if not fused:
        if _one_node(x, cos, sin, starts, prev, keep_rotated):
            return None, _RotateShear.apply(x, cos, sin, gamma, boundary == "replicate")  # (B, H, T, D)
        return _rotate_then_shear(x, cos, sin, gamma, starts, prev, boundary, keep_rotated)
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(_rotate_then_shear, dynamic=True)
    # one graph per gamma and grad mode (a sweep of many runs in one process reaches dozens: hence the
    # limit, under the name every supported torch knows); a compiler failure runs the eager composition,
    # with a warning
    with torch._dynamo.config.patch(specialize_float=True, suppress_errors=True, cache_size_limit=64):
        return _compiled(x, cos, sin, gamma, starts, prev, boundary, keep_rotated)


def rope_shear(x: Tensor, cos: Tensor, sin: Tensor, gamma: float, *, starts: Tensor | None = None,
               prev: Tensor | None = None, boundary: str = "replicate", fused: bool | None = None) -> Tensor:
    """``shear(apply_rope(x, cos, sin), gamma, ...)`` (B, H, T, D), in one compiled pass where that pays
    (arguments as in ``rotate_and_shear``).

    Examples:
        >>> import torch
        >>> from psattn.ops import RotaryEmbedding, apply_rope, shear
        >>> from psattn.ops.rope_shear import rope_shear
        >>> x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(0))
        >>> cos, sin = RotaryEmbedding(8)(torch.arange(5)[None])
        >>> torch.allclose(rope_shear(x, cos, sin, 0.8), shear(apply_rope(x, cos, sin), 0.8))
        True
    """
    return rotate_and_shear(x, cos, sin, gamma, starts=starts, prev=prev, boundary=boundary, keep_rotated=False,
                            fused=fused)[1]
