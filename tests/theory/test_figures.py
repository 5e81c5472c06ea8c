"""The theory figures: gains in dB on both Bode plots, streams told apart, both correlations quoted."""

import numpy as np
import pytest

from psattn.theory import plots


def _captured(monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi=120: figures.append(fig) or path)
    return figures


def test_measured_bode_uses_db_and_tells_the_streams_apart(monkeypatch):
    figures = _captured(monkeypatch)
    w = np.linspace(0, np.pi, 8)
    gain = list(1 + w)
    entry = {"label": "run", "omega": list(w), "key_r": 0.99, "query_r": 0.98}
    for stream in ("key", "query"):
        entry |= {f"{stream}_measured_gain": gain, f"{stream}_theory_gain": gain,
                  f"{stream}_measured_phase": list(w / 4), f"{stream}_theory_phase": list(w / 4)}
    plots.plot_measured_bode([entry], "x.png")
    gain_ax = figures[0].axes[0]
    assert gain_ax.get_ylabel() == "gain (dB)"
    lines = gain_ax.get_lines()
    assert np.allclose(lines[0].get_ydata(), 20 * np.log10(gain))
    markers = {line.get_marker() for line in lines if line.get_linestyle() == "None"}
    styles = {line.get_linestyle() for line in lines if line.get_marker() in (None, "None", "")}
    assert len(markers) == 2 and len(styles) == 2  # key and query differ in marker and in line style


def test_phase_diagram_quotes_both_correlations_and_labels_the_crossovers(monkeypatch):
    figures = _captured(monkeypatch)
    comparison = {"T": [16, 64], "d_k": [8, 64, 256], "gamma_sim": [[None, 0.7, 0.4], [None, 0.8, 0.5]],
                  "stats": {"above_crossover": {"pearson_r": 0.9999}, "below_crossover": {"pearson_r": -0.36}}}
    plots.plot_phase_diagram(comparison, "x.png")
    ax_cmp = figures[0].axes[1]
    assert "above the crossover 0.9999" in ax_cmp.get_title() and "below it -0.3600" in ax_cmp.get_title()
    assert "crossover d_k* of each T" in [t.get_text() for t in ax_cmp.get_legend().get_texts()]


def test_phase_diagram_draws_the_closed_form_with_the_comparisons_c(monkeypatch):
    """It drew c = 0.74 whatever c the comparison (and its correlations) had been computed with."""
    from psattn.theory.reduced_model import compare_with_theory
    from psattn.theory.transition import gamma_c

    figures = _captured(monkeypatch)
    comparison = compare_with_theory([16.0, 64.0], [16], n_samples=8, c=0.5).to_dict()
    assert comparison["c"] == 0.5
    plots.plot_phase_diagram(comparison, "x.png")
    drawn = [line for line in figures[0].axes[1].get_lines() if line.get_linestyle() == "-" and len(line.get_xdata())]
    x, y = np.concatenate([line.get_xdata() for line in drawn]), np.concatenate([line.get_ydata() for line in drawn])
    assert np.allclose(y, gamma_c(x, 16, 0.5)) and not np.allclose(y, gamma_c(x, 16, 0.74))
    with pytest.raises(ValueError, match="computed with c = 0.5, not 0.74"):
        plots.plot_phase_diagram(comparison, "x.png", c=0.74)


def test_closed_form_bode_and_scaling_are_labelled(monkeypatch):
    from psattn.theory.spectral import all_variant_bode

    figures = _captured(monkeypatch)
    plots.plot_bode([c.to_dict() for c in all_variant_bode(0.8)], "x.png")
    axes = figures[0].axes
    assert axes[0].get_ylabel() == "gain (dB)" and all(ax.get_title() for ax in axes[: len(axes) // 2])
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["query", "key", "joint"]
    fit = {"exponent": -0.25}
    plots.plot_scaling({"T": 64, "d_k": [16, 64, 256], "closed_form": [1.0, 0.7, 0.5], "simulated": [1.0, None, 0.5],
                        "fits": {"closed_form": fit, "simulated": fit}}, "x.png")
    ax = figures[1].axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and len(ax.get_legend().get_texts()) == 3
