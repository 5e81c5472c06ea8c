"""Figures of the induction experiments, drawn from saved summaries and saved models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from psattn.experiments.phase_change import best, best_head, uniform_score
from psattn.figures import save_figure


def plot_gamma_sweep(rows: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Success rate and mean emergence step against gamma (two y axes, one legend)."""
    rows = sorted(rows, key=lambda r: r["gamma"])
    gammas = [r["gamma"] for r in rows]
    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.add_subplot()
    rate = ax.plot(gammas, [r["success_rate"] for r in rows], "o-", color="tab:blue", label="success rate")
    ax.set_xlabel("gamma (shear coupling)")
    ax.set_ylabel("success rate (fraction of seeds)", color="tab:blue")
    ax.set_ylim(-0.05, 1.05)
    ax2 = ax.twinx()
    steps = [r["mean_emergence_step"] if r["mean_emergence_step"] is not None else np.nan for r in rows]
    step = ax2.plot(gammas, steps, "s--", color="tab:red", label="mean emergence step (successful seeds)")
    ax2.set_ylabel("mean emergence step", color="tab:red")
    ax.legend(handles=rate + step, fontsize=7, loc="center right")
    ax.set_title(title or "gamma sweep (symmetric PSA)")
    return save_figure(fig, path)


MARKERS = "osD^v<>px*"


