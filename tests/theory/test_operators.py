import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.ops.hooks import capture
from psattn.theory.flops import count_flops
from psattn.theory.operators import MUTANTS, REFERENCE, OperatorUnderTest, get_operator
from psattn.theory.probe import phase_map, probe_taps


def test_reference_taps_and_phase_space_matrix():
    taps = probe_taps(REFERENCE, 0.5, dim=4)
    assert taps.lags == [0, 1] and taps.is_one_step_causal and taps.order == 1
    np.testing.assert_array_equal(taps.tap(0), 1.5 * np.eye(4))
    np.testing.assert_array_equal(taps.tap(1), -0.5 * np.eye(4))
    M = taps.phase_space_matrix()
    np.testing.assert_array_equal(M, np.block([[np.eye(4), 0.5 * np.eye(4)], [np.zeros((4, 4)), np.eye(4)]]))


@settings(max_examples=40, deadline=None)
@given(gamma=st.floats(-3, 3).filter(lambda g: abs(g) > 1e-3), dim=st.sampled_from([2, 4, 6]))
def test_reference_taps_for_any_gamma(gamma, dim):
    taps = probe_taps(REFERENCE, gamma, dim=dim)
    np.testing.assert_allclose(taps.tap(0), (1 + gamma) * np.eye(dim), atol=1e-12)
    np.testing.assert_allclose(taps.tap(1), -gamma * np.eye(dim), atol=1e-12)
    M = taps.phase_space_matrix()
    np.testing.assert_allclose(M, np.block([[np.eye(dim), gamma * np.eye(dim)], [np.zeros((dim, dim)), np.eye(dim)]]),
                               atol=1e-9)


def test_probes_refuse_a_position_without_a_predecessor_and_phase_maps_gamma_zero():
    """At t = 0 probe_taps read the shear as having no lag-1 tap ([0]) and phase_map dropped p without a word;
    t = -1 gave lags [-2, -1]; gamma = 0 gave p' = NaN; a (D,) point "not enough values to unpack"."""
    x, p = torch.ones(3, 4, dtype=torch.float64), torch.ones(3, 4, dtype=torch.float64)
    for t in (0, -1, 2.0):
        with pytest.raises(ValueError, match=r"t must be an integer >= 1 \(a position with a predecessor\), got"):
            probe_taps(REFERENCE, 0.5, t=t)
        with pytest.raises(ValueError, match="t must be an integer >= 1"):
            phase_map(REFERENCE, x, p, 0.5, t=t)
    with pytest.raises(ValueError, match="dim must be an integer >= 1"):
        probe_taps(REFERENCE, 0.5, dim=0)
    with pytest.raises(ValueError, match="the phase-space form needs gamma != 0"):
        phase_map(REFERENCE, x, p, 0.0)
    with pytest.raises(ValueError, match=r"x and p must be phase-space points \(N, D\) of one shape, got \(4,\)"):
        phase_map(REFERENCE, x[0], p[0], 0.5)
    assert probe_taps(REFERENCE, 0.5, t=1).lags == [0, 1]
    x_hat, p_new = phase_map(REFERENCE, x, p, 0.5, t=1)
    assert torch.allclose(x_hat, x + 0.5 * p) and torch.allclose(p_new, p)


def test_mutants_read_as_what_they_are():
    assert probe_taps(MUTANTS["look_ahead"], 0.5).lags == [-1, 0]
    np.testing.assert_array_equal(probe_taps(MUTANTS["wrong_sign"], 0.5).tap(1), 0.5 * np.eye(8))
    pre = probe_taps(MUTANTS["pre_rope"], 0.5)
    assert pre.lags == [0, 1] and not np.allclose(pre.tap(1), -0.5 * np.eye(8))  # a rotated predecessor
    with pytest.raises(ValueError, match="one-step"):
        probe_taps(MUTANTS["look_ahead"], 0.5).phase_space_matrix()
    with pytest.raises(ValueError, match="gamma != 0"):
        probe_taps(REFERENCE, 0.0).phase_space_matrix()


def test_phase_map_keeps_the_momentum():
    x, p = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    x_hat, p_new = phase_map(REFERENCE, x, p, 0.7)
    torch.testing.assert_close(x_hat, x + 0.7 * p)
    torch.testing.assert_close(p_new, p)


def test_pre_rope_operator_matches_the_pre_rope_model():
    op = MUTANTS["pre_rope"]
    model = op.build_model("symmetric", 0.8, n_layers=1)
    ids = torch.randint(0, 37, (2, 9))
    with torch.no_grad(), capture(model, "*.hook_k", "*.hook_k_sheared") as seen:
        model(ids)
    # RoPE tables are float32: undoing a rotation is exact only to about 1e-7
    torch.testing.assert_close(op.sheared(seen["blocks.0.attn.hook_k"], 0.8), seen["blocks.0.attn.hook_k_sheared"],
                               atol=1e-6, rtol=1e-5)


def test_build_model_runs_the_operators_shear():
    ids = torch.randint(0, 37, (1, 6))
    ref, bad = REFERENCE.build_model("key_only", 0.5), MUTANTS["wrong_sign"].build_model("key_only", 0.5)
    with torch.no_grad():
        assert not torch.allclose(ref(ids), bad(ids))
    flipped = REFERENCE.build_model("key_only", -0.5)
    with torch.no_grad():
        torch.testing.assert_close(bad(ids), flipped(ids))


def test_mutant_caches():
    model = REFERENCE.build_model("symmetric", 0.8)
    raw = MUTANTS["raw_key_cache"].new_cache(model)
    model(torch.randint(0, 37, (1, 5)), cache=raw)
    assert len(raw) == 5
    recompute = MUTANTS["recompute_cache"].new_cache(model)
    model(torch.randint(0, 37, (1, 5)), cache=recompute)
    assert recompute.extra_state_bytes() > model.new_cache().extra_state_bytes()


def test_registry_and_validation():
    assert get_operator("psa") is REFERENCE and set(MUTANTS) <= {"wrong_sign", "look_ahead", "pre_rope",
                                                                 "raw_key_cache", "recompute_cache", "swapped_law"}
    with pytest.raises(ValueError, match="unknown operator"):
        get_operator("nope")
    with pytest.raises(ValueError, match="placement"):
        OperatorUnderTest("x", "", placement="sideways")
    with pytest.raises(ValueError, match="cache mode"):
        OperatorUnderTest("x", "", cache="disk")


def test_flop_counter():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    total, by_op = count_flops(lambda: (a @ b) + 1.0)
    assert by_op == {"mm": 2 * 3 * 4 * 5, "add": 15} and total == 135
    total, _ = count_flops(lambda: torch.cat([torch.lerp(a, a, 0.5), a]))
    assert total == 3 * 12  # lerp = a + w (b - a); cat moves data only
