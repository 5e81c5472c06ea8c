"""PSA attention: shear the (post-RoPE) query and key streams, then attend as usual.

    q̂ = shear(q, gamma_q),  k̂ = shear(k, gamma_k),  out = softmax(scale * q̂ k̂ᵀ + mask) v

The fast path hands q̂, k̂, v to ``torch.nn.functional.scaled_dot_product_attention`` unchanged
(so every SDPA backend, GQA, dropout and masking work as they do for plain attention); the
reference path forms the scores explicitly. ``score_terms`` splits the score into

    T1 = q_tᵀ k_j,  T2 = gamma_q p_{q,t}ᵀ k_j,  T3 = gamma_k q_tᵀ p_{k,j},  T4 = gamma_q gamma_k p_{q,t}ᵀ p_{k,j},

whose sum is q̂_tᵀ k̂_j (before scaling).
"""

from __future__ import annotations

import importlib.util
import math
import os
from numbers import Real
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from psattn.ops.shear import check_boundary, check_gamma, check_stream, momentum, shear


def check_qkv(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, *, same_dtype: bool = True) -> None:
    """Raise a ValueError / TypeError naming the problem if q (B, Hq, Tq, D), k (B, Hkv, Tk, D),
    v (B, Hkv, Tk, Dv) and the mask do not fit together (``same_dtype=False``: their dtypes may
    differ, as under autocast)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must be (B, H, T, D), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if same_dtype and not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k head dimensions differ: {q.shape[-1]} vs {k.shape[-1]}")
    if q.shape[-1] == 0:  # the default scale 1/sqrt(D): a ZeroDivisionError on the reference path
        raise ValueError("q and k must have a positive head dimension D, got 0")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in heads or length")
    if q.shape[1] == 0:  # score_terms blamed k, repeated to no heads; attention gave an empty output
        raise ValueError(f"q must have at least one head, got shape {tuple(q.shape)}")
    if k.shape[1] == 0:  # the GQA check below divided by it: a ZeroDivisionError
        raise ValueError(f"{'k' if v is k else 'k and v'} must have at least one key/value head, got 0")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
        if attn_mask.device != q.device:
            raise ValueError(f"attn_mask is on {attn_mask.device}, q on {q.device}: they must share a device")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():  # 0/1 integers were added as a bias
            raise TypeError(f"attn_mask must be bool (True: may attend) or an additive float mask, got {attn_mask.dtype}")
        if attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype and same_dtype:
            raise TypeError(f"attn_mask must be bool or {q.dtype}, got {attn_mask.dtype}")
        target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        try:
            if torch.broadcast_shapes(attn_mask.shape, target) != target:
                raise RuntimeError
        except RuntimeError:
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to (B, Hq, Tq, Tk) = {target}"
            ) from None


def check_dropout(dropout_p: float) -> float:
    """``dropout_p`` if it is a probability in [0, 1]; TypeError / ValueError naming it otherwise."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, Real):
        raise TypeError(f"dropout_p must be a real number, got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p <= 1.0:  # NaN fails too
        raise ValueError(f"dropout_p must lie in [0, 1], got {dropout_p}")
    return float(dropout_p)


def check_masking(attn_mask: Tensor | None, is_causal: bool) -> None:
    """TypeError unless ``is_causal`` is a bool (SDPA refuses anything else, the explicit backends read
    any truthy value as True); ValueError for ``is_causal`` together with ``attn_mask``: SDPA documents the
    pair as an error (and some of its kernels apply both), so every backend refuses it."""
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {is_causal!r}")
    if is_causal and attn_mask is not None:
        raise ValueError("pass either is_causal or attn_mask, not both (fold the causal mask into attn_mask)")


def check_scale(scale: float | None) -> float | None:
    """``scale`` if it is None (1/sqrt(D)) or a finite number (a tensor goes on: the reference path differentiates
    it, SDPA reads it as a number); TypeError / ValueError naming it otherwise (NaN or inf made every output NaN)."""
    if scale is None or isinstance(scale, Tensor):
        return scale
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise TypeError(f"scale must be a number or None (for 1/sqrt(D)), got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def autocasting(q: Tensor) -> bool:
    """Whether autocast is on for q's device (then q, k and v may differ in dtype)."""
    return isinstance(q, Tensor) and torch.is_autocast_enabled(q.device.type)


def check_streams(q: Tensor, k: Tensor, starts: Tensor | None, prev_q: Tensor | None, prev_k: Tensor | None,
                  boundary: str) -> None:
    """ValueError / TypeError, naming the argument, unless ``starts``, ``prev_q``, ``prev_k`` and
    ``boundary`` fit the streams q and k (``psattn.ops.shear.check_stream``)."""
    check_boundary(boundary)
    if starts is not None and q.shape[2] != k.shape[2]:
        raise ValueError("starts applies to q and k together; their lengths must match")
    check_stream(q, starts, prev_q, "prev_q")
    check_stream(k, starts, prev_k, "prev_k")


def _shear_qk(q, k, gamma_q, gamma_k, starts, prev_q, prev_k, boundary):
    q_hat = shear(q, gamma_q, starts=starts, prev=prev_q, boundary=boundary)
    k_hat = shear(k, gamma_k, starts=starts, prev=prev_k, boundary=boundary)
    return q_hat, k_hat


def psa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    gamma_q: float = 0.0,
    gamma_k: float = 0.0,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    starts: Tensor | None = None,
    prev_q: Tensor | None = None,
    prev_k: Tensor | None = None,
    boundary: str = "replicate",
    backend: str = "auto",
) -> Tensor:
    """Phase Space Attention on post-RoPE q (B, Hq, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv).

    Masking, dropout and scale mean what they mean for SDPA (``is_causal`` or ``attn_mask``, not both,
    as SDPA's documentation asks; every backend refuses the pair); Hq may be a multiple of Hkv (GQA).
    ``starts`` (B, T) marks sequence starts (see ``psattn.ops.shear``); ``prev_q``/``prev_k``
    continue a cached stream. Returns (B, Hq, Tq, Dv). An argument that does not fit is a
    TypeError or ValueError naming it.

    ``backend`` chooses the implementation: ``"sdpa"``, the shear followed by
    ``scaled_dot_product_attention``; ``"fused"``, the Triton kernel that forms q̂ and k̂ inside the
    attention loop (``psattn.ops.fused_attention``; CUDA, or the CPU under ``TRITON_INTERPRET=1``), or a
    ValueError naming why it cannot run the call; ``"reference"``, the explicit ``psa_attention_reference``;
    ``"auto"`` (the default), the fastest measured: today the shear and SDPA on every device, since on
    an H200 the fused kernel ran slower than it (docs/kernel.md).

    Args:
        q: post-RoPE queries (B, Hq, Tq, D).
        k: post-RoPE keys (B, Hkv, Tk, D); Hq a multiple of Hkv.
        v: values (B, Hkv, Tk, Dv).
        gamma_q: the query stream's shear coupling (0: queries unsheared), a finite number within
            ±``MAX_GAMMA`` (1e4) or a one-element tensor that needs no gradient.
        gamma_k: the key stream's shear coupling (0: keys unsheared), as ``gamma_q``.
        attn_mask: boolean or additive mask on q's device, as for SDPA.
        is_causal: causal attention, as for SDPA: aligned top-left, so with Tq < Tk query i sees keys
            0..i (queries that continue cached keys need an explicit ``attn_mask``).
        dropout_p: attention dropout, a probability in [0, 1], as for SDPA.
        scale: score scale (default 1/sqrt(D)).
        starts: (B, T) booleans marking sequence starts, where the momentum restarts; it needs
            Tq = Tk = T.
        prev_q: the query before the first one (B, Hq, 1, D), continuing a cached stream; cast to
            q's dtype, as one more row of the stream.
        prev_k: the key before the first one (B, Hkv, 1, D); cast to k's dtype.
        boundary: ``"replicate"`` (momentum 0 at a start) or ``"zero"``.
        backend: ``"auto"``, ``"fused"``, ``"sdpa"`` or ``"reference"`` (``BACKENDS``); another
            is a ValueError.

    Returns:
        The attention output (B, Hq, Tq, Dv).

    Examples:
        >>> import torch
        >>> from psattn import psa_attention, psa_attention_reference
        >>> q, k, v = torch.randn(3, 1, 2, 8, 16, generator=torch.Generator().manual_seed(0)).unbind(0)
        >>> out = psa_attention(q, k, v, gamma_k=0.8, is_causal=True)  # key-only shear
        >>> out.shape
        torch.Size([1, 2, 8, 16])
        >>> torch.allclose(out, psa_attention_reference(q, k, v, gamma_k=0.8, is_causal=True), atol=1e-5)
        True
    """
    autocast = autocasting(q)  # SDPA casts q̂, k̂, v itself; the kernel takes v's dtype
    check_qkv(q, k, v, attn_mask, same_dtype=not autocast)
    check_masking(attn_mask, is_causal)
    dropout_p, scale = check_dropout(dropout_p), check_scale(scale)
    gamma_q, gamma_k = check_gamma(gamma_q, "gamma_q"), check_gamma(gamma_k, "gamma_k")
    check_streams(q, k, starts, prev_q, prev_k, boundary)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "reference":
        return psa_attention_reference(q, k, v, gamma_q=gamma_q, gamma_k=gamma_k, attn_mask=attn_mask,
                                       is_causal=is_causal, dropout_p=dropout_p, scale=scale, starts=starts,
                                       prev_q=prev_q, prev_k=prev_k, boundary=boundary)  # type: ignore[return-value]
    if backend == "fused":
        # one more row of each stream, in its dtype, as the other backends' shear takes it
        prev_q = None if prev_q is None else prev_q.to(q.dtype)
        prev_k = None if prev_k is None else prev_k.to(k.dtype)
        if autocast and v.dtype != torch.float64:  # the products in autocast's dtype (what the checks see), which
            # leaves float64 alone as it does for SDPA; q and k are sheared at their own precision
            v = v.to(torch.get_autocast_dtype(q.device.type))
        reason = fused_unsupported(q, k, v, attn_mask, dropout_p, starts, is_causal, scale)
        if reason is not None:
            raise ValueError(f"the fused PSA kernel cannot run this call: {reason}")
        from psattn.ops.fused_attention import fused_psa_attention

        return fused_psa_attention(q, k, v, gamma_q=gamma_q, gamma_k=gamma_k, is_causal=is_causal, scale=scale,
                                   starts=starts, prev_q=prev_q, prev_k=prev_k, replicate=boundary == "replicate")
    if isinstance(scale, Tensor) and scale.requires_grad:  # SDPA's own words name no way out
        raise TypeError(f"backend {backend!r} takes the scale as a number and gives it no gradient; a scale tensor "
                        "that requires grad needs backend='reference'")
    q_hat, k_hat = _shear_qk(q, k, gamma_q, gamma_k, starts, prev_q, prev_k, boundary)
    if is_causal and scale is not None and float(scale) <= 0:  # CPU SDPA's causal kernel scales its -inf too: NaN rows
        attn_mask, is_causal = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril(), False
    return F.scaled_dot_product_attention(
        q_hat, k_hat, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
        scale=scale, enable_gqa=q.shape[1] != k.shape[1],
    )


#: the implementations ``psa_attention`` can choose (see its ``backend``)
BACKENDS: tuple[str, ...] = ("auto", "fused", "sdpa", "reference")


def fused_unsupported(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout_p: float,
                      starts: Tensor | None, is_causal: bool, scale: float | Tensor | None = None) -> str | None:
    """Why the fused kernel cannot run a call with these arguments (None when it can). On the CPU it
    runs in Triton's interpreter only (``TRITON_INTERPRET=1``)."""
    if is_causal and attn_mask is not None:
        return "both is_causal and attn_mask"
    if isinstance(scale, Tensor) and scale.requires_grad:  # read as a number, it would get no gradient
        return "a scale tensor that requires grad (the kernel takes the scale as a number)"
    if torch.compiler.is_compiling():
        return "torch.compile (the compiled graph fuses the shear into its neighbours itself)"
    interpreter = os.environ.get("TRITON_INTERPRET") == "1"
    if q.device.type != "cuda" and not interpreter:
        return f"tensors on {q.device.type} (the kernel runs on CUDA, or on the CPU under TRITON_INTERPRET=1)"
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (pip install 'phase-space-attention[gpu]')"
    from psattn.ops.fused_attention import unsupported

    return unsupported(q, k, v, attn_mask, dropout_p, starts)


def expand_kv_heads(x: Tensor, n_q_heads: int) -> Tensor:
    """Repeat key/value heads (B, Hkv, T, D) to match Hq query heads (GQA)."""
    return x.repeat_interleave(n_q_heads // x.shape[1], dim=1)  # (B, Hq, Tk, D)


def attention_weights(
    q_hat: Tensor, k_hat: Tensor, *, attn_mask: Tensor | None = None, is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(scale * q̂ k̂ᵀ + mask) as an explicit (B, Hq, Tq, Tk) pattern, SDPA's conventions
    (the causal mask is aligned top-left, a bool mask marks allowed keys, a query row that may see
    no key gets zero weights). q̂ (B, Hq, Tq, D) and k̂ (B, Hkv, Tk, D) are checked as ``psa_attention``'s q and k."""
    check_qkv(q_hat, k_hat, k_hat, attn_mask, same_dtype=False)  # the mask may be additive in another dtype
    check_masking(attn_mask, is_causal)
    scale = check_scale(scale)
    scale = 1.0 / math.sqrt(q_hat.shape[-1]) if scale is None else scale
    k_hat = expand_kv_heads(k_hat, q_hat.shape[1])
    scores = (q_hat @ k_hat.transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk)
    if is_causal:
        Tq, Tk = scores.shape[-2:]
        attn_mask = torch.ones(Tq, Tk, dtype=torch.bool, device=scores.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (B, Hq, Tq, 1): rows that may see no key
    # their softmax is NaN: filled with finite scores first, or its backward spread NaN into q and k (an additive mask)
    return scores.masked_fill(dead, 0.0).softmax(dim=-1).masked_fill(dead, 0.0)


def psa_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    gamma_q: float = 0.0,
    gamma_k: float = 0.0,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    starts: Tensor | None = None,
    prev_q: Tensor | None = None,
    prev_k: Tensor | None = None,
    boundary: str = "replicate",
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Slow, explicit version of ``psa_attention`` (same arguments but ``backend``; under autocast, as there,
    q, k and v may differ in dtype and the products run in autocast's); optionally also returns the attention
    pattern (B, Hq, Tq, Tk).

    Returns:
        The output (B, Hq, Tq, Dv), and with ``return_weights`` the pattern (B, Hq, Tq, Tk) too.

    Examples:
        >>> import torch
        >>> from psattn import psa_attention_reference
        >>> q, k, v = torch.randn(3, 1, 1, 4, 8, generator=torch.Generator().manual_seed(0)).unbind(0)
        >>> out, pattern = psa_attention_reference(q, k, v, gamma_k=1.0, is_causal=True, return_weights=True)
        >>> torch.allclose(pattern.sum(-1), torch.ones(1, 1, 4))  # every query's weights sum to 1
        True"""
    check_qkv(q, k, v, attn_mask, same_dtype=not autocasting(q))  # under autocast the products cast themselves
    check_masking(attn_mask, is_causal)
    dropout_p, scale = check_dropout(dropout_p), check_scale(scale)
    gamma_q, gamma_k = check_gamma(gamma_q, "gamma_q"), check_gamma(gamma_k, "gamma_k")
    check_streams(q, k, starts, prev_q, prev_k, boundary)
    q_hat, k_hat = _shear_qk(q, k, gamma_q, gamma_k, starts, prev_q, prev_k, boundary)
    weights = attention_weights(q_hat, k_hat, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = dropped @ expand_kv_heads(v, q.shape[1])  # (B, Hq, Tq, Dv)
    return (out, weights) if return_weights else out


class ScoreTerms(NamedTuple):
    """The four unscaled terms (each (B, Hq, Tq, Tk)) of the PSA score q̂_tᵀ k̂_j."""

    t1: Tensor
    t2: Tensor
    t3: Tensor
    t4: Tensor

    def total(self) -> Tensor:
        """T1 + T2 + T3 + T4: the unscaled scores of the sheared streams."""
        return self.t1 + self.t2 + self.t3 + self.t4

    @classmethod
    def from_streams(cls, q: Tensor, p_q: Tensor, k: Tensor, p_k: Tensor, gamma_q: float, gamma_k: float) -> ScoreTerms:
        """Terms from streams q (B, Hq, Tq, D), k (B, Hkv, Tk, D) and their momenta p_q, p_k (shaped as
        they are); key heads are repeated to the query heads (GQA) where Hkv divides Hq."""
        try:
            check_qkv(q, k, k, same_dtype=False)
        except ValueError as err:
            raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}: {err}") from None
        for name, p, x, x_name in (("p_q", p_q, q, "q"), ("p_k", p_k, k, "k")):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(p).__name__}")
            if p.shape != x.shape or p.device != x.device:
                raise ValueError(f"{name} {tuple(p.shape)} on {p.device} must match {x_name} {tuple(x.shape)} on {x.device}")
        if not autocasting(q) and len({q.dtype, p_q.dtype, k.dtype, p_k.dtype}) > 1:  # autocast casts the products
            raise TypeError(f"q, p_q, k, p_k dtypes differ: {q.dtype}, {p_q.dtype}, {k.dtype}, {p_k.dtype}")
        if k.shape[1] != q.shape[1]:
            k, p_k = expand_kv_heads(k, q.shape[1]), expand_kv_heads(p_k, q.shape[1])  # (B, Hq, Tk, D)
        kT, p_kT = k.transpose(-2, -1), p_k.transpose(-2, -1)  # (B, Hq, D, Tk)
        return cls(
            t1=q @ kT,
            t2=gamma_q * (p_q @ kT),
            t3=gamma_k * (q @ p_kT),
            t4=(gamma_q * gamma_k) * (p_q @ p_kT),
        )


def score_terms(
    q: Tensor,
    k: Tensor,
    *,
    gamma_q: float = 0.0,
    gamma_k: float = 0.0,
    starts: Tensor | None = None,
    prev_q: Tensor | None = None,
    prev_k: Tensor | None = None,
    boundary: str = "replicate",
) -> ScoreTerms:
    """T1..T4 of the PSA score for q (B, Hq, Tq, D), k (B, Hkv, Tk, D); T1 + T2 + T3 + T4 = q̂ k̂ᵀ."""
    gamma_q, gamma_k = check_gamma(gamma_q, "gamma_q"), check_gamma(gamma_k, "gamma_k")
    check_qkv(q, k, k, same_dtype=False)  # k stands in for the values it does not take
    if q.dtype != k.dtype:
        raise TypeError(f"q and k dtypes differ: {q.dtype}, {k.dtype}")
    check_streams(q, k, starts, prev_q, prev_k, boundary)
    p_q = momentum(q, starts=starts, prev=prev_q, boundary=boundary)
    p_k = momentum(k, starts=starts, prev=prev_k, boundary=boundary)
    k, p_k = expand_kv_heads(k, q.shape[1]), expand_kv_heads(p_k, q.shape[1])  # (B, Hq, Tk, D)
    return ScoreTerms.from_streams(q, p_q, k, p_k, gamma_q, gamma_k)
