import json
import math

import numpy as np
import pytest

from psattn.theory.scaling import (
    empirical_exponent,
    exponent_interval,
    fit_power_law,
    load_sweep_results,
    reduced_model_exponent,
    sweep_pairs,
)


def test_exact_power_law_is_recovered():
    x = np.array([16, 32, 64, 128, 256.0])
    fit = fit_power_law(x, 3.0 * x**-1.13)
    assert fit.exponent == pytest.approx(-1.13) and fit.prefactor == pytest.approx(3.0)
    assert fit.r_squared == pytest.approx(1.0) and fit.n == 5 and fit.stderr < 1e-10


def test_reduced_model_exponent_tends_to_minus_a_quarter():
    far = reduced_model_exponent(256, [4096, 16384, 65536, 262144])
    assert far.exponent == pytest.approx(-0.25, abs=0.005)
    near = reduced_model_exponent(256, [64, 128, 256, 512])
    assert near.exponent < -0.26  # steeper near the crossover
    simulated = reduced_model_exponent(256, [1024, 4096, 16384], simulated=True, n_samples=32)
    assert simulated.exponent == pytest.approx(-0.25, abs=0.01)


def test_empirical_exponent_from_records_drops_unusable_runs():
    records = [{"d_k": 16, "gamma_critical": 1.0}, {"head_dim": 32, "gamma_c": 0.5}, {"d_k": 64, "gamma": 0.25},
               {"d_k": 128, "gamma_critical": None}, (256, 0.0)]
    fit = empirical_exponent(records)
    assert fit.exponent == pytest.approx(-1.0) and fit.n == 3 and fit.dropped == 2


def test_load_sweep_results(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"results": [[16, 0.9], [64, 0.4]]}))
    assert load_sweep_results(path) == [(16.0, 0.9), (64.0, 0.4)]
    path.write_text(json.dumps([{"d_k": 8, "gamma_critical": 1.2}]))
    assert load_sweep_results(path) == [(8.0, 1.2)]
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(ValueError, match="results"):
        load_sweep_results(path)


def test_load_sweep_results_refuses_json_that_is_not_a_list(tmp_path):
    """A number, null or a string (valid JSON) is one ValueError, as an object without "results" is: a number or
    null raised a TypeError (a traceback from the command line), a string was read letter by letter."""
    path = tmp_path / "sweep.json"
    for data in (42, None, "16 0.9", {"results": 5}, {"results": None}):
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="expected a list, or an object with a 'results' list"):
            load_sweep_results(path)


def test_errors():
    with pytest.raises(ValueError, match="two distinct"):
        fit_power_law([16, 16], [1, 2])
    with pytest.raises(ValueError, match=r"got \[32.\] \(2 pairs with a non-finite or non-positive value left out\)"):
        fit_power_law([16, 32, 64], [-0.5, 0.4, math.nan])  # the x values of dropped pairs are not missing from the file
    for y in ([1e300, 1e-300, 1e-300], [1e-300, 1e-300, 1e300]):  # past a float's range: math.exp raised an OverflowError
        with pytest.raises(ValueError, match="prefactor .* is past a float's range"):
            fit_power_law([16, 64, 128], y)
    with pytest.raises(ValueError, match="no sweep results"):
        empirical_exponent([])
    with pytest.raises(ValueError, match="no d_k field"):
        sweep_pairs([{"gamma_c": 1.0}])
    for bad in ([1, 2, 3], [[16, 0.5, 1]], [["16", 0.5]], [[16, [0.5]]], [{"d_k": True, "gamma": 1.0}]):
        with pytest.raises(ValueError, match="pair nor a record|must be a number"):
            sweep_pairs(bad)
    with pytest.raises(ValueError, match="differ in length"):
        fit_power_law([1, 2, 3], [1, 2])
    assert math.isnan(fit_power_law([1, 2], [1, 2]).stderr)


def test_exponent_interval_is_empty_for_disjoint_brackets_at_one_d_k():
    """A power law has one value at each d_k: two brackets there that do not overlap admit none (pairs at equal
    d_k were skipped, and an interval came back). Brackets that overlap there leave the interval as it was."""
    lower, upper = exponent_interval([(16, 0.5, 0.6), (16, 0.7, 0.8), (64, 0.3, 0.4)])
    assert lower >= upper
    assert exponent_interval([(16, 0.5, 0.7), (16, 0.6, 0.8), (64, 0.3, 0.4)]) == exponent_interval(
        [(16, 0.6, 0.7), (64, 0.3, 0.4)])


def test_exponent_interval_holds_exactly_the_power_laws_through_every_bracket():
    # gamma_c = 4 d_k^-0.5 bracketed on a grid: the true exponent lies inside the interval
    brackets = [(16, 0.9, 1.1), (64, 0.45, 0.55), (256, 0.2, 0.3)]
    lower, upper = exponent_interval(brackets)
    assert lower < -0.5 < upper
    assert lower == pytest.approx(math.log(0.2 / 1.1) / math.log(16))  # the widest pair binds here
    assert upper == pytest.approx(math.log(0.3 / 0.9) / math.log(16))
    rng = np.random.default_rng(0)
    for alpha in rng.uniform(-3, 3, 200):  # inside iff some prefactor threads every bracket
        logs = [(math.log(lo) - alpha * math.log(d), math.log(hi) - alpha * math.log(d)) for d, lo, hi in brackets]
        feasible = max(a for a, _ in logs) < min(b for _, b in logs)
        assert feasible == (lower < alpha < upper)


def test_exponent_interval_with_censored_brackets():
    # above the grid at 16, below its first point at 64: only an upper bound
    lower, upper = exponent_interval([(16, 0.5, math.inf), (32, 0.1, 0.2), (64, 0.0, 0.1)])
    assert lower == -math.inf and upper == pytest.approx(math.log(0.2 / 0.5) / math.log(2))
    with pytest.raises(ValueError, match="two or more"):
        exponent_interval([(16, 0.1, 0.2)])


@pytest.mark.parametrize("bad", [(64, math.nan, 0.3), (64, 0.2, math.nan), (64, 0.4, 0.3), (64, -0.1, 0.3), (0, 0.1, 0.3),
                                 (math.inf, 0.1, 0.3)])
def test_exponent_interval_refuses_a_bracket_that_holds_no_gamma(bad):
    """A NaN bound compares false and was skipped (an interval from the other brackets alone); lo >= hi, a bracket
    that holds no gamma, narrowed the interval from nothing; d_k = 0 gave log(0) and a ZeroDivisionError."""
    with pytest.raises(ValueError, match=r"a bracket \(d_k, lo, hi\) needs a finite d_k > 0 and 0 <= lo < hi"):
        exponent_interval([(16, 0.5, 0.6), bad])
