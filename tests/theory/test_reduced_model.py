import math

import numpy as np
import pytest

from psattn.theory.reduced_model import ReducedModel, compare_with_theory, simulate_transition
from psattn.theory.transition import crossover_dk, gamma_c


def test_seeded_and_reproducible():
    a = simulate_transition(256, 64, n_samples=64, seed=3)
    assert a == simulate_transition(256, 64, n_samples=64, seed=3)
    assert a != simulate_transition(256, 64, n_samples=64, seed=4)


@pytest.mark.parametrize("d_k,T", [(512, 64), (1024, 256), (4096, 1024), (2048, 16)])
def test_agrees_with_branch_one_far_above_the_crossover(d_k, T):
    """Where d_k >> 8L the typical log-partition equals the annealed one, so the theory must hold."""
    assert d_k > 8 * crossover_dk(T)
    sim = simulate_transition(d_k, T, n_samples=128, seed=0)
    assert sim == pytest.approx(gamma_c(d_k, T), rel=0.01)


def test_annealed_criterion_reproduces_branch_one():
    model = ReducedModel(64, n_samples=256, seed=0)
    for d_k in (64, 256, 1024):
        assert model.transition(d_k, "annealed") == pytest.approx(gamma_c(d_k, 64), rel=0.01)


def test_annealed_log_partition_estimates_L_plus_v_over_2():
    model = ReducedModel(256, n_samples=512, seed=1)
    u = 0.1  # v = 4u^2 = 0.04
    value, _ = model.log_partition(u, "annealed")
    assert value == pytest.approx(math.log(255) + 2 * u**2, abs=2e-3)


def test_no_transition_well_below_the_crossover():
    model = ReducedModel(1024, n_samples=64, seed=0)
    assert math.isnan(model.transition(8.0)) and math.isnan(model.transition(4.0))


def test_margin_derivative_matches_finite_differences():
    model = ReducedModel(32, n_samples=16, seed=0)
    for criterion in ("quenched", "annealed"):
        value, slope = model.log_partition(0.3, criterion)
        h = 1e-6
        assert slope == pytest.approx((model.log_partition(0.3 + h, criterion)[0] - value) / h, rel=1e-4)


def test_target_weight_rises_through_the_transition():
    model = ReducedModel(256, n_samples=128, seed=0)
    g = model.transition(1024)
    assert model.target_weight(0.8 * g, 1024) < 0.5 < model.target_weight(1.2 * g, 1024)


def test_compare_with_theory_reports_both_sides():
    cmp = compare_with_theory([8, 64, 1024], [16, 256], n_samples=32, seed=0)
    assert cmp.gamma_sim.shape == cmp.gamma_theory.shape == (2, 3)
    assert cmp.branch.tolist() == [[2, 1, 1], [2, 1, 1]]
    above = cmp.stats["above_crossover"]
    assert above["points"] == 4 and above["with_transition"] == 4 and above["max_rel_error"] < 0.05
    assert above["pearson_r"] > 0.99
    assert all(p["branch"] == 2 for p in cmp.stats["parting"])
    d = cmp.to_dict()
    assert d["gamma_sim"][0][0] is None or isinstance(d["gamma_sim"][0][0], float)
    assert np.isfinite(np.array(d["gamma_theory"], dtype=float)).all()


@pytest.mark.parametrize("kwargs,match", [(dict(T=2), "T must be an integer >= 3"),
                                          (dict(T=64, n_samples=1), "n_samples")])
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReducedModel(**kwargs)


def test_bad_criterion_and_dk():
    model = ReducedModel(16, n_samples=4)
    with pytest.raises(ValueError, match="criterion"):
        model.transition(64, "median")
    with pytest.raises(ValueError, match="d_k"):
        model.transition(0)


@pytest.mark.parametrize("T", [math.nan, math.inf, "16", True])
def test_a_context_length_that_is_not_a_whole_number_is_one_line(T):
    with pytest.raises(ValueError, match="T must be an integer >= 3"):  # nan and inf raised from int()
        ReducedModel(T, n_samples=4)


