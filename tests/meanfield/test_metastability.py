"""Two-cluster plateau lifetimes, the reduced ODE, the exponential fit and the cluster-count helpers."""

import math

import numpy as np
import pytest
import torch

from psattn.meanfield.metastability import (
    circle_cluster_count,
    crossing_time,
    exponential_fit,
    first_plateau,
    measure_cluster_count,
    measure_lifetimes,
    plateau_energies,
    predicted_cluster_count,
    reduced_lifetime,
    two_cluster_state,
)


def test_two_cluster_state_is_on_the_circle():
    x = two_cluster_state(10, math.pi / 2, 0.0, seed=0, batch=2)
    assert x.shape == (2, 10, 2) and torch.allclose(x.norm(dim=-1), torch.ones(2, 10, dtype=torch.float64))
    assert torch.allclose(x[0, :5], torch.tensor([1.0, 0.0], dtype=torch.float64).expand(5, 2))


@pytest.mark.parametrize("n", [5, 17])
def test_lifetimes_need_two_clusters_of_equal_mass(n):
    """An odd n made clusters of n//2 and n − n//2 particles, measured against the plateau energies and reduced ODE of
    two equal clusters: lifetimes 7% off at n = 5, inside the rate check's 15%. It is now refused."""
    with pytest.raises(ValueError, match="n must be an even integer ≥ 4"):
        measure_lifetimes(betas=(3.0, 5.0), n=n, batch=1)


def test_two_cluster_state_element_0_does_not_depend_on_the_batch_size():
    """One (B, n) draw of the noise gave element 0, the one whose energy curve is drawn, other noise at another batch
    size when n was not a multiple of 16."""
    single, batched = (two_cluster_state(10, math.pi / 2, 0.05, seed=0, batch=b) for b in (1, 3))
    assert torch.equal(batched[0], single[0])


def test_reduced_lifetime_grows_exponentially():
    times = [reduced_lifetime(b, math.pi / 2) for b in (4.0, 8.0, 16.0)]
    assert times[0] < times[1] < times[2]
    # large β: d log T / dβ → 1 − cos φ0 = 1
    slope = math.log(reduced_lifetime(30.0, math.pi / 2) / reduced_lifetime(29.0, math.pi / 2))
    assert slope == pytest.approx(1.0, abs=0.05)
    low, high = plateau_energies(2.0, math.pi / 2)
    assert low < high


def test_crossing_time_and_fit():
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    assert crossing_time(t, t, 0.25) == pytest.approx(0.25)
    assert crossing_time(t, t, 2.0) == math.inf
    rate, intercept, r = exponential_fit([1.0, 2.0, 3.0], [math.exp(0.5 + 0.3 * b) for b in (1.0, 2.0, 3.0)])
    assert (rate, intercept, r) == pytest.approx((0.3, 0.5, 1.0))


def test_simulated_lifetimes_follow_the_reduced_ode():
    res = measure_lifetimes(betas=(2.0, 4.0, 6.0), batch=1)
    assert all(0.95 < s / p < 1.05 for s, p in zip(res.lifetimes, res.reduced_lifetimes, strict=True))
    assert res.r > 0.99 and res.rate == pytest.approx(res.reduced_rate, rel=0.15)
    assert len(res.curves) == 3 and res.to_dict()["betas"] == [2.0, 4.0, 6.0]
    with pytest.raises(ValueError, match="two values"):
        measure_lifetimes(betas=(2.0,))


def test_cluster_count_helpers():
    assert circle_cluster_count(np.array([0.0, 0.01, 3.0, 3.01]), gap=0.5) == 2
    assert circle_cluster_count(np.array([0.0, 0.01]), gap=0.5) == 1
    for bad in (1.0, [], [[0.0, 1.0]], [0.0, float("nan")]):  # a single number was NumPy's AxisError from the sort
        with pytest.raises(ValueError, match="angles must be a non-empty list of finite numbers"):
            circle_cluster_count(bad, gap=0.5)
    pytest.importorskip("scipy")
    assert [predicted_cluster_count(b) for b in (1.0, 9.0, 36.0)] == [1, 4, 8]


def test_first_plateau_skips_the_formation_transients():
    # beta 36, n 128, seed 0 of SA from a near-uniform start, recorded every 0.5: 1s, gaps opening
    # (4, 7, 8), the first plateau (9), then the merges of the staircase (8, 7)
    counts = [1] * 20 + [4, 4, 4, 7, 8, 8, 8] + [9] * 13 + [8] * 9 + [7] * 20
    times = [0.5 * i for i in range(len(counts))]
    assert first_plateau(counts, times, hold=3.0) == 9
    assert first_plateau(counts, times, hold=1.5) == 4  # too short a hold takes a transient
    assert first_plateau(counts[:35], times[:35], hold=3.0) == 9  # ends inside the plateau, already held 3.5
    with pytest.raises(ValueError, match="no cluster count above 1 was held for 3 time units by t = 16"):
        first_plateau(counts[:33], times[:33], hold=3.0)
    with pytest.raises(ValueError, match="one time per count"):
        first_plateau([1, 2], [0.0], hold=1.0)


