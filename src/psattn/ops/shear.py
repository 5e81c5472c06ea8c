"""Momentum and the symplectic upper shear of a stream along the sequence axis.

For a stream x_t (queries or keys of one head) the momentum is the first backward difference
``p_t = x_t - x_{t-1}``, and the shear M_gamma : (x, p) -> (x + gamma p, p) gives

    x̂_t = x_t + gamma p_t = (1 + gamma) x_t - gamma x_{t-1},

a causal two-tap filter H(z) = (1 + gamma) - gamma z^-1.

Boundary rule. At every sequence start (t = 0, the first real token after left padding, each
document start of a packed batch) there is no predecessor. With ``boundary="replicate"`` (the
default) ``x_{-1} := x_t``, so the momentum is 0 and ``x̂_t = x_t``: the filter stays DC-neutral (H(1) = 1)
and a token never sees anything before its own sequence. With ``boundary="zero"`` ``x_{-1} := 0``, so
``x̂_t = (1 + gamma) x_t``; it is kept for ablations.

All functions take streams shaped (B, H, T, D) and an optional ``starts`` mask (B, T) marking
sequence starts, and an optional ``prev`` (B, H, 1, D): the raw value just before x[..., 0, :]
(used by cached decoding, where the chunk continues an earlier one). ``prev`` is one more row of the
stream, so it is cast to the stream's dtype (a float32 row before a bfloat16 chunk is rounded as the
chunk's own rows are); ``starts`` and ``prev`` must be on the stream's device.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Literal, get_args

import torch
from torch import Tensor

from psattn.ops.tracing import plain_ops_only

Boundary = Literal["replicate", "zero"]
BOUNDARIES: tuple[str, ...] = get_args(Boundary)


#: the largest |gamma| accepted: far past any useful coupling (the filter's gain is at most 1 + 2|gamma|), and
#: small enough that gamma (1 + 2 gamma) times a key stays within float32 and bfloat16
MAX_GAMMA = 1e4


def check_gamma(gamma: float | Tensor, name: str = "gamma") -> float:
    """Return gamma as a finite Python float of magnitude at most MAX_GAMMA, or raise a TypeError /
    ValueError naming it."""
    if isinstance(gamma, Tensor):
        if gamma.numel() != 1:
            raise TypeError(f"{name} must be a scalar, got a tensor of shape {tuple(gamma.shape)}")
        if gamma.requires_grad:  # read as a number, it would never get a gradient
            raise TypeError(f"{name} must be a fixed number: a tensor that requires grad (a learnable {name}) "
                            "is not supported")
        gamma = gamma.item()
    if isinstance(gamma, bool) or not isinstance(gamma, Real):
        raise TypeError(f"{name} must be a real number, got {type(gamma).__name__}")
    gamma = float(gamma)
    if not math.isfinite(gamma):
        raise ValueError(f"{name} must be finite, got {gamma}")
    if abs(gamma) > MAX_GAMMA:
        raise ValueError(f"{name} must lie within ±{MAX_GAMMA:g} (the shear's gain is up to 1 + 2|{name}|; larger "
                         f"values overflow float32 activations), got {gamma:g}")
    return gamma


def check_boundary(boundary: str) -> str:
    """``boundary`` if it is a boundary rule (``replicate`` or ``zero``); TypeError for what is not a name,
    ValueError for another name."""
    if not isinstance(boundary, str):  # None was an unknown rule, a list an "unhashable type"
        raise TypeError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    if boundary not in BOUNDARIES:
        raise ValueError(f"unknown boundary rule {boundary!r}; expected one of {BOUNDARIES}")
    return boundary


def check_mask_dtype(attention_mask: Tensor) -> None:
    """TypeError unless ``attention_mask`` is bool or integer: a float mask of 0.5 (or a complex one) was read as
    real tokens. Whether its values are 0 and 1 alone takes a read of the device (``build_context`` makes it)."""
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be bool or integer, 1 at real tokens and 0 at padding, got {attention_mask.dtype}")


def mask_values_error(attention_mask: Tensor) -> ValueError:
    """The error for an integer ``attention_mask`` holding values other than 0 and 1, naming the first."""
    odd = attention_mask[(attention_mask != 0) & (attention_mask != 1)]
    return ValueError(f"attention_mask must hold 1 at real tokens and 0 at padding, got {int(odd[0])}")


def check_position_dtype(position_ids: Tensor) -> None:
    """TypeError unless ``position_ids`` is an integer tensor: a float 0.5 (or a bool False) is no position."""
    if position_ids.is_floating_point() or position_ids.is_complex() or position_ids.dtype == torch.bool:
        raise TypeError(f"position_ids must be an integer tensor, got {position_ids.dtype}")


def sequence_starts(position_ids: Tensor | None = None, attention_mask: Tensor | None = None, *,
                    check_values: bool = True) -> Tensor:
    """Mark sequence starts (B, T): where ``position_ids`` (integer) is 0, or where a padding run
    (``attention_mask`` 0, bool or integer 0 and 1) gives way to a real token. Position 0 of the chunk is left to the
    caller (it is a start unless the chunk continues a cached one). An integer mask's values are read from the device
    to refuse any other than 0 and 1 (a 2 or a -1 was read as a real token); ``check_values=False`` leaves that
    to a caller that reads them in a device read of its own (``psattn.models.context.build_context``)."""
    if position_ids is None and attention_mask is None:
        raise ValueError("sequence_starts needs position_ids or attention_mask")
    for name, x in (("position_ids", position_ids), ("attention_mask", attention_mask)):
        if x is not None and not isinstance(x, Tensor):  # a list compared == 0 as False: no start anywhere
            raise TypeError(f"{name} must be a torch.Tensor (B, T) or None, got {type(x).__name__}")
        if x is not None and x.dim() != 2:
            raise ValueError(f"{name} must be (B, T), got shape {tuple(x.shape)}")
    if position_ids is not None and attention_mask is not None and position_ids.shape != attention_mask.shape:
        raise ValueError(f"position_ids {tuple(position_ids.shape)} and attention_mask {tuple(attention_mask.shape)} "
                         "must have one shape (B, T)")
    if position_ids is not None:
        check_position_dtype(position_ids)
    if attention_mask is not None:
        check_mask_dtype(attention_mask)
        if check_values and attention_mask.dtype != torch.bool and bool(((attention_mask != 0) & (attention_mask != 1)).any()):
            raise mask_values_error(attention_mask)
    starts = None
    if position_ids is not None:
        starts = position_ids == 0
    if attention_mask is not None:
        real = attention_mask.bool()
        after_pad = torch.zeros_like(real)
        after_pad[:, 1:] = real[:, 1:] & ~real[:, :-1]
        starts = after_pad if starts is None else starts | after_pad
    assert starts is not None  # one of the two was given
    return starts


def check_stream(x: Tensor, starts: Tensor | None, prev: Tensor | None, prev_name: str = "prev") -> None:
    """ValueError / TypeError unless ``x`` is a (B, H, T, D) tensor and ``starts``, ``prev`` (called
    ``prev_name`` in the message) are tensors that fit it, on its device (``prev`` may differ in dtype:
    it is cast to ``x``'s)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"a stream must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"streams must be (B, H, T, D), got shape {tuple(x.shape)}")
    B, H, T, D = x.shape
    for name, y in (("starts", starts), (prev_name, prev)):
        if y is not None and not isinstance(y, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(y).__name__}")
        if y is not None and y.device != x.device:
            raise ValueError(f"{name} is on {y.device}, the stream on {x.device}: they must share a device")
    if starts is not None and tuple(starts.shape) != (B, T):
        raise ValueError(f"starts must be (B, T) = {(B, T)}, got {tuple(starts.shape)}")
    if starts is not None and starts.dtype != torch.bool:
        raise TypeError(f"starts must be a bool tensor (True at sequence starts), got {starts.dtype}")
    if prev is not None and tuple(prev.shape) != (B, H, 1, D):
        raise ValueError(f"{prev_name} must be (B, H, 1, D) = {(B, H, 1, D)}, got {tuple(prev.shape)}")
    if prev is not None and not prev.is_floating_point():
        raise TypeError(f"{prev_name} must be a floating-point tensor, got {prev.dtype}")


def previous(x: Tensor, *, starts: Tensor | None = None, prev: Tensor | None = None,
             boundary: str = "replicate") -> Tensor:
    """The lagged stream ``x_{t-1}`` (B, H, T, D) under the boundary rule."""
    check_stream(x, starts, prev)
    return _lagged(x, starts, prev, check_boundary(boundary))


def _lagged(x: Tensor, starts: Tensor | None, prev: Tensor | None, boundary: str) -> Tensor:
    """``previous`` of arguments already checked."""
    fill = x if boundary == "replicate" else torch.zeros_like(x)
    first = prev.to(x.dtype) if prev is not None else fill[..., :1, :]  # (B, H, 1, D): one more row of x
    if torch.compiler.is_exporting():  # slicing off x_{T-1} would make the exported graph refuse T = 2
        is_first = torch.arange(x.shape[-2], device=x.device)[:, None] == 0  # (T, 1)
        x_prev = torch.where(is_first, first, torch.roll(x, 1, dims=-2))  # (B, H, T, D)
    elif x.shape[-2] == 1:  # one decoded row: its predecessor is ``first`` itself
        x_prev = first  # (B, H, 1, D)
    else:
        x_prev = torch.cat([first, x[..., :-1, :]], dim=-2)  # (B, H, T, D)
    if starts is not None:
        x_prev = torch.where(starts[:, None, :, None], fill, x_prev)
    return x_prev


def momentum(x: Tensor, *, starts: Tensor | None = None, prev: Tensor | None = None,
             boundary: str = "replicate") -> Tensor:
    """``p_t = x_t - x_{t-1}`` (B, H, T, D); 0 at sequence starts under the replicate rule."""
    return x - previous(x, starts=starts, prev=prev, boundary=boundary)


def lag_one_shear_kernels(x: Tensor, gamma: float, replicate: bool) -> Tensor:
    """``x̂_t = (1 + gamma) x_t - gamma x_{t-1}`` of a stream (B, H, T, D) whose only start is t = 0, in one
    pass over shifted views, in x's layout (no autograd of its own: ``_LagOneShear`` gives it one)."""
    out = torch.empty_like(x)
    torch.lerp(x[..., :-1, :], x[..., 1:, :], 1.0 + gamma, out=out[..., 1:, :])
    if replicate:
        out[..., :1, :] = x[..., :1, :]
    else:
        torch.mul(x[..., :1, :], 1.0 + gamma, out=out[..., :1, :])
    return out


def lag_one_transposed_kernels(g: Tensor, gamma: float, replicate: bool) -> Tensor:
    """The transposed filter ``g_t (1 + gamma) - gamma g_{t+1}`` of a (B, H, T, D), in g's layout: the gradient of
    ``lag_one_shear_kernels``."""
    gx = torch.empty_like(g)
    torch.lerp(g[..., 1:, :], g[..., :-1, :], 1.0 + gamma, out=gx[..., :-1, :])
    torch.mul(g[..., -1:, :], 1.0 + gamma, out=gx[..., -1:, :])
    if replicate and g.shape[-2] > 1:  # x̂_0 = x_0: the first tap has weight 1, not 1 + gamma
        torch.add(g[..., :1, :], g[..., 1:2, :], alpha=-gamma, out=gx[..., :1, :])
    elif replicate:  # one row: x̂_0 = x_0 alone
        gx.copy_(g)
    return gx


class _LagOneShear(torch.autograd.Function):
    """x̂_t = (1 + gamma) x_t - gamma x_{t-1} with only t = 0 as a start, in one pass over shifted
    views. Its backward is the transposed filter (``_LagOneShearT``), whose backward is this
    filter again, so gradients of any order stay on the one-pass kernels."""

    @staticmethod
    def forward(ctx, x: Tensor, gamma: float, replicate: bool) -> Tensor:
        ctx.gamma, ctx.replicate = gamma, replicate
        return lag_one_shear_kernels(x, gamma, replicate)

    @staticmethod
    def backward(ctx, g: Tensor):
        return _LagOneShearT.apply(g, ctx.gamma, ctx.replicate), None, None

    @staticmethod
    def jvp(ctx, x_dot: Tensor, *_) -> Tensor:  # forward-mode AD: the filter is linear
        boundary = "replicate" if ctx.replicate else "zero"
        return torch.lerp(previous(x_dot, boundary=boundary), x_dot, 1.0 + ctx.gamma)


class _LagOneShearT(torch.autograd.Function):
    """The transposed filter g_t (1 + gamma) - gamma g_{t+1} (the backward of ``_LagOneShear``)."""

    @staticmethod
    def forward(ctx, g: Tensor, gamma: float, replicate: bool) -> Tensor:
        ctx.gamma, ctx.replicate = gamma, replicate
        return lag_one_transposed_kernels(g, gamma, replicate)

    @staticmethod
    def backward(ctx, gg: Tensor):
        return _LagOneShear.apply(gg, ctx.gamma, ctx.replicate), None, None


def shear(x: Tensor, gamma: float, *, starts: Tensor | None = None, prev: Tensor | None = None,
          boundary: str = "replicate") -> Tensor:
    """x̂ = x + gamma * momentum(x) (B, H, T, D), under the boundary rule; gamma is a finite number within
    ±``MAX_GAMMA``, x a floating-point stream (a ValueError / TypeError otherwise). Eagerly, the common case
    (no starts but t = 0, no prev) takes a one-pass kernel with its own backward; under
    ``torch.compile`` / ``torch.export`` and ``torch.func`` transforms the same filter is written
    with ordinary ops."""
    gamma = check_gamma(gamma)
    check_stream(x, starts, prev)
    check_boundary(boundary)
    if not x.is_floating_point():  # lerp has no integer kernel
        raise TypeError(f"shear needs a floating-point stream, got {x.dtype}")
    return sheared(x, gamma, starts, prev, boundary)


def sheared(x: Tensor, gamma: float, starts: Tensor | None, prev: Tensor | None, boundary: str) -> Tensor:
    """``shear`` of arguments already checked (a decode step's row costs less than the checks)."""
    if gamma == 0.0:
        return x
    if starts is None and prev is None and not plain_ops_only():
        return _LagOneShear.apply(x, gamma, boundary == "replicate")
    if starts is None and prev is not None and x.shape[-2] == 1 and not torch.compiler.is_exporting():
        return torch.lerp(prev.to(x.dtype), x, 1.0 + gamma)  # a decoded row after prev: what follows, in one step
    x_prev = _lagged(x, starts, prev, boundary)
    if torch.compiler.is_exporting():  # lerp has no kernel in some runtimes (ExecuTorch): the same filter in adds
        return x + gamma * (x - x_prev)
    return torch.lerp(x_prev, x, 1.0 + gamma)


#: the largest growth of rounding errors ``unshear`` accepts, relative to its dtype's precision
MAX_INVERSE_ERROR = 1e-3


def _check_inverse_growth(gamma: float, is_start: Tensor, dtype: torch.dtype) -> None:
    """ValueError when the inverse recursion over the longest run of positions between starts (B, T) grows a
    rounding error of ``dtype`` past ``MAX_INVERSE_ERROR`` (gamma = -0.8 over 64 float32 positions gave 1e30)."""
    ratio = abs(gamma / (1.0 + gamma))
    if ratio <= 1.0:  # gamma >= -1/2: errors shrink or stay
        return
    positions = torch.arange(is_start.shape[1], device=is_start.device)  # (T,)
    last_start = torch.where(is_start, positions, -1).cummax(dim=1).values  # (B, T): the latest start at or before t
    steps = int((positions - last_start).max())  # the longest chain of the recursion
    if steps * math.log(ratio) > math.log(MAX_INVERSE_ERROR / torch.finfo(dtype).eps):
        raise ValueError(
            f"unshear with gamma = {gamma:g} is unstable here: it multiplies rounding errors by "
            f"|gamma / (1 + gamma)| = {ratio:.3g} per position, {steps} times in a row: {dtype}'s rounding error "
            f"({torch.finfo(dtype).eps:.3g}) would grow past a relative {MAX_INVERSE_ERROR:g} (it is stable for "
            "gamma >= -1/2; shorter runs between starts or float64 go further)"
        )


def unshear(y: Tensor, gamma: float, *, starts: Tensor | None = None, prev: Tensor | None = None,
            boundary: str = "replicate") -> Tensor:
    """The exact inverse of ``shear``: ``x_t = (y_t + gamma x_{t-1}) / (1 + gamma)``, x = y at
    replicate-rule starts. A sequential scan over T; needs gamma != -1. For gamma < -1/2 the recursion
    multiplies every rounding error by |gamma / (1 + gamma)| > 1 per position, so a run of positions
    between starts long enough to grow the dtype's rounding error past ``MAX_INVERSE_ERROR`` (relative)
    is a ValueError, not a result."""
    gamma = check_gamma(gamma)
    check_stream(y, starts, prev)
    check_boundary(boundary)
    if gamma == -1.0:
        raise ValueError("the shear with gamma = -1 is not invertible (x̂_t = x_{t-1})")
    T = y.shape[-2]
    if T == 0:
        return y.clone()  # (B, H, 0, D): nothing to invert
    is_start = torch.zeros(y.shape[0], T, dtype=torch.bool, device=y.device)
    if starts is not None:
        is_start |= starts
    if prev is None:
        is_start[:, 0] = True
    _check_inverse_growth(gamma, is_start, y.dtype if y.is_floating_point() else torch.get_default_dtype())
    xs = []
    x_last = prev.to(y.dtype) if prev is not None else torch.zeros_like(y[..., :1, :])  # (B, H, 1, D)
    for t in range(T):
        y_t = y[..., t : t + 1, :]  # (B, H, 1, D)
        start = is_start[:, t, None, None, None]  # (B, 1, 1, 1)
        x_start = y_t if boundary == "replicate" else y_t / (1.0 + gamma)
        x_t = torch.where(start, x_start, (y_t + gamma * x_last) / (1.0 + gamma))
        xs.append(x_t)
        x_last = x_t
    return torch.cat(xs, dim=-2)  # (B, H, T, D)
