"""USA/SA velocity fields against hand computations; co-moving field against the direct one."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.meanfield.dynamics import ComovingField, DirectField, energy
from psattn.meanfield.gauges import random_orthogonal
from psattn.meanfield.kernels import cosine_toeplitz_kernel, prefix_kernel, rope_kernel


def _basis_state():
    return torch.eye(3, dtype=torch.float64)[None]  # (1, 3, 3): x_i = e_i


def test_usa_on_orthonormal_triple():
    # x_i = e_i, c = 1, A = I, β = 1: v_1 = P_{e1}((e·e1 + e2 + e3)/3) = (0, 1, 1)/3, and cyclically
    ones = torch.ones(3, 3, dtype=torch.float64)
    eye = torch.eye(3, dtype=torch.float64).expand(3, 3, 3, 3)
    v, e = DirectField(ones, eye, beta=1.0, dynamics="usa")(_basis_state())
    expected = (torch.ones(3, 3, dtype=torch.float64) - torch.eye(3, dtype=torch.float64)) / 3
    assert torch.allclose(v[0], expected, atol=1e-14)
    assert math.isclose(float(e[0]), (3 * math.e + 6) / 18, rel_tol=1e-14)  # Σ_ij e^{⟨x_i,x_j⟩} / (2β n²)


def test_sa_on_orthonormal_triple():
    # SA: Z_1 = e + 2, v_1 = (0, 1, 1)/(e + 2)
    ones = torch.ones(3, 3, dtype=torch.float64)
    v, _ = ComovingField(ones, beta=1.0, dynamics="sa")(_basis_state())
    expected = (torch.ones(3, 3, dtype=torch.float64) - torch.eye(3, dtype=torch.float64)) / (math.e + 2)
    assert torch.allclose(v[0], expected, atol=1e-14)


def _hand_velocity(x, c, a, beta, normalised):
    """Explicit loops: v_i = P_{x_i}(Σ_j c_ij e^{β⟨x_i, A_ij x_j⟩} A_ij x_j / N_i)."""
    n = len(x)
    out = []
    for i in range(n):
        m = np.zeros(3)
        z = 0.0
        for j in range(n):
            ax = a[i][j] @ x[j]
            w = math.exp(beta * float(x[i] @ ax))
            m += c[i][j] * w * ax
            z += abs(c[i][j]) * w
        m = m / (z if normalised else n)
        out.append(m - float(m @ x[i]) * x[i])
    return np.array(out)


@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_general_kernel_on_three_particles_by_hand(dynamics):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    pos = [0.0, 1.0, 2.5]
    c = np.cos(0.8 * (np.array(pos)[:, None] - np.array(pos)[None, :]))  # sign-changing label factor
    theta = 0.6 * np.array(pos)
    g = [np.array([[math.cos(t), -math.sin(t), 0], [math.sin(t), math.cos(t), 0], [0, 0, 1]]) for t in theta]
    a = [[g[i].T @ g[j] for j in range(3)] for i in range(3)]
    beta = 1.7
    expected = _hand_velocity(x, c, a, beta, normalised=dynamics == "sa")

    field = DirectField(torch.tensor(c), torch.tensor(np.array(a)), beta, dynamics)
    v, _ = field(torch.tensor(x)[None])
    assert np.allclose(v[0].numpy(), expected, atol=1e-13)

    gauges = torch.tensor(np.array(g))
    y = torch.einsum("iab,Bib->Bia", gauges, torch.tensor(x)[None])
    vy, _ = ComovingField(torch.tensor(c), beta, dynamics)(y)
    vx = torch.einsum("iba,Bib->Bia", gauges, vy)  # back to the content frame
    assert np.allclose(vx[0].numpy(), expected, atol=1e-13)


@pytest.mark.parametrize(
    "kernel",
    [rope_kernel(range(5), 3, (0.9,)), prefix_kernel([0, 1, 1, 2, 0], 3, 3, seed=2), cosine_toeplitz_kernel(range(5), 3, 1.1)],
    ids=lambda k: k.name,
)
@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_comoving_field_equals_direct_field(kernel, dynamics):
    x = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x = x / x.norm(dim=-1, keepdim=True)
    beta = 2.0
    v_direct, e_direct = DirectField(kernel.label_factor, kernel.pair_matrices(), beta, dynamics)(x)
    v_y, e_y = ComovingField(kernel.label_factor, beta, dynamics)(kernel.to_comoving(x))
    assert torch.allclose(kernel.from_comoving(v_y), v_direct, atol=1e-12)
    assert torch.allclose(e_y, e_direct, rtol=1e-12)
    assert torch.allclose(energy(x, kernel.label_factor, kernel.pair_matrices(), beta), e_direct, rtol=1e-12)


def test_velocity_is_tangent():
    k = rope_kernel(range(8), 3, (1.0,))
    x = torch.randn(3, 8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    x = x / x.norm(dim=-1, keepdim=True)
    v, _ = DirectField(k.label_factor, k.pair_matrices(), 1.0, "usa")(x)
    assert (v * x).sum(-1).abs().max() < 1e-14


def test_unknown_dynamics_rejected():
    with pytest.raises(ValueError, match="unknown dynamics"):
        ComovingField(torch.ones(2, 2), 1.0, "mean")


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 7),
    d=st.integers(2, 5),
    beta=st.floats(0.05, 8.0),
    seed=st.integers(0, 10_000),
    dynamics=st.sampled_from(["usa", "sa"]),
)
def test_comoving_equals_direct_for_random_gauges(n, d, beta, seed, dynamics):
    gen = torch.Generator().manual_seed(seed)
    gauges = random_orthogonal(n, d, seed)  # one gauge per token
    c = torch.randn(n, n, dtype=torch.float64, generator=gen)
    c = (c + c.T) / 2  # any symmetric label factor, signs included
    x = torch.randn(2, n, d, dtype=torch.float64, generator=gen)
    x = x / x.norm(dim=-1, keepdim=True)
    pairs = torch.einsum("iba,jbc->ijac", gauges, gauges)  # (n, n, d, d): G_iᵀ G_j
    v_direct, e_direct = DirectField(c, pairs, beta, dynamics)(x)
    y = torch.einsum("iab,Bib->Bia", gauges, x)
    v_y, e_y = ComovingField(c, beta, dynamics)(y)
    assert torch.allclose(torch.einsum("iba,Bib->Bia", gauges, v_y), v_direct, atol=1e-10)
    assert torch.allclose(e_y, e_direct, rtol=1e-10, atol=1e-12)
    assert (v_direct * x).sum(-1).abs().max() < 1e-10
