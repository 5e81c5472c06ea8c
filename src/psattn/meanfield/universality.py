"""Target laws and the label/gauge constructions that realise them (arXiv 2605.30229, Theorems 2 and 4).

Both theorems rest on the co-moving picture of arXiv 2605.30229: for a gauge kernel A(ξ, ζ) = G(ξ)ᵀG(ζ) with
c ≡ 1, the co-moving coordinates y_i = G(ξ_i) x_i follow plain USA, whose maximisers are the Dirac
masses ``δ_{y*}``; the content state of that maximiser is the graph law x*(ξ) = G(ξ)ᵀ y*, and the
maximised marginal output law is the push-forward (ξ ↦ G(ξ)ᵀ y*)_# ρ of the label law ρ. Choosing
ρ (RoPE) or G (prefix tokens) chooses that law.

**RoPE, orbit-wise universality (Theorem 2).** One frequency ω on the plane (0, 1):
G(s) = exp(sωE_01), so x*(s) = exp(−sωE_01) y* is y* turned by the angle −ωs in that plane, and the
orbit through y* is the circle {exp(θE_01) y*} (a latitude circle of S² when d = 3). To realise a
target law ν of the angle θ along the orbit (measured from y*), take positions s = −θ/ω with θ ~ ν,
i.e. ρ = (θ ↦ −θ/ω)_# ν. With n tokens we use the n quantiles θ_i = F_ν⁻¹((i + ½)/n) (the n-point
law nearest to ν) or n i.i.d. draws. The kernel commutes with the rotations of that plane, so every
orbit point is as good a base point as y*; angles are therefore measured from the y* the flow chose.

**Prefix tokens, gauge-level universality (Theorem 4).** Prompt p has a target point t_p = T(p)
(here: the p-th of P i.i.d. draws from ν, a measurable map from the prompt set to ``S^{d−1}``), and the
gauge G(p) = S_p R_p with R_p the rotation in the plane of (t_p, e) taking t_p to a base point e,
and S_p an arbitrary (seeded random) orthogonal map fixing e. Then the maximiser δ_e in co-moving
coordinates has content law G(p)ᵀ e = t_p, i.e. exactly ``(1/P) Σ_p δ_{t_p}`` (and ν itself in the
limit of a non-atomic prompt law). Every δ_y is an equally good maximiser (the co-moving energy is
rotation invariant, and G ↦ QᵀG leaves the kernel unchanged), so the flow converges to some ``δ_{y*}``;
the realised law is read off after the co-moving alignment y ↦ Q y with Q y* = e, i.e.
x̃_i = G(p_i)ᵀ Q G(p_i) x_i, which maps the flow's maximiser onto the theorem's one.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TWO_PI = 2.0 * np.pi


def _all_finite(values: Sequence[float]) -> bool:
    return bool(np.isfinite(np.asarray(values, dtype=np.float64)).all())


def _count(n: int) -> int:
    """``n`` if it is an integer ≥ 1 (not a bool), else a ValueError (0 or less gave no points, 2.5 three)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be an integer ≥ 1 (points), got {n!r}")
    return int(n)


def _i0e(kappa: float) -> float:
    """I_0(κ) e^{−κ}, the scaled Bessel function: ``np.i0`` overflows beyond κ ≈ 709, so there the asymptotic series
    (1 + 1/(8κ) + 9/(128κ²) + 225/(3072κ³)) / √(2πκ), whose next term is below 10⁻¹² of it from κ = 700 on."""
    if kappa < 700.0:
        return float(np.i0(kappa) * np.exp(-kappa))
    return (1.0 + 1.0 / (8 * kappa) + 9.0 / (128 * kappa**2) + 225.0 / (3072 * kappa**3)) / math.sqrt(TWO_PI * kappa)


