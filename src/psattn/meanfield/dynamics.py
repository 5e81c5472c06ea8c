"""Velocity fields of the labelled particle system and its energy (arXiv 2605.30229).

With W_ij = c_ij exp(β⟨x_i, A_ij x_j⟩) and P_x = I − x xᵀ:

- USA (unnormalised): ``ẋ_i = P_{x_i}( (1/n)   Σ_j W_ij A_ij x_j )``, the gradient ascent of ``E_h``.
- SA  (normalised):   ``ẋ_i = P_{x_i}( (1/Z_i) Σ_j W_ij A_ij x_j )``,  ``Z_i = Σ_k |c_ik| exp(β⟨x_i, A_ik x_k⟩)``.
  With c ≡ 1 and A = I this is the usual SA. Using |c| keeps Z_i > 0 for sign-changing label factors;
  since SA is USA with a positive per-particle time change n/Z_i, E_h is non-decreasing under both.
- Energy of the empirical measure: E_h = (1 / (2β n²)) Σ_ij W_ij.

Two implementations of the same field, chosen once at construction:

- ``ComovingField`` acts on co-moving coordinates y_i = G(ξ_i) x_i, in which any gauge-form kernel is
  plain USA/SA weighted by c: one (n × n) Gram matrix per evaluation.
- ``DirectField`` applies every pair matrix A_ij: O(n² d²), the slow reference path.

A field maps a batch of states (B, n, d) to (velocity (B, n, d), energy (B,)). It first retracts its
argument onto the sphere, which makes it the 0-homogeneous extension that RK4 stages rely on.
"""

from __future__ import annotations

import math
import reprlib
from typing import Protocol

import torch
from torch import Tensor

DYNAMICS = ("usa", "sa")


class VelocityField(Protocol):
    """A velocity field: particles (B, n, d) -> (velocity, energy)."""
    def __call__(self, x: Tensor, /) -> tuple[Tensor, Tensor]: ...


def normalise(x: Tensor) -> Tensor:
    """Retract onto the unit sphere along the last axis, scaling each point by its largest entry first: ‖x‖² of a
    large fixed step at large β overflowed the dtype, and x / inf was 0, off the sphere."""
    x = x / x.abs().amax(dim=-1, keepdim=True)  # largest entry ±1 in every point
    return x / x.norm(dim=-1, keepdim=True)


def tangent_part(x: Tensor, m: Tensor) -> Tensor:
    """P_x m = m − ⟨x, m⟩ x for unit x, per particle."""
    return m - (m * x).sum(-1, keepdim=True) * x


def _check_dynamics(dynamics: str, label_factor: Tensor) -> None:
    """A ValueError for an unknown dynamics, and for SA where a token interacts with none (a zero row of c makes
    Z_i = 0, and the run NaN)."""
    if dynamics not in DYNAMICS:
        raise ValueError(f"unknown dynamics {dynamics!r}; choose one of {DYNAMICS}")
    lonely = torch.nonzero(~(label_factor != 0).any(-1)).flatten().tolist()  # rows of c (n, n) that are all 0
    if dynamics == "sa" and lonely:
        raise ValueError(f"SA normalises each token's attention by Z_i = Σ_k |c_ik| e^(β⟨·,·⟩), which is 0 for tokens "
                         f"{reprlib.repr(lonely)} (their row of the label factor is zero); use dynamics 'usa'")


class ComovingField:
    """Plain USA/SA with label factor c, in co-moving coordinates y_i = G(ξ_i) x_i."""

    def __init__(self, label_factor: Tensor, beta: float, dynamics: str) -> None:
        _check_dynamics(dynamics, label_factor)
        plain = bool((label_factor == 1).all())  # c ≡ 1: skip the (n, n) products with c and |c|
        self.c = None if plain else label_factor  # (n, n)
        self.abs_c = None if plain else label_factor.abs()
        self.beta = beta
        self.normalised = dynamics == "sa"

    def __call__(self, y: Tensor) -> tuple[Tensor, Tensor]:
        y = normalise(y)  # (B, n, d)
        n = y.shape[-2]
        gram = y @ y.transpose(-1, -2)  # (B, n, n) ⟨y_i, y_j⟩
        boltz = gram.sub_(1.0).mul_(self.beta).exp_()  # in place: e^{β(⟨y_i,y_j⟩−1)} ≤ 1, no overflow
        w = boltz if self.c is None else self.c * boltz  # (B, n, n) W_ij e^{−β}
        energy = w.sum((-1, -2)) / (2 * self.beta * n * n) * math.exp(self.beta)  # divided first: e^β Σ W overflowed
        if self.normalised:
            z = boltz if self.abs_c is None else self.abs_c * boltz
            drift = (w @ y) / z.sum(-1, keepdim=True)  # Z_i e^{−β}: (B, n, 1)
        else:
            drift = (w @ y) * (math.exp(self.beta) / n)
        return tangent_part(y, drift), energy


class DirectField:
    """The same field with every pair matrix A_ij applied explicitly (reference path)."""

    def __init__(self, label_factor: Tensor, pair_matrices: Tensor, beta: float, dynamics: str) -> None:
        _check_dynamics(dynamics, label_factor)
        self.c = label_factor  # (n, n)
        self.abs_c = label_factor.abs()
        self.pairs = pair_matrices  # (n, n, d, d)
        self.beta = beta
        self.normalised = dynamics == "sa"

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = normalise(x)  # (B, n, d)
        n = x.shape[-2]
        ax = torch.einsum("ijab,Bjb->Bija", self.pairs, x)  # (B, n, n, d): A_ij x_j
        inner = torch.einsum("Bia,Bija->Bij", x, ax)  # (B, n, n): ⟨x_i, A_ij x_j⟩
        boltz = torch.exp(self.beta * (inner - 1.0))
        w = self.c * boltz
        energy = w.sum((-1, -2)) / (2 * self.beta * n * n) * math.exp(self.beta)  # divided first, as above
        if self.normalised:
            z = (self.abs_c * boltz).sum(-1, keepdim=True)  # (B, n, 1)
            drift = torch.einsum("Bij,Bija->Bia", w / z, ax)  # (B, n, d): Σ_j w_ij A_ij x_j / Z_i
        else:
            drift = math.exp(self.beta) / n * torch.einsum("Bij,Bija->Bia", w, ax)  # (B, n, d)
        return tangent_part(x, drift), energy


def energy(x: Tensor, label_factor: Tensor, pair_matrices: Tensor, beta: float) -> Tensor:
    """E_h of the empirical measure, (1/(2βn²)) Σ_ij c_ij exp(β⟨x_i, A_ij x_j⟩). x: (B, n, d) -> (B,)."""
    n = x.shape[-2]
    inner = torch.einsum("Bia,ijab,Bjb->Bij", x, pair_matrices, x)  # (B, n, n)
    return (label_factor * torch.exp(beta * inner)).sum((-1, -2)) / (2 * beta * n * n)
