"""Figures of the theory section, drawn from saved results (the dicts written to JSON by
``psattn.theory.report``), never from a live run.

- ``plot_phase_diagram``: gamma_c over (d_k, T) with the crossover d_k = 8 log(T - 1), and the
  closed form against the reduced-model simulation;
- ``plot_scaling``: gamma_c against d_k on log-log axes with the fitted exponents;
- ``plot_bode``: closed-form Bode magnitude and phase of every variant;
- ``plot_measured_bode``: the response measured on a model's streams over the closed form.

Uses matplotlib's object API with the Agg canvas, so importing this module changes no global backend.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from psattn.figures import save_figure
from psattn.theory.transition import C_CONSTANT, crossover_dk, gamma_c


def _nan(values) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)


def plot_phase_diagram(comparison: dict[str, Any], path: str | Path, c: float | None = None) -> Path:
    """``comparison``: ``TransitionComparison.to_dict`` output. The closed form is drawn with the law's
    constant ``c`` the comparison was computed with (``C_CONSTANT`` for one saved before it recorded its c);
    another ``c`` is refused, as the figure's correlations are the comparison's."""
    recorded = comparison.get("c", C_CONSTANT)
    if c is not None and c != recorded:  # the lines were drawn at 0.74 whatever c the comparison had
        raise ValueError(f"the comparison was computed with c = {recorded:g}, not {c:g}: its correlations are of that c")
    c = recorded
    fig = Figure(figsize=(13, 5), layout="constrained")
    ax_map, ax_cmp = fig.subplots(1, 2)
    d_grid = np.geomspace(2, 8192, 240)
    T_grid = np.geomspace(3.5, 1e5, 200)
    D, TT = np.meshgrid(d_grid, T_grid)
    G = np.asarray(gamma_c(D, TT, c))
    mesh = ax_map.pcolormesh(D, TT, G, shading="auto", cmap="viridis", norm=LogNorm())
    fig.colorbar(mesh, ax=ax_map, label="closed-form γ_c")
    ax_map.plot(np.asarray(crossover_dk(T_grid)), T_grid, "w--", lw=2, label="crossover d_k = 8 log(T−1)")
    Ts, dks = comparison["T"], comparison["d_k"]
    sim = _nan(comparison["gamma_sim"])
    dd, tt = np.meshgrid(dks, Ts)
    ax_map.scatter(dd[np.isfinite(sim)], tt[np.isfinite(sim)], s=14, c="white", edgecolors="k",
                   label="simulated: transition")
    ax_map.scatter(dd[~np.isfinite(sim)], tt[~np.isfinite(sim)], s=18, marker="x", c="red",
                   label="simulated: none")
    ax_map.set(xscale="log", yscale="log", xlabel="head dimension d_k", ylabel="context length T",
               title="critical coupling γ_c(d_k, T)")
    ax_map.legend(loc="lower right", fontsize=7)

    colors = [f"C{i}" for i in range(len(Ts))]
    for i, T in enumerate(Ts):
        above = d_grid >= float(crossover_dk(T))  # draw the branches apart: the law jumps at the crossover
        for part, label in ((~above, None), (above, f"T = {T}")):
            ax_cmp.plot(d_grid[part], np.asarray(gamma_c(d_grid[part], T, c)), color=colors[i], lw=1.2, label=label)
        ax_cmp.plot(dks, sim[i], "o", color=colors[i], ms=4, mfc="none")
        ax_cmp.axvline(float(crossover_dk(T)), color=colors[i], ls=":", lw=0.8)
    ax_cmp.plot([], [], "o", color="grey", ms=4, mfc="none", label="simulation")
    ax_cmp.plot([], [], ":", color="grey", lw=0.8, label="crossover d_k* of each T")

    def r_text(region: str) -> str:
        r = comparison["stats"][region]["pearson_r"]
        return "n/a" if r is None else f"{r:.4f}"

    title = (f"closed form (lines) vs simulation (circles)\nPearson r above the crossover {r_text('above_crossover')}, "
             f"below it {r_text('below_crossover')}")
    ax_cmp.set(xscale="log", yscale="log", xlabel="head dimension d_k", ylabel="γ_c", title=title)
    ax_cmp.legend(fontsize=7)
    return save_figure(fig, path)


def plot_scaling(scaling: dict[str, Any], path: str | Path) -> Path:
    """``scaling``: {"T": T, "d_k": [...], "closed_form": [...], "simulated": [...], "fits": {name:
    PowerLawFit dict}}."""
    fig = Figure(figsize=(5.5, 4.2))
    ax = fig.subplots()
    d = np.asarray(scaling["d_k"], dtype=float)
    for key, style in (("closed_form", "-"), ("simulated", "o")):
        y = np.array([np.nan if v is None else v for v in scaling[key]], dtype=float)
        fit = scaling["fits"][key]
        ax.plot(d, y, style, label=f"{key.replace('_', ' ')}: exponent {fit['exponent']:.3f}")
    ref = d ** -0.25 * scaling["closed_form"][-1] / d[-1] ** -0.25
    ax.plot(d, ref, "k:", label="slope −1/4 (paper)")
    ax.set(xscale="log", yscale="log", xlabel="d_k", ylabel="γ_c", title=f"scaling at T = {scaling['T']}")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_bode(curves: list[dict[str, Any]], path: str | Path) -> Path:
    """``curves``: ``BodeCurves.to_dict`` outputs, one per variant."""
    fig = Figure(figsize=(3.2 * len(curves), 5.2), layout="constrained")
    axes = fig.subplots(2, len(curves), sharex=True, squeeze=False)
    for col, c in enumerate(curves):
        w = np.asarray(c["omega"])
        for name, style in (("query", "--"), ("key", ":"), ("joint", "-")):
            axes[0, col].plot(w, c[f"{name}_gain_db"], style, label=name)
            axes[1, col].plot(w, np.degrees(c[f"{name}_phase"]), style, label=name)
        axes[0, col].set_title(f"{c['variant']} (γ = {c['gamma']:g}), order {tuple(c['order'])}", fontsize=9)
        axes[1, col].set_xlabel("ω (rad / token)")
    axes[0, 0].set_ylabel("gain (dB)")
    axes[1, 0].set_ylabel("phase (deg)")
    axes[0, 0].legend(fontsize=7)
    for ax in axes.ravel():
        ax.set_xlim(0, np.pi)
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_measured_bode(measured: list[dict[str, Any]], path: str | Path) -> Path:
    """``measured``: entries {"label", "omega", "<stream>_measured_gain", "<stream>_theory_gain",
    "<stream>_measured_phase", "<stream>_theory_phase", "<stream>_r"} for stream in query, key. Gain in
    dB, as in ``plot_bode``; the two streams differ in marker and line style, so neither hides the
    other where they coincide."""
    fig = Figure(figsize=(4.8 * len(measured), 5.6), layout="constrained")
    axes = fig.subplots(2, len(measured), sharex=True, squeeze=False)
    styles = {"key": ("o", "-", 3.5), "query": ("x", "--", 5.0)}
    for col, m in enumerate(measured):
        w = np.asarray(m["omega"])
        for i, (stream, (marker, line, size)) in enumerate(styles.items()):
            color = f"C{i}"
            r = m.get(f"{stream}_r")
            label = f"{stream} measured" + (f" (r = {r:.4f})" if r is not None else "")
            gain_db = [20 * np.log10(np.maximum(np.asarray(m[f"{stream}_{kind}_gain"], dtype=float), 1e-12))
                       for kind in ("measured", "theory")]
            axes[0, col].plot(w, gain_db[0], marker, ms=size, color=color, mfc="none", label=label)
            axes[0, col].plot(w, gain_db[1], line, color=color, lw=1, label=f"{stream} closed form")
            axes[1, col].plot(w, np.degrees(m[f"{stream}_measured_phase"]), marker, ms=size, color=color, mfc="none")
            axes[1, col].plot(w, np.degrees(m[f"{stream}_theory_phase"]), line, color=color, lw=1)
        axes[0, col].set_title(textwrap.fill(m["label"], 48), fontsize=9)
        axes[0, col].legend(fontsize=7)
        axes[1, col].set_xlabel("ω (rad / token)")
    axes[0, 0].set_ylabel("gain (dB)")
    axes[1, 0].set_ylabel("phase (deg)")
    for ax in axes.ravel():
        ax.set_xlim(0, np.pi)
        ax.grid(alpha=0.3)
    return save_figure(fig, path)
