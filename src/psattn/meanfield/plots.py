"""Figures from a saved experiment summary (``experiments.run_experiments``), never from a live run.

Uses matplotlib's object API with the Agg canvas, so importing this module changes no global backend.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DEFAULT_SERIES = ("marginal_spread", "fraction_aligned", "comoving_spread", "mean_cosine", "energy")


def load_summary(summary: str | Path | dict[str, Any]) -> dict[str, Any]:
    if isinstance(summary, dict):
        return summary
    path = Path(summary)
    if path.is_dir():
        path = path / "summary.json"
    return json.loads(path.read_text())


def _select(runs: list[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    return [r for r in runs if n is None or r["config"]["n"] == n]


def _save(fig: Figure, out_path: str | Path) -> Path:
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(out, dpi=120)
    return out


def plot_final_states(summary: str | Path | dict[str, Any], out_path: str | Path, n: int | None = None) -> Path:
    """Final states on S² (batch element 0), one panel per run, coloured by label."""
    runs = [r for r in _select(load_summary(summary)["runs"], n) if r["config"]["d"] == 3]
    if not runs:
        raise ValueError("no runs with d = 3 to draw on the sphere")
    cols = min(3, len(runs))
    rows = math.ceil(len(runs) / cols)
    fig = Figure(figsize=(4 * cols, 4 * rows))
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
    for k, run in enumerate(runs):
        ax = fig.add_subplot(rows, cols, k + 1, projection="3d")
        ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", linewidth=0.4)
        x = np.asarray(run["final_state"])  # (n, 3)
        ax.scatter(x[:, 0], x[:, 1], x[:, 2], c=run["labels"], cmap="viridis", s=12, depthshade=False)
        ax.set_title(run["name"], fontsize=9)
        ax.set_box_aspect((1, 1, 1))
        ax.set_axis_off()
    fig.tight_layout()
    return _save(fig, out_path)


def plot_diagnostics(
    summary: str | Path | dict[str, Any],
    out_path: str | Path,
    names: Sequence[str] = DEFAULT_SERIES,
    n: int | None = None,
) -> Path:
    """Diagnostics (and the energy) against time, batch element 0, one line per run."""
    runs = _select(load_summary(summary)["runs"], n)
    fig = Figure(figsize=(4.5 * len(names), 3.5))
    for k, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), k + 1)
        for run in runs:
            series = run["energy"] if name == "energy" else run["diagnostics"][name]
            values = [np.nan if row[0] is None else row[0] for row in series]
            ax.plot(run["record_times"], values, label=run["name"], linewidth=1)
        ax.set_xlabel("t")
        ax.set_title(name, fontsize=9)
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out_path)
