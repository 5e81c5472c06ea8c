"""Collapse diagnostics of a particle state (arXiv 2605.30229).

Every function takes a batch of states x: (B, n, d) on the sphere, n ≥ 2, and returns one value per batch
element, (B,); with a single particle there is no pair, and the pair diagnostics read NaN (``min_inner``: inf).
``diagnose`` checks its states; the single diagnostics do not. Content (marginal) diagnostics:

- ``mean_cosine``          mean of ⟨x_i, x_j⟩ over pairs i ≠ j (1 at a Dirac mass).
- ``fraction_aligned``     fraction of pairs i < j with ⟨x_i, x_j⟩ > threshold (default 0.999).
- ``cluster_count``        connected components of the graph {⟨x_i, x_j⟩ > threshold} (single linkage:
                           densely sampled curves chain into one component; read it with
                           ``fraction_aligned``).
- ``min_inner``            min over pairs of ⟨x_i, x_j⟩.
- ``marginal_spread``      1 − ‖(1/n) Σ_i x_i‖ ∈ [0, 1]; 0 iff the content marginal is a Dirac mass.

Conditional diagnostics, which need the kernel's labels and gauges:

- ``comoving_spread``      1 − ‖ȳ‖ of the co-moving coordinates y_i = G(ξ_i) x_i; 0 iff every slice
                           μ_ξ is the Dirac mass at x*(ξ) = G(ξ)ᵀ y* (conditional Dirac-isation).
- ``graph_law_distance``   mean_i ‖x_i − G(ξ_i)ᵀ y*‖ with y* = ȳ/‖ȳ‖, the distance from the predicted
                           graph law; NaN where ‖ȳ‖ ≤ √eps, which leaves y* no direction but rounding's.
- ``conditional_spread``   mean over label groups with ≥ 2 tokens, weighted by their sizes, of
                           1 − ‖mean of x in the group‖ (NaN when every label is distinct, e.g. positions).
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from psattn.meanfield.kernels import LabelledKernel

ALIGNED_THRESHOLD = 0.999


def _gram(x: Tensor) -> Tensor:
    return x @ x.transpose(-1, -2)  # (B, n, n)


def _off_diagonal(n: int, device: torch.device | None = None) -> Tensor:
    return ~torch.eye(n, dtype=torch.bool, device=device)


def _check_threshold(threshold: float) -> None:
    """A ValueError unless threshold is a cosine in (−1, 1) (NaN compares false: no pair aligned, n clusters)."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not -1.0 < threshold < 1.0:
        raise ValueError(f"threshold must be a cosine in (−1, 1), got {threshold!r}")


def mean_cosine(x: Tensor) -> Tensor:
    """Mean cosine between distinct particles (B,)."""
    n = x.shape[-2]
    return (_gram(x) * _off_diagonal(n)).sum((-1, -2)) / (n * (n - 1))


def fraction_aligned(x: Tensor, threshold: float = ALIGNED_THRESHOLD) -> Tensor:
    """Fraction of particle pairs whose cosine exceeds ``threshold`` (B,)."""
    _check_threshold(threshold)
    n = x.shape[-2]
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return ((_gram(x) > threshold) & upper).sum((-1, -2)).to(x.dtype) / (n * (n - 1) / 2)


def min_inner(x: Tensor) -> Tensor:
    """Smallest cosine between distinct particles (B,)."""
    n = x.shape[-2]
    gram = _gram(x).masked_fill(~_off_diagonal(n), float("inf"))
    return gram.amin((-1, -2))


def cluster_count(x: Tensor, threshold: float = ALIGNED_THRESHOLD) -> Tensor:
    """Connected components of {⟨x_i, x_j⟩ > threshold}, by min-label propagation with pointer jumping.

    Each particle's label is the id of a particle of its component and never increases; adopting the
    label of one's label (comp[comp[i]]) doubles the reach per round, so chains take O(log n) rounds.
    """
    _check_threshold(threshold)
    batch, n, _ = x.shape
    adjacent = (_gram(x) > threshold) | ~_off_diagonal(n)  # (B, n, n), self-loops included
    comp = torch.arange(n).expand(batch, n).clone()  # (B, n) component id per particle
    for _ in range(n):
        spread = torch.where(adjacent, comp[:, None, :], n).amin(-1)  # (B, n) min id among neighbours
        spread = spread.gather(-1, spread)  # pointer jumping
        if torch.equal(spread, comp):
            break
        comp = spread
    return (comp == torch.arange(n)).sum(-1).to(x.dtype)