@pytest.mark.parametrize("kwargs,match", [(dict(d_k=math.inf), "d_k must be a finite number > 0"),
                                          (dict(d_k="64"), "d_k must be a finite number > 0"),
                                          (dict(d_k=64, rtol=0.0), r"rtol must be a number in \(0, 1\)"),
                                          (dict(d_k=64, rtol=-1.0), r"rtol must be a number in \(0, 1\)")])
def test_a_transition_that_would_never_end_is_refused(kwargs, match):
    """An infinite d_k or an rtol <= 0 kept the bisection going forever (hi - lo > rtol * hi held at 5e-324)."""
    with pytest.raises(ValueError, match=match):
        ReducedModel(16, n_samples=4).transition(**kwargs)


@pytest.mark.parametrize("call,match", [
    (lambda m: m.log_partition(math.inf), "u must be a finite number"),  # (nan, nan) and a RuntimeWarning
    (lambda m: m.margin(math.nan, 64.0), "u must be a finite number"),  # nan
    (lambda m: m.margin(1.0, -4.0), "d_k must be a finite number > 0"),  # math domain error
    (lambda m: m.target_weight(math.nan, 64.0), "gamma must be a finite number"),  # nan
    (lambda m: m.target_weight(1.0, math.inf), "d_k must be a finite number > 0"),  # 0.0
])
def test_the_reduced_models_curves_refuse_arguments_that_give_nan(call, match):
    with pytest.raises(ValueError, match=match):
        call(ReducedModel(16, n_samples=4))


@pytest.mark.parametrize("seed", [-1, 1.5, None])
def test_a_bad_seed_of_the_reduced_model_is_named(seed):
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):  # NumPy: 'expected non-negative integer'
        ReducedModel(16, n_samples=4, seed=seed)


@pytest.mark.parametrize("kwargs,match", [
    (dict(d_ks=[64.0], Ts=[16.9]), "T must be an integer >= 3, got 16.9"),  # compared at T = 16, silently
    (dict(d_ks=[64.0], Ts=["16"]), "T must be an integer"),
    (dict(d_ks=["64"], Ts=[16]), "d_k must be a finite number > 0"),
    (dict(d_ks=[64.0], Ts=[16], part_threshold=float("nan")), "part_threshold must be a finite number"),
])
def test_compare_with_theory_checks_its_grid_instead_of_converting_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare_with_theory(n_samples=4, **kwargs)


def test_on_the_operator_neighbouring_distractor_scores_correlate_at_minus_one_half():
    """The module says the reduced model draws its distractors independently while on the operator neighbouring
    distractor keys share a token (p_j = e_j - e_{j-1}, p_{j+1} = e_{j+1} - e_j), so their T4 scores correlate at
    -1/2 and those two apart not at all; nothing checked it. Measured on psattn's shear: T4 of the last query
    (q = -e) against fresh keys (k = e), with i.i.d. N(0, I) embeddings."""
    import torch

    from psattn.ops import shear

    n, T, d, gamma = 20_000, 8, 16, 0.5
    e = torch.randn(n, 1, T, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # (n, 1, T, d)
    p_k = (shear(e, gamma) - e) / gamma  # (n, 1, T, d): the keys' momenta
    p_q = (shear(-e, gamma) + e) / gamma  # the queries' momenta
    t4 = (p_q[:, 0, -1:] * p_k[:, 0, 1:5]).sum(-1)  # (n, 4): keys 1..4 share no token with the query (6, 7)
    corr = np.corrcoef(t4.T.numpy())  # (4, 4)
    neighbours, apart = np.diag(corr, 1), np.concatenate([np.diag(corr, 2), np.diag(corr, 3)])
    assert np.abs(neighbours + 0.5).max() < 0.03 and np.abs(apart).max() < 0.03
