"""The paper's phase transition at its own scale, on a GPU (``psattn sweep paper_scale --full``).

The PSA paper reports, at 91.3M parameters: with gamma = 0.80 induction appears in 3/3 seeds at about
717 steps; with gamma = 0 in 2/3 seeds at about 2,700 (``PAPER``). The full plan trains the psa-92m
preset (85.1M parameters at the task's vocabulary of 64: 12 layers, d_model 768) on full-sequence
induction with the symmetric shear and the key-only shear at every gamma of ``GAMMAS`` (gamma 0 is the
plain model, one row), and on the single-answer form the plain model and both shears at gamma 0.8 and 1
(``SINGLE_ROWS``); three seeds each; then the psa-20m preset at the same settings, for the trend in
size. Training: bf16 autocast, AdamW at a peak learning rate of 3e-4 (3e-3 is the one-layer rate),
64 rows a step, held-out accuracy every 25 steps, each run stopping once it has stayed at the
threshold (0.8) for two evaluations, or at 3,000 steps: the cosine schedule's horizon of the first
H200 runs (2026-12-04), in which the plain model emerged at 1,350-1,450 steps on the three seeds that
finished, so the cap decides the baseline.

A GPU sweep has no CPU-scale plan: the quick plan is the same declaration shrunk to tiny models, a
few steps and one seed on the CPU, which checks the pipeline (training, saving, tables) end to end in
seconds; its numbers mean nothing.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any, Literal

from psattn.experiments.configs import study_config
from psattn.experiments.markdown import table
from psattn.experiments.study import Study, check_mode
from psattn.experiments.summaries import first_attention
from psattn.training.config import RunConfig

#: the paper's table at 91.3M parameters (symmetric shear, full-sequence form): gamma -> (successes,
#: seeds, emergence step)
PAPER = {0.8: (3, 3, 717), 0.0: (2, 3, 2700)}
PAPER_SIZE = "91.3M"


@dataclass(frozen=True)
class ScalePlan:
    """The paper-scale study's sizes, γ values, single-answer rows, seeds and training settings."""
    sizes: tuple[tuple[str, dict[str, Any]], ...]  # (label, model fields of ``small_config``)
    gammas: tuple[float, ...]  # of both shears on the full-sequence form (0: the plain model)
    single_rows: tuple[tuple[str, float], ...]  # (variant, gamma) on the single-answer form
    seeds: tuple[int, ...]
    steps: int  # the cap (and the cosine schedule's horizon)
    eval_every: int
    eval_size: int
    batch_size: int
    lr: float
    threshold: float
    early_stop_evals: int
    device: str
    precision: Literal["fp32", "bf16"]
    checkpoint_every: int  # a psa-92m checkpoint with its optimiser is about 1 GB


SINGLE_ROWS = (("baseline", 0.0), ("symmetric", 0.8), ("symmetric", 1.0), ("key_only", 0.8), ("key_only", 1.0))
GAMMAS = (0.0, 0.2, 0.4, 0.8, 1.6)
VARIANTS = ("symmetric", "key_only")
PLANS = {
    "full": ScalePlan(sizes=(("psa-92m", {"model_preset": "psa-92m"}), ("psa-20m", {"model_preset": "psa-20m"})),
                      gammas=GAMMAS, single_rows=SINGLE_ROWS, seeds=(0, 1, 2), steps=3000, eval_every=25,
                      eval_size=512, batch_size=64, lr=3e-4, threshold=0.8, early_stop_evals=2, device="cuda",
                      precision="bf16", checkpoint_every=500),
    "quick": ScalePlan(sizes=(("L2d16h2", {"d_model": 16, "n_heads": 2, "n_layers": 2}),
                              ("L1d16h2", {"d_model": 16, "n_heads": 2, "n_layers": 1})),
                       gammas=(0.0, 0.8), single_rows=SINGLE_ROWS, seeds=(0,), steps=8, eval_every=4, eval_size=16,
                       batch_size=8, lr=3e-3, threshold=0.8, early_stop_evals=2, device="cpu", precision="bf16",
                       checkpoint_every=4),
}
#: seconds a psa-92m step took on one H200 in bf16 (2026-12-04, git 4f3c995), timed from the first step to
#: the last with an evaluation every 50 steps in between: the planning figure
H200_STEP_S = (0.050, 0.090)


