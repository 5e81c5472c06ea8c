import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.theory import transition

# (d_k, T, gamma_c) worked out by hand; T = 1 + e^L makes L = log(T - 1) a round number.
HAND = [
    (64, 1 + math.e**2, math.sqrt(2 - math.sqrt(3))),  # L = 2: u = 4 / (8 + sqrt 48) = 2 - sqrt 3
    (16, 1 + math.e**2, 1.0),  # L = 2, d_k = 8L: u = 4 / 4
    (4, 1 + math.e**2, 1 / (2 * 0.74)),  # L = 2, branch 2: u = 1 / (2 c^2 * 2)
    (9, 1 + math.e, math.sqrt(0.5)),  # L = 1: u = 2 / (3 + 1)
    (4, 1 + math.e, 1 / (0.74 * 2**0.75)),  # L = 1, branch 2: u = 1 / (2 c^2 sqrt 2)
    (1024, 3, 0.147276),  # T = 3, L = log 2 = 0.693147: u = 1.386294 / (32 + 31.913245) = 0.0216902
]


@pytest.mark.parametrize("d_k,T,expected", HAND)
def test_hand_computed_values(d_k, T, expected):
    assert transition.gamma_c(d_k, T) == pytest.approx(expected, rel=2e-6)


def test_documented_constant_and_crossover():
    assert transition.C_CONSTANT == 0.74
    assert transition.log_distractors(1025) == pytest.approx(math.log(1024))
    assert transition.crossover_dk(1025) == pytest.approx(8 * math.log(1024))
    L = math.log(1023)
    assert transition.transition_branch(8 * L, 1024) == 1 and transition.transition_branch(8 * L - 1e-9, 1024) == 2


def test_branch_one_is_the_smaller_root_of_the_quartic():
    for d_k, T in [(64, 16), (100, 1024), (4096, 50), (9, 1 + math.e)]:
        u = transition.gamma_c_squared(d_k, T)
        L = math.log(T - 1)
        assert 2 * u**2 - math.sqrt(d_k) * u + L == pytest.approx(0, abs=1e-12)
        lo, hi = transition.annealed_roots(d_k, T)
        assert lo == pytest.approx(u) and hi >= lo


def test_no_real_roots_below_the_crossover():
    lo, hi = transition.annealed_roots(4, 1024)
    assert math.isnan(lo) and math.isnan(hi)


def test_branch_two_is_independent_of_dk_and_the_jump_at_the_crossover():
    T = 1024
    L = math.log(T - 1)
    branch_two = (2 * 0.74**2 * math.sqrt(2 * L)) ** -0.5
    assert transition.gamma_c(1, T) == transition.gamma_c(8 * L * 0.999, T) == pytest.approx(branch_two)
    assert transition.gamma_c(8 * L, T) / transition.gamma_c(8 * L * 0.999999, T) == pytest.approx(transition.crossover_jump(T))
    assert transition.crossover_jump(1 + math.exp(1 / (2 * 0.74**2))) == pytest.approx(1.0)  # continuous only there


def test_vectorised_and_broadcast():
    d = np.array([4.0, 64.0, 1024.0])
    T = np.array([[16.0], [1024.0]])
    out = transition.gamma_c(d, T)
    assert out.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert out[i, j] == transition.gamma_c(d[j], T[i, 0])
    assert isinstance(transition.gamma_c(64, 1024), float)
    assert transition.transition_branch(d, 1024).tolist() == [2, 1, 1]


def test_custom_c_only_changes_branch_two():
    assert transition.gamma_c(4, 1024, c=0.5) != transition.gamma_c(4, 1024)
    assert transition.gamma_c(1024, 1024, c=0.5) == transition.gamma_c(1024, 1024)


@pytest.mark.parametrize("d_k,T,match", [
    (64, 2, "T .* must be >= 3"), (64, 2.5, "must be >= 3"), (0, 64, "d_k .* must be > 0"),
    (-3, 64, "must be > 0"), (float("nan"), 64, "d_k must be finite"), (64, float("inf"), "T must be finite"),
    ([64, -1], 64, "must be > 0"),
])
def test_validation(d_k, T, match):
    with pytest.raises(ValueError, match=match):
        transition.gamma_c(d_k, T)


def test_bad_types_and_c():
    with pytest.raises(TypeError, match="d_k must be a real number"):
        transition.gamma_c("sixty-four", 64)
    with pytest.raises(ValueError, match="c must be a positive"):
        transition.gamma_c(64, 64, c=0)


@settings(max_examples=200, deadline=None)
@given(d_k=st.floats(0.5, 1e6), T=st.floats(3, 1e7))
def test_properties_of_the_law(d_k, T):
    u = transition.gamma_c_squared(d_k, T)
    L = math.log(T - 1)
    assert u > 0 and math.isfinite(u)
    assert transition.gamma_c(np.array([d_k]), np.array([T]))[0] == transition.gamma_c(d_k, T)
    if d_k >= 8 * L:  # the smaller root: it solves the quadratic and lies left of the vertex sqrt(d_k)/4
        assert 2 * u**2 - math.sqrt(d_k) * u + L == pytest.approx(0, abs=1e-9 * (d_k + L))
        assert u <= math.sqrt(d_k) / 4 * (1 + 1e-12)
        assert transition.gamma_c(d_k * 1.5, T) < transition.gamma_c(d_k, T)  # decreasing in d_k above the crossover
    else:
        assert u == pytest.approx(1 / (2 * transition.C_CONSTANT**2 * math.sqrt(2 * L)))


def test_a_constant_or_grid_of_the_wrong_kind_is_named():
    """c = 'x' said only "could not convert string to float: 'x'", c = None raised float()'s TypeError, and
    d_k and T of shapes (2,) and (3,) numpy's 'shape mismatch: objects cannot be broadcast'."""
    for c in ("x", None, True):
        with pytest.raises(TypeError, match="c must be a real number"):
            transition.gamma_c(64, 100, c=c)
    with pytest.raises(ValueError, match=r"d_k of shape \(2,\) and T of shape \(3,\) do not broadcast together"):
        transition.gamma_c([16, 64], [100, 1000, 10])


@pytest.mark.parametrize("d_k, T, name", [("64", 100, "d_k"), (True, 100, "d_k"), (64, ["100"], "T"),
                                          (64, np.array([100 + 0j]), "T")])
def test_a_number_written_as_text_or_a_bool_is_not_a_grid(d_k, T, name):
    """d_k = "64" and True were read as 64 and 1 (c = "64" and True were refused), a complex T lost its imaginary part."""
    with pytest.raises(TypeError, match=f"{name} must be a real number or an array of them"):
        transition.gamma_c(d_k, T)
