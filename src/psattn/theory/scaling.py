"""Scaling exponents: fit gamma_c ∝ d_k^alpha, for the reduced model and for trained models.

The paper reports alpha = -0.25 for the reduced model (branch 1 tends to gamma_c^2 ~ L / sqrt(d_k),
i.e. alpha -> -1/4 as d_k / 8L grows; closer to the crossover the local slope is steeper) and about
-1.13 for the critical gamma of trained models. ``empirical_exponent`` fits the latter from saved
sweep results; the sweep itself lives with the induction experiments.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psattn.jsonfile import read_json
from psattn.theory.reduced_model import ReducedModel
from psattn.theory.transition import C_CONSTANT, gamma_c

#: Keys accepted for the two columns of a sweep record.
DK_KEYS = ("d_k", "head_dim", "dk")
GAMMA_KEYS = ("gamma_critical", "gamma_c", "critical_gamma", "gamma")


@dataclass(frozen=True)
class PowerLawFit:
    """y = prefactor * x^exponent, fitted by least squares on (log x, log y)."""

    exponent: float
    prefactor: float
    r_squared: float
    stderr: float  # standard error of the exponent (NaN for two points)
    n: int
    x_min: float
    x_max: float
    dropped: int = 0  # input pairs left out (non-finite or non-positive)

    def to_dict(self) -> dict[str, Any]:
        """The fit as plain values, for JSON (non-finite numbers as null)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def fit_power_law(x, y) -> PowerLawFit:
    """Least-squares fit of log y = log prefactor + exponent log x over the pairs with x, y > 0 and
    finite (the others are counted in ``dropped``). Needs two distinct x values, and a prefactor a float holds."""
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in length: {x.size} vs {y.size}")
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log(x[keep]), np.log(y[keep])
    if np.unique(lx).size < 2:
        dropped = int((~keep).sum())
        left_out = f" ({dropped} pair{'s' * (dropped != 1)} with a non-finite or non-positive value left out)" if dropped else ""
        raise ValueError(f"a power-law fit needs at least two distinct positive x values; got {np.unique(x[keep])}"
                         f"{left_out}")
    A = np.stack([lx, np.ones_like(lx)], axis=1)
    (slope, intercept), *_ = np.linalg.lstsq(A, ly, rcond=None)
    resid = ly - A @ np.array([slope, intercept])
    ss_tot = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    try:
        prefactor = math.exp(intercept)
    except OverflowError:  # was the traceback
        prefactor = math.inf
    if not 0 < prefactor < math.inf:  # or 0.0, a prefactor under a float's range
        raise ValueError(f"the fitted prefactor e^{float(intercept):.4g} (exponent {float(slope):.4g}) is past a float's "
                         "range; rescale x or y")
    n = int(keep.sum())
    if n > 2:
        s2 = float((resid**2).sum()) / (n - 2)
        stderr = math.sqrt(s2 / float(((lx - lx.mean()) ** 2).sum()))
    else:
        stderr = math.nan
    return PowerLawFit(float(slope), prefactor, r2, stderr, n,
                       float(x[keep].min()), float(x[keep].max()), int((~keep).sum()))


def exponent_interval(brackets: Iterable[tuple[float, float, float]]) -> tuple[float, float]:
    """The exponents alpha for which some power law gamma = C d_k^alpha passes through every
    bracket (d_k, lo, hi), lo < gamma_c(d_k) <= hi (lo may be 0, hi infinite): an open interval
    (lower, upper), each end possibly infinite. It is empty (lower >= upper) when no power law fits.

    A power law passes through all brackets iff log lo_i - alpha log d_i < log hi_j - alpha log d_j
    for every pair i, j, so each pair with d_i < d_j bounds alpha from above by
    log(hi_j / lo_i) / log(d_j / d_i) and from below by log(lo_j / hi_i) / log(d_j / d_i)."""
    rows = sorted((float(d), float(lo), float(hi)) for d, lo, hi in brackets)
    for d, lo, hi in rows:  # NaN compares false, so a NaN bound (or an empty bracket) was skipped without a word
        if not (0 < d < math.inf and 0 <= lo < hi):
            raise ValueError(f"a bracket (d_k, lo, hi) needs a finite d_k > 0 and 0 <= lo < hi (hi may be inf), "
                             f"got {(d, lo, hi)}")
    if len({d for d, _, _ in rows}) < 2:
        raise ValueError("an exponent needs brackets at two or more distinct d_k")
    lower, upper = -math.inf, math.inf
    for i, (d_i, lo_i, hi_i) in enumerate(rows):
        for d_j, lo_j, hi_j in rows[i + 1 :]:
            if d_j == d_i:  # no exponent enters: the two brackets of one d_k must overlap (they were skipped)
                if lo_i >= hi_j or lo_j >= hi_i:
                    return math.inf, -math.inf
                continue
            span = math.log(d_j / d_i)
            if lo_i > 0 and math.isfinite(hi_j):
                upper = min(upper, math.log(hi_j / lo_i) / span)
            if lo_j > 0 and math.isfinite(hi_i):
                lower = max(lower, math.log(lo_j / hi_i) / span)
    return lower, upper


