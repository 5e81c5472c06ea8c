"""Target laws and the constructions of Theorems 2 and 4, checked without any dynamics."""

import numpy as np
import pytest
import torch

from psattn.meanfield import universality
from psattn.meanfield.kernels import rope_kernel


def test_von_mises_mixture_is_a_probability_law_with_matching_quantiles():
    law = universality.VonMisesMixture()
    grid, mass = law.discretise(8192)
    assert np.sum(law.density(grid)) * 2 * np.pi / 8192 == pytest.approx(1.0, rel=1e-6)
    q = law.quantiles(32)
    assert np.all(np.diff(q) > 0) and 0 <= q[0] and q[-1] < 2 * np.pi
    cdf_at_q = np.array([mass[grid <= t].sum() for t in q])
    assert np.allclose(cdf_at_q, (np.arange(32) + 0.5) / 32, atol=2e-3)
    with pytest.raises(ValueError, match="one weight"):
        universality.VonMisesMixture(weights=(1.0,), means=(0.0, 1.0), kappas=(1.0,))


def test_rope_construction_puts_the_graph_law_on_the_target_angles():
    # x*(s) = G(s)ᵀ y* must sit at angle θ_i from y* on y*'s orbit, for any y*
    real = universality.rope_positions_for(universality.VonMisesMixture(), 24, omega=0.7)
    kernel = rope_kernel(real.positions, 3, (0.7,))
    y_star = torch.tensor([0.6, -0.3, 0.5], dtype=torch.float64)
    y_star /= y_star.norm()
    x = kernel.from_comoving(y_star.expand(1, 24, 3).clone())[0].numpy()
    assert np.allclose(universality.orbit_angles(x, y_star.numpy()), real.angles, atol=1e-12)
    assert np.allclose(x[:, 2], y_star[2].item())  # on the latitude circle through y*
    with pytest.raises(ValueError, match="mode"):
        universality.rope_positions_for(universality.VonMisesMixture(), 4, mode="grid")


@pytest.mark.parametrize("d", [2, 3, 5])
def test_rotation_taking_maps_t_to_e(d):
    rng = np.random.default_rng(d)
    e = np.eye(d)[0]
    for t in [rng.standard_normal(d), e, -e]:
        t = t / np.linalg.norm(t)
        r = universality.rotation_taking(t, e)
        assert np.allclose(r @ t, e, atol=1e-12)
        assert np.allclose(r.T @ r, np.eye(d), atol=1e-12)
        assert np.linalg.det(r) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", [None, 0])
def test_gauges_realise_the_targets_at_the_base_point(seed):
    targets = universality.default_sphere_target(4).sample(10, 3)
    base = np.eye(4)[0]
    gauges = universality.gauges_for_targets(targets, base, seed=seed)  # (P, d, d)
    assert np.allclose(np.einsum("pba,b->pa", gauges, base), targets, atol=1e-12)  # G(p)ᵀ e = t_p
    assert np.allclose(np.einsum("pba,pbc->pac", gauges, gauges), np.eye(4), atol=1e-12)


def test_projected_gaussian_mixture_validates_and_samples_unit_vectors():
    law = universality.default_sphere_target(3)
    x = law.sample(100, 0)
    assert x.shape == (100, 3) and np.allclose(np.linalg.norm(x, axis=1), 1.0)
    with pytest.raises(ValueError, match="scales"):
        universality.ProjectedGaussianMixture(centres=((1.0, 0.0),), weights=(1.0,), scales=(0.0,))


@pytest.mark.parametrize("kappa", [650.0, 710.0, 2000.0])
def test_a_concentrated_von_mises_law_has_a_finite_density_of_mass_one(kappa):
    """np.i0(κ) overflows beyond κ ≈ 709: the density, its grid and its quantiles were all NaN."""
    law = universality.VonMisesMixture(weights=(1.0,), means=(1.0,), kappas=(kappa,))
    cells = 1 << 16
    grid = (np.arange(cells) + 0.5) * 2 * np.pi / cells
    assert np.sum(law.density(grid)) * 2 * np.pi / cells == pytest.approx(1.0, rel=1e-9)
    assert law.quantiles(1)[0] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("kwargs", [dict(means=(float("nan"),)), dict(kappas=(float("inf"),))])
def test_a_von_mises_law_of_non_finite_parameters_is_refused(kwargs):
    """A NaN mean or an infinite concentration gave a NaN density and NaN quantiles."""
    with pytest.raises(ValueError, match="must be finite"):
        universality.VonMisesMixture(**{**dict(weights=(1.0,), means=(0.0,), kappas=(1.0,)), **kwargs})


@pytest.mark.parametrize("omega", [float("nan"), float("inf"), 0.0])
def test_rope_positions_need_a_finite_non_zero_frequency(omega):
    """ω = NaN gave NaN positions, ω = ±inf put every token at position 0."""
    with pytest.raises(ValueError, match="finite and non-zero"):
        universality.rope_positions_for(universality.VonMisesMixture(), 8, omega=omega)


@pytest.mark.parametrize("centres, scales", [(((np.nan, 0.0),), (1.0,)), (((0.0, 0.0),), (1.0,)), (((1.0, 0.0),), (np.inf,))])
def test_a_projected_gaussian_mixture_that_samples_nan_is_refused(centres, scales):
    """A NaN or zero centre, or an infinite scale, sampled NaN points."""
    with pytest.raises(ValueError, match="must be finite, and no centre 0"):
        universality.ProjectedGaussianMixture(centres=centres, weights=(1.0,), scales=scales)


@pytest.mark.parametrize("targets, base, match", [
    (np.zeros((1, 3)), [1.0, 0.0, 0.0], "none of them 0"),  # NaN gauges
    (np.eye(3), [0.0, 0.0, 0.0], "none of them 0"),  # NaN gauges
    (np.array([[np.nan, 1.0, 0.0]]), [1.0, 0.0, 0.0], "must be finite"),  # NaN gauges
    (np.eye(3), [1.0, 0.0], r"targets must be \(P, d\) and base \(d,\)"),  # matmul's words
    (np.array([1.0, 0.0, 0.0]), [1.0, 0.0, 0.0], r"targets must be \(P, d\)"),  # AxisError
])
def test_gauges_for_targets_refuse_targets_that_give_nan_or_a_traceback(targets, base, match):
    with pytest.raises(ValueError, match=match):
        universality.gauges_for_targets(targets, base)


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_a_count_of_points_that_is_not_a_positive_integer_is_refused(n):
    """quantiles(0) and quantiles(-1) gave no points, quantiles(2.5) three, sample(-1) NumPy's 'negative dimensions'."""
    for draw in (lambda: universality.VonMisesMixture().quantiles(n), lambda: universality.VonMisesMixture().sample(n, 0),
                 lambda: universality.default_sphere_target(3).sample(n, 0),
                 lambda: universality.rope_positions_for(universality.VonMisesMixture(), n)):
        with pytest.raises(ValueError, match="n must be an integer ≥ 1"):
            draw()