def _rows(plan: ScalePlan) -> list[tuple[str, str, float]]:
    """(form, variant, gamma) of every row of the plan, the plain model once per form."""
    every = [("all_positions", "baseline", 0.0)]
    every += [("all_positions", v, g) for v in VARIANTS for g in plan.gammas if g > 0]
    return every + [("single", v, g) for v, g in plan.single_rows]


def scale_config(plan: ScalePlan, size: dict[str, Any], form: str, variant: str, gamma: float, seed: int) -> RunConfig:
    """One run of the paper-scale study."""
    config = study_config("paper_scale", variant, gamma, form=form, seed=seed, steps=plan.steps,
                          batch_size=plan.batch_size, lr=plan.lr, threshold=plan.threshold, early_stop=False,
                          early_stop_evals=plan.early_stop_evals, eval_every=plan.eval_every, device=plan.device,
                          **size)
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, precision=plan.precision, eval_size=plan.eval_size, checkpoint_every=plan.checkpoint_every,
        threads=1 if plan.device == "cpu" else None))


#: the rows of the paper's own table (``PAPER``): the plain model and the symmetric shear, full-sequence form
PAPER_ROWS = tuple(("all_positions", "symmetric" if gamma else "baseline", gamma) for gamma in sorted(PAPER))


def paper_scale(mode: str = "quick") -> list[RunConfig]:
    """Every run of the plan, the larger model first. Within a size the paper's own rows come first
    (``PAPER_ROWS``, every seed: a sweep's first piece gives the paper's table at that size), then the
    others; seeds interleaved in each part (a sweep cut short keeps whole seeds of every row)."""
    plan = PLANS[check_mode(mode)]
    rows = _rows(plan)
    ordered = [row for row in rows if row in PAPER_ROWS] + [row for row in rows if row not in PAPER_ROWS]
    split = sum(row in PAPER_ROWS for row in rows)
    return [scale_config(plan, size, form, variant, gamma, seed)
            for _, size in plan.sizes for part in (ordered[:split], ordered[split:])
            for seed in plan.seeds for form, variant, gamma in part]


def size_label(result: dict[str, Any]) -> str:
    """The plan's label of a saved run's model: its preset, or its shape."""
    name = result["config"]["name"]
    return next((label for label, _ in (*PLANS["full"].sizes, *PLANS["quick"].sizes) if f"-{label}-" in name), "?")


def scale_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (size, form, variant, gamma): the emergence step of every seed (None: not reached),
    successes, the mean emergence step over the seeds that emerged, mean best accuracy and the
    parameter count."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in sorted(results.values(), key=lambda r: r["config"]["train"]["seed"]):
        a = first_attention(r)
        key = (size_label(r), r["config"]["task"].get("form", "all_positions"), a["variant"], a["gamma"])
        groups.setdefault(key, []).append(r)
    rows = []
    for (size, form, variant, gamma), runs in groups.items():
        steps = [r["emergence_step"] for r in runs]
        emerged = [s for s in steps if s is not None]
        rows.append({"size": size, "form": form, "variant": variant, "gamma": gamma,
                     "seeds": [r["config"]["train"]["seed"] for r in runs], "emergence_steps": steps,
                     "diverged_at": [r.get("diverged_at") for r in runs],
                     "successes": len(emerged), "mean_emergence_step": statistics.fmean(emerged) if emerged else None,
                     "mean_best_accuracy": statistics.fmean(r["best_accuracy"] for r in runs),
                     "cap": runs[0]["config"]["train"]["steps"], "threshold": runs[0]["config"]["train"]["threshold"]})
    order = {"baseline": 0, "symmetric": 1, "key_only": 2}
    sizes = [label for label, _ in (*PLANS["full"].sizes, *PLANS["quick"].sizes)]
    return sorted(rows, key=lambda r: (sizes.index(r["size"]) if r["size"] in sizes else len(sizes),
                                       r["form"] != "all_positions", order.get(r["variant"], 3), r["gamma"]))


