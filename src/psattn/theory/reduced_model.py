"""Monte-Carlo simulation of the reduced Gaussian score model, and its comparison with gamma_c.

The model (the T4-only reduction). One query attends over one target key and T - 1 distractor keys.
Only the coherence term T4 = gamma^2 p_qᵀ p_k / sqrt(d_k) of the symmetric PSA score (scaled as in
attention) is kept; T1..T3, RoPE and the target's own fluctuation are dropped. Token embeddings are
i.i.d. standard Gaussian vectors e in ``R^{d_k}``, with keys k = e and queries q = -e (the readout that
makes the induction match positive). With u = gamma^2 this gives

    target score      s_* = u sqrt(d_k)              (the mean of T4 at the target; fixed)
    distractor scores s_j = 2u xi_j,  xi_j ~ N(0, 1) i.i.d.,  j = 1 .. T - 1   (variance v = 4u^2)

Why: let the query token be a with predecessor c, and the target b with predecessor a. Then
p_qᵀp_k = -(e_a - e_c)ᵀ(e_b - e_a) contains +|e_a|^2, of mean d_k, and three products of independent
vectors, of mean 0: T4 has mean gamma^2 sqrt(d_k). At a distractor whose token and predecessor are
both new, the four products are all between independent vectors: mean 0, variance 4 d_k, so T4 has
variance 4 gamma^4. The ``transition_law`` certificate measures both moments on the operator itself.
The model draws the distractors independently; on the operator, neighbouring distractor keys share a
token (``p_j = e_j - e_{j-1}`` and ``p_{j+1} = e_{j+1} - e_j``), so their scores correlate at -1/2. The annealed
log-partition, log of a sum of expectations, does not see it (branch 1 stands); the typical one does.

Observable. The target's attention weight is ``e^{s_*} / (e^{s_*} + Z)`` with ``Z = sum_j e^{s_j}``; it
reaches 1/2 when ``s_* = log Z``. The *simulated transition point* is the smallest u at which

    s_*(u) >= E[log Z(u)]      (criterion "quenched": the typical log-partition, the default), or
    s_*(u) >= log E[Z(u)]      (criterion "annealed": its exact value is L + 2u^2, so this criterion
                                reproduces branch 1 of the closed form as the sample grows)

with the expectation estimated over ``n_samples`` independent draws of the T - 1 distractors (the
same draws for every u: common random numbers). Both right-hand sides are convex in u and start at
L = log(T - 1), so the margin s_* - E[...] is concave with a negative value at u = 0: it has at most
two roots, found by bracketing and bisection. No transition (NaN) if the margin never turns positive.

There are no fitted parameters; the closed form's c enters only the comparison, never the simulation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from numbers import Real
from typing import Any

import numpy as np

from psattn.theory.transition import C_CONSTANT, crossover_dk, gamma_c

CRITERIA = ("quenched", "annealed")


def _check_count(name: str, value: Any, low: int) -> int:
    """``value`` as an int if it is a whole number >= ``low`` (not a bool), else a ValueError naming it."""
    number = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and number.is_integer() and number >= low):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(number)


def _check_real(name: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a float if it is a finite real number (> 0 with ``positive``), else a ValueError naming it
    (NaN or inf gave NaN, a negative d_k a 'math domain error')."""
    number = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and (number > 0 or not positive)):
        raise ValueError(f"{name} must be a finite number{' > 0' if positive else ''}, got {value!r}")
    return number


def _logsumexp_rows(a: np.ndarray) -> np.ndarray:
    m = a.max(axis=1, keepdims=True)
    return m[:, 0] + np.log(np.exp(a - m).sum(axis=1))


