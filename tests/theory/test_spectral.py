import numpy as np
import pytest
import torch

from psattn.models import AttentionConfig, DecoderLM, ModelConfig
from psattn.theory.spectral import (
    MeasuredBode,
    all_variant_bode,
    filter_order,
    joint_response,
    measure_bode,
    shear_gain_squared,
    shear_response,
    spectral_ratio,
    variant_bode,
)


def test_closed_form_gains():
    w = np.linspace(0, np.pi, 101)
    for g in (0.3, 0.8, 2.0):
        h = shear_response(w, g)
        assert h[0] == pytest.approx(1.0)  # DC-neutral
        assert abs(h[-1]) == pytest.approx(1 + 2 * g)  # Nyquist gain
        np.testing.assert_allclose(np.abs(h) ** 2, shear_gain_squared(w, g), rtol=1e-12)
        assert np.all(np.diff(np.abs(h)) > 0)  # monotone high-pass
    np.testing.assert_allclose(shear_response(w, 0.0), 1.0)


def test_joint_filter_and_orders():
    assert joint_response(0.0, np.pi, 0.5, 0.5) == pytest.approx(2.0)
    assert [variant_bode(v, 0.8).order for v in ("baseline", "symmetric", "key_only", "query_only")] == \
        [(0, 0), (1, 1), (0, 1), (1, 0)]
    assert filter_order(0.0, 0.3) == (0, 1)
    curves = all_variant_bode(0.8)
    assert len(curves) == 4
    d = curves[1].to_dict()
    assert d["joint_gain_db"][0] == pytest.approx(0.0) and d["order"] == [1, 1]


@pytest.mark.parametrize("call,name", [
    (lambda g: shear_response([0.0, 1.0], g), "gamma"),
    (lambda g: shear_gain_squared([0.0, 1.0], g), "gamma"),
    (lambda g: joint_response(0.0, 1.0, 0.5, g), "gamma_k"),
    (lambda g: filter_order(g, 0.0), "gamma_q"),
])
def test_a_non_finite_gamma_is_refused_by_the_closed_forms(call, name):
    """NaN gave NaN responses and inf NaN too; filter_order(nan, 0) said (1, 0)."""
    for gamma in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            call(gamma)
    with pytest.raises(TypeError, match=f"{name} must be a real number"):
        call("0.5")


def test_spectral_ratio_of_an_exact_filter():
    x = torch.randn(4, 2, 128, 8, dtype=torch.float64)
    y = 1.5 * x - 0.5 * torch.roll(x, 1, dims=2)  # circular, so the estimate is exact up to the window
    omega, h = spectral_ratio(x, y)
    assert np.corrcoef(np.abs(h), np.abs(shear_response(omega, 0.5)))[0, 1] > 0.999
    with pytest.raises(ValueError, match="one shape"):
        spectral_ratio(x, y[..., :4])


def _model(variant, placement="post_rope", gamma=0.8):
    torch.manual_seed(0)
    # init 0.02: the streams these tolerances were set on (the estimate's error depends on the streams)
    config = ModelConfig(vocab_size=64, d_model=64, n_layers=2, n_heads=4,
                         attention=AttentionConfig(variant, gamma, placement), init=0.02)
    return DecoderLM(config).eval()


def test_measured_bode_matches_the_closed_form_on_a_model():
    ids = torch.randint(0, 64, (16, 64), generator=torch.Generator().manual_seed(0))
    m = measure_bode(_model("symmetric"), ids, layer=1)
    assert m.correlation("key") > 0.9999 and m.correlation("query") > 0.9999 and m.correlation("joint") > 0.9999
    assert m.max_rel_error("key") < 0.01
    d = m.to_dict("symmetric")
    assert d["label"] == "symmetric" and len(d["key_measured_gain"]) == len(d["omega"]) == 33

    key_only = measure_bode(_model("key_only"), ids)
    assert key_only.correlation("query") is None and key_only.max_rel_error("query") < 1e-12
    assert key_only.correlation("key") > 0.9999


def test_no_correlation_for_the_pure_delay_whose_gain_is_constant():
    """At gamma = -1 the shear is x̂_t = x_{t-1}: |H| = 1 at every frequency, like gamma = 0, so r is undefined (None);
    the rounding left in |e^{-iω}| gave r of 0.28 or -0.07, read as a measurement disagreeing with the closed form."""
    ids = torch.randint(0, 64, (16, 64), generator=torch.Generator().manual_seed(0))
    m = measure_bode(_model("symmetric", gamma=-1.0), ids)
    assert [m.correlation(s) for s in ("query", "key", "joint")] == [None, None, None]
    assert m.max_rel_error("key") < 0.01


def test_pre_rope_placement_departs_from_the_closed_form():
    ids = torch.randint(0, 64, (16, 64), generator=torch.Generator().manual_seed(0))
    post = measure_bode(_model("symmetric"), ids).max_rel_error("key")
    pre = measure_bode(_model("symmetric", "pre_rope"), ids).max_rel_error("key")
    assert pre > 5 * post


