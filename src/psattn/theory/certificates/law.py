"""The transition-law certificate: the closed form's branches and crossover, the reduction of the
operator's coherence term to the Gaussian score model, and the simulation where they must agree."""

from __future__ import annotations

import math

import sympy as sp
import torch

from psattn.theory.certificates.base import Evidence, certificate, operator_free
from psattn.theory.operators import OperatorUnderTest
from psattn.theory.reduced_model import ReducedModel

C = sp.Rational(74, 100)

# (d_k, T, gamma_c) by hand: L = log(T - 1) chosen to make the arithmetic exact.
HAND_VALUES = [
    (64.0, 1 + math.e**2, math.sqrt(2 - math.sqrt(3))),  # L = 2, branch 1: u = (8 - sqrt 48)/4 = 2 - sqrt 3
    (16.0, 1 + math.e**2, 1.0),  # L = 2, at the crossover d_k = 8L: u = 2L / sqrt(8L) = 1
    (4.0, 1 + math.e**2, 1 / (2 * 0.74)),  # L = 2, branch 2: u = 1 / (2c^2 * 2)
    (9.0, 1 + math.e, math.sqrt(0.5)),  # L = 1, branch 1: u = 2 / (3 + 1)
    (32.0, 1 + math.e, math.sqrt(math.sqrt(2) - math.sqrt(1.5))),  # L = 1: u = (sqrt 32 - sqrt 24)/4 = sqrt 2 - sqrt 1.5
    (4.0, 1 + math.e, 1 / (0.74 * 2**0.75)),  # L = 1, branch 2: u = 1 / (2c^2 sqrt 2)
]
HAND_TOLERANCE = 1e-6  # T = 1 + e^L carries rounding that sqrt(d_k - 8L) amplifies at the crossover

# Where the simulation (T = 256, 128 draws, seed 0) must reproduce branch 1, and how closely. Far above the
# crossover the distractors barely enter (gamma_c^2 -> L / sqrt(d_k) whatever their variance): at d_k = 512 and
# 2048 alone, distractor scores of variance gamma^4 instead of 4 gamma^4 moved gamma_sim by 0.8% and 0.2%, inside
# a 2% tolerance. At d_k = 96, about twice the crossover, that error moves it by 5.5% and a variance off by a
# fifth by 1.7%, while the simulation sits 0.16% below the annealed root (the quenched log-partition is smaller).
SIMULATED_DK = (96.0, 512.0, 2048.0)
SIMULATION_TOLERANCE = 0.01


