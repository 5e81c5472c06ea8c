"""Figures of the real-text experiment, drawn from the runs' saved metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from psattn.experiments.phase_change import best_head, uniform_score
from psattn.figures import save_figure

MARKERS = "osD^v<>"


def plot_text_curves(histories: dict[str, list[dict[str, Any]]], path: str | Path) -> Path:
    """Held-out bits per byte, the in-context-learning score and the repeated-passage copy gain against
    step, one line per model (bits per byte from the first trained evaluation, so the untrained model's
    ~log2 V does not flatten the differences)."""
    fig = Figure(figsize=(13, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    for i, (label, history) in enumerate(histories.items()):
        steps = [h["step"] for h in history]
        style = dict(marker=MARKERS[i % len(MARKERS)], markersize=4, label=label)
        trained = [h for h in history if h["step"] > 0]
        axes[0].plot([h["step"] for h in trained], [h["bits_per_byte"] for h in trained], **style)
        axes[1].plot(steps, [h["icl_score"] for h in history], **style)
        axes[2].plot(steps, [h["passage_first_loss"] - h["passage_second_loss"] for h in history], **style)
    axes[0].set(xlabel="training step", ylabel="held-out bits per byte", title="held-out loss (lower is better)")
    axes[1].set(xlabel="training step", ylabel="ICL score (nats; late minus early loss)",
                title="in-context learning (lower is better)")
    axes[2].set(xlabel="training step", ylabel="copy gain (nats; 1st minus 2nd copy)",
                title="copying a repeated passage (higher is better)")
    for ax in axes[1:]:
        ax.axhline(0.0, color="grey", linewidth=0.8, linestyle=":")
    axes[2].legend(fontsize=8)
    return save_figure(fig, path)


def plot_position_loss(curves: dict[str, list[float]], path: str | Path) -> Path:
    """Final held-out loss against position in the context, one colour per model: the per-position
    mean (thin) and its moving average over T/16 positions (thick), on a log position axis."""
    fig = Figure(figsize=(6.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, losses) in enumerate(curves.items()):
        values = np.asarray(losses)
        width = max(1, len(values) // 16)
        smooth = np.convolve(values, np.ones(width) / width, mode="valid")  # (T - width + 1,)
        positions = np.arange(len(values))
        color = f"C{i}"
        ax.plot(positions[1:], values[1:], color=color, linewidth=0.6, alpha=0.35)
        ax.plot(positions[width - 1 :][1:], smooth[1:], color=color, linewidth=2.0,
                linestyle=("-", "--", ":", "-.")[i % 4], label=f"{label} (mean of {width})")
    ax.set_xscale("log")
    ax.set(xlabel="position in the context (tokens, log scale)", ylabel="held-out loss (nats per token)",
           title="loss against position (final models)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_head_heatmaps(scores: dict[str, dict[str, list[list[float]]]], path: str | Path) -> Path:
    """Every head's induction score (repeated random tokens) and prefix-matching score (repeated passage):
    rows of panels are the two scores, columns the models; rows of a panel are layers, columns heads.
    One colour scale for all panels, from 0 to the largest finite score drawn (a NaN cell is left blank)."""
    kinds = {"induction_score": "induction score\n(random tokens)", "prefix_matching_score": "prefix matching\n(passage)"}
    drawn = np.concatenate([np.ravel(grids[kind]) for grids in scores.values() for kind in kinds])
    top = float(drawn[np.isfinite(drawn)].max(initial=0.0))  # max() gave NaN for a NaN in first place only
    fig = Figure(figsize=(2.6 * len(scores) + 1.4, 4.6), layout="constrained")
    axes = fig.subplots(len(kinds), len(scores), squeeze=False)
    image = None
    for col, (label, grids) in enumerate(scores.items()):
        for row, (kind, kind_label) in enumerate(kinds.items()):
            ax, values = axes[row, col], np.asarray(grids[kind])
            image = ax.imshow(values, vmin=0.0, vmax=top, cmap="viridis", aspect="auto")
            for (layer, head), v in np.ndenumerate(values):
                ax.text(head, layer, f"{v:.3f}", ha="center", va="center", fontsize=6,
                        color="white" if v < 0.6 * top else "black")
            ax.set_xticks(range(values.shape[1]))
            ax.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])])  # layer 1 first
            ax.set(xlabel="head", ylabel="layer" if col == 0 else None)
            if row == 0:
                ax.set_title(label, fontsize=8)
            if col == 0:
                ax.set_ylabel(f"{kind_label}\nlayer", fontsize=8)
    assert image is not None  # scores holds at least one model
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention to the token after\nits occurrence in the first copy")
    return save_figure(fig, path)


def plot_copying(histories: dict[str, list[dict[str, Any]]], path: str | Path, *, context: int, threshold: float,
                 copy_threshold: float, changes: dict[str, Any], copying: dict[str, Any],
                 styles: dict[str, dict[str, Any]] | None = None) -> Path:
    """Olsson-style curves against training tokens, one line per model: the best head's prefix-matching
    score (log scale; uniform attention's level, ``uniform_score``, and the phase-change threshold marked, a circle at each
    detected phase change), the ICL score, the repeated random tokens' copy gain (a square at each
    model's first copying) and held-out bits per byte. ``styles`` overrides a model's line style (its
    ``color``, ``linestyle``, ...) by label."""
    fig = Figure(figsize=(14, 8), layout="constrained")
    (prefix, icl), (copy, loss) = fig.subplots(2, 2)
    for i, (label, history) in enumerate(histories.items()):
        rows = [h for h in history if h["step"] > 0]
        tokens = [h["tokens"] / 1e6 for h in rows]
        style = dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], markersize=2.5, linewidth=1.1, label=label)
        style.update((styles or {}).get(label, {}))
        colour = style["color"]
        prefix.plot(tokens, [best_head(h, "prefix_matching_score") for h in rows], **style)
        icl.plot(tokens, [h["icl_score"] for h in rows], **style)
        copy.plot(tokens, [h["random_first_loss"] - h["random_second_loss"] for h in rows], **style)
        loss.plot(tokens, [h["bits_per_byte"] for h in rows], **style)
        if changes.get(label) is not None:
            prefix.plot([changes[label].tokens / 1e6], [changes[label].score], "o", markersize=11,
                        markerfacecolor="none", color=colour)
        if copying.get(label) is not None:
            copy.plot([copying[label].tokens / 1e6], [copying[label].score], "s", markersize=11,
                      markerfacecolor="none", color=colour)
    prefix.axhline(uniform_score(context), color="grey", linestyle=":", linewidth=1,
                   label=f"uniform attention (~ln 2/(T/2) = {uniform_score(context):.3f})")
    prefix.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"phase-change threshold ({threshold:g})")
    copy.axhline(copy_threshold, color="black", linestyle="--", linewidth=1)
    prefix.set(yscale="log", ylabel="best prefix-matching score\n(any head, repeated passage)",
               title="prefix matching\n(circle: phase change)")
    icl.set(ylabel="ICL score (nats; late minus early loss)", title="in-context learning\n(lower is better)")
    copy.set(ylabel="copy gain (nats; 1st minus 2nd copy)",
             title=f"copying repeated random tokens\n(dashed: threshold, {copy_threshold:g}; square: first copying)")
    loss.set(ylabel="held-out bits per byte", title="held-out loss\n(lower is better)")
    for ax in (prefix, icl, copy, loss):
        ax.set_xlabel("training tokens (millions)")
    icl.axhline(0.0, color="grey", linewidth=0.8, linestyle=":")
    fig.legend(*prefix.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    return save_figure(fig, path)
