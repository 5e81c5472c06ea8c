"""Labelled interaction kernels h((x,ξ),(y,ζ)) = c(ξ,ζ) · exp(β⟨x, A(ξ,ζ) y⟩) / β (arXiv 2605.30229).

A kernel is evaluated once on the n frozen labels of a run: the label factor c_ij = c(ξ_i, ξ_j) and,
in the gauge form A_ij = G(ξ_i)ᵀ G(ξ_j), the per-token gauges G_i = G(ξ_i). Kernels that are not of
gauge form (an explicit table of pair matrices) keep A_ij itself and can only run in the direct frame.

| name               | labels            | c(s, t)              | A(s, t)                      |
|--------------------|-------------------|----------------------|------------------------------|
| usa                | none (all zero)   | 1                    | I                            |
| rope               | positions         | 1                    | exp((t − s) Ω), block RoPE   |
| generalised_rope   | positions         | 1                    | G(s)ᵀG(t), product of planes |
| cosine_toeplitz    | positions         | cos(ω (s − t))       | I                            |
| distance_bias      | positions         | exp(−λ |s − t|)      | I                            |
| prefix             | prompt ids        | 1                    | G(p)ᵀG(q), random orthogonal |
| gauge              | integer ids       | given (default 1)    | G(p)ᵀG(q), given             |
| pair               | none              | given (default 1)    | given table A_ij             |
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from psattn.meanfield.gauges import (
    generalised_rope_gauges,
    orthogonality_error,
    random_orthogonal,
    rope_gauges,
)

ORTHOGONALITY_TOL = 1e-8
SYMMETRY_TOL = 1e-10


@dataclass(frozen=True)
class LabelledKernel:
    """A kernel evaluated on n frozen labels, in content dimension d."""

    name: str
    d: int
    labels: Tensor  # (n,) frozen auxiliary labels ξ_i
    label_factor: Tensor  # (n, n) c(ξ_i, ξ_j), symmetric
    gauges: Tensor | None = None  # (n, d, d) orthogonal G(ξ_i); None means G = I
    explicit_pairs: Tensor | None = None  # (n, n, d, d) A_ij for kernels not of gauge form

    def __post_init__(self) -> None:
        if not isinstance(self.labels, Tensor) or self.labels.is_complex() or self.labels.dtype == torch.bool:
            got = self.labels.dtype if isinstance(self.labels, Tensor) else type(self.labels).__name__
            raise TypeError(f"labels must be a real torch.Tensor (n,), got {got}")
        for what, table in (("label factor", self.label_factor), ("gauges", self.gauges), ("pair matrices", self.explicit_pairs)):
            if table is not None and not (isinstance(table, Tensor) and table.is_floating_point()):  # finfo, isfinite failed
                got = table.dtype if isinstance(table, Tensor) else type(table).__name__
                raise TypeError(f"{what} must be a floating torch.Tensor, got {got}")
        if self.labels.ndim != 1 or self.labels.shape[0] < 1:
            raise ValueError(f"labels must be one per token, (n,) with n ≥ 1, got shape {tuple(self.labels.shape)}")
        if isinstance(self.d, bool) or not isinstance(self.d, int) or self.d < 1:
            raise ValueError(f"dimension d must be an integer ≥ 1, got {self.d!r}")
        n = self.labels.shape[0]
        for what, table in (("labels", self.labels), ("label factor", self.label_factor), ("gauges", self.gauges),
                            ("pair matrices", self.explicit_pairs)):
            if table is not None and not bool(torch.isfinite(table).all()):  # NaN passes every tolerance check below
                raise ValueError(f"{what} must be finite, got NaN or infinite entries")
        if self.label_factor.shape != (n, n):
            raise ValueError(f"label factor must be ({n}, {n}), got {tuple(self.label_factor.shape)}")
        if (self.label_factor - self.label_factor.T).abs().max() > max(SYMMETRY_TOL, torch.finfo(self.label_factor.dtype).eps):
            raise ValueError("label factor c(ξ, ζ) must be symmetric")
        if self.gauges is not None and self.explicit_pairs is not None:
            raise ValueError("give either gauges or explicit pair matrices, not both")
        if self.gauges is not None:
            if self.gauges.shape != (n, self.d, self.d):
                raise ValueError(f"gauges must be ({n}, {self.d}, {self.d}), got {tuple(self.gauges.shape)}")
            err = orthogonality_error(self.gauges.double())
            if err > self._orthogonality_tol(self.gauges):
                raise ValueError(f"gauges G(ξ) must be orthogonal (max |GᵀG − I| = {err:.2e})")
        if self.explicit_pairs is not None:
            pairs = self.explicit_pairs
            if pairs.shape != (n, n, self.d, self.d):
                raise ValueError(f"pair matrices must be ({n}, {n}, {self.d}, {self.d}), got {tuple(pairs.shape)}")
            err = orthogonality_error(pairs.double())
            if err > self._orthogonality_tol(pairs):
                raise ValueError(f"pair matrices A(ξ, ζ) must be orthogonal (max |AᵀA − I| = {err:.2e})")
            asym = float((pairs - pairs.transpose(0, 1).transpose(-1, -2)).abs().max())  # A(ζ, ξ)ᵀ (n, n, d, d)
            if asym > self._orthogonality_tol(pairs):
                raise ValueError(f"pair matrices must satisfy A(ζ, ξ) = A(ξ, ζ)ᵀ (max error {asym:.2e})")

    def _orthogonality_tol(self, mats: Tensor) -> float:
        """1e-8 in float64; a few hundred rounding errors in lower precision."""
        return max(ORTHOGONALITY_TOL, 100 * self.d * torch.finfo(mats.dtype).eps)

    @property
    def n(self) -> int:
        return self.labels.shape[0]

    @property
    def has_gauge_form(self) -> bool:
        """True when the co-moving trick applies (A_ij = G_iᵀ G_j, including A = I)."""
        return self.explicit_pairs is None

    def pair_matrices(self) -> Tensor:
        """A_ij as a table (n, n, d, d); O(n² d²) memory, for the direct reference path."""
        if self.explicit_pairs is not None:
            return self.explicit_pairs
        if self.gauges is None:
            eye = torch.eye(self.d, dtype=self.label_factor.dtype)
            return eye.expand(self.n, self.n, self.d, self.d).clone()  # (n, n, d, d)
        g = self.gauges
        return torch.einsum("iba,jbc->ijac", g, g)  # (n, n, d, d): G_iᵀ G_j

    def _check_batch(self, x: Tensor, name: str) -> None:
        """A ValueError unless ``x`` is a batch (B, n, d) of this kernel's n and d, a TypeError unless it is a
        tensor in the dtype of the gauges (einsum's errors named neither the argument nor the shape it takes)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (B, n={self.n}, d={self.d}), got {type(x).__name__}")
        if x.ndim != 3 or x.shape[1:] != (self.n, self.d):
            raise ValueError(f"{name} must be (B, n={self.n}, d={self.d}) for this kernel, got shape {tuple(x.shape)}")
        if self.gauges is not None and x.dtype != self.gauges.dtype:
            raise TypeError(f"{name} is {x.dtype}, the kernel's gauges {self.gauges.dtype}: use kernel.to({x.dtype})")

    def to_comoving(self, x: Tensor) -> Tensor:
        """y_i = G_i x_i. x: (B, n, d) -> (B, n, d); another shape is a ValueError, another dtype than the
        gauges' a TypeError."""
        self._check_batch(x, "x")
        if self.gauges is None:
            return x
        return torch.einsum("iab,Bib->Bia", self.gauges, x)  # (B, n, d): G_i x_i

    def from_comoving(self, y: Tensor) -> Tensor:
        """x_i = G_iᵀ y_i. y: (B, n, d) -> (B, n, d); another shape is a ValueError, another dtype than the
        gauges' a TypeError."""
        self._check_batch(y, "y")
        if self.gauges is None:
            return y
        return torch.einsum("iba,Bib->Bia", self.gauges, y)  # (B, n, d): G_iᵀ y_i

    def to(self, dtype: torch.dtype) -> LabelledKernel:
        """The kernel with its tensors in ``dtype``. Widened (float32 to float64) it is not checked again: its
        checks held in its own dtype, and its gauges' float32 rounding (GᵀG − I of 5e-8) fails float64's 1e-8."""
        def cast(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(dtype)

        if dtype.is_floating_point and torch.finfo(dtype).eps < torch.finfo(self.label_factor.dtype).eps:
            widened = copy.copy(self)  # frozen: its tables set in place of __init__, which would check them
            for name in ("label_factor", "gauges", "explicit_pairs"):
                object.__setattr__(widened, name, cast(getattr(self, name)))
            return widened
        return LabelledKernel(
            self.name,
            self.d,
            self.labels,
            self.label_factor.to(dtype),
            cast(self.gauges),
            cast(self.explicit_pairs),
        )


def _as_labels(labels: Sequence[float] | Tensor) -> Tensor:
    return torch.as_tensor(labels, dtype=torch.float64).reshape(-1).clone()  # (n,)


def plain_kernel(n: int, d: int) -> LabelledKernel:
    """Plain USA/SA: one label, c = 1, A = I."""
    return LabelledKernel("usa", d, torch.zeros(n, dtype=torch.float64), torch.ones(n, n, dtype=torch.float64))


def rope_kernel(positions: Sequence[float] | Tensor, d: int, frequencies: Sequence[float]) -> LabelledKernel:
    """RoPE: G(s) = exp(s Ω) block rotations, c = 1."""
    pos = _as_labels(positions)
    n = pos.shape[0]
    return LabelledKernel("rope", d, pos, torch.ones(n, n, dtype=torch.float64), rope_gauges(pos, d, frequencies))


def generalised_rope_kernel(
    positions: Sequence[float] | Tensor,
    d: int,
    planes: Sequence[tuple[int, int]],
    frequencies: Sequence[float],
) -> LabelledKernel:
    """Generalised RoPE: ``G(s) = Π_k exp(s ω_k E_{a_k b_k})`` over arbitrary planes, c = 1."""
    pos = _as_labels(positions)
    n = pos.shape[0]
    gauges = generalised_rope_gauges(pos, d, planes, frequencies)
    return LabelledKernel("generalised_rope", d, pos, torch.ones(n, n, dtype=torch.float64), gauges)


def cosine_toeplitz_kernel(positions: Sequence[float] | Tensor, d: int, omega: float) -> LabelledKernel:
    """Sign-changing Toeplitz label factor c(s, t) = cos(ω (s − t)), A = I."""
    pos = _as_labels(positions)
    c = torch.cos(omega * (pos[:, None] - pos[None, :]))  # (n, n)
    return LabelledKernel("cosine_toeplitz", d, pos, c)


def distance_bias_kernel(positions: Sequence[float] | Tensor, d: int, decay: float) -> LabelledKernel:
    """Non-negative distance bias c(s, t) = exp(−λ |s − t|), A = I."""
    pos = _as_labels(positions)
    c = torch.exp(-decay * (pos[:, None] - pos[None, :]).abs())  # (n, n)
    return LabelledKernel("distance_bias", d, pos, c)


def _integer_ids(labels: Sequence[float] | Tensor, count: int, what: str) -> Tensor:
    ids = _as_labels(labels)
    bad = (ids != ids.round()) | (ids < 0) | (ids >= count)  # (n,)
    if bad.any():  # the first few offenders and their count: every label made one line of thousands of numbers
        wrong = ids[bad].tolist()
        raise ValueError(f"{what} must be integers in [0, {count}); {len(wrong)} of {ids.shape[0]} are not: "
                         f"{', '.join(f'{v:g}' for v in wrong[:5])}{', …' if len(wrong) > 5 else ''}")
    return ids


def prefix_kernel(prompt_ids: Sequence[float] | Tensor, d: int, n_prompts: int, seed: int) -> LabelledKernel:
    """Prefix tokens: prompt p carries a Haar-random orthogonal gauge G(p) drawn from seed; c = 1."""
    ids = _integer_ids(prompt_ids, n_prompts, "prompt ids")
    per_prompt = random_orthogonal(n_prompts, d, seed)  # (n_prompts, d, d)
    n = ids.shape[0]
    return LabelledKernel("prefix", d, ids, torch.ones(n, n, dtype=torch.float64), per_prompt[ids.long()])


def gauge_kernel(
    labels: Sequence[float] | Tensor,
    per_label_gauges: Tensor,
    label_factor: Tensor | None = None,
) -> LabelledKernel:
    """A user-given gauge: integer labels index per_label_gauges (m, d, d); c given per token pair."""
    gauges = torch.as_tensor(per_label_gauges, dtype=torch.float64)
    if gauges.ndim != 3 or gauges.shape[1] != gauges.shape[2]:
        raise ValueError(f"gauges must be a stack (m, d, d), got shape {tuple(gauges.shape)}")
    ids = _integer_ids(labels, gauges.shape[0], "gauge labels")
    n = ids.shape[0]
    c = torch.ones(n, n, dtype=torch.float64) if label_factor is None else torch.as_tensor(label_factor).double()
    return LabelledKernel("gauge", gauges.shape[1], ids, c, gauges[ids.long()])


def pair_kernel(pair_matrices: Tensor, label_factor: Tensor | None = None) -> LabelledKernel:
    """A user-given table A_ij (n, n, d, d), orthogonal with A_ji = A_ijᵀ; direct frame only."""
    pairs = torch.as_tensor(pair_matrices, dtype=torch.float64)
    if pairs.ndim != 4:
        raise ValueError(f"pair matrices must have shape (n, n, d, d), got {tuple(pairs.shape)}")
    n, d = pairs.shape[0], pairs.shape[-1]
    c = torch.ones(n, n, dtype=torch.float64) if label_factor is None else torch.as_tensor(label_factor).double()
    return LabelledKernel("pair", d, torch.arange(n, dtype=torch.float64), c, explicit_pairs=pairs)