def plot_training_curves(histories: dict[str, list[dict[str, Any]]], path: str | Path, threshold: float,
                         title: str = "held-out accuracy during training") -> Path:
    """Held-out accuracy against step, one line (with markers, so a one-point run shows) per run, and
    the success threshold."""
    fig = Figure(figsize=(7.5, 4), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, history) in enumerate(histories.items()):
        ax.plot([h["step"] for h in history], [h["eval_accuracy"] for h in history], label=label,
                marker=MARKERS[i % len(MARKERS)], markersize=3.5, linewidth=1.2,
                linestyle=("-", "--", "-.", ":")[(i // 10) % 4], color=f"C{i % 10}")
    ax.axhline(threshold, color="grey", linestyle=":", linewidth=1, label=f"success threshold ({threshold:g})")
    ax.set(xlabel="training step", ylabel="held-out accuracy", title=title, ylim=(0, 1.02))
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return save_figure(fig, path)


#: metric of a metrics.jsonl row -> axis label
RUN_METRICS = {"eval_accuracy": "held-out accuracy", "eval_loss": "held-out loss (nats per scored token)",
               "train_loss": "training loss (nats)", "bits_per_byte": "held-out bits per byte",
               "icl_score": "ICL score (nats; late minus early loss)",
               "position_loss": "held-out loss at each position (nats)",
               "prefix_matching_score": "prefix-matching score", "induction_score": "induction score",
               "previous_token_score": "previous-token score"}


def plot_runs(histories: dict[str, list[dict[str, Any]]], path: str | Path, metrics: tuple[str, ...]) -> Path:
    """One panel per metric, one line per run (what ``psattn plot`` draws): a number against step; a
    per-head score (layers of heads) as its best head in each layer against step (dashed: layer 1);
    a per-position list (``position_loss``) as the last evaluation's values against position."""
    fig = Figure(figsize=(5.2 * len(metrics) + 1.8, 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        name = RUN_METRICS.get(metric, metric)
        for i, (label, history) in enumerate(histories.items()):
            rows = [h for h in history if h.get(metric) is not None]
            style = dict(marker=MARKERS[i % len(MARKERS)], markersize=3.5, linewidth=1.2, color=f"C{i % 10}")
            values = rows[-1][metric] if rows else None
            if isinstance(values, list) and values and isinstance(values[0], list):  # (layers, heads)
                for layer in range(len(values)):
                    ax.plot([h["step"] for h in rows], [best(h[metric][layer]) for h in rows],
                            label=f"{label}, layer {layer + 1}", linestyle="--" if layer == 0 else "-", **style)
                ax.set(xlabel="training step", ylabel=f"{name} (best head of each layer)")
            elif isinstance(values, list):  # one value per position
                ax.plot(range(len(values)), values, label=f"{label} (step {rows[-1]['step']})",
                        **{**style, "marker": None})
                ax.set(xlabel="position in the context", ylabel=f"{name} (last evaluation)")
            else:
                ax.plot([h["step"] for h in rows], [h[metric] for h in rows], label=label, **style)
                ax.set(xlabel="training step", ylabel=name)
        ax.set_title(name)
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return save_figure(fig, path)


def plot_head_scores(scores: dict[str, dict[str, list[list[float]]]], path: str | Path) -> Path:
    """Previous-token and induction score of every head (layer 0), grouped by variant."""
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    names = list(scores)
    for ax, kind in zip(axes, ("previous_token", "induction"), strict=True):
        heads = len(scores[names[0]][kind][0])
        width = 0.8 / heads
        for h in range(heads):
            ax.bar(np.arange(len(names)) + h * width, [scores[n][kind][0][h] for n in names], width,
                   label=f"head {h}")
        ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{kind.replace('_', '-')} score")
        ax.set(xlabel="variant", ylim=(0, 1))
    axes[0].set_ylabel("attention (mean over rows)")
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)


def plot_attention_patterns(patterns: dict[str, np.ndarray], path: str | Path) -> Path:
    """Heat maps of layer-0 attention patterns (heads, T, T) on a [BOS] + R + R row, one row of
    panels per variant."""
    names = list(patterns)
    if not names:
        raise ValueError("no attention patterns to draw")
    heads = patterns[names[0]].shape[0]
    fig = Figure(figsize=(2.2 * heads + 1.0, 2.2 * len(names) + 0.4), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(names), heads))
    images = []
    for i, name in enumerate(names):
        for h in range(heads):
            ax = axes[i, h]
            images.append(ax.imshow(patterns[name][h], cmap="viridis", vmin=0, vmax=1))
            ax.set_xticks([])
            ax.set_yticks([])
            if h == 0:
                ax.set_ylabel(name, fontsize=8)
            if i == 0:
                ax.set_title(f"head {h}", fontsize=8)
    fig.colorbar(images[-1], ax=axes.ravel().tolist(), shrink=0.6, label="attention weight (row: query, column: key)")
    fig.suptitle("layer 1 attention on [BOS] + R + R (R: random tokens), seed-0 models")
    return save_figure(fig, path)


def plot_phase_change(histories: dict[str, list[dict[str, Any]]], path: str | Path, *, context: int | list[int],
                      threshold: float, changes: dict[str, Any] | None = None,
                      predicted: dict[str, float] | None = None) -> Path:
    """Olsson-style curves against training tokens, one line per run: the best head's prefix-matching
    score (log scale; the uniform-attention level of each ``context`` and the phase-change threshold
    marked), the best second-layer previous-token score beside the first layer's, and the ICL score.
    ``changes`` maps a label to its detected phase change (a circle marks it), or None; ``predicted``
    maps a label to a predicted phase change in tokens (a dotted vertical line in the run's colour)."""
    fig = Figure(figsize=(14, 3.9), layout="constrained")
    prefix, previous, icl = fig.subplots(1, 3)
    for i, (label, history) in enumerate(histories.items()):
        rows = [h for h in history if h["step"] > 0]
        tokens = [h["tokens"] / 1e6 for h in rows]
        style = dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], markersize=2.5, linewidth=1.1)
        prefix.plot(tokens, [best_head(h, "prefix_matching_score") for h in rows], label=label, **style)
        layers = len(rows[0]["previous_token_score"]) if rows else 0
        for layer, dash in zip(range(layers), ("--", "-"), strict=False):  # two line styles: the first two layers
            previous.plot(tokens, [best(h["previous_token_score"][layer]) for h in rows], linestyle=dash,
                          label=f"{label}, layer {layer + 1}", **{k: v for k, v in style.items() if k != "marker"})
        icl.plot(tokens, [h["icl_score"] for h in rows], label=label, **style)
        change = (changes or {}).get(label)
        if change is not None:
            prefix.plot([change.tokens / 1e6], [change.score], "o", markersize=11, markerfacecolor="none",
                        color=f"C{i % 10}")
        when = (predicted or {}).get(label)
        if when is not None:
            prefix.axvline(when / 1e6, color=f"C{i % 10}", linestyle=":", linewidth=1.2)
    for t in sorted({context} if isinstance(context, int) else set(context), reverse=True):
        prefix.axhline(uniform_score(t), color="grey", linestyle=":", linewidth=1,
                       label=f"uniform attention, T = {t} (~ln 2/(T/2) = {uniform_score(t):.3f})")
    prefix.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"phase-change threshold ({threshold:g})")
    prefix.set(yscale="log", xlabel="training tokens (millions)",
               ylabel="best prefix-matching score\n(any head, repeated passage)",
               title="prefix matching\n(circle: phase change" + ("; dotted: predicted)" if predicted else ")"))
    previous.set(xlabel="training tokens (millions)", ylabel="best previous-token score", ylim=(0, 1),
                 title="previous-token heads by layer\n(dashed: layer 1)")
    icl.set(xlabel="training tokens (millions)", ylabel=RUN_METRICS["icl_score"], title="in-context learning score\n")
    prefix.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2)
    icl.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return save_figure(fig, path)