def paper_cell(row: dict[str, Any]) -> str:
    """The paper's 91.3M result beside the matching row (symmetric or plain, full-sequence form, the larger size)."""
    if row["form"] != "all_positions" or row["size"] != "psa-92m" or row["variant"] not in ("baseline", "symmetric"):
        return ""
    if row["gamma"] not in PAPER:
        return ""
    successes, seeds, step = PAPER[row["gamma"]]
    return f"{successes}/{seeds} at ~{step:,}"


def format_scale_table(rows: list[dict[str, Any]]) -> list[str]:
    """The table as markdown lines: per seed the emergence step ("—": not within the cap; "diverged at
    N": the loss stopped being finite at step N)."""
    def seed(step, diverged):
        shown = "—" if step is None else f"{step:,}"
        if diverged is None:
            return shown
        return f"diverged at {diverged:,}" if step is None else f"{shown} (diverged at {diverged:,})"

    def steps(r):
        diverged = r.get("diverged_at", [None] * len(r["seeds"]))
        return ", ".join(seed(s, d) for s, d in zip(r["emergence_steps"], diverged, strict=True))
    return table(
        ["model", "form", "variant", "gamma", "emergence step per seed", "succeed", "mean emergence step",
         "mean best accuracy", f"paper ({PAPER_SIZE})"],
        [[r["size"], r["form"], r["variant"], f"{r['gamma']:g}", steps(r), f"{r['successes']}/{len(r['seeds'])}",
          "—" if r["mean_emergence_step"] is None else f"{r['mean_emergence_step']:,.0f}", f"{r['mean_best_accuracy']:.3f}",
          paper_cell(r) or "—"] for r in rows])


def scale_verdict(rows: list[dict[str, Any]]) -> list[str]:
    """Per model size, on the full-sequence form: how many times earlier the symmetric shear at gamma 0.8
    emerges than the plain model (mean emergence steps of the seeds that emerged), beside the paper's."""
    out = []
    paper_ratio = PAPER[0.0][2] / PAPER[0.8][2]
    by = {(r["size"], r["form"], r["variant"], r["gamma"]): r for r in rows}
    for size in dict.fromkeys(r["size"] for r in rows):
        plain, psa = by.get((size, "all_positions", "baseline", 0.0)), by.get((size, "all_positions", "symmetric", 0.8))
        if plain is None or psa is None:
            continue
        n = len(plain["seeds"])
        line = (f"**{size}, full-sequence form**: gamma 0.8 emerged on {psa['successes']}/{len(psa['seeds'])} seeds, "
                f"the plain model on {plain['successes']}/{n} within {plain['cap']:,} steps")
        diverged = []
        for r in (r for r in rows if r["size"] == size):
            k = sum(d is not None for d in r.get("diverged_at", []))
            if k:
                diverged.append(f"{r['form']} {r['variant']} γ={r['gamma']:g} on {k} seed{'s' * (k > 1)}")
        if diverged:
            line += f" (diverged: {', '.join(diverged)})"
        if psa["mean_emergence_step"] and plain["mean_emergence_step"]:
            ratio = plain["mean_emergence_step"] / psa["mean_emergence_step"]
            line += (f"; the shear brings emergence {ratio:.1f}× earlier ({plain['mean_emergence_step']:,.0f} against "
                     f"{psa['mean_emergence_step']:,.0f} steps, means over the seeds that emerged)")
        paper = f" The paper at {PAPER_SIZE}: 3/3 and 2/3, {paper_ratio:.1f}× earlier." if size == "psa-92m" else ""
        out.append(line + "." + paper)
    return out


