"""Distances on the circle and the sphere: exact values, symmetry, brute-force agreement."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.meanfield.distances import circle_w1, coupling_w1_bound, energy_distance


def test_circle_w1_of_two_points_is_the_shorter_arc():
    assert circle_w1(np.array([0.1]), None, np.array([0.4]), None) == pytest.approx(0.3)
    assert circle_w1(np.array([0.1]), None, np.array([2 * np.pi - 0.2]), None) == pytest.approx(0.3)  # wraps
    assert circle_w1(np.array([0.0]), None, np.array([np.pi]), None) == pytest.approx(np.pi)


def test_circle_w1_of_a_rotated_uniform_grid():
    n, alpha = 16, 0.05
    grid = np.arange(n) * 2 * np.pi / n
    assert circle_w1(grid, None, grid + alpha, None) == pytest.approx(alpha)
    assert circle_w1(grid, None, grid, None) == pytest.approx(0.0, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 7), st.integers(0, 10_000))
def test_circle_w1_matches_brute_force_cyclic_matching(n, seed):
    # equal-weight n-point laws on the circle: an optimal plan is a cyclic shift of the sorted matching
    rng = np.random.default_rng(seed)
    a, b = np.sort(rng.uniform(0, 2 * np.pi, n)), np.sort(rng.uniform(0, 2 * np.pi, n))
    arc = lambda u, v: np.minimum(np.abs(u - v), 2 * np.pi - np.abs(u - v))  # noqa: E731
    brute = min(arc(a, np.roll(b, k)).mean() for k in range(n))
    assert circle_w1(a, None, b, None) == pytest.approx(brute, abs=1e-12)
    assert circle_w1(b, None, a, None) == pytest.approx(brute, abs=1e-12)


def test_circle_w1_weighted_law():
    # mass 1/2 at 0 and 1/2 at 1 against a point at 0: move half the mass by 1
    assert circle_w1(np.array([0.0, 1.0]), np.array([1.0, 1.0]), np.array([0.0]), None) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="weights"):
        circle_w1(np.array([0.0, 1.0]), np.array([1.0, -1.0]), np.array([0.0]), None)


def test_energy_distance_is_a_symmetric_discrepancy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((50, 3))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = a.copy()
    b[:, 0] = np.abs(b[:, 0])
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    assert energy_distance(a, a) == pytest.approx(0.0, abs=1e-7)
    for same, weights in ((a[::-1], None), (np.concatenate([a, a]), None), (a, np.full(50, 3.0))):  # one law again
        assert energy_distance(a, same, weights_b=weights) < 1e-7  # √eps: D is the root of a sum of O(1) terms
    assert energy_distance(a, b) == pytest.approx(energy_distance(b, a))
    assert energy_distance(a, b) > 0.1


def _on_circle(angles):
    return np.stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)], 1)  # (n, 3)


@pytest.mark.parametrize("theta", [0.0, 1e-3, 1e-6, 1e-9, 1e-12])
def test_energy_distance_of_near_laws_is_exact(theta):
    """‖x‖² + ‖y‖² − 2⟨x, y⟩ cancelled to rounding noise for near points: two points 1e-9 apart were at energy distance
    0 (it is 4.5e-5), and moving one of two points by 1e-12 read 1e-8 (it is 7e-7). Analytic values:
    D(δ_x, δ_y)² = 2‖x − y‖, and D({x1, x2}, {x1, x2′})² = ‖x2 − x2′‖ / 2, with ‖x − y‖ = 2 sin(θ/2) at angle θ."""
    chord = 2.0 * np.sin(theta / 2)  # angles 0 and θ: the points' rounding moves their chord by eps relative
    one, other = _on_circle(np.array([0.0])), _on_circle(np.array([theta]))
    assert energy_distance(one, other) == pytest.approx(np.sqrt(2.0 * chord), rel=1e-12)
    pair, moved = _on_circle(np.array([2.0, 0.0])), _on_circle(np.array([2.0, theta]))
    # the O(1) distances cancel to a few eps in D², which moves D by about eps / D: 1e-9 at D = 7e-7
    assert energy_distance(pair, moved) == pytest.approx(np.sqrt(chord / 2.0), rel=1e-6, abs=1e-9)


def test_energy_distance_matches_a_high_precision_reference_for_near_clouds():
    """Clouds 1e-10 apart (D = 6.0e-6) read 0; 40-digit arithmetic on the same points is the reference."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 3))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = a + 1e-10 * rng.standard_normal((6, 3))
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    with mpmath.workdps(40):
        def norm(p, q):
            return mpmath.sqrt(mpmath.fsum((mpmath.mpf(u) - mpmath.mpf(v)) ** 2 for u, v in zip(p, q, strict=True)))

        def mean(x, y):
            return mpmath.fsum(norm(p, q) for p in x for q in y) / (len(x) * len(y))
        reference = float(mpmath.sqrt(2 * mean(a, b) - mean(a, a) - mean(b, b)))
    assert energy_distance(a, b) == pytest.approx(reference, rel=1e-5)


def test_coupling_bound_dominates_the_circle_w1():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 2 * np.pi, 20), rng.uniform(0, 2 * np.pi, 20)
    embed = lambda t: np.stack([np.cos(t), np.sin(t)], 1)  # noqa: E731
    assert coupling_w1_bound(embed(a), embed(b)) >= circle_w1(a, None, b, None) - 1e-12
    assert coupling_w1_bound(embed(a), embed(a)) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        coupling_w1_bound(embed(a), embed(b)[:3])


@pytest.mark.parametrize("call,match", [
    (lambda: circle_w1(np.array([np.nan, 0.0]), None, np.zeros(2), None), r"angles_a must be \(n,\) finite"),  # IndexError
    (lambda: circle_w1(np.zeros(2), None, np.zeros(0), None), r"angles_b must be \(n,\) finite"),  # ZeroDivisionError
    (lambda: circle_w1(np.zeros(2), np.array([np.inf, 1.0]), np.zeros(2), None), "weights must be finite"),  # nan
    (lambda: energy_distance(np.full((3, 2), np.nan), np.zeros((3, 2))), r"points_a must be \(n, d\) finite"),  # nan
    (lambda: energy_distance(np.zeros(3), np.zeros(3)), r"points_a must be \(n, d\)"),  # AxisError
    (lambda: energy_distance(np.zeros((3, 2)), np.zeros((3, 3))), "one dimension d, got 2 and 3"),  # matmul's words
    (lambda: coupling_w1_bound(np.full((2, 3), np.nan), np.ones((2, 3))), r"points_a must be \(n, d\) finite"),  # nan
    (lambda: coupling_w1_bound(np.zeros((0, 3)), np.zeros((0, 3))), r"points_a must be \(n, d\)"),  # nan, 2 warnings
    (lambda: coupling_w1_bound(np.ones(2), np.ones(2)), r"points_a must be \(n, d\)"),  # AxisError
])
def test_distances_refuse_points_that_give_nan_or_a_traceback(call, match):
    with pytest.raises(ValueError, match=match):
        call()
