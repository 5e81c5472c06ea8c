"""Certificates of the algebra of the shear: the four-term score, symplecticity, the Hamiltonian
flow, kinetic energy, and uniqueness within the factorised subclass.

Each has a symbolic part (SymPy, about the claimed operator M_gamma) and a part about the operator
under test: its phase-space matrix M_F (see ``psattn.theory.probe``), read exactly at dyadic
couplings and compared with the symbolic object, or its outputs on random tensors.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch

from psattn.ops.attention import ScoreTerms, score_terms
from psattn.ops.shear import momentum
from psattn.theory.certificates.base import Evidence, certificate
from psattn.theory.operators import OperatorUnderTest
from psattn.theory.probe import DYADIC_GAMMAS, phase_map, probe_taps

DIM = 4  # stream width of the probes (two RoPE pairs)


def exact(a: np.ndarray) -> sp.Matrix:
    """A float matrix as SymPy rationals, exactly (every float is a binary fraction)."""
    return sp.Matrix(a.shape[0], a.shape[1], [sp.Rational(float(v)) for v in a.ravel()])


def claimed_shear_matrix(gamma, dim: int = 1) -> sp.Matrix:
    """M_gamma = [[I, gamma I], [0, I]] with identity blocks of size ``dim``."""
    I, Z = sp.eye(dim), sp.zeros(dim)
    return sp.Matrix(sp.BlockMatrix([[I, gamma * I], [Z, I]]))


def symplectic_form(dim: int) -> sp.Matrix:
    """The symplectic form J of a 2``dim``-dimensional phase space."""
    I, Z = sp.eye(dim), sp.zeros(dim)
    return sp.Matrix(sp.BlockMatrix([[Z, I], [-I, Z]]))


def operator_matrices(op: OperatorUnderTest, ev: Evidence) -> dict:
    """{gamma: exact M_F} at the dyadic couplings, or {} (with a failed check) if the operator is
    not a one-step causal linear map."""
    out = {}
    for g in DYADIC_GAMMAS:
        taps = probe_taps(op, g, DIM)
        if not ev.check(taps.is_one_step_causal,
                        f"gamma={g}: one-step causal linear map (taps at lags {taps.lags}, "
                        f"linearity error {taps.linearity_error:.1e})"):
            return {}
        out[g] = exact(taps.phase_space_matrix())
    return out


@certificate(
    "four_term_decomposition",
    "q̂_tᵀk̂_j = T1 + T2 + T3 + T4 with T1 = q_tᵀk_j, T2 = γ_q p_{q,t}ᵀk_j, T3 = γ_k q_tᵀp_{k,j}, "
    "T4 = γ_qγ_k p_{q,t}ᵀp_{k,j} (p the post-RoPE momenta)",
    "symbolic + numeric",
)
def four_term_decomposition(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check the four-term split of the sheared scores (the statement above)."""
    gq, gk = sp.symbols("gamma_q gamma_k")
    q, qp, k, kp = (sp.Matrix(sp.symbols(f"{n}0:3")) for n in ("q", "qprev", "k", "kprev"))
    pq, pk = q - qp, k - kp
    lhs = (q + gq * pq).dot(k + gk * pk)
    rhs = q.dot(k) + gq * pq.dot(k) + gk * q.dot(pk) + gq * gk * pq.dot(pk)
    ev.check(sp.expand(lhs - rhs) == 0, "symbolic: (q + γ_q p_q)ᵀ(k + γ_k p_k) - (T1+T2+T3+T4) expands to 0")

    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(2, 2, 12, 8, generator=g, dtype=torch.float64) for _ in range(2))  # (B, H, T, D)
    for gamma_q, gamma_k in ((0.7, 0.3), (1.5, 1.5), (0.0, 0.9)):
        scores = op.sheared(q, gamma_q) @ op.sheared(k, gamma_k).transpose(-2, -1)  # (B, H, T, T)
        terms = ScoreTerms.from_streams(q, momentum(q), k, momentum(k), gamma_q, gamma_k)
        err = (scores - terms.total()).abs().max().item()
        ev.check(err < 1e-10, f"operator, γ_q={gamma_q}, γ_k={gamma_k}: |q̂ᵀk̂ - ΣT| = {err:.1e}")
        lib = score_terms(q, k, gamma_q=gamma_q, gamma_k=gamma_k).total()
        err = (lib - terms.total()).abs().max().item()
        ev.check(err < 1e-10, f"score_terms matches the definitions ({err:.1e})")


