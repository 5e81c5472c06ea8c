"""Time steppers on the sphere and the β-aware step size (arXiv 2605.30229).

- ``euler``: forward Euler followed by renormalisation, the scheme of the reference simulation code.
  Order 1.
- ``rk4``: classical RK4 on tangent vectors; each stage point x + a·h·k is retracted onto the sphere
  by normalisation (inside the field), and so is the final update. Because the fields are
  0-homogeneous (they normalise their argument) and tangent, this is exactly classical RK4 for an
  ambient ODE that leaves the sphere invariant, followed by a retraction that moves the result by
  O(h⁵): order 4.

A stepper maps (field, x, h) to (x after one step, energy at x).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import Tensor

from psattn.meanfield.dynamics import VelocityField, normalise

Stepper = Callable[[VelocityField, Tensor, float], tuple[Tensor, Tensor]]


def euler_step(field: VelocityField, x: Tensor, h: float) -> tuple[Tensor, Tensor]:
    """x ← (x + h v(x)) / ‖x + h v(x)‖."""
    v, e = field(x)
    return normalise(x + h * v), e


def rk4_step(field: VelocityField, x: Tensor, h: float) -> tuple[Tensor, Tensor]:
    """Tangent-space RK4 with normalisation as the retraction."""
    k1, e = field(x)
    k2, _ = field(x + 0.5 * h * k1)
    k3, _ = field(x + 0.5 * h * k2)
    k4, _ = field(x + h * k3)
    return normalise(x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)), e


STEPPERS: dict[str, Stepper] = {"euler": euler_step, "rk4": rk4_step}


def get_stepper(name: str) -> Stepper:
    """The integrator of that name; ValueError for an unknown one."""
    if name not in STEPPERS:
        raise ValueError(f"unknown integrator {name!r}; choose one of {tuple(STEPPERS)}")
    return STEPPERS[name]


def usa_step_size(dt: float, beta: float) -> float:
    """``η = dt / max(√β e^{β−1/2}, 1)``: the USA step shrinks with β as the interaction grows like ``e^β``."""
    return dt / max(math.sqrt(beta) * math.exp(beta - 0.5), 1.0)