def test_measured_cluster_count_does_not_depend_on_the_horizon():
    # the mode of the records gave 9, 8, 7 at tau 20, 30, 60 here; the first plateau is 9 at each
    short, long = (measure_cluster_count(36.0, n=128, seed=0, tau=tau) for tau in (20.0, 60.0))
    assert short["measured"] == long["measured"] == 9
    assert long["counts"][:len(short["counts"])] == short["counts"]
    with pytest.raises(ValueError, match="multiple of dt"):
        measure_cluster_count(36.0, n=16, tau=1.0, record_every=0.25)


def test_the_cluster_count_refuses_a_horizon_that_is_no_multiple_of_its_record_spacing():
    # tau 40.05: the step shrank to 40.05 / 401 and the records fell 0.499 and 0.599 apart, not every 0.5
    with pytest.raises(ValueError, match="tau must be a multiple of record_every = 0.5, got 40.05"):
        measure_cluster_count(4.0, n=16, tau=40.05)
    counted = measure_cluster_count(36.0, n=128, seed=0, tau=12.0, hold=0.5)
    assert counted["record_times"] == pytest.approx([0.5 * k for k in range(25)])


@pytest.mark.parametrize("call,match", [
    (lambda: two_cluster_state(8, math.nan, 0.05, 0), "separation must be a finite number"),  # a NaN state
    (lambda: two_cluster_state(8, 1.0, -0.1, 0), "jitter must be >= 0"),
    (lambda: plateau_energies(0.0, 1.0), "beta must be a finite number > 0"),  # float division by zero
    (lambda: plateau_energies(math.nan, 1.0), "beta must be a finite number > 0"),  # (nan, nan)
    (lambda: reduced_lifetime(-1.0, 1.0), "beta must be a finite number > 0"),  # a lifetime of 0.30
    (lambda: reduced_lifetime(2.0, math.inf), "separation must be a finite number"),
    (lambda: reduced_lifetime(2.0, -1.0), r"separation must be an angular distance in \(0, π\)"),  # a lifetime of −0.27
    (lambda: reduced_lifetime(2.0, 0.0), r"separation must be an angular distance in \(0, π\)"),  # NaN, 2 warnings
    # 257, where the same angular distance 2π − 3.5 gives 27
    (lambda: reduced_lifetime(2.0, 3.5), r"separation must be an angular distance in \(0, π\)"),
    (lambda: circle_cluster_count(np.zeros(0), 0.1), "non-empty"),  # IndexError
    (lambda: circle_cluster_count(np.array([0.0, 0.1]), -0.1), r"gap must be an angle in \[0, 2π\)"),  # 2 clusters
    (lambda: circle_cluster_count(np.array([0.0, 3.0]), math.nan), "gap must be a finite number"),  # 1 cluster
])
def test_metastability_helpers_refuse_values_that_give_nan_or_nonsense(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_predicted_cluster_count_needs_a_positive_beta():
    pytest.importorskip("scipy")
    for beta in (math.nan, -1.0, 0.0):  # NaN gave 1 cluster, -1 gave 2
        with pytest.raises(ValueError, match="beta must be a finite number > 0"):
            predicted_cluster_count(beta)
    with pytest.raises(ValueError, match="k_max must be an integer >= 1"):
        predicted_cluster_count(4.0, k_max=0)  # argmax of an empty sequence


@pytest.mark.parametrize("call,match", [
    (lambda: exponential_fit([1.0], [1.0]), "two or more distinct betas"),  # (-0.0, 0.0, 1.0) and a RankWarning
    (lambda: exponential_fit([1.0, 2.0], [-1.0, 1.0]), "lifetimes > 0"),  # (nan, nan, 1.0)
    (lambda: exponential_fit([1.0, 2.0], [math.inf, 1.0]), "must be finite"),
    (lambda: crossing_time(torch.arange(5.0), torch.zeros(4), 1.0), r"one series each, \(S\+1,\)"),  # inf
])
def test_the_lifetime_fit_and_crossing_time_refuse_what_gives_a_wrong_number(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("separation", [1e-12, 1e-9, 1e-6])
def test_the_reduced_lifetime_of_nearby_clusters_tends_to_log_sqrt_two(separation):
    """Near φ = 0 the ODE is dφ/dt ≈ −φ, and the half-way energy sits at φ0/√2: a lifetime of ln √2 for any β.
    1 − cos φ0 cancelled to 0, which put φ_m at 0 and gave a lifetime of inf below φ0 ≈ 1e-8 (1e-4 off at 1e-6)."""
    for beta in (0.5, 7.0):
        assert reduced_lifetime(beta, separation) == pytest.approx(0.5 * math.log(2.0), rel=1e-8)


def test_exponential_fit_of_two_betas_gives_the_sign_of_the_correlation():
    """Two points lie on a line either way: r is ±1 with the slope's sign (1.0 was reported for falling lifetimes)."""
    assert exponential_fit([2.0, 3.0], [10.0, 5.0])[2] == pytest.approx(-1.0)
    assert exponential_fit([2.0, 3.0], [5.0, 10.0])[2] == pytest.approx(1.0)
    assert math.isnan(exponential_fit([2.0, 3.0, 4.0], [5.0, 5.0, 5.0])[2])  # undefined, without numpy's warning