@certificate(
    "symplecticity",
    "the operator's phase-space map M_F is symplectic: det M_F = 1 and M_Fᵀ J M_F = J",
    "symbolic + numeric",
)
def symplecticity(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check that the operator's phase-space map is symplectic (the statement above)."""
    gamma = sp.Symbol("gamma", real=True)
    M, J = claimed_shear_matrix(gamma, 2), symplectic_form(2)
    ev.check(sp.simplify(M.det() - 1) == 0 and sp.simplify(M.T * J * M - J) == sp.zeros(4),
             "symbolic: det M_γ = 1 and M_γᵀ J M_γ = J for every γ")
    J = symplectic_form(DIM)
    for g, MF in operator_matrices(op, ev).items():
        det = MF.det()
        ev.check(abs(det - 1) < sp.Rational(1, 10**12), f"operator, γ={g}: det M_F - 1 = {float(det - 1):.1e}")
        residual = MF.T * J * MF - J
        worst = max(abs(v) for v in residual)
        ev.check(worst == 0, f"operator, γ={g}: M_Fᵀ J M_F - J has max entry {float(worst):.3g} (exact)")


@certificate(
    "hamiltonian_flow",
    "M_γ is the exact time-γ flow of H(q, p) = ½|p|² (q̇ = ∂H/∂p = p, ṗ = -∂H/∂q = 0), and the "
    "operator's M_F equals it",
    "symbolic + numeric",
)
def hamiltonian_flow(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check that the shear is the Hamiltonian flow (the statement above)."""
    tau, gamma, q0, p0 = sp.symbols("tau gamma q0 p0", real=True)
    qf, pf = sp.Function("q"), sp.Function("p")
    H = pf(tau) ** 2 / 2
    odes = [sp.Eq(qf(tau).diff(tau), sp.diff(H, pf(tau))), sp.Eq(pf(tau).diff(tau), -sp.diff(H, qf(tau)))]
    sol = sp.dsolve(odes, [qf(tau), pf(tau)], ics={qf(0): q0, pf(0): p0})
    flow = {s.lhs.func: s.rhs.subs(tau, gamma) for s in sol}
    Phi = sp.Matrix([[sp.diff(flow[qf], q0), sp.diff(flow[qf], p0)], [sp.diff(flow[pf], q0), sp.diff(flow[pf], p0)]])
    ev.check(sp.simplify(Phi - claimed_shear_matrix(gamma)) == sp.zeros(2),
             f"symbolic: Hamilton's equations integrate to (q, p)(γ) = ({flow[qf]}, {flow[pf]}) = M_γ (q0, p0)")
    A = sp.Matrix([[0, 1], [0, 0]])
    ev.check(sp.simplify((gamma * A).exp() - claimed_shear_matrix(gamma)) == sp.zeros(2),
             "symbolic: exp(γ [[0, 1], [0, 0]]) = M_γ (the generator of H's flow)")
    for g, MF in operator_matrices(op, ev).items():
        target = claimed_shear_matrix(sp.Rational(g), DIM)
        worst = max(abs(v) for v in (MF - target))
        ev.check(worst == 0, f"operator, γ={g}: M_F = time-γ flow (max deviation {float(worst):.3g}, exact)")


@certificate(
    "kinetic_energy",
    "the operator conserves the kinetic energy ½|p|² exactly in each application (p' = p)",
    "symbolic + numeric",
)
def kinetic_energy(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check that the shear leaves the momentum unchanged, hence the kinetic energy (the statement above)."""
    gamma = sp.Symbol("gamma", real=True)
    x, p = sp.Matrix(sp.symbols("x0:2", real=True)), sp.Matrix(sp.symbols("p0:2", real=True))
    image = claimed_shear_matrix(gamma, 2) * sp.Matrix.vstack(x, p)
    p_new = image[2:, 0]
    ev.check(sp.expand(p_new - p) == sp.zeros(2, 1) and sp.expand(p_new.dot(p_new) - p.dot(p)) == 0,
             "symbolic: M_γ(x, p) has momentum p' = p (each entry), so H(M_γ(x, p)) = H(x, p)")
    momentum_rows = sp.Matrix.hstack(sp.zeros(DIM), sp.eye(DIM))  # p' = 0·x + I·p
    for g, MF in operator_matrices(op, ev).items():
        worst = max(abs(v) for v in (MF[DIM:, :] - momentum_rows))
        ev.check(worst == 0, f"operator, γ={g}: the momentum rows of M_F are [0, I], p' = p "
                             f"(max deviation {float(worst):.3g}, exact)")
    g = torch.Generator().manual_seed(2)
    x, p = (torch.randn(64, DIM, generator=g, dtype=torch.float64) for _ in range(2))
    for gamma in (0.37, 1.3, -0.4):
        _, p_new = phase_map(op, x, p, gamma)
        err = ((p_new - p).abs().amax(1) / p.abs().amax(1)).max().item()
        ev.check(err < 1e-12, f"operator, γ={gamma}: max |p' - p|∞ / |p|∞ = {err:.1e}")
        energy, energy_new = 0.5 * (p**2).sum(1), 0.5 * (p_new**2).sum(1)
        err = ((energy_new - energy).abs() / energy).max().item()
        ev.check(err < 1e-12, f"operator, γ={gamma}: max relative change of ½|p|² = {err:.1e}")


def _stream_constraints(a, b, m, n):
    """Equality constraints on one stream's map [[a, b], [m, n]] acting on (x, p)."""
    return {
        "symplectic (det = 1)": a * n - b * m - 1,
        "momenta stay momenta (a constant stream keeps p = 0)": m,
        "DC-neutral (x̂ = x on a constant stream)": a - 1,
    }


@certificate(
    "uniqueness",
    "within the factorised subclass (per-stream 2x2 maps on (x, p), one-step, causal, linear), the "
    "constraints symplectic + momentum-preserving + DC-neutral + swap-symmetric force M_q = M_k = M_γ, "
    "and high-pass forces γ > 0 or γ < -1; the operator's symmetric variant is that solution",
    "symbolic + numeric",
)
def uniqueness(op: OperatorUnderTest, ev: Evidence) -> None:
    """Check that the constraints force the symmetric shear (the statement above)."""
    aq, bq, mq, nq, ak, bk, mk, nk = sp.symbols("a_q b_q m_q n_q a_k b_k m_k n_k", real=True)
    x, p, y, r = sp.symbols("x p y r", real=True)
    eqs = list(_stream_constraints(aq, bq, mq, nq).values()) + list(_stream_constraints(ak, bk, mk, nk).values())
    swap = sp.expand((aq * x + bq * p) * (ak * y + bk * r) - (ak * x + bk * p) * (aq * y + bq * r))
    eqs += sp.Poly(swap, x, p, y, r).coeffs()  # swapping the streams' roles leaves every score unchanged
    sols = sp.solve(eqs, [aq, mq, nq, ak, mk, nk, bk], dict=True)
    ok = len(sols) == 1 and all(sp.simplify(sols[0].get(s, s) - v) == 0
                                for s, v in ((aq, 1), (mq, 0), (nq, 1), (ak, 1), (mk, 0), (nk, 1), (bk, bq)))
    ev.check(ok, f"symbolic: the constraints have the unique solution family {sols}: M_q = M_k = [[1, γ], [0, 1]], γ = b_q")
    gamma = sp.Symbol("gamma", real=True)
    # x̂ = x + γ p has H(z) = 1 + γ (1 - z^-1): H(1) = 1, H(-1) = 1 + 2γ
    high_pass = sp.solve_univariate_inequality((1 + 2 * gamma) ** 2 > 1, gamma, relational=False)
    ev.check(high_pass == sp.Union(sp.Interval.open(-sp.oo, -1), sp.Interval.open(0, sp.oo)),
             f"symbolic: high-pass |H(-1)| > |H(1)| iff γ ∈ {high_pass}")
    relaxed = eqs[:2] + eqs[3:]  # every constraint but the query stream's DC-neutrality
    witness = sp.solve([e.subs(aq, 2) for e in relaxed], [mq, nq, ak, mk, nk, bk], dict=True)
    holds = bool(witness) and all(sp.simplify(e.subs({aq: 2, **witness[0]})) == 0 for e in relaxed)
    ev.check(holds, "symbolic: dropping DC-neutrality admits a non-shear solution, a_q = 2 with "
                    f"{witness[0] if witness else 'none found'} satisfying every other constraint, so it is needed")
    for g, MF in operator_matrices(op, ev).items():
        blocks = {name: MF[i * DIM:(i + 1) * DIM, j * DIM:(j + 1) * DIM]
                  for name, (i, j) in {"a": (0, 0), "b": (0, 1), "m": (1, 0), "n": (1, 1)}.items()}
        scalar = all(B == B[0, 0] * sp.eye(DIM) for B in blocks.values())
        if not ev.check(scalar, f"operator, γ={g}: M_F is isotropic (each block a multiple of I)"):
            continue
        a, b, m, n = (blocks[k][0, 0] for k in "abmn")
        violated = [name for name, e in _stream_constraints(a, b, m, n).items() if e != 0]
        ev.check(not violated, f"operator, γ={g}: (a, b, m, n) = ({a}, {b}, {m}, {n}) "
                               f"violates {violated or 'nothing'}")
        ev.check(b == sp.Rational(g) and sp.Rational(g) in high_pass,
                 f"operator, γ={g}: b = {b} is the claimed γ and lies in the high-pass set")
