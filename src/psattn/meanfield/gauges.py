"""Orthogonal gauges G(ξ) for the mean-field kernels (arXiv 2605.30229).

A gauge maps each label ξ_i to an orthogonal matrix G(ξ_i) ∈ O(d); the pair matrix of the kernel is
A(ξ, ζ) = G(ξ)ᵀ G(ζ), symmetric in the sense A(ζ, ξ) = A(ξ, ζ)ᵀ by construction.

- RoPE:             G(s) = exp(s Ω), Ω block-diagonal with frequencies ω_k on planes (0,1), (2,3), ...
- generalised RoPE: G(s) = exp(s ω_1 E_1) exp(s ω_2 E_2) ..., E_k the unit generator of an arbitrary
  plane (a_k, b_k). Planes that share an axis do not commute, so A(s, t) is not a function of t − s
  and the graph law x*(s) = G(s)ᵀ y* traces a wavy curve instead of a latitude circle.
- prefix tokens:    one Haar-random orthogonal matrix per prompt id, drawn from a seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def plane_rotation(angles: Tensor, d: int, a: int, b: int) -> Tensor:
    """exp(θ E_ab) for every angle θ, E_ab = e_b e_aᵀ − e_a e_bᵀ (rotates e_a towards e_b).

    angles: (m,) -> (m, d, d).
    """
    if not (0 <= a < d and 0 <= b < d and a != b):  # a == b wrote cos θ and −sin θ into one cell: not orthogonal
        raise ValueError(f"plane {(a, b)} is not a pair of distinct axes in d={d}")
    m = angles.shape[0]
    rot = torch.eye(d, dtype=angles.dtype).repeat(m, 1, 1)  # (m, d, d)
    cos, sin = torch.cos(angles), torch.sin(angles)
    rot[:, a, a] = cos
    rot[:, b, b] = cos
    rot[:, b, a] = sin
    rot[:, a, b] = -sin
    return rot


def rope_planes(d: int, n_frequencies: int) -> list[tuple[int, int]]:
    """The disjoint planes (0,1), (2,3), ... used by block RoPE for n_frequencies frequencies."""
    if n_frequencies > d // 2:
        raise ValueError(f"RoPE in d={d} has at most {d // 2} planes, got {n_frequencies} frequencies")
    return [(2 * k, 2 * k + 1) for k in range(n_frequencies)]


def rope_gauges(positions: Tensor, d: int, frequencies: Sequence[float]) -> Tensor:
    """Block RoPE gauges G(s) = exp(s Ω). positions: (n,) -> (n, d, d).

    Frequency ω_k rotates the plane (2k, 2k+1); planes beyond len(frequencies) are not rotated.
    """
    return generalised_rope_gauges(positions, d, rope_planes(d, len(frequencies)), frequencies)


def generalised_rope_gauges(
    positions: Tensor, d: int, planes: Sequence[tuple[int, int]], frequencies: Sequence[float]
) -> Tensor:
    """``G(s) = Π_k exp(s ω_k E_{a_k b_k})`` in the listed order. positions: (n,) -> (n, d, d)."""
    if len(planes) != len(frequencies):
        raise ValueError(f"need one frequency per plane, got {len(planes)} planes, {len(frequencies)} frequencies")
    gauge = torch.eye(d, dtype=positions.dtype).repeat(positions.shape[0], 1, 1)  # (n, d, d)
    for (a, b), omega in zip(planes, frequencies, strict=True):
        if not (0 <= a < d and 0 <= b < d and a != b):
            raise ValueError(f"plane {(a, b)} is not a pair of distinct axes in d={d}")
        gauge = gauge @ plane_rotation(omega * positions, d, a, b)
    return gauge


def rope_relative_rotation(offsets: Tensor, d: int, frequencies: Sequence[float]) -> Tensor:
    """R(t − s) = exp((t − s) Ω) computed from the offsets alone. offsets: (...) -> (..., d, d).

    For block RoPE this equals G(s)ᵀ G(t); it is the per-pair reference the co-moving trick is tested
    against.
    """
    flat = offsets.reshape(-1)  # (m,)
    rot = rope_gauges(flat, d, frequencies)  # (m, d, d)
    return rot.reshape(*offsets.shape, d, d)  # (m, d, d) -> (..., d, d)


def random_orthogonal(count: int, d: int, seed: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """count Haar-distributed orthogonal d×d matrices from a seed: (count, d, d)."""
    gen = torch.Generator().manual_seed(seed)
    gauss = torch.randn(count, d, d, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(gauss)
    signs = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))  # (count, d), fixes the QR sign ambiguity
    return (q * signs[:, None, :]).to(dtype)  # (count, d, d): column j times sign r_jj


def orthogonality_error(mats: Tensor) -> float:
    """max |MᵀM − I| over a stack of square matrices (..., d, d)."""
    d = mats.shape[-1]
    eye = torch.eye(d, dtype=mats.dtype)
    return float((mats.transpose(-1, -2) @ mats - eye).abs().max()) if mats.numel() else 0.0  # MᵀM (..., d, d)