@dataclass(frozen=True)
class VonMisesMixture:
    """A law on the circle: ``Σ_k w_k vM(μ_k, κ_k)``, density ``Σ_k w_k e^{κ_k cos(θ − μ_k)} / (2π I_0(κ_k))``."""

    weights: tuple[float, ...] = (0.65, 0.35)
    means: tuple[float, ...] = (0.0, 2.4)
    kappas: tuple[float, ...] = (5.0, 1.5)

    def __post_init__(self) -> None:
        if not len(self.weights) == len(self.means) == len(self.kappas) or not self.weights:
            raise ValueError("need one weight, mean and concentration per component")
        if any(w < 0 for w in self.weights) or not sum(self.weights) > 0 or any(k < 0 for k in self.kappas):
            raise ValueError("weights and concentrations must be non-negative, with a positive total weight")
        if not _all_finite(self.weights + self.means + self.kappas):  # a NaN mean or an infinite κ: NaN density
            raise ValueError("weights, means and concentrations must be finite")

    def density(self, theta: np.ndarray) -> np.ndarray:
        """The mixture's density at angles ``theta``."""
        theta = np.asarray(theta, dtype=np.float64)
        w = np.asarray(self.weights) / sum(self.weights)
        out = np.zeros_like(theta)
        for wk, mu, kappa in zip(w, self.means, self.kappas, strict=True):
            out += wk * np.exp(kappa * (np.cos(theta - mu) - 1.0)) / (TWO_PI * _i0e(kappa))
        return out

    def discretise(self, cells: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """(cell midpoints, masses) of a fine grid on [0, 2π): the law as a discrete one for ``circle_w1``."""
        mid = (np.arange(cells) + 0.5) * TWO_PI / cells
        mass = self.density(mid)
        return mid, mass / mass.sum()

    def quantiles(self, n: int, cells: int = 1 << 16) -> np.ndarray:
        """θ_i = F⁻¹((i + ½)/n), i = 0..n−1, with F the CDF from angle 0: (n,) increasing in [0, 2π)."""
        n = _count(n)
        mid, mass = self.discretise(cells)
        edges = np.linspace(0.0, TWO_PI, cells + 1)
        cdf = np.concatenate([[0.0], np.cumsum(mass)])
        return np.interp((np.arange(n) + 0.5) / n, cdf, edges)

    def sample(self, n: int, seed: int) -> np.ndarray:
        """n i.i.d. angles in [0, 2π)."""
        n = _count(n)
        rng = np.random.default_rng(seed)
        w = np.asarray(self.weights) / sum(self.weights)
        comp = rng.choice(len(w), size=n, p=w)
        draws = rng.vonmises(np.asarray(self.means)[comp], np.asarray(self.kappas)[comp])
        return np.mod(draws, TWO_PI)


@dataclass(frozen=True)
class ProjectedGaussianMixture:
    """A law on ``S^{d−1}``: pick centre k with weight w_k, draw c_k + σ_k g (g standard normal), normalise."""

    centres: tuple[tuple[float, ...], ...]
    weights: tuple[float, ...]
    scales: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.centres) == len(self.weights) == len(self.scales) or not self.centres:
            raise ValueError("need one weight and scale per centre")
        if len({len(c) for c in self.centres}) != 1 or len(self.centres[0]) < 2:
            raise ValueError("centres must all have the same dimension d ≥ 2")
        if any(w < 0 for w in self.weights) or not sum(self.weights) > 0 or any(s <= 0 for s in self.scales):
            raise ValueError("weights must be non-negative (positive total) and scales positive")
        centres = np.asarray(self.centres, dtype=np.float64)  # (K, d)
        if not _all_finite(self.weights + self.scales) or not np.isfinite(centres).all() or \
                not (np.linalg.norm(centres, axis=1) > 0).all():  # normalised, each gave NaN samples
            raise ValueError("centres, weights and scales must be finite, and no centre 0")

    @property
    def d(self) -> int:
        return len(self.centres[0])

    def sample(self, n: int, seed: int) -> np.ndarray:
        """n i.i.d. points (n, d)."""
        n = _count(n)
        rng = np.random.default_rng(seed)
        w = np.asarray(self.weights) / sum(self.weights)
        comp = rng.choice(len(w), size=n, p=w)
        centres = np.asarray(self.centres, dtype=np.float64)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        x = centres[comp] + np.asarray(self.scales)[comp, None] * rng.standard_normal((n, self.d))
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def default_sphere_target(d: int) -> ProjectedGaussianMixture:
    """A non-uniform target on ``S^{d−1}``: a tight bump at e_0 (weight 0.6) and a broad one at ``(−e_0 + 2e_1)/√5``."""
    if d < 2:
        raise ValueError(f"need d ≥ 2, got {d}")
    e0 = tuple(1.0 if k == 0 else 0.0 for k in range(d))
    e1 = tuple(-1.0 if k == 0 else (2.0 if k == 1 else 0.0) for k in range(d))
    return ProjectedGaussianMixture(centres=(e0, e1), weights=(0.6, 0.4), scales=(0.25, 0.6))