def t4_moments(op: OperatorUnderTest, d_k: int = 64, n: int = 4000, gamma: float = 0.5, seed: int = 0):
    """Monte-Carlo moments of T4 / sqrt(d_k) = gamma^2 p'_qᵀ p'_k / sqrt(d_k) from the operator's momenta
    p' = (x̂ - x)/gamma, on token rows y x a b w c a with i.i.d. N(0, I) embeddings, k = e, q = -e.
    Returns the mean at the target b and its standard error, then the mean and the variance at the clean
    distractors x and w."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(n, 6, d_k, generator=g, dtype=torch.float64)  # y x a b w c
    rows = torch.stack([e[:, 0], e[:, 1], e[:, 2], e[:, 3], e[:, 4], e[:, 5], e[:, 2]], dim=1)[:, None]  # (n, 1, 7, d)
    p_k = (op.sheared(rows, gamma) - rows) / gamma
    p_q = (op.sheared(-rows, gamma) + rows) / gamma
    t4 = gamma**2 * (p_q[:, 0, 6:7] * p_k[:, 0]).sum(-1) / math.sqrt(d_k)  # (n, 7): the last query vs every key
    distractors = torch.cat([t4[:, 1], t4[:, 4]])
    return (t4[:, 3].mean().item(), t4[:, 3].std().item() / math.sqrt(n),
            distractors.mean().item(), distractors.var().item())


@operator_free
def _law_derivation(ev: Evidence) -> None:
    """The law's symbolic derivation: its roots, branch 1, the crossover and the annealed log-partition."""
    u, d, L, v = sp.symbols("u d L v", positive=True)
    s = sp.Symbol("s", real=True)
    roots = sp.solve(2 * u**2 - sp.sqrt(d) * u + L, u)
    smaller = (sp.sqrt(d) - sp.sqrt(d - 8 * L)) / 4
    ev.check(len(roots) == 2 and any(sp.simplify(r - smaller) == 0 for r in roots),
             f"symbolic: the roots of 2u² - √d u + L are {roots}")
    ev.check(sp.simplify(sp.radsimp(smaller - 2 * L / (sp.sqrt(d) + sp.sqrt(d - 8 * L)))) == 0,
             "symbolic: the smaller root equals branch 1, 2L / (√d + √(d - 8L))")
    disc = sp.discriminant(2 * u**2 - sp.sqrt(d) * u + L, u)
    ev.check(sp.simplify(disc - (d - 8 * L)) == 0, f"symbolic: discriminant {disc}: real roots iff d >= 8L (the crossover)")
    mgf = sp.integrate(sp.exp(s) * sp.exp(-s**2 / (2 * v)) / sp.sqrt(2 * sp.pi * v), (s, -sp.oo, sp.oo))
    mgf = sp.simplify(mgf.rewrite(sp.erf))
    ev.check(sp.simplify(sp.expand_log(sp.log(sp.exp(L) * mgf), force=True) - (L + v / 2)) == 0,
             "symbolic: annealed log-partition log((T-1) E e^s), s ~ N(0, v), = L + v/2")
    ev.check(sp.simplify((4 * smaller**2).subs(d, 8 * L) - 2 * L) == 0,
             "symbolic: at the crossover v = 4γ_c⁴ = 2L, the random-energy-model freezing point")


@certificate(
    "transition_law",
    "γ_c² = 2L/(√d_k + √(d_k - 8L)) for d_k >= 8L, 1/(2c²√(2L)) below, L = log(T-1), c = 0.74: branch 1 is "
    "the smaller root of 2γ⁴ - √d_k γ² + L = 0 (target mean γ²√d_k vs annealed log-partition L + v/2, "
    "v = 4γ⁴), real iff d_k >= 8L; the operator's T4 term has those moments; the simulation agrees above the crossover",
    "symbolic + numeric",
)
def transition_law(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check the critical-coupling law against its derivation and the simulation (the statement above)."""
    _law_derivation(ev)
    law = op.critical_coupling
    for d_k, T, expected in HAND_VALUES:
        got = float(law(d_k, T))
        ev.check(abs(got - expected) < HAND_TOLERANCE, f"law: γ_c({d_k:g}, {T:.4f}) = {got:.12g}, by hand {expected:.12g}")

    mean_target, se, mean_distractor, var_distractor = t4_moments(op)
    gamma, d_k = 0.5, 64
    ev.check(abs(mean_target - gamma**2 * math.sqrt(d_k)) < 5 * se,
             f"operator: T4 target mean {mean_target:.4f} = γ²√d_k = {gamma**2 * math.sqrt(d_k):.4f} (± {se:.4f})")
    ev.check(abs(mean_distractor) < 0.05 * gamma**2 and abs(var_distractor / (4 * gamma**4) - 1) < 0.1,
             f"operator: T4 distractor mean {mean_distractor:.4f}, variance {var_distractor:.4f} vs 4γ⁴ = {4 * gamma**4:.4f}")

    model = ReducedModel(256, n_samples=128, seed=0)
    for d_k in SIMULATED_DK:
        sim, theory = model.transition(d_k), float(law(d_k, 256))
        ev.check(abs(sim - theory) / theory < SIMULATION_TOLERANCE,
                 f"simulation at (d_k={d_k:g}, T=256), above the crossover d_k* = 44.3: γ_sim {sim:.4f} vs γ_c {theory:.4f}")
