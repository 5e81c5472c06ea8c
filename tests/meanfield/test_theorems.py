"""The theorem checks pass on their default examples and fail where the claim does not apply."""

from psattn.meanfield.theorems import (
    check_conditional_diracisation,
    check_energy_ascent,
    check_metastability,
    check_spectral_dichotomy,
)


def test_conditional_diracisation_for_gauge_kernels():
    for kernel in ("rope", "generalised_rope", "prefix"):
        result = check_conditional_diracisation(kernel, n=32, batch=1)
        assert result.passed, result.message


def test_conditional_diracisation_fails_without_labels():
    # plain USA collapses slices *and* the marginal: the spread part of the claim fails
    assert not check_conditional_diracisation("usa", n=32, batch=1).passed


def test_spectral_dichotomy():
    result = check_spectral_dichotomy(n=32, batch=1)
    assert result.passed, result.message
    assert not check_spectral_dichotomy(n=32, batch=1, tau=1.0).passed  # too short to collapse


def test_energy_ascent():
    result = check_energy_ascent(n=16, tau=2.0, batch=1)
    assert result.passed, result.message


def test_metastability():
    result = check_metastability(n=16, tau=150.0)
    assert result.passed, result.message