def marginal_spread(x: Tensor) -> Tensor:
    """1 minus the norm of the particles' mean (B,): 0 when they all coincide."""
    return (1.0 - x.mean(-2).norm(dim=-1)).clamp_min(0.0)


def comoving_spread(x: Tensor, kernel: LabelledKernel) -> Tensor:
    """``marginal_spread`` in co-moving coordinates (the kernel's gauges undone)."""
    return marginal_spread(kernel.to_comoving(x))


def graph_law_distance(x: Tensor, kernel: LabelledKernel) -> Tensor:
    """Mean distance of the co-moving particles from their normalised mean y* = ȳ/‖ȳ‖ (B,).

    NaN where ‖ȳ‖ ≤ √eps of the dtype (co-moving particles balanced about the centre, as on a uniform great circle):
    there y* is the direction of ȳ's rounding error, and the distance was that error's, not the state's (one great
    circle, turned, read anywhere from 1.23 to 1.31); such a state is far from every graph law (``comoving_spread``
    ≈ 1), and no y* is predicted."""
    y = kernel.to_comoving(x)  # (B, n, d)
    mean = y.mean(-2, keepdim=True)  # (B, 1, d): ȳ
    length = mean.norm(dim=-1, keepdim=True)  # (B, 1, 1)
    y_star = mean / length.clamp_min(torch.finfo(x.dtype).tiny)
    distance = (y - y_star).norm(dim=-1).mean(-1)  # (B,); G orthogonal: ‖x_i − G_iᵀy*‖ = ‖y_i − y*‖
    return distance.masked_fill(length[:, 0, 0] <= torch.finfo(x.dtype).eps ** 0.5, float("nan"))


def conditional_spread(x: Tensor, kernel: LabelledKernel) -> Tensor:
    """Spread within groups of equal label, weighted by group size (B,); NaN when no group has two."""
    _, group, counts = torch.unique(kernel.labels, return_inverse=True, return_counts=True)  # (n,), (G,)
    weights = (counts * (counts >= 2)).to(x.dtype)  # groups with a single token carry no weight
    if not weights.sum() > 0:
        return torch.full(x.shape[:1], float("nan"), dtype=x.dtype)
    sums = x.new_zeros(x.shape[0], counts.shape[0], x.shape[-1]).index_add_(1, group, x)  # (B, G, d)
    spreads = (1.0 - (sums / counts[None, :, None].to(x.dtype)).norm(dim=-1)).clamp_min(0.0)  # (B, G)
    return (spreads * weights).sum(-1) / weights.sum()


DIAGNOSTIC_NAMES = (
    "mean_cosine",
    "fraction_aligned",
    "cluster_count",
    "min_inner",
    "marginal_spread",
    "comoving_spread",
    "graph_law_distance",
    "conditional_spread",
)


def _check_states(x: Tensor, kernel: LabelledKernel) -> LabelledKernel:
    """The kernel in x's dtype; a ValueError unless x is a batch (B, n, d) of the kernel's n and d on the sphere
    (a traceback from index_add_ or einsum otherwise, and off the sphere every cosine was wrong)."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.ndim != 3 or x.shape[1:] != (kernel.n, kernel.d):
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"states must be a floating tensor (B, n={kernel.n}, d={kernel.d}) for this kernel, got {shape}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("states must be finite, got NaN or infinite entries")
    off = float((x.norm(dim=-1) - 1.0).abs().max())
    if not off <= 1e3 * torch.finfo(x.dtype).eps:
        raise ValueError(f"states must lie on the unit sphere (max |‖x_i‖ − 1| = {off:.2e}); normalise them first")
    return kernel if kernel.label_factor.dtype == x.dtype else kernel.to(x.dtype)


def diagnose(x: Tensor, kernel: LabelledKernel, threshold: float = ALIGNED_THRESHOLD) -> dict[str, Tensor]:
    """All diagnostics of DIAGNOSTIC_NAMES for a batch of states x: (B, n, d) on the sphere; each value (B,)."""
    kernel = _check_states(x, kernel)
    return {
        "mean_cosine": mean_cosine(x),
        "fraction_aligned": fraction_aligned(x, threshold),
        "cluster_count": cluster_count(x, threshold),
        "min_inner": min_inner(x),
        "marginal_spread": marginal_spread(x),
        "comoving_spread": comoving_spread(x, kernel),
        "graph_law_distance": graph_law_distance(x, kernel),
        "conditional_spread": conditional_spread(x, kernel),
    }