def expected_minutes(plan: ScalePlan = PLANS["full"], step_s: tuple[float, float] = H200_STEP_S,
                     emerges_at: dict[float, int] | None = None) -> tuple[float, float]:
    """(low, high) minutes of training for the psa-92m runs, from the H200 step time: every run of a
    gamma in ``emerges_at`` stops two evaluations after that step, every other one at the cap. The
    default, from the first H200 runs: gamma 0.8 and above by step 100, gamma 0 at 1,450; gammas 0.2 and
    0.4, never measured, run to the cap (an upper bound)."""
    emerges_at = {0.8: 100, 1.6: 100, 0.0: 1450} if emerges_at is None else emerges_at
    per_seed = sum(min(plan.steps, emerges_at[g] + plan.early_stop_evals * plan.eval_every) if g in emerges_at
                   else plan.steps for form, _, g in _rows(plan) if form == "all_positions")
    per_seed += sum(plan.steps for form, _, _ in _rows(plan) if form == "single")  # the single form: unmeasured
    steps = per_seed * len(plan.seeds)
    return steps * step_s[0] / 60, steps * step_s[1] / 60


def scale_figure(results: dict[str, dict[str, Any]], path) -> Any:
    """Emergence step against gamma on the full-sequence form, one panel per model size, one line per shear
    (seed means over the seeds that emerged, from the plain model's at gamma 0), every seed a dot (the plain
    model's black, once); a seed that never emerged sits on the cap, hollow (one that diverged first is left
    out); the cap's line and the hollow dots named in the legend; the paper's 91.3M points marked."""
    from matplotlib.figure import Figure

    from psattn.figures import save_figure

    rows = [r for r in scale_table(results) if r["form"] == "all_positions"]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    fig = Figure(figsize=(5.0 * len(sizes), 4.0))
    axes = fig.subplots(1, len(sizes), squeeze=False)[0]
    for ax, size in zip(axes, sizes, strict=True):
        mine = [r for r in rows if r["size"] == size]
        plain = [r for r in mine if r["variant"] == "baseline"]
        for variant, color in (("symmetric", "tab:blue"), ("key_only", "tab:orange")):
            line = sorted(plain + [r for r in mine if r["variant"] == variant], key=lambda r: r["gamma"])
            shown = [(r["gamma"], r["mean_emergence_step"]) for r in line if r["mean_emergence_step"] is not None]
            ax.plot([g for g, _ in shown], [s for _, s in shown], "-", color=color, label=variant)
        for variant, color in (("baseline", "black"), ("symmetric", "tab:blue"), ("key_only", "tab:orange")):
            for r in (r for r in mine if r["variant"] == variant):  # the plain model's seeds once, in their own colour
                for step, diverged in zip(r["emergence_steps"], r["diverged_at"], strict=True):
                    if diverged is not None and step is None:  # named in the table and verdict, no point here
                        continue
                    ax.plot(r["gamma"], step if step is not None else r["cap"], "o", color=color,
                            fillstyle="full" if step is not None else "none", alpha=0.7)
        if plain:
            ax.plot([], [], "o", color="black", alpha=0.7, label="plain model (gamma 0)")
        if size == "psa-92m":
            ax.plot(list(PAPER), [step for _, _, step in PAPER.values()], "k*", markersize=12, label=f"paper ({PAPER_SIZE})")
        ax.axhline(mine[0]["cap"], color="grey", linestyle=":", linewidth=1,
                   label=f"cap, {mine[0]['cap']:,} steps (hollow: not emerged)")
        ax.set(title=f"{size}, full-sequence form", xlabel="gamma", ylabel="emergence step", yscale="log")
        ax.legend(fontsize=8)
    return save_figure(fig, path)


STUDIES = (Study("paper_scale", paper_scale,
                 "the phase transition at the paper's scale (emergence: held-out accuracy at the threshold; "
                 "—: not within the cap)",
                 lambda results: format_scale_table(scale_table(results)),
                 verdict=lambda results: scale_verdict(scale_table(results)), shows_divergence=True),)