@dataclass(frozen=True)
class RopeRealisation:
    """Positions realising a target law on a RoPE orbit (one frequency ω, plane (0, 1))."""

    omega: float
    angles: np.ndarray  # (n,) the target angles θ_i along the orbit, measured from y*
    positions: np.ndarray  # (n,) s_i = −θ_i / ω


def rope_positions_for(
    target: VonMisesMixture, n: int, omega: float = 1.0, mode: str = "quantile", seed: int = 0
) -> RopeRealisation:
    """Label law ρ = (θ ↦ −θ/ω)_# ν, as n quantiles (``mode="quantile"``) or n draws (``"sample"``)."""
    if not (math.isfinite(omega) and omega != 0):  # NaN gave NaN positions, ±inf all of them 0
        raise ValueError(f"the RoPE frequency ω must be finite and non-zero, got {omega!r}")
    if mode == "quantile":
        angles = target.quantiles(n)
    elif mode == "sample":
        angles = np.sort(target.sample(n, seed))
    else:
        raise ValueError(f"mode must be 'quantile' or 'sample', got {mode!r}")
    return RopeRealisation(omega=float(omega), angles=angles, positions=-angles / omega)


def orbit_angles(x: np.ndarray, base: np.ndarray, plane: tuple[int, int] = (0, 1)) -> np.ndarray:
    """Angle of each x_i in the rotation plane, measured from the base point's angle: (n,) in [0, 2π)."""
    a, b = plane
    phase = np.arctan2(x[:, b], x[:, a]) - np.arctan2(base[b], base[a])
    return np.mod(phase, TWO_PI)


def rotation_taking(t: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The rotation R in the plane of the unit vectors t and e with R t = e (identity off that plane).

    With u the unit component of t orthogonal to e and θ = ∠(t, e):
    R = I + (cos θ − 1)(e eᵀ + u uᵀ) + sin θ (e uᵀ − u eᵀ). For t = −e any plane through e is used.
    """
    t, e = np.asarray(t, dtype=np.float64), np.asarray(e, dtype=np.float64)
    d = t.shape[0]
    cos = float(np.clip(t @ e, -1.0, 1.0))
    u = t - cos * e
    norm = np.linalg.norm(u)
    if norm < 1e-12:
        if cos > 0:
            return np.eye(d)
        u = np.eye(d)[int(np.argmin(np.abs(e)))]  # any axis not parallel to e
        u = u - (u @ e) * e
        norm = np.linalg.norm(u)
    u = u / norm
    sin = float(np.sqrt(max(0.0, 1.0 - cos * cos)))
    return np.eye(d) + (cos - 1.0) * (np.outer(e, e) + np.outer(u, u)) + sin * (np.outer(e, u) - np.outer(u, e))


def stabiliser(e: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random orthogonal S with S e = e (a Haar-random orthogonal map of e⊥)."""
    d = e.shape[0]
    basis = np.linalg.qr(np.column_stack([e, rng.standard_normal((d, d - 1))]))[0]  # first column ±e
    basis[:, 0] = e
    q, r = np.linalg.qr(rng.standard_normal((d - 1, d - 1)))
    q = q * np.sign(np.diag(r))
    block = np.eye(d)
    block[1:, 1:] = q
    return basis @ block @ basis.T


def gauges_for_targets(targets: np.ndarray, base: Sequence[float] | np.ndarray, seed: int | None = 0) -> np.ndarray:
    """G(p) = S_p R_p with R_p t_p = e and S_p e = e (S_p = I when seed is None): (P, d, d), G(p)ᵀ e = t_p."""
    t = np.asarray(targets, dtype=np.float64)  # (P, d)
    e = np.asarray(base, dtype=np.float64)  # (d,)
    if t.ndim != 2 or e.shape != t.shape[1:]:
        raise ValueError(f"targets must be (P, d) and base (d,), got {t.shape} and {e.shape}")
    if not (np.isfinite(t).all() and np.isfinite(e).all() and (np.linalg.norm(t, axis=1) > 0).all() and
            np.linalg.norm(e) > 0):  # each is normalised: NaN gauges
        raise ValueError("targets and base must be finite, and none of them 0")
    e = e / np.linalg.norm(e)
    rng = np.random.default_rng(seed) if seed is not None else None
    gauges = []
    for tp in t / np.linalg.norm(t, axis=1, keepdims=True):
        g = rotation_taking(tp, e)
        if rng is not None:
            g = stabiliser(e, rng) @ g
        gauges.append(g)
    return np.stack(gauges)
