"""The closed-form critical coupling gamma_c(d_k, T) of the reduced Gaussian score model (arXiv 2609.32319).

With L = log(T - 1), the number of distractor keys T - 1 and c = ``C_CONSTANT`` = 0.74::

    gamma_c^2 = 2L / (sqrt(d_k) + sqrt(d_k - 8L))   if d_k >= 8L   (branch 1)
    gamma_c^2 = 1 / (2 c^2 sqrt(2L))                if d_k <  8L   (branch 2)

with the crossover at d_k* = 8L. The paper calls this an analytically solvable limit, not a robust
prediction; trained models sit below it (it is an upper bound for them).

Where branch 1 comes from (verified symbolically by the ``transition_law`` certificate): write
u = gamma^2. A target score of mean u sqrt(d_k) against T - 1 Gaussian distractor scores of variance
v = 4u^2 wins when it beats their annealed log-partition ``log E[sum_j e^{s_j}] = L + v/2``, i.e. when
2u^2 - sqrt(d_k) u + L <= 0. Branch 1 is the smaller root u_- = (sqrt(d_k) - sqrt(d_k - 8L)) / 4
(rationalised, the formula above); the roots are real iff d_k >= 8L, hence the crossover. At the
crossover v = 2L, exactly where the annealed log-partition stops describing a typical one (the
freezing point of Derrida's random energy model), so branch 1 is self-consistent on its own side.

Branch 2 has no such derivation in this library; it is implemented as stated. Note that the two
branches do not meet at the crossover: gamma_branch1 / gamma_branch2 = c sqrt(2L) there
(``crossover_jump``), which is 1 only at L = 1 / (2c^2), T ~ 3.49.

All functions broadcast over numpy arrays (scalars in, Python floats out) and raise ValueError on
T < 3, d_k <= 0 or non-finite input.
"""

from __future__ import annotations

from numbers import Real

import numpy as np

#: The constant c of branch 2 (arXiv 2609.32319: c ~ 0.74). It is the only free parameter of the law.
C_CONSTANT = 0.74


def _as_array(name: str, x) -> np.ndarray:
    try:
        if np.asarray(x).dtype.kind in "bUSc":  # "64" and True were read as 64 and 1 (c refused both)
            raise TypeError
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or an array of them, got {x!r}") from None
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return a


def _out(a: np.ndarray):
    return float(a) if a.ndim == 0 else a


def _check_T(T) -> np.ndarray:
    T = _as_array("T", T)
    if np.any(T < 3):
        raise ValueError(f"T (context length) must be >= 3 so that L = log(T - 1) > 0, got {T.min():g}")
    return T


def _check_dk(d_k) -> np.ndarray:
    d_k = _as_array("d_k", d_k)
    if np.any(d_k <= 0):
        raise ValueError(f"d_k (head dimension) must be > 0, got {d_k.min():g}")
    return d_k


def _check_c(c: float) -> float:
    if isinstance(c, bool) or not isinstance(c, Real):  # float("x") said only "could not convert string to float"
        raise TypeError(f"c must be a real number, got {c!r}")
    c = float(c)
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"c must be a positive finite number, got {c}")
    return c


def _pair(d_k, T) -> tuple[np.ndarray, np.ndarray]:
    """``d_k`` and ``T``, checked and broadcast together; a ValueError naming both shapes when they do not."""
    d_k, T = _check_dk(d_k), _check_T(T)
    try:
        return np.broadcast_arrays(d_k, T)  # type: ignore[return-value]
    except ValueError:
        raise ValueError(f"d_k of shape {d_k.shape} and T of shape {T.shape} do not broadcast together") from None


def log_distractors(T):
    """L = log(T - 1): the log of the number of distractor keys."""
    return _out(np.log(_check_T(T) - 1.0))


def crossover_dk(T):
    """The crossover head dimension d_k* = 8 L = 8 log(T - 1)."""
    return _out(8.0 * np.log(_check_T(T) - 1.0))


def transition_branch(d_k, T):
    """1 where d_k >= 8L (the annealed branch), 2 below the crossover."""
    d_k, T = _pair(d_k, T)
    branch = np.where(d_k >= 8.0 * np.log(T - 1.0), 1, 2)
    return int(branch) if branch.ndim == 0 else branch


def gamma_c_squared(d_k, T, c: float = C_CONSTANT):
    """gamma_c^2(d_k, T) of arXiv 2609.32319, both branches."""
    c = _check_c(c)
    d_k, T = _pair(d_k, T)
    L = np.log(T - 1.0)
    above = d_k >= 8.0 * L
    branch1 = 2.0 * L / (np.sqrt(d_k) + np.sqrt(np.where(above, d_k - 8.0 * L, 0.0)))
    branch2 = 1.0 / (2.0 * c**2 * np.sqrt(2.0 * L))
    return _out(np.where(above, branch1, branch2))


def gamma_c(d_k, T, c: float = C_CONSTANT):
    """The critical coupling gamma_c(d_k, T) = sqrt(gamma_c^2)."""
    return _out(np.sqrt(gamma_c_squared(d_k, T, c)))


def annealed_roots(d_k, T):
    """(u_-, u_+): the roots u = gamma^2 of 2u^2 - sqrt(d_k) u + L = 0, NaN where d_k < 8L.
    Branch 1 of the law is u_-; between the roots the target beats the annealed log-partition."""
    d_k, T = _pair(d_k, T)
    L = np.log(T - 1.0)
    disc = d_k - 8.0 * L
    root = np.sqrt(np.where(disc >= 0, disc, np.nan))
    return _out((np.sqrt(d_k) - root) / 4.0), _out((np.sqrt(d_k) + root) / 4.0)


def crossover_jump(T, c: float = C_CONSTANT):
    """gamma_c just above the crossover divided by gamma_c just below it: c sqrt(2L)."""
    return _out(_check_c(c) * np.sqrt(2.0 * np.log(_check_T(T) - 1.0)))
