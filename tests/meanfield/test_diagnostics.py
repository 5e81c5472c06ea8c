"""Diagnostics on states whose answers are known."""

import math

import pytest
import torch

from psattn.meanfield.diagnostics import (
    cluster_count,
    conditional_spread,
    diagnose,
    fraction_aligned,
    graph_law_distance,
    marginal_spread,
    mean_cosine,
    min_inner,
)
from psattn.meanfield.kernels import plain_kernel, prefix_kernel, rope_kernel


def _f64(x):
    return torch.tensor(x, dtype=torch.float64)


def _great_circle(n):
    angles = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    return torch.stack([angles.cos(), angles.sin(), torch.zeros(n, dtype=torch.float64)], -1)[None]  # (1, n, 3)


def test_dirac_mass():
    x = _f64([[0.0, 0.0, 1.0]]).expand(1, 5, 3)
    assert float(mean_cosine(x)) == pytest.approx(1.0)
    assert float(fraction_aligned(x)) == 1.0
    assert float(cluster_count(x)) == 1.0
    assert float(min_inner(x)) == pytest.approx(1.0)
    assert float(marginal_spread(x)) == pytest.approx(0.0)


def test_two_antipodal_clusters():
    x = _f64([[[0, 0, 1.0], [0, 0, 1.0], [0, 0, -1.0], [0, 0, -1.0]]])
    assert float(cluster_count(x)) == 2.0
    assert float(min_inner(x)) == -1.0
    assert float(fraction_aligned(x)) == pytest.approx(2 / 6)
    assert float(mean_cosine(x)) == pytest.approx(-1 / 3)
    assert float(marginal_spread(x)) == pytest.approx(1.0)


def test_uniform_great_circle():
    x = _great_circle(8)
    assert float(cluster_count(x)) == 8.0
    assert float(fraction_aligned(x)) == 0.0
    assert float(mean_cosine(x)) == pytest.approx(-1 / 7)
    assert float(marginal_spread(x)) == pytest.approx(1.0)


def test_cluster_count_follows_chains():
    # 0–1 and 1–2 above threshold, 0–2 below: one component
    angles = _f64([0.0, 0.03, 0.06, 2.0])
    x = torch.stack([angles.cos(), angles.sin(), torch.zeros(4, dtype=torch.float64)], -1)[None]
    assert float(cluster_count(x, threshold=0.999)) == 2.0


def test_rope_graph_law_is_a_conditional_dirac():
    kernel = rope_kernel(range(10), 3, (1.0,))
    y_star = _f64([0.6, 0.0, 0.8])
    x = kernel.from_comoving(y_star.expand(1, 10, 3))  # x_i = G(s_i)ᵀ y*: a latitude circle
    diag = diagnose(x, kernel)
    assert float(diag["comoving_spread"]) == pytest.approx(0.0, abs=1e-12)
    assert float(diag["graph_law_distance"]) == pytest.approx(0.0, abs=1e-12)
    assert float(diag["marginal_spread"]) > 0.1
    assert torch.allclose(x[0, :, 2], torch.full((10,), 0.8, dtype=torch.float64))  # constant latitude
    assert math.isnan(float(diag["conditional_spread"]))  # every position is its own label


def test_conditional_spread_per_prompt_group():
    kernel = prefix_kernel([0, 0, 1, 1], 3, 2, seed=0)
    x = _f64([[[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]]])
    # group 0 collapsed (spread 0), group 1 antipodal (spread 1): mass-weighted mean 0.5
    assert float(conditional_spread(x, kernel)) == pytest.approx(0.5)


def test_graph_law_distance_of_spread_state():
    angles = torch.linspace(0.0, 2.0, 6, dtype=torch.float64)  # an arc: its mean has a direction
    x = torch.stack([angles.cos(), angles.sin(), torch.zeros(6, dtype=torch.float64)], -1)[None]
    y_star = torch.tensor([math.cos(1.0), math.sin(1.0), 0.0], dtype=torch.float64)  # the arc's mean direction
    expected = float((x[0] - y_star).norm(dim=-1).mean())
    assert float(graph_law_distance(x, plain_kernel(6, 3))) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [4, 8, 64])
