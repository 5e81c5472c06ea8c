"""Figures of the real-text experiment, drawn from the runs' saved metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from psattn.figures import save_figure

MARKERS = "osD^v<>"


def plot_text_curves(histories: dict[str, list[dict[str, Any]]], path: str | Path) -> Path:
    """Held-out bits per byte and the in-context-learning score against step, one line per model."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    axes = fig.subplots(1, 2)
    for i, (label, history) in enumerate(histories.items()):
        steps = [h["step"] for h in history]
        style = dict(marker=MARKERS[i % len(MARKERS)], markersize=4, label=label)
        axes[0].plot(steps, [h["bits_per_byte"] for h in history], **style)
        axes[1].plot(steps, [h["icl_score"] for h in history], **style)
    axes[0].set(xlabel="training step", ylabel="held-out bits per byte", title="held-out loss")
    axes[1].set(xlabel="training step", ylabel="ICL score (nats; late minus early loss)",
                title="in-context learning (lower is better)")
    axes[1].axhline(0.0, color="grey", linewidth=0.8, linestyle=":")
    axes[1].legend(fontsize=8)
    return save_figure(fig, path)


def plot_position_loss(curves: dict[str, list[float]], path: str | Path) -> Path:
    """Final held-out loss against position in the context, one line per model."""
    fig = Figure(figsize=(6.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, losses) in enumerate(curves.items()):
        ax.plot(np.arange(len(losses)), losses, label=label, linewidth=1.2,
                linestyle=("-", "--", ":", "-.")[i % 4])
    ax.set(xlabel="position in the context (tokens)", ylabel="held-out loss (nats per token)",
           title="loss against position (final models)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_induction_heatmaps(scores: dict[str, list[list[float]]], path: str | Path) -> Path:
    """Induction score of every head (rows: layers, columns: heads), one panel per model."""
    fig = Figure(figsize=(2.8 * len(scores) + 1.2, 2.8), layout="constrained")
    axes = fig.subplots(1, len(scores), squeeze=False)[0]
    image = None
    for ax, (label, grid) in zip(axes, scores.items()):
        values = np.asarray(grid)
        image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (layer, head), v in np.ndenumerate(values):
            ax.text(head, layer, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if v < 0.5 else "black")
        ax.set_xticks(range(values.shape[1]))
        ax.set_yticks(range(values.shape[0]))
        ax.set(xlabel="head", ylabel="layer", title=label)
        ax.title.set_fontsize(8)
    fig.colorbar(image, ax=list(axes), label="induction score (attention to the token\nafter the previous occurrence)")
    return save_figure(fig, path)
