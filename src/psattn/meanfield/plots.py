"""Figures from saved results, never from a live run.

- ``plot_final_states``, ``plot_diagnostics``: from an experiment summary (``experiments.run_experiments``).
- ``plot_check``: the figure of a theorem check, from its saved record (``TheoremCheck.to_dict()``).
- ``animate_states``: a GIF of a run, from the states saved by ``experiments.save_states`` (needs Pillow,
  which matplotlib itself depends on; without it the animation is skipped with a logged message).

Uses matplotlib's object API with the Agg canvas, so importing this module changes no global backend.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from psattn.figures import save_figure
from psattn.processes import signals_unwind

logger = logging.getLogger(__name__)

DEFAULT_SERIES = ("marginal_spread", "fraction_aligned", "comoving_spread", "mean_cosine", "energy")
#: series -> (panel title, y-axis label)
SERIES_LABELS = {
    "marginal_spread": ("spread of the tokens", "1 − |mean of x_i|  (0: one point)"),
    "fraction_aligned": ("pairs aligned", "fraction of pairs with cos > {threshold}"),  # the runs' threshold
    "comoving_spread": ("spread in co-moving coordinates", "1 − |mean of G(ξ_i) x_i|"),
    "mean_cosine": ("mean pairwise cosine", "mean cos(x_i, x_j)  (1: one point)"),
    "energy": ("interaction energy", "energy"),
}


def load_summary(summary: str | Path | dict[str, Any]) -> dict[str, Any]:
    """A run summary: the dict itself, or read from a summary.json or its folder."""
    if isinstance(summary, dict):
        return summary
    path = Path(summary)
    if path.is_dir():
        path = path / "summary.json"
    return json.loads(path.read_text())


def _select(runs: list[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    return [r for r in runs if n is None or r["config"]["n"] == n]


def _sphere_axes(fig: Figure, rows: int, cols: int, index: int, title: str):
    """A 3-D panel with a light wireframe of S²."""
    ax = fig.add_subplot(rows, cols, index, projection="3d")
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", linewidth=0.4)
    ax.set_title(title, fontsize=9)
    ax.set(xlim=(-1, 1), ylim=(-1, 1), zlim=(-1, 1))
    ax.set_box_aspect((1, 1, 1))
    ax.set_axis_off()
    return ax


def _circle_axes(fig: Figure, rows: int, cols: int, index: int, title: str):
    """A 2-D panel with the unit circle."""
    ax = fig.add_subplot(rows, cols, index)
    t = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(t), np.sin(t), color="0.85", linewidth=0.8)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
    return ax


def _points(fig: Figure, rows: int, cols: int, index: int, x: np.ndarray, colour: Any, title: str, **kw: Any):
    """Scatter states (n, 2) on the circle or (n, 3) on the sphere; returns the axes."""
    if x.shape[1] == 2:
        ax = _circle_axes(fig, rows, cols, index, title)
        ax.scatter(x[:, 0], x[:, 1], c=colour, s=kw.pop("s", 12), **kw)
    else:
        ax = _sphere_axes(fig, rows, cols, index, title)
        ax.scatter(x[:, 0], x[:, 1], x[:, 2], c=colour, s=kw.pop("s", 12), depthshade=False, **kw)
    return ax


def plot_final_states(summary: str | Path | dict[str, Any], out_path: str | Path, n: int | None = None) -> Path:
    """Final states on S² (or S¹ for d = 2) of batch element 0, one panel per run, coloured by label."""
    runs = [r for r in _select(load_summary(summary)["runs"], n) if r["config"]["d"] in (2, 3)]
    if not runs:
        raise ValueError("no runs with d = 2 or 3 to draw on the circle or sphere")
    cols = min(3, len(runs))
    rows = math.ceil(len(runs) / cols)
    fig = Figure(figsize=(4 * cols + 1, 4 * rows), layout="constrained")
    for k, run in enumerate(runs):  # labels mean positions in one run and prompt ids in another: a bar each
        labels = np.asarray(run["labels"], dtype=float)  # real positions: negative (s = −θ/ω) or fractional
        low = float(labels.min())
        ax = _points(fig, rows, cols, k + 1, np.asarray(run["final_state"]), labels, run["name"], cmap="viridis",
                     vmin=low, vmax=max(low + 1, float(labels.max())))
        fig.colorbar(ax.collections[-1], ax=ax, shrink=0.55, pad=0.02, label="token label")
    fig.suptitle("final states, coloured by each token's frozen label (position, or prompt id for prefix)")
    return save_figure(fig, out_path)


def plot_diagnostics(
    summary: str | Path | dict[str, Any],
    out_path: str | Path,
    names: Sequence[str] = DEFAULT_SERIES,
    n: int | None = None,
) -> Path:
    """Diagnostics (and the energy) against time, batch element 0, one line per run, in a grid of at
    most three panels a row with one legend for all."""
    runs = _select(load_summary(summary)["runs"], n)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = Figure(figsize=(4.6 * cols, 3.4 * rows + 0.6), layout="constrained")
    for k, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, k + 1)
        for i, run in enumerate(runs):
            series = run["energy"] if name == "energy" else run["diagnostics"][name]
            values = [np.nan if row[0] is None else row[0] for row in series]
            ax.plot(run["record_times"], values, label=run["name"], linewidth=1.2, color=f"C{i % 10}",
                    linestyle=("-", "--", "-.", ":")[i % 4])
        title, ylabel = SERIES_LABELS.get(name, (name.replace("_", " "), name.replace("_", " ")))
        thresholds = {run["config"].get("threshold", 0.999) for run in runs}  # a config may set another than 0.999
        ylabel = ylabel.format(threshold=f"{thresholds.pop():g}" if len(thresholds) == 1 else "each run's threshold")
        ax.set(xlabel="time t", ylabel=ylabel, title=title)
        ax.title.set_fontsize(10)
        ax.yaxis.label.set_fontsize(8)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), fontsize=8)
    fig.suptitle("collapse or not: diagnostics against time, one line per kernel (batch element 0)")
    return save_figure(fig, out_path)


def _plot_diracisation(fig: Figure, data: dict[str, Any]) -> None:
    ax = fig.add_subplot(1, 2, 1)
    for name, values in data["series"].items():
        ax.plot(data["times"], np.maximum(values, 1e-17), label=name, linewidth=1)
    ax.set_yscale("log")
    ax.set(xlabel="time t", ylabel="spread (log scale)")
    ax.set_title(f"{data['kernel']}: slices collapse, the marginal does not", fontsize=9)
    ax.legend(fontsize=7)
    x, g = np.asarray(data["final_state"]), np.asarray(data["graph_law"])
    ax3 = _points(fig, 1, 2, 2, x, data["labels"], "final state (colour: label), x: graph law G(ξ)ᵀy*",
                  cmap="viridis", s=18)
    if x.shape[1] == 3:
        ax3.scatter(g[:, 0], g[:, 1], g[:, 2], c="k", marker="x", s=8, depthshade=False)
    elif x.shape[1] == 2:
        ax3.scatter(g[:, 0], g[:, 1], c="k", marker="x", s=8)


def _plot_rope_orbit(fig: Figure, data: dict[str, Any]) -> None:
    realised = np.asarray(data["realised_angles"])
    prescribed = np.asarray(data["prescribed_angles"])
    grid, density = np.asarray(data["density_grid"]), np.asarray(data["density"])
    ax = fig.add_subplot(1, 3, 1)
    ax.hist(realised, bins=24, range=(0, 2 * np.pi), density=True, color="C0", alpha=0.6, label="realised")
    ax.plot(grid, density, color="C3", label="target density")
    ax.set(xlabel="angle along the orbit from y* (rad)", ylabel="density")
    ax.set_title("law on the RoPE orbit", fontsize=9)
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 3, 2)
    n = realised.shape[0]
    ax.step(np.sort(realised), (np.arange(n) + 1) / n, where="post", label="realised", color="C0")
    ax.step(np.sort(prescribed), (np.arange(n) + 1) / n, where="post", label="prescribed", color="C1",
            linestyle="--")
    cdf = np.cumsum(density) / density.sum()
    ax.plot(grid, cdf, color="C3", label="target")
    ax.set(xlabel="angle along the orbit from y* (rad)", ylabel="cumulative fraction")
    ax.set_title("CDFs", fontsize=9)
    ax.legend(fontsize=7)
    _points(fig, 1, 3, 3, np.asarray(data["final_state"]), data["labels"], "final state (colour: position)",
            cmap="twilight")


def _plot_prefix_gauge(fig: Figure, data: dict[str, Any]) -> None:
    aligned, raw = np.asarray(data["aligned_state"]), np.asarray(data["raw_state"])
    reference = np.asarray(data["reference"])
    if aligned.shape[1] >= 3:
        ax = _points(fig, 1, 3, 1, reference[:, :3], "0.7", "target sample (grey), realised (colour)", s=3)
        ax.scatter(aligned[:, 0], aligned[:, 1], aligned[:, 2], c=data["labels"], cmap="viridis", s=18,
                   depthshade=False)
        _points(fig, 1, 3, 2, raw[:, :3], data["labels"], "flow state before co-moving alignment",
                cmap="viridis", s=18)
    ax = fig.add_subplot(1, 3, 3)
    bins = np.linspace(-1, 1, 21).tolist()
    ax.hist(reference[:, 0], bins=bins, density=True, color="0.6", alpha=0.6, label="target")
    ax.hist(aligned[:, 0], bins=bins, density=True, histtype="step", color="C0", label="realised")
    ax.hist(raw[:, 0], bins=bins, density=True, histtype="step", color="C3", linestyle="--", label="unaligned")
    ax.set(xlabel="⟨x, e_0⟩", ylabel="density", title="first coordinate")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)


def _plot_dichotomy(fig: Figure, data: dict[str, Any]) -> None:
    ax = fig.add_subplot(1, 3, 1)
    for name, values in data["series"].items():
        ax.plot(data["times"], np.maximum(values, 1e-17), label=name)
    ax.set_yscale("log")
    ax.set(xlabel="time t", ylabel="1 − |mean of x_i| (log scale)")
    ax.set_title("marginal spread", fontsize=9)
    ax.legend(fontsize=7)
    for k, (name, x) in enumerate(data["final_states"].items()):
        _points(fig, 1, 3, k + 2, np.asarray(x), data["labels"], f"{name}: final state", cmap="viridis")


def _plot_metastability(fig: Figure, data: dict[str, Any]) -> None:
    ax = fig.add_subplot(1, 2, 1)
    for curve in data["curves"]:
        ax.plot(np.maximum(curve["times"], 1e-2), curve["energy"], label=f"β = {curve['beta']:g}", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("(E − E_plateau) / (E_merged − E_plateau)")
    ax.set_title(f"two clusters at distance {data['separation']:.2f}", fontsize=9)
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 2, 2)
    betas = np.asarray(data["betas"])
    low = [s[0] for s in data["lifetime_spread"]]
    high = [s[1] for s in data["lifetime_spread"]]
    ax.semilogy(betas, data["lifetimes"], "o", label="simulated (median)")
    ax.vlines(betas, low, high, color="C0", linewidth=1)
    ax.semilogy(betas, data["reduced_lifetimes"], "--", color="C1", label="reduced two-cluster ODE")
    ax.semilogy(betas, np.exp(data["intercept"] + data["rate"] * betas), color="C2",
                label=f"fit: rate {data['rate']:.3f}, r = {data['r']:.4f}")
    ax.set_xlabel("β")
    ax.set_ylabel("plateau lifetime")
    ax.legend(fontsize=7)


def _plot_cluster_count(fig: Figure, data: dict[str, Any]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    rows = data["rows"]
    betas = [r["beta"] for r in rows]
    ax.plot(betas, [r["predicted"] for r in rows], "s-", label="argmax_k k² I_k(β)")
    for r in rows:
        measured = [m for m in r["measured"] if m is not None]  # None: a run that held no plateau
        ax.plot([r["beta"]] * len(measured), measured, "o", color="C1", alpha=0.6)
    ax.plot([], [], "o", color="C1", label="measured (per seed)")
    ax.set_xlabel("β")
    ax.set_ylabel("clusters")
    ax.legend(fontsize=7)


_CHECK_PLOTS = {
    "diracisation": (_plot_diracisation, (9, 4)),
    "rope_orbit": (_plot_rope_orbit, (13, 4)),
    "prefix_gauge": (_plot_prefix_gauge, (13, 4)),
    "dichotomy": (_plot_dichotomy, (13, 4)),
    "metastability": (_plot_metastability, (11, 4)),
    "cluster_count": (_plot_cluster_count, (5, 4)),
}


def plot_check(record: dict[str, Any], out_path: str | Path) -> Path | None:
    """The figure of a saved theorem check (``TheoremCheck.to_dict()``); None for checks without one."""
    kind = record.get("kind", "")
    if kind not in _CHECK_PLOTS:
        return None
    draw, size = _CHECK_PLOTS[kind]
    fig = Figure(figsize=size)
    draw(fig, record["data"])
    fig.suptitle(f"{record['name']}: {'PASS' if record['passed'] else 'FAIL'}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


#: the most frames an animation draws (evenly spaced records, the first and last among them): the writer holds every
#: frame (0.4 MB) until the GIF is written, and a run's memory check counts its states, not its frames
MAX_FRAMES = 200


def animate_states(states_path: str | Path, out_path: str | Path, fps: int = 10, dpi: int = 70) -> Path | None:
    """A GIF of a saved run (``experiments.save_states``), one frame per record, or ``MAX_FRAMES`` evenly spaced
    records of a run with more, written whole; None without Pillow."""
    try:
        import PIL  # noqa: F401  (PillowWriter needs it)
        from matplotlib.animation import PillowWriter
    except ImportError:
        logger.warning("Pillow is not importable: skipping the animation %s", out_path)
        return None
    saved = np.load(states_path)
    states, times, labels = saved["states"], saved["record_times"], saved["labels"]  # (R, n, d), (R,), (n,)
    d = states.shape[-1]
    if d not in (2, 3):
        logger.warning("animation needs d = 2 or 3, the run has d = %d: skipped", d)
        return None
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(4, 4))
    FigureCanvasAgg(fig)
    ax = _points(fig, 1, 1, 1, states[0], labels, "", cmap="viridis")
    points = ax.collections[-1]
    drawn = np.unique(np.round(np.linspace(0, len(states) - 1, min(len(states), MAX_FRAMES))).astype(int))  # (F,)
    writer = PillowWriter(fps=fps)
    # written beside and moved in whole: a write cut short (a full disk) keeps the GIF already there, and SIGTERM or
    # SIGHUP, which would end the process on the spot, remove the folder it is written in first
    with signals_unwind(), tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp") as folder:
        staged = Path(folder) / out.name
        with writer.saving(fig, str(staged), dpi):
            for state, t in zip(states[drawn], times[drawn], strict=True):
                if d == 3:
                    points._offsets3d = (state[:, 0], state[:, 1], state[:, 2])
                else:
                    points.set_offsets(state)
                ax.set_title(f"{str(saved['name'])}   t = {t:.2f}", fontsize=9)
                writer.grab_frame()
        os.replace(staged, out)
    return out