class ReducedModel:
    """The distractor draws of one (T, n_samples, seed), shared by every d_k and coupling."""

    def __init__(self, T: int, n_samples: int = 256, seed: int = 0):
        self.T, self.n_samples, self.seed = _check_count("T", T, 3), _check_count("n_samples", n_samples, 2), seed
        _check_count("seed", seed, 0)  # NumPy's words: 'expected non-negative integer'
        rng = np.random.default_rng(np.random.SeedSequence([seed, int(T)]))
        self.xi = rng.standard_normal((self.n_samples, self.T - 1))  # (n, T - 1)

    def _per_sample(self, u: float) -> tuple[np.ndarray, np.ndarray]:
        """log Z_n(u) (n,) and its derivative d log Z_n / du = sum_j w_nj 2 xi_nj (n,)."""
        a = 2.0 * u * self.xi  # (n, T - 1)
        log_z = _logsumexp_rows(a)
        w = np.exp(a - log_z[:, None])  # softmax weights of the distractors
        return log_z, (w * 2.0 * self.xi).sum(axis=1)

    def log_partition(self, u: float, criterion: str = "quenched") -> tuple[float, float]:
        """(value, derivative in u) of E[log Z(u)] (quenched) or log E[Z(u)] (annealed), estimated
        over the samples."""
        log_z, dlog_z = self._per_sample(_check_real("u", u))
        if criterion == "quenched":
            return float(log_z.mean()), float(dlog_z.mean())
        if criterion == "annealed":
            top = log_z.max()
            weights = np.exp(log_z - top)
            value = top + math.log(weights.sum()) - math.log(self.n_samples)
            return float(value), float((weights * dlog_z).sum() / weights.sum())
        raise ValueError(f"unknown criterion {criterion!r}; expected one of {CRITERIA}")

    def margin(self, u: float, d_k: float, criterion: str = "quenched") -> float:
        """s_*(u) - log-partition(u): positive once the target wins."""
        return u * math.sqrt(_check_real("d_k", d_k, positive=True)) - self.log_partition(u, criterion)[0]

    def target_weight(self, gamma: float, d_k: float) -> float:
        """Mean attention weight of the target at coupling gamma (the order parameter)."""
        u = _check_real("gamma", gamma) ** 2
        log_z, _ = self._per_sample(u)
        return float((1.0 / (1.0 + np.exp(log_z - u * math.sqrt(_check_real("d_k", d_k, positive=True))))).mean())

    def transition(self, d_k: float, criterion: str = "quenched", rtol: float = 1e-10) -> float:
        """The simulated critical coupling gamma (not gamma^2), or NaN if the target never wins."""
        if isinstance(d_k, bool) or not isinstance(d_k, Real) or not 0 < d_k < math.inf:  # inf: the bisection never ends
            raise ValueError(f"d_k must be a finite number > 0, got {d_k!r}")
        if isinstance(rtol, bool) or not isinstance(rtol, Real) or not 0 < rtol < 1:  # 0 or less: it never ends either
            raise ValueError(f"rtol must be a number in (0, 1), got {rtol!r}")
        if criterion not in CRITERIA:
            raise ValueError(f"unknown criterion {criterion!r}; expected one of {CRITERIA}")
        hi = self._bracket(d_k, criterion)
        if hi is None:
            return math.nan
        lo = 0.0
        while hi - lo > rtol * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if self.margin(mid, d_k, criterion) > 0 else (mid, hi)
        return math.sqrt(0.5 * (lo + hi))

    def _bracket(self, d_k: float, criterion: str) -> float | None:
        """A u with a positive margin (the first root lies below it), or None if there is none.
        The margin is concave, negative at 0, with asymptotic slope sqrt(d_k) - 2 max(xi)."""
        root_dk = math.sqrt(d_k)
        L = math.log(self.T - 1)
        if d_k >= 8 * L:  # the annealed root; Jensen puts the quenched margin >= 0 there
            u = (root_dk - math.sqrt(d_k - 8 * L)) / 4
            if self.margin(u, d_k, criterion) > 0:
                return u
        top = float(self.xi.max(axis=1).mean()) if criterion == "quenched" else float(np.max(self.xi))
        if root_dk - 2 * top > 0:  # eventually increasing without bound
            u = 1.0
            while self.margin(u, d_k, criterion) <= 0:
                u *= 2.0
            return u
        slope = lambda u: root_dk - self.log_partition(u, criterion)[1]  # noqa: E731 (decreasing)
        lo, hi = 0.0, 1.0
        while slope(hi) > 0:
            lo, hi = hi, 2 * hi
        for _ in range(60):  # the peak of the margin
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if slope(mid) > 0 else (lo, mid)
        peak = 0.5 * (lo + hi)
        return peak if self.margin(peak, d_k, criterion) > 0 else None


def simulate_transition(d_k: float, T: int, *, n_samples: int = 256, seed: int = 0,
                        criterion: str = "quenched") -> float:
    """The simulated critical coupling of the reduced model at (d_k, T) (NaN: no transition)."""
    return ReducedModel(T, n_samples, seed).transition(d_k, criterion)


