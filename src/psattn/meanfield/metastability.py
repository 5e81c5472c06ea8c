"""Metastability on the circle: plateau lifetime against β, and the cluster count (arXiv 2605.30229).

**Plateau lifetime.** The last tread of the energy staircase is two clusters at angular distance φ.
Under SA (normalised) dynamics two point clusters of equal mass approach each other as

    dφ/dt = −2 e^{β cos φ} sin φ / (e^β + e^{β cos φ}),

so the merging time grows like ``e^{β(1 − cos φ0)}`` (up to a power of β): exponentially long plateaus.
``measure_lifetimes`` starts n particles as two jittered clusters at distance φ0 on S¹, runs SA for
each β, and records the *lifetime*: the first time the energy E_h passes half-way from the two-cluster
plateau value ``(e^β + e^{β cos φ0})/(4β)`` to the one-cluster value ``e^β/(2β)``. It fits
log(lifetime) = a + rate·β (least squares; Pearson r reported) and compares with the same fit of the
reduced two-cluster ODE above, whose lifetime ``reduced_lifetime`` is a quadrature.

**Cluster count.** Linearising USA/SA on S¹ about the uniform law, the Fourier mode k of the density
grows at a rate proportional to k² I_k(β) (I_k the modified Bessel function), so a near-uniform start
forms about argmax_k k² I_k(β) clusters (``predicted_cluster_count``; needs scipy, the ``theory``
extra, imported lazily).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from psattn.meanfield.config import SimulationConfig
from psattn.meanfield.simulate import simulate


def _finite(name: str, value: float, *, positive: bool = False) -> float:
    """``value`` as a float if it is a finite (and, with ``positive``, > 0) real number; a ValueError naming it
    otherwise (NaN and inf went through the formulas below into NaN or a meaningless count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be a finite number{' > 0' if positive else ''}, got {value!r}")
    return float(value)


def two_cluster_state(n: int, separation: float, jitter: float, seed: int, batch: int = 1) -> Tensor:
    """(B, n, 2): the first n//2 particles around angle 0, the rest around separation.

    Each cluster gets N(0, jitter²) angle noise, centred so that the clusters' mean angles stay exactly
    0 and separation. Batch element b's noise is the (b+1)-th draw of n from one generator seeded with ``seed``: it
    depends on (seed, b) alone, not on the batch size (``simulate.initial_state`` draws the same way).
    """
    if n < 4:
        raise ValueError(f"need n ≥ 4 particles (two clusters of ≥ 2), got {n}")
    _finite("separation", separation)
    if not _finite("jitter", jitter) >= 0:
        raise ValueError(f"jitter must be >= 0, got {jitter!r}")
    gen = torch.Generator().manual_seed(seed)
    first = torch.arange(n) < n // 2
    centre = torch.where(first, 0.0, float(separation)).double()  # (n,)
    noise = jitter * torch.stack([torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(batch)])  # (B, n)
    noise[:, first] -= noise[:, first].mean(-1, keepdim=True)
    noise[:, ~first] -= noise[:, ~first].mean(-1, keepdim=True)
    angles = centre + noise  # (B, n)
    return torch.stack([torch.cos(angles), torch.sin(angles)], -1)  # (B, n, 2)


def plateau_energies(beta: float, separation: float) -> tuple[float, float]:
    """(two-cluster plateau energy, one-cluster energy) of ``E_h = (1/(2βn²)) Σ_ij e^{β⟨x_i, x_j⟩}``."""
    beta, separation = _finite("beta", beta, positive=True), _finite("separation", separation)
    return (math.exp(beta) + math.exp(beta * math.cos(separation))) / (4 * beta), math.exp(beta) / (2 * beta)


def reduced_lifetime(beta: float, separation: float, points: int = 20001) -> float:
    """Time for the reduced two-cluster ODE to reach the half-way energy (trapezoid quadrature); the clusters'
    angular distance φ0 = separation lies in (0, π)."""
    beta, separation = _finite("beta", beta, positive=True), _finite("separation", separation)
    if not 0 < separation < math.pi:  # the quadrature crossed sin φ = 0: a negative lifetime, NaN, or a made-up one
        raise ValueError(f"separation must be an angular distance in (0, π), got {separation!r}")
    # half-way energy ⇔ e^{β cos φ_m} = (e^β + e^{β cos φ0}) / 2; work with e^{β(cos φ − 1)} to avoid overflow,
    # and with cos φ − 1 = −2 sin²(φ/2), whose cancellation put φ_m at 0 (a lifetime of inf) for φ0 ≲ 1e-8
    log_target = math.log1p(0.5 * math.expm1(-2.0 * beta * math.sin(0.5 * separation) ** 2))  # log((1 + e^{β(cos φ0 − 1)})/2)
    phi_m = 2.0 * math.asin(math.sqrt(-log_target / (2.0 * beta)))
    phi = np.linspace(phi_m, separation, points)
    rel = np.exp(-2.0 * beta * np.sin(0.5 * phi) ** 2)  # e^{β(cos φ − 1)}
    integrand = (1.0 + rel) / (2.0 * rel * np.sin(phi))  # |dt/dφ|
    return float(np.sum(0.5 * (integrand[1:] + integrand[:-1]) * np.diff(phi)))


def crossing_time(times: Tensor, energy: Tensor, level: float) -> float:
    """First time a series (S+1,) reaches level (linear interpolation); inf if it never does."""
    if times.dim() != 1 or energy.shape != times.shape:  # a shorter series read as one that never got there
        raise ValueError(f"times and energy must be one series each, (S+1,), got {tuple(times.shape)} and "
                         f"{tuple(energy.shape)}")
    above = torch.nonzero(energy >= level)
    if above.numel() == 0:
        return math.inf
    k = int(above[0])
    if k == 0:
        return float(times[0])
    e0, e1, t0, t1 = (float(v) for v in (energy[k - 1], energy[k], times[k - 1], times[k]))
    return t0 + (level - e0) / (e1 - e0) * (t1 - t0)


def exponential_fit(betas: Sequence[float], lifetimes: Sequence[float]) -> tuple[float, float, float]:
    """(rate, intercept, Pearson r) of the least-squares fit log(lifetime) = intercept + rate·β."""
    x, t = np.asarray(betas, dtype=np.float64), np.asarray(lifetimes, dtype=np.float64)
    if x.ndim != 1 or x.shape != t.shape or np.unique(x).size < 2:  # one beta gave a rate of 0 and r = 1
        raise ValueError(f"need one lifetime per beta and two or more distinct betas, got {x.shape} betas, "
                         f"{t.shape} lifetimes")
    if not (np.isfinite(x).all() and np.isfinite(t).all() and (t > 0).all()):  # log of them: NaN rate and intercept
        raise ValueError("betas and lifetimes must be finite, and lifetimes > 0")
    y = np.log(t)
    rate, intercept = np.polyfit(x, y, 1)
    # two betas: r is the slope's sign, ±1 (1.0 was reported for lifetimes that fall with beta); equal lifetimes: NaN
    r = float(np.corrcoef(x, y)[0, 1]) if np.ptp(y) > 0 else math.nan
    return float(rate), float(intercept), r


@dataclass
class MetastabilityResult:
    """Two-cluster lifetimes against β, simulated and from the reduced ODE, with the fitted rates."""
    betas: list[float]
    separation: float
    lifetimes: list[float]  # median over the batch, per β
    lifetime_spread: list[tuple[float, float]]  # (min, max) over the batch, per β
    reduced_lifetimes: list[float]
    rate: float  # fitted d log(lifetime) / dβ of the simulations
    intercept: float
    r: float
    reduced_rate: float  # the same fit on the reduced ODE's lifetimes
    asymptotic_rate: float  # 1 − cos φ0
    curves: list[dict[str, Any]] = field(default_factory=list)  # per β: times, normalised energy (batch 0)

    def to_dict(self) -> dict[str, Any]:
        """The result as plain values, for JSON."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def measure_lifetimes(
    betas: Sequence[float] = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0),
    n: int = 16,
    separation: float = math.pi / 2,
    jitter: float = 0.05,
    seed: int = 0,
    batch: int = 3,
    dt: float = 0.1,
    integrator: str = "rk4",
    horizon: float = 2.5,
    curve_points: int = 300,
) -> MetastabilityResult:
    """Two-cluster SA runs on S¹, one per β, each to horizon × the reduced lifetime. n is even: the plateau energies
    and the reduced ODE are those of two clusters of equal mass (an odd n, clusters of n//2 and n − n//2, put the
    lifetimes 7% off at n = 5)."""
    if len(betas) < 2:
        raise ValueError("need at least two values of beta to fit a rate")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 4 or n % 2:
        raise ValueError(f"n must be an even integer ≥ 4 (two clusters of equal mass), got {n!r}")
    lifetimes, spreads, reduced, curves = [], [], [], []
    for beta in betas:
        predicted = reduced_lifetime(beta, separation)
        cfg = SimulationConfig(n=n, d=2, beta=beta, dynamics="sa", integrator=integrator, dt=dt,
                               tau=horizon * predicted + 1.0, seed=seed, batch=batch, n_records=2)
        traj = simulate(cfg, two_cluster_state(n, separation, jitter, seed, batch))
        low, high = plateau_energies(beta, separation)
        level = 0.5 * (low + high)
        per_run = [crossing_time(traj.times, traj.energy[:, b], level) for b in range(batch)]
        lifetimes.append(float(np.median(per_run)))
        spreads.append((min(per_run), max(per_run)))
        reduced.append(predicted)
        stride = max(1, traj.times.shape[0] // curve_points)
        curves.append({
            "beta": beta,
            "times": traj.times[::stride].tolist(),
            "energy": ((traj.energy[::stride, 0] - low) / (high - low)).tolist(),  # 0 on the plateau, 1 merged
        })
    finite = all(math.isfinite(t) and t > 0 for t in lifetimes)
    rate, intercept, r = exponential_fit(betas, lifetimes) if finite else (math.nan, math.nan, math.nan)
    reduced_rate = exponential_fit(betas, reduced)[0]
    return MetastabilityResult(
        betas=[float(b) for b in betas], separation=float(separation), lifetimes=lifetimes, lifetime_spread=spreads,
        reduced_lifetimes=reduced, rate=rate, intercept=intercept, r=r, reduced_rate=reduced_rate,
        asymptotic_rate=1.0 - math.cos(separation), curves=curves,
    )


def predicted_cluster_count(beta: float, k_max: int = 200) -> int:
    """``argmax_{k ≥ 1} k² I_k(β)``, the fastest-growing Fourier mode of the uniform law on S¹ (needs scipy)."""
    try:
        from scipy.special import ive  # optional extra "theory"
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("predicted_cluster_count needs scipy (pip install 'phase-space-attention[theory]')") from err
    _finite("beta", beta, positive=True)  # NaN gave 1, a negative beta a count too
    if isinstance(k_max, bool) or not isinstance(k_max, numbers.Integral) or k_max < 1:
        raise ValueError(f"k_max must be an integer >= 1, got {k_max!r}")
    k = np.arange(1, k_max + 1)
    return int(k[np.argmax(k.astype(np.float64) ** 2 * ive(k, beta))])  # ive = I_k e^{−β}: same argmax


def circle_cluster_count(angles: np.ndarray, gap: float) -> int:
    """Clusters of points on S¹: the number of circular gaps wider than gap between sorted angles (≥ 1)."""
    a = np.asarray(angles, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or not np.isfinite(a).all():  # checked before the sort: one number was an AxisError
        raise ValueError(f"angles must be a non-empty list of finite numbers, got shape {a.shape}")
    a = np.sort(np.mod(a, 2 * np.pi))
    if not 0 <= _finite("gap", gap) < 2 * np.pi:  # NaN counted 1 cluster, a negative gap one per point
        raise ValueError(f"gap must be an angle in [0, 2π), got {gap!r}")
    gaps = np.diff(np.append(a, a[0] + 2 * np.pi))
    return max(1, int((gaps > gap).sum()))


def near_uniform_circle(n: int, noise: float, seed: int) -> Tensor:
    """(1, n, 2): n equally spaced angles plus N(0, noise²) perturbations."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not _finite("noise", noise) >= 0:
        raise ValueError(f"noise must be >= 0, got {noise!r}")
    gen = torch.Generator().manual_seed(seed)
    angles = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    angles = angles + noise * torch.randn(n, generator=gen, dtype=torch.float64)
    return torch.stack([torch.cos(angles), torch.sin(angles)], -1)[None]  # (1, n, 2)


class NoPlateau(ValueError):
    """No cluster count above 1 was held long enough by the end of the records."""


def first_plateau(counts: Sequence[int], times: Sequence[float], hold: float) -> int:
    """The first cluster count above 1 that stays unchanged for at least ``hold`` time units: from the
    record where it first appears to the record where it changes (or the last record).

    Example (records every 0.5): counts 1, 1, 4, 8, 9, 9, 9, 9, 9, 9, 9, 8, ... with hold 3 give 9;
    the formation transients 4 and 8 are held 0.5 each. ``NoPlateau`` (a ValueError) when no count is held that
    long (the horizon ends before the first plateau has lasted ``hold``).
    """
    if len(counts) != len(times) or not counts:
        raise ValueError(f"need one time per count, got {len(counts)} counts and {len(times)} times")
    start = 0
    for i in range(1, len(counts) + 1):
        if i < len(counts) and counts[i] == counts[start]:
            continue
        end = times[i] if i < len(counts) else times[-1]
        if counts[start] > 1 and end - times[start] >= hold:
            return int(counts[start])
        start = i
    raise NoPlateau(f"no cluster count above 1 was held for {hold:g} time units by t = {times[-1]:g}; "
                     "run longer (tau)")


def measure_cluster_count(
    beta: float,
    n: int = 256,
    noise: float = 1e-3,
    seed: int = 0,
    tau: float = 60.0,
    dt: float = 0.1,
    record_every: float = 0.5,
    hold: float = 3.0,
    gap_factor: float = 10.0,
) -> dict[str, Any]:
    """SA on S¹ from a near-uniform start; clusters are separated by gaps > gap_factor · 2π/n, counted
    every ``record_every`` time units.

    The measured count is the first metastable plateau (``first_plateau``): the first count above 1
    held for ``hold`` time units. While the fastest-growing mode saturates, the gaps open one after
    another and the count climbs through transient values; in runs with n 128–256, β 4–36 and seeds
    0–5 (noise 1e-3) each transient lasted at most 2 time units and the first plateau at least 5, so
    hold = 3 separates them. The result does not depend on ``tau`` once ``tau`` covers that plateau
    (the records sit at fixed times: tau must be a multiple of ``record_every``, itself a multiple of ``dt``); later
    merges (the staircase) do not change it.
    """
    steps_per_record = record_every / dt
    if record_every <= 0 or abs(steps_per_record - round(steps_per_record)) > 1e-9:
        raise ValueError(f"record_every must be a positive multiple of dt = {dt:g}, got {record_every!r}")
    records = tau / record_every
    if abs(records - round(records)) > 1e-9:  # the step shrinks to tau / steps and the records spread: 0.4, 0.5, 0.6 apart
        raise ValueError(f"tau must be a multiple of record_every = {record_every:g}, got {tau!r}")
    cfg = SimulationConfig(n=n, d=2, beta=beta, dynamics="sa", dt=dt, tau=tau, seed=seed,
                           n_records=round(records) + 1, keep_states=True)
    traj = simulate(cfg, near_uniform_circle(n, noise, seed))
    assert traj.states is not None
    gap = gap_factor * 2 * math.pi / n
    counts = [circle_cluster_count(np.arctan2(s[0, :, 1].numpy(), s[0, :, 0].numpy()), gap) for s in traj.states]
    times = traj.record_times.tolist()
    return {"beta": beta, "seed": seed, "measured": first_plateau(counts, times, hold), "hold": hold,
            "counts": counts, "record_times": times}
