"""Rotary position embedding (RoPE).

The rotation pairs channel i with channel i + r/2 of the rotary part (the "rotate half" layout used
by Llama-family models). With ``rotary_fraction < 1`` only the first ``r = fraction * d`` channels
rotate; the rest pass through unchanged.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import Tensor, nn

from psattn.ops.tracing import plain_ops_only


def rotary_dim(head_dim: int, rotary_fraction: float = 1.0) -> int:
    """Number of rotating channels; it must be even and positive (a ValueError names what is not, a TypeError
    an argument of the wrong type)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, Integral):  # 8.5 rounded to 8, True to 1
        raise TypeError(f"head_dim must be an integer, got {head_dim!r}")
    if isinstance(rotary_fraction, bool) or not isinstance(rotary_fraction, Real):
        raise TypeError(f"rotary_fraction must be a number in (0, 1], got {rotary_fraction!r}")
    if not 0.0 < rotary_fraction <= 1.0:
        raise ValueError(f"rotary_fraction must lie in (0, 1], got {rotary_fraction}")
    r = int(round(head_dim * rotary_fraction))
    if r <= 0 or r % 2:
        raise ValueError(
            f"RoPE needs an even, positive rotary dimension; head_dim={head_dim} with "
            f"rotary_fraction={rotary_fraction} gives {r}"
        )
    return r