@dataclass
class TransitionComparison:
    """Simulated against closed-form gamma_c on a (d_k, T) grid, with agreement statistics.

    ``gamma_sim`` and ``gamma_theory`` are (len(T), len(d_k)) arrays; ``branch`` is 1 above the
    crossover (d_k >= 8L) and 2 below it. ``parting`` lists the points where the two differ by more
    than ``part_threshold`` (relative) or the simulation has no transition.
    """

    d_k: list[float]
    T: list[int]
    gamma_sim: np.ndarray
    gamma_theory: np.ndarray
    branch: np.ndarray
    criterion: str
    n_samples: int
    seed: int
    part_threshold: float
    stats: dict[str, Any] = field(default_factory=dict)
    c: float = C_CONSTANT  # the law's constant of gamma_theory (what plot_phase_diagram draws the closed form with)

    def to_dict(self) -> dict[str, Any]:
        """The comparison as plain values, for JSON (no transition as null)."""
        d = asdict(self)
        for key in ("gamma_sim", "gamma_theory"):  # NaN (no transition) becomes null
            d[key] = [[float(v) if np.isfinite(v) else None for v in row] for row in d[key]]
        d["branch"] = d["branch"].tolist()
        return d


def _agreement(sim: np.ndarray, theory: np.ndarray) -> dict[str, Any]:
    ok = np.isfinite(sim)
    out: dict[str, Any] = {"points": int(sim.size), "with_transition": int(ok.sum())}
    if ok.sum() >= 2 and np.ptp(sim[ok]) > 0 and np.ptp(theory[ok]) > 0:
        out["pearson_r"] = float(np.corrcoef(sim[ok], theory[ok])[0, 1])
    else:
        out["pearson_r"] = None
    rel = np.abs(sim[ok] - theory[ok]) / theory[ok]
    out["max_rel_error"] = float(rel.max()) if rel.size else None
    out["median_rel_error"] = float(np.median(rel)) if rel.size else None
    return out


def compare_with_theory(d_ks, Ts, *, n_samples: int = 256, seed: int = 0, criterion: str = "quenched",
                        c: float = C_CONSTANT, part_threshold: float = 0.05) -> TransitionComparison:
    """Simulate every (d_k, T) of the grid and compare with ``gamma_c`` (see the class doc).
    ``stats`` holds Pearson r, the largest and median relative error over all points with a
    simulated transition, then the same per side of the crossover."""
    # checked, not converted: int() made T = 16.9 a comparison at T = 16 and "16" one at 16, without a word
    d_ks = [_check_real("d_k", d, positive=True) for d in d_ks]
    Ts = [_check_count("T", t, 3) for t in Ts]
    _check_real("part_threshold", part_threshold)  # NaN compared false: no point was ever reported as parting
    sim = np.full((len(Ts), len(d_ks)), np.nan)
    for i, T in enumerate(Ts):
        model = ReducedModel(T, n_samples, seed)
        for j, d in enumerate(d_ks):
            sim[i, j] = model.transition(d, criterion)
    dk_grid, T_grid = np.meshgrid(d_ks, Ts)
    theory = np.asarray(gamma_c(dk_grid, T_grid, c))
    branch = np.where(dk_grid >= np.asarray(crossover_dk(T_grid)), 1, 2)
    stats: dict[str, Any] = {"all": _agreement(sim.ravel(), theory.ravel()),
                             "above_crossover": _agreement(sim[branch == 1], theory[branch == 1]),
                             "below_crossover": _agreement(sim[branch == 2], theory[branch == 2])}
    parting = []
    for i, T in enumerate(Ts):
        for j, d in enumerate(d_ks):
            s, t = sim[i, j], theory[i, j]
            if not np.isfinite(s) or abs(s - t) / t > part_threshold:
                parting.append({"d_k": d, "T": T, "branch": int(branch[i, j]), "gamma_theory": float(t),
                                "gamma_sim": float(s) if np.isfinite(s) else None,
                                "rel_error": float(abs(s - t) / t) if np.isfinite(s) else None})
    stats["parting"] = parting
    return TransitionComparison(d_ks, Ts, sim, theory, branch, criterion, n_samples, seed, part_threshold, stats, c)