def plot_depth_law(rows: list[dict[str, Any]], path: str | Path, law: tuple[float, float]) -> Path:
    """One panel per task and variant: mean emergence step against gamma (log scale), one line per
    depth over the gammas every seed solves, a cross near the top where some seed failed (one row per depth), and the
    law gamma* = a N^b marked at each depth (``law`` = (a, b))."""
    panels = sorted({(r["task"], r["variant"]) for r in rows})
    depths = sorted({r["depth"] for r in rows})
    fig = Figure(figsize=(9, 3.2 * ((len(panels) + 1) // 2)), layout="constrained")
    axes = fig.subplots((len(panels) + 1) // 2, 2, squeeze=False, sharex=True).ravel()
    top = max(g["mean_emergence_step"] or 0 for r in rows for g in r["grid"]) * 1.15
    for ax, (task, variant) in zip(axes, panels, strict=True):
        for r in (r for r in rows if (r["task"], r["variant"]) == (task, variant)):
            color = f"C{depths.index(r['depth'])}"
            grid = [g for g in r["grid"] if g["gamma"] > 0]
            solved = [g for g in grid if g["successes"] == g["seeds"]]
            ax.plot([g["gamma"] for g in solved], [g["mean_emergence_step"] for g in solved], "o-", color=color,
                    markersize=4, linewidth=1.2, label=f"N = {r['depth']}")
            failed = [g["gamma"] for g in grid if g["successes"] < g["seeds"]]
            row = top * (1 - 0.045 * depths.index(r["depth"]))  # one row of crosses per depth
            ax.plot(failed, [row] * len(failed), "x", color=color, markersize=6)
            ax.axvline(law[0] * r["depth"] ** law[1], color=color, linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ticks = sorted({g["gamma"] for r in rows for g in r["grid"] if g["gamma"] > 0})
        ax.set_xticks(ticks, [f"{g:g}" for g in ticks])
        ax.set(title=f"{task}, {variant}", ylabel="mean emergence step", ylim=(0, top * 1.08))
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-2:]:
        ax.set_xlabel("gamma (log scale)")
    axes[0].legend(fontsize=7, title="depth", title_fontsize=7)
    fig.suptitle(f"emergence against gamma per depth (crosses on top: some seed failed; dotted: {law[0]:g} N^{law[1]:g})",
                 fontsize=9)
    return save_figure(fig, path)