def test_pre_rope_shear_is_the_filter_shifted_by_each_pairs_rotation():
    # after RoPE, R_t((1+γ)q_t − γq_{t−1}) = (1+γ)y_t − γR_θ y_{t−1} with y_t = R_t q_t: time-invariant, shifted
    from psattn.ops.hooks import capture
    from psattn.ops.rope import apply_rope

    gamma, T = 0.8, 16
    model = _model("symmetric", "pre_rope", gamma)
    ids = torch.randint(0, 64, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), capture(model, "blocks.0.attn.hook_q", "blocks.0.attn.hook_q_sheared") as seen:
        model(ids)
    y, y_hat = seen["blocks.0.attn.hook_q"].double(), seen["blocks.0.attn.hook_q_sheared"].double()  # (B, H, T, D)
    cos, sin = model.blocks[0].attn.rope(torch.ones(1, T - 1, dtype=torch.long), torch.float64)  # R_θ: one position
    shifted = (1 + gamma) * y[:, :, 1:] - gamma * apply_rope(y[:, :, :-1], cos, sin)
    torch.testing.assert_close(y_hat[:, :, 1:], shifted, atol=1e-5, rtol=1e-5)
    assert (y_hat[:, :, 1:] - ((1 + gamma) * y[:, :, 1:] - gamma * y[:, :, :-1])).abs().max() > 1e-3  # not H itself


def test_bad_layer():
    with pytest.raises(ValueError, match="layer"):
        measure_bode(_model("symmetric"), torch.zeros(1, 8, dtype=torch.long), layer=5)


@pytest.mark.parametrize("layer", [0.5, True])
def test_measure_bode_names_a_layer_that_is_no_integer(layer):
    """0.5 raised ModuleList's "'float' object cannot be interpreted as an integer"; True measured layer 1."""
    model = DecoderLM(ModelConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=2,
                                  attention=AttentionConfig("symmetric", 0.5)))
    with pytest.raises(ValueError, match="layer must lie in"):
        measure_bode(model, torch.zeros(1, 16, dtype=torch.long), layer=layer)


def test_measure_bode_of_something_other_than_a_decoder_lm_is_a_type_error():
    """It raised "'str' object has no attribute 'blocks'"."""
    with pytest.raises(TypeError, match="measure_bode reads the hook points of a psattn DecoderLM, got str"):
        measure_bode("model", torch.zeros(1, 16, dtype=torch.long))


def test_a_stream_that_is_not_query_key_or_joint_is_refused():
    """closed_form("keys") gave the key's response and measured("keys") an AttributeError."""
    omega = np.linspace(0.0, np.pi, 9)
    bode = MeasuredBode(0, 0.0, 0.5, omega, shear_response(omega, 0.0), shear_response(omega, 0.5))
    assert bode.correlation("key") == pytest.approx(1.0)
    for call in (bode.closed_form, bode.measured, bode.correlation, bode.max_rel_error):
        with pytest.raises(ValueError, match=r"unknown stream 'keys'; choose one of \('query', 'key', 'joint'\)"):
            call("keys")


def test_relative_error_leaves_out_the_zeros_of_the_closed_form():
    """γ = −1/2 averages x_t and x_{t−1}: H(−1) = 0 at ω = π, a measured frequency. The relative error there is
    undefined; dividing by the rounding left in |H| reported 10¹⁴ (10²⁹ for the joint stream)."""
    ids = torch.randint(0, 64, (16, 64), generator=torch.Generator().manual_seed(0))
    m = measure_bode(_model("symmetric", gamma=-0.5), ids)
    assert abs(m.closed_form("key")[-1]) < 1e-12 and m.correlation("key") > 0.999
    for stream in ("key", "query", "joint"):
        assert 0 < m.max_rel_error(stream) < 1, stream


def test_a_shear_towards_the_next_token_matches_the_gain_but_not_the_phase():
    """The measured response was compared by its gain alone (Pearson r and the largest relative error), and the
    time reverse of the shear, x̂_t = (1 + γ) x_t − γ x_{t+1}, has the closed form's gain: r 0.99995 and a 1.4%
    error read it as the closed form. Its phase is the opposite, which the largest phase error now shows."""
    from psattn.theory.operators import MUTANTS, REFERENCE

    ids = torch.randint(0, 37, (8, 32), generator=torch.Generator().manual_seed(0))
    right = measure_bode(REFERENCE.build_model("key_only", 0.8, n_layers=1), ids)
    reversed_ = measure_bode(MUTANTS["look_ahead"].build_model("key_only", 0.8, n_layers=1), ids)
    assert reversed_.correlation("key") > 0.9999 and reversed_.max_rel_error("key") < 0.02  # the gain cannot tell
    assert right.max_phase_error("key") < 0.05 and reversed_.max_phase_error("key") > 0.5
    assert right.summary()["key_max_phase_error"] == right.max_phase_error("key")
    assert right.max_phase_error("query") == 0.0  # γ_q = 0: both phases are 0


def test_the_phase_error_leaves_out_the_zeros_of_the_closed_form():
    """At a zero of H (γ = −1/2, ω = π) the closed form has no phase: the rounding left there is not compared."""
    omega = np.linspace(0.0, np.pi, 9)
    h = shear_response(omega, -0.5)
    flipped = h * np.where(omega == np.pi, -1.0, 1.0)  # the rounding at ω = π turned by π, the rest exact
    bode = MeasuredBode(0, -0.5, -0.5, omega, h, flipped)
    assert bode.max_phase_error("key") < 1e-12 and bode.max_phase_error("query") < 1e-12