def test_graph_law_distance_is_nan_where_the_comoving_mean_has_no_direction(n):
    """A uniform great circle has co-moving mean 0 up to rounding: y* was the rounding error's direction, and the
    same circle, turned, read 1.23 to 1.31 (n = 4). It is NaN now, as is the diagnostic that ``diagnose`` records."""
    for phase in (0.0, 0.1, 0.3, 1.0):
        angles = phase + 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
        x = torch.stack([angles.cos(), angles.sin(), torch.zeros(n, dtype=torch.float64)], -1)[None]
        assert math.isnan(float(graph_law_distance(x, plain_kernel(n, 3))))
        assert math.isnan(float(diagnose(x, plain_kernel(n, 3))["graph_law_distance"]))
    balanced = _great_circle(n)
    tilted = balanced.clone()
    tilted[0, 0] = torch.tensor([math.cos(0.01), 0.0, math.sin(0.01)])  # ‖ȳ‖ ≈ 0.01/n: a direction again
    assert math.isfinite(float(graph_law_distance(tilted, plain_kernel(n, 3))))


def test_all_diagnostics_are_batched():
    x = torch.randn(4, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x / x.norm(dim=-1, keepdim=True)
    for name, value in diagnose(x, prefix_kernel([0, 1, 0, 1, 2, 2, 2], 3, 3, 0)).items():
        assert value.shape == (4,), name


def test_cluster_count_matches_scipy_connected_components():
    csgraph = pytest.importorskip("scipy.sparse.csgraph")
    import numpy as np

    rng = np.random.default_rng(0)
    for _ in range(20):
        n, d = int(rng.integers(2, 50)), int(rng.integers(2, 4))
        x = torch.as_tensor(rng.standard_normal((2, n, d)))
        x = x / x.norm(dim=-1, keepdim=True)
        threshold = float(rng.uniform(0.0, 0.99))
        counts = cluster_count(x, threshold)
        for b in range(2):
            expected = csgraph.connected_components((x[b] @ x[b].T > threshold).numpy(), directed=False)[0]
            assert counts[b] == expected


def test_cluster_count_of_a_long_chain_is_one():
    t = torch.linspace(0, 3, 300, dtype=torch.float64)
    chain = torch.stack([t.cos(), t.sin()], -1)[None]  # spacing 0.01 rad: every neighbour within 0.999
    assert cluster_count(chain).item() == 1


def test_diagnose_refuses_states_that_do_not_fit_the_kernel_or_the_sphere():
    """A state without a batch axis, or of another n or d than the kernel, failed deep in torch (unpacking,
    index_add_, einsum); one off the sphere gave wrong cosines (a mean cosine of −1.1) without a word."""
    kernel = rope_kernel(range(5), 3, (1.0,))
    x = torch.nn.functional.normalize(torch.randn(1, 5, 3, dtype=torch.float64), dim=-1)
    for bad in (x[0], x[:, :4], torch.nn.functional.normalize(torch.randn(1, 5, 4, dtype=torch.float64), dim=-1)):
        with pytest.raises(ValueError, match=r"states must be a floating tensor \(B, n=5, d=3\)"):
            diagnose(bad, kernel)
    with pytest.raises(ValueError, match="states must lie on the unit sphere"):
        diagnose(3 * x, kernel)


def test_diagnose_of_float32_states_with_a_float64_kernel():
    """The kernel's float64 gauges met float32 states in einsum: 'expected scalar type Float but found Double'."""
    kernel = rope_kernel(range(5), 3, (1.0,))
    x = torch.nn.functional.normalize(torch.randn(2, 5, 3, dtype=torch.float64), dim=-1)
    for name, value in diagnose(x.float(), kernel).items():
        assert value.dtype == torch.float32
        assert torch.allclose(value.double(), diagnose(x, kernel)[name], atol=1e-5, equal_nan=True), name


@pytest.mark.parametrize("threshold", [float("nan"), 1.0, -1.5])
def test_a_threshold_that_is_not_a_cosine_is_refused(threshold):
    """NaN compares false: no pair counted as aligned and every particle its own cluster, without a word."""
    x = _f64([[0.0, 0.0, 1.0]]).expand(1, 5, 3)
    for count in (fraction_aligned, cluster_count):
        with pytest.raises(ValueError, match=r"threshold must be a cosine in \(−1, 1\)"):
            count(x, threshold)