class RotaryEmbedding(nn.Module):
    """Produces cos/sin tables for given positions: angle(t, i) = t * base^(-2i/r).

    Args:
        head_dim: the head dimension D, an integer.
        base: RoPE's base, a finite number > 1.
        rotary_fraction: the share of the D channels that rotate, in (0, 1]; r = round(fraction * D)
            must be even and positive (``rotary_dim``). What does not fit is a ValueError.
    """

    inv_freq: Tensor  # a buffer (registered in __init__)
    base: float
    rotary_dim: int

    def __init__(self, head_dim: int, base: float = 10000.0, rotary_fraction: float = 1.0):
        super().__init__()
        if isinstance(base, bool) or not isinstance(base, Real):
            raise TypeError(f"RoPE base must be a finite number > 1, got {base!r}")
        if not 1.0 < base < math.inf:  # inf: all but one frequency 0
            raise ValueError(f"RoPE base must be a finite number > 1, got {base!r}")
        self.head_dim, self.base = head_dim, base
        self.rotary_dim = rotary_dim(head_dim, rotary_fraction)
        self.register_buffer("inv_freq", self.frequencies(), persistent=False)

    def _apply(self, fn, recurse: bool = True):
        """As ``nn.Module._apply`` (``.to``, ``.cuda``, ``.half``, ...), but the frequencies never drop
        below float32: a model cast to bf16 or fp16 still rotates by float32 angles (rounded to bf16,
        the frequencies of a 64-wide head would put angles off by up to 0.44 radian at position 1000)."""
        super()._apply(fn, recurse)
        if self.inv_freq.dtype in (torch.float16, torch.bfloat16):
            self.inv_freq = self.frequencies(device=self.inv_freq.device)
        return self

    def frequencies(self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> Tensor:
        """base^(-2i/r) for i < r/2, (r/2,) in ``dtype`` on ``device`` (computed in float64; None: PyTorch's
        default device, as for a module's parameters at construction)."""
        steps = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64, device=device)
        return (self.base ** (-steps / self.rotary_dim)).to(dtype)

    def forward(self, position_ids: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """position_ids (B, T) -> cos, sin of shape (B, 1, T, r), broadcastable over heads. The angles are
        float32, as in common RoPE implementations, or float64 for float64 tables, whose rotations are then
        orthogonal to float64 precision (float32 angles leave |cos² + sin² − 1| near 1e-7)."""
        if not isinstance(position_ids, Tensor):
            raise TypeError(f"position_ids must be a torch.Tensor (B, T), got {type(position_ids).__name__}")
        if position_ids.dim() != 2:
            raise ValueError(f"position_ids must be (B, T), got shape {tuple(position_ids.shape)}")
        if not dtype.is_floating_point:  # integer tables hold cos and sin rounded to 0 and 1
            raise TypeError(f"RoPE tables need a floating-point dtype, got {dtype}")
        if dtype == torch.float64:
            inv_freq = self.frequencies(torch.float64, position_ids.device)
            angles = position_ids.to(torch.float64)[..., None] * inv_freq  # (B, T, r/2)
        else:
            angles = position_ids.to(torch.float32)[..., None] * self.inv_freq  # (B, T, r/2)
        angles = torch.cat([angles, angles], dim=-1)[:, None]  # (B, 1, T, r)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # each (..., r/2)
    return torch.cat([-x2, x1], dim=-1)  # (..., r)


class _Rotate(torch.autograd.Function):
    """x cos + rotate_half(x) sin (``rotate_kernels``) with its own derivatives. A rotation's transpose is the
    rotation by the opposite angle, so the backward is this function with ``transposed`` flipped (and any
    order of gradient stays on it). The tables are constants: they get no gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, transposed: bool = False) -> Tensor:
        ctx.transposed = transposed
        ctx.save_for_backward(cos, sin)
        ctx.save_for_forward(cos, sin)
        return rotate_kernels(x, cos, sin, transposed)

    @staticmethod
    def backward(ctx, g: Tensor):
        cos, sin = ctx.saved_tensors
        return _Rotate.apply(g, cos, sin, not ctx.transposed), None, None, None

    @staticmethod
    def jvp(ctx, x_dot: Tensor, *_) -> Tensor:  # forward-mode AD: the rotation is linear
        cos, sin = ctx.saved_tensors
        return x_dot * cos + _rotate_half(x_dot) * (-sin if ctx.transposed else sin)


def rotate_kernels(x: Tensor, cos: Tensor, sin: Tensor, transposed: bool = False) -> Tensor:
    """x cos + rotate_half(x) sin, or with ``transposed`` the rotation by the opposite angle,
    x cos - rotate_half(x) sin, in three kernels and one allocation (no autograd of its own: ``_Rotate``
    gives it one)."""
    h = x.shape[-1] // 2
    sign = -1.0 if transposed else 1.0
    out = x * cos
    out[..., :h].addcmul_(x[..., h:], sin[..., :h], value=-sign)  # -x2 sin
    out[..., h:].addcmul_(x[..., :h], sin[..., h:], value=sign)  # +x1 sin
    return out


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x cos + rotate_half(x) sin; eagerly with tables that need no gradient, on ``_Rotate``, or on its
    kernels alone when no gradient flows (a decode step: an autograd.Function's bookkeeping costs more
    than the rotation of one row)."""
    if cos.requires_grad or sin.requires_grad or plain_ops_only():
        return x * cos + _rotate_half(x) * sin
    if not (torch.is_grad_enabled() and x.requires_grad):
        return rotate_kernels(x, cos, sin)
    return _Rotate.apply(x, cos, sin)


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    """Whether a tensor of ``shape`` broadcasts to ``target`` unchanged (``torch.broadcast_shapes`` costs
    more than rotating a decode step's row)."""
    return len(shape) <= len(target) and all(a == 1 or a == b for a, b in zip(reversed(shape), reversed(target), strict=False))


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the first r channels of x (B, H, T, D) by the tables ``cos``, ``sin`` (B, 1, T, r) or
    (1, 1, T, r) from ``RotaryEmbedding``; returns (B, H, T, D). A stream of another rank, or tables that do not
    fit it, are a ValueError, an integer stream a TypeError."""
    check_tables(x, cos, sin)
    return rotated(x, cos, sin)


def rotated(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``apply_rope`` of tables already checked (``check_tables``): a decode step's row costs less than the checks."""
    r = cos.shape[-1]
    if r == x.shape[-1]:
        return _rotate(x, cos, sin)
    x_rot, x_pass = x[..., :r], x[..., r:]
    return torch.cat([_rotate(x_rot, cos, sin), x_pass], dim=-1)  # (B, H, T, D): r rotated channels, then the rest


def check_tables(x: Tensor, cos: Tensor, sin: Tensor) -> int:
    """The rotary width r of RoPE tables ``cos``, ``sin`` (B, 1, T, r) for a stream ``x`` (B, H, T, D); a
    TypeError or ValueError naming what does not fit."""
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, Tensor):  # was "'list' object has no attribute 'shape'"
            raise TypeError(f"apply_rope's {name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 4:  # a (B, T, D) stream was told that tables (B, 1, T, r) "do not fit" it
        raise ValueError(f"apply_rope's x must be a stream (B, H, T, D), got shape {tuple(x.shape)}"
                         + (": split its channels into heads first" if x.dim() == 3 else ""))
    if not x.is_floating_point():  # it came back rotated in a float dtype, where shear refuses it
        raise TypeError(f"apply_rope needs a floating-point stream, got {x.dtype}")
    r = cos.shape[-1]
    if r > x.shape[-1]:
        raise ValueError(f"rotary dimension {r} exceeds head dimension {x.shape[-1]}")
    if r % 2 or sin.shape[-1] != r:
        raise ValueError(f"RoPE tables must share one even width, got cos {r} and sin {sin.shape[-1]}")
    # tables (B, 1, T, r) for the stream's rows: its positions, and its batch (or one row for all)
    fits = _broadcasts_to(cos.shape[:-1], x.shape[:-1]) and _broadcasts_to(sin.shape[:-1], x.shape[:-1])
    if not fits or cos.shape[-2] != x.shape[-2] or sin.shape[-2] != x.shape[-2]:
        raise ValueError(f"RoPE tables of shape {tuple(cos.shape)} and {tuple(sin.shape)} do not fit a stream of shape "
                         f"{tuple(x.shape)}: they need its positions (dimension -2) and its batch, or one row for all")
    return r