def reduced_model_exponent(T: int, d_ks, *, simulated: bool = False, n_samples: int = 256, seed: int = 0,
                           c: float = C_CONSTANT) -> PowerLawFit:
    """Exponent of gamma_c against d_k at fixed T: from the closed form, or (``simulated``) from
    the Monte-Carlo transition points of ``ReducedModel``."""
    d_ks = np.asarray(d_ks, dtype=float)
    if simulated:
        model = ReducedModel(T, n_samples, seed)
        gammas = np.array([model.transition(d) for d in d_ks])
    else:
        gammas = np.asarray(gamma_c(d_ks, T, c))
    return fit_power_law(d_ks, gammas)


def _pick(record: Mapping[str, Any], keys: tuple[str, ...], what: str):
    for key in keys:
        if key in record and record[key] is not None:
            return record[key]
    raise ValueError(f"sweep record {dict(record)!r} has no {what} field (one of {keys})")


def sweep_pairs(results: Iterable) -> list[tuple[float, float]]:
    """(d_k, gamma_critical) pairs from pairs or records (mappings with a d_k and a critical gamma
    field, see ``DK_KEYS`` / ``GAMMA_KEYS``); a missing gamma (None) becomes NaN."""
    pairs = []
    for item in results:
        if isinstance(item, Mapping):
            d_k = _pick(item, DK_KEYS, "d_k")
            gamma = next((item[k] for k in GAMMA_KEYS if k in item), None)
        elif isinstance(item, list | tuple) and len(item) == 2:
            d_k, gamma = item
        else:
            raise ValueError(f"sweep result {item!r} is neither a (d_k, gamma_critical) pair nor a record")
        pairs.append((_number(d_k, "d_k", item), math.nan if gamma is None else _number(gamma, "gamma", item)))
    return pairs


def _number(value: Any, what: str, item: Any) -> float:
    """``value`` as a float, refusing what is not a real number (a string, a bool, a list ...)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"sweep result {item!r}: {what} must be a number, got {value!r}")
    return float(value)


def empirical_exponent(results: Iterable) -> PowerLawFit:
    """Fit gamma_critical ∝ d_k^alpha from saved sweep results: an iterable of (d_k, gamma_critical)
    pairs or of records (see ``sweep_pairs``). Runs where no critical gamma was found (None,
    NaN) or where it is 0 (the baseline already solves the task) cannot enter a log-log fit and are
    reported in ``dropped``."""
    pairs = sweep_pairs(results)
    if not pairs:
        raise ValueError("no sweep results to fit")
    d_k, gamma = zip(*pairs, strict=True)
    return fit_power_law(d_k, gamma)


def load_sweep_results(path: str | Path) -> list[tuple[float, float]]:
    """(d_k, gamma_critical) pairs from a JSON file: a list of pairs or records, or an object with
    such a list under "results"."""
    data = read_json(path, what="sweep results file")
    if isinstance(data, Mapping):
        data = data.get("results")
    if not isinstance(data, list):  # a number or null raised a TypeError, a string was read letter by letter
        raise ValueError(f"{path}: expected a list, or an object with a 'results' list")
    return sweep_pairs(data)
