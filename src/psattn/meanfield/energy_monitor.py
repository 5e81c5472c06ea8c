"""Checks on the energy series of a run: monotonicity and the metastable staircase (arXiv 2605.30229).

USA and SA both increase E_h along the exact flow, so a decrease between two steps beyond rounding
is a step-size problem; ``check_monotone`` reports where it happened and which step size caused it.
In metastable runs the energy rises in a staircase; ``energy_plateaus`` returns the flat treads.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class EnergyViolation:
    """One step at which the energy fell by more than the tolerance."""
    step: int  # the step k with E[k+1] < E[k] − tol
    time: float  # t_k
    batch_index: int
    drop: float  # E[k] − E[k+1] > 0
    relative_drop: float  # drop / |E[k]|
    step_size: float  # the step size that produced it


@dataclass(frozen=True)
class EnergyCheck:
    """Whether the energy stayed non-decreasing over a run, and where it did not."""
    monotone: bool
    step_size: float
    tolerance: float  # relative tolerance used
    n_violations: int
    worst_relative_drop: float
    first_violation_time: float | None  # earliest t_k with a drop, None when monotone
    violations: tuple[EnergyViolation, ...]  # at most ``max_reported``, largest drops first
    n_non_finite: int = 0  # energies that are NaN or infinite (overflow): not monotone, whatever the drops

    def summary(self) -> str:
        """The check in one line."""
        if self.monotone:
            return f"energy non-decreasing (step size {self.step_size:.3g}, rtol {self.tolerance:.1e})"
        if self.n_non_finite:
            return (f"energy not finite at {self.n_non_finite} of its values (first at t = {self.first_violation_time:.4g}; "
                    f"an overflow of the dtype?), {self.n_violations} decreases with step size {self.step_size:.3g}")
        return (
            f"energy decreased {self.n_violations} times with step size {self.step_size:.3g}; "
            f"worst relative drop {self.worst_relative_drop:.2e}, first at t = {self.first_violation_time:.4g}"
        )


def _check_series(times: Tensor, energy: Tensor, shapes: tuple[int, ...], finite_energy: bool = True) -> None:
    """A ValueError unless times is (S+1,), S + 1 ≥ 1, energy has S+1 rows and ``energy.ndim in shapes``, and both
    (or, without ``finite_energy``, the times) are finite: a shorter series was cut to fit, a NaN compares false,
    and an empty one raised an IndexError."""
    if times.ndim != 1 or energy.ndim not in shapes or energy.shape[0] != times.shape[0] or times.shape[0] == 0:
        want = " or ".join("(S+1,)" if k == 1 else "(S+1, B)" for k in shapes)
        raise ValueError(f"times must be (S+1,) and energy {want}, S ≥ 0, got {tuple(times.shape)} and "
                         f"{tuple(energy.shape)}")
    if not (bool(torch.isfinite(times).all()) and (not finite_energy or bool(torch.isfinite(energy).all()))):
        raise ValueError("times and energy must be finite, got NaN or infinite entries")


def _tolerance(value, name: str) -> float:
    """``value`` as a float if it is a finite real number ≥ 0 (not a bool), else a ValueError naming it: a NaN
    tolerance compares false with everything, so a falling energy passed as non-decreasing (and a NaN slope
    tolerance found no plateau); a negative one flagged a constant energy as falling."""
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be a finite number ≥ 0, got {value!r}")
    return number


def default_tolerance(dtype: torch.dtype) -> float:
    """Relative rounding allowance for energy differences: 1000 machine epsilons."""
    return 1e3 * torch.finfo(dtype).eps


def check_monotone(
    times: Tensor,
    energy: Tensor,
    step_size: float,
    rtol: float | None = None,
    max_reported: int = 10,
) -> EnergyCheck:
    """Report every step where the energy decreased by more than rtol·|E|; a NaN or infinite energy (which compares
    false with everything, so no drop shows) makes the check fail too, counted in ``n_non_finite``.

    times: (S+1,); energy: (S+1, B) or (S+1,); S ≥ 0 (empty series are a ValueError).
    """
    _check_series(times, energy, (1, 2), finite_energy=False)
    e = energy if energy.ndim == 2 else energy[:, None]  # (S+1, B)
    tol = default_tolerance(e.dtype) if rtol is None else _tolerance(rtol, "rtol")
    drop = e[:-1] - e[1:]  # (S, B)
    scale = e[:-1].abs().clamp_min(torch.finfo(e.dtype).tiny)
    bad = drop > tol * scale
    steps, batch = torch.nonzero(bad, as_tuple=True)
    rel = (drop / scale)[bad]
    order = torch.argsort(rel, descending=True)[:max_reported]
    violations = tuple(
        EnergyViolation(
            step=int(steps[k]),
            time=float(times[steps[k]]),
            batch_index=int(batch[k]),
            drop=float(drop[steps[k], batch[k]]),
            relative_drop=float(rel[k]),
            step_size=step_size,
        )
        for k in order
    )
    non_finite = torch.nonzero(~torch.isfinite(e).all(-1)).flatten()  # (K,) steps with a NaN or inf energy
    first = [float(times[steps.min()])] if steps.numel() else []
    first += [float(times[non_finite[0]])] if non_finite.numel() else []
    return EnergyCheck(
        monotone=not violations and not non_finite.numel(),
        step_size=step_size,
        tolerance=tol,
        n_violations=int(bad.sum()),
        worst_relative_drop=float(rel.max()) if rel.numel() else 0.0,
        first_violation_time=min(first) if first else None,
        violations=violations,
        n_non_finite=int((~torch.isfinite(e)).sum()),
    )


@dataclass(frozen=True)
class Plateau:
    """An interval of time over which the energy stayed flat, and its level."""
    start: float
    end: float
    energy: float  # mean energy on the plateau

    @property
    def length(self) -> float:
        return self.end - self.start


def energy_plateaus(
    times: Tensor,
    energy: Tensor,
    slope_tol: float = 0.05,
    min_length: float = 0.0,
) -> list[Plateau]:
    """Flat treads of the energy staircase of one run.

    A step belongs to a plateau when its slope dE/dt is below slope_tol times the mean slope
    (E_end − E_0) / (t_end − t_0); consecutive flat steps merge, and plateaus shorter than min_length
    are dropped. times, energy: (S+1,), S ≥ 0 (empty series are a ValueError). A run whose energy does not move
    returns one plateau; a single time, none.
    """
    _check_series(times, energy, (1,))
    slope_tol, min_length = _tolerance(slope_tol, "slope_tol"), _tolerance(min_length, "min_length")
    t, e = times.double(), energy.double()
    rise = float(e[-1] - e[0])
    span = float(t[-1] - t[0])
    if span <= 0:
        return []
    mean_slope = rise / span
    slope = (e[1:] - e[:-1]) / (t[1:] - t[:-1])  # (S,)
    flat = slope.abs() <= slope_tol * abs(mean_slope) if mean_slope != 0 else torch.ones_like(slope, dtype=torch.bool)
    plateaus: list[Plateau] = []
    k, steps = 0, flat.shape[0]
    while k < steps:
        if not flat[k]:
            k += 1
            continue
        start = k
        while k < steps and flat[k]:
            k += 1
        p = Plateau(float(t[start]), float(t[k]), float(e[start : k + 1].mean()))
        if p.length >= min_length:
            plateaus.append(p)
    return plateaus
