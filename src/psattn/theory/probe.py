"""Read an operator's action off its outputs: stream taps and its phase-space matrix.

Taps. For a linear stream map F and a generic position t, probing F with unit impulses gives
x̂_t = sum_s G_s x_s with G_s = ∂x̂_t / ∂x_s (D x D). The taps are indexed by lag t - s; a causal
one-step map has taps at lags 0 and 1 only: ``x̂_t = A x_t + B x_{t-1}``. For the shear A = (1+gamma) I,
B = -gamma I.

Phase-space form. Writing ``p = x_t - x_{t-1}`` and calling ``p' = (x̂_t - x_t) / gamma`` the momentum the
map actually adds (x̂ = x + gamma p' by definition), a one-step map acts on phase space as

    M_F : (x, p) -> (x̂, p') = [[A + B, -B], [(A + B - I) / gamma, -B / gamma]] (x, p).

For the PSA shear M_F = M_gamma = [[I, gamma I], [0, I]]. A map that adds anything other than the
momentum (the wrong sign, a rotated predecessor) shows up in the second row.

Probes run in float64 at a position ``t`` far enough from 0 that the boundary rule does not enter.
With a dyadic gamma (1/4, 1/2, 3/4, 2, ...) the reference taps are exact binary fractions, so the
certificates can compare them exactly (as SymPy rationals).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import torch

from psattn.theory.operators import OperatorUnderTest

#: Couplings at which taps are exact in binary floating point.
DYADIC_GAMMAS = (0.25, 0.5, 0.75, 2.0)


@dataclass
class StreamTaps:
    """The measured taps of a stream operator: matrix per lag, and how far from linear it is."""
    gamma: float
    taps: dict[int, np.ndarray]  # lag -> (D, D); only lags with a non-zero entry
    linearity_error: float  # max |F(x + 2y) - F(x) - 2F(y)| on random streams

    @property
    def dim(self) -> int:
        return next(iter(self.taps.values())).shape[0] if self.taps else 0

    @property
    def lags(self) -> list[int]:
        return sorted(self.taps)

    @property
    def is_one_step_causal(self) -> bool:
        return set(self.taps) <= {0, 1} and self.linearity_error < 1e-9

    @property
    def order(self) -> int:
        """The filter order: the largest lag with a non-zero tap (negative lags: acausal)."""
        return max(self.taps) if self.taps else 0

    def tap(self, lag: int) -> np.ndarray:
        """The (D, D) matrix at ``lag`` (zeros where the operator has none)."""
        D = self.dim
        return self.taps.get(lag, np.zeros((D, D)))

    def phase_space_matrix(self) -> np.ndarray:
        """M_F (2D x 2D) as defined in the module doc; needs a one-step causal map and gamma != 0."""
        if not self.is_one_step_causal:
            raise ValueError(f"not a one-step causal linear map (taps at lags {self.lags}, "
                             f"linearity error {self.linearity_error:.1e})")
        if self.gamma == 0:
            raise ValueError("the phase-space form needs gamma != 0")
        A, B = self.tap(0), self.tap(1)
        I = np.eye(A.shape[0])
        return np.block([[A + B, -B], [(A + B - I) / self.gamma, -B / self.gamma]])


def _check_position(t: int) -> None:
    """A ValueError unless ``t`` is an integer ≥ 1: at t = 0 the boundary rule, not a predecessor, sets x_{t-1}
    (the shear read as having no lag-1 tap), and a negative t indexed from the end of the stream."""
    if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 1:
        raise ValueError(f"t must be an integer >= 1 (a position with a predecessor), got {t!r}")


def probe_taps(op: OperatorUnderTest, gamma: float, dim: int = 8, t: int = 5, seed: int = 0) -> StreamTaps:
    """The taps of ``op.sheared`` at position ``t`` for streams of width ``dim`` (positions 0..t+2,
    so one and two steps ahead are probed too). A ``t`` below 1, or a ``dim`` below 1, is a ValueError."""
    _check_position(t)
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1 (the stream's width), got {dim!r}")
    T = t + 3
    impulses = torch.eye(T * dim, dtype=torch.float64).view(T * dim, 1, T, dim)  # (T*D, 1, T, D)
    out = op.sheared(impulses, gamma)[:, 0, t, :].reshape(T, dim, dim)  # [s, input c, output]
    taps = {}
    for s in range(T):
        G = out[s].T.numpy().copy()  # (output, input)
        if np.abs(G).max() > 1e-12:
            taps[t - s] = G
    g = torch.Generator().manual_seed(seed)
    x, y = (torch.randn(2, 3, T, dim, generator=g, dtype=torch.float64) for _ in range(2))
    lin = (op.sheared(x + 2 * y, gamma) - op.sheared(x, gamma) - 2 * op.sheared(y, gamma)).abs().max().item()
    return StreamTaps(float(gamma), taps, lin)


def phase_map(op: OperatorUnderTest, x: torch.Tensor, p: torch.Tensor, gamma: float, t: int = 5):
    """Apply the operator to phase-space points: x, p (N, D) -> (x̂, p') (N, D), with the stream
    ``x_{t-1} = x - p``, ``x_t = x`` at position t (earlier positions zero). x and p of other shapes, a ``t``
    below 1 and gamma = 0 (p' divides by it) are a ValueError."""
    _check_position(t)  # at t = 0, x_t overwrote x_{t-1}: p was dropped without a word
    if x.dim() != 2 or p.shape != x.shape:
        raise ValueError(f"x and p must be phase-space points (N, D) of one shape, got {tuple(x.shape)} and {tuple(p.shape)}")
    if gamma == 0:  # p' = (x̂ − x) / gamma: NaN
        raise ValueError("the phase-space form needs gamma != 0")
    N, D = x.shape
    stream = torch.zeros(N, 1, t + 1, D, dtype=x.dtype)
    stream[:, 0, t - 1], stream[:, 0, t] = x - p, x
    x_hat = op.sheared(stream, gamma)[:, 0, t]
    return x_hat, (x_hat - x) / gamma
