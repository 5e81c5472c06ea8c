"""The predecessor paper's depth law, tested (``psattn sweep gamma_depth``).

"Momentum Attention" (arXiv 2602.04902) applies the same shear as PSA and reports, from associative
recall, a best coupling that falls with depth: gamma* = 4.17 N^-0.74. Here N is read as the number of
layers. At fixed width (d_model 128, 4 heads) and depth N = 1..4, the symmetric and the key-only shear
run over a gamma grid (gamma 0 is the plain model, shared by both) on MQAR and on full-sequence
induction, two seeds each, evaluated every 10 steps, every run stopping once held-out accuracy has
stayed at the threshold for two evaluations.

"Best" is the rule of ``best_gamma`` for runs that stop once they
succeed: the gamma with the most successful seeds, then the earliest mean emergence (the first
evaluation at the threshold), then the smallest gamma. The predecessor's own definition is not
available here; a fixed-budget accuracy or loss optimum is its natural reading, and on tasks every
coupling eventually solves, "fastest to learn" is the version of it a budget can measure. Emergence is
read every 10 steps, so gammas within 10 steps of each other are not told apart. The critical gamma is the
smallest grid gamma at which every seed succeeds, given that a smaller one fails.

Emergence is read every 10 steps and the grid doubles gamma, so the best gamma is known only to a
bracket: ``near_best`` is every gamma that succeeds on every seed within one evaluation (10 steps) of the
fastest, and the true best lies within half a grid step (a factor of sqrt 2) of that set.
``fit_depth_law`` fits log gamma* = log a + b log N by least squares over the depths' best gammas, and
gives the exponents the brackets allow: the b for which some a puts a N^b inside every depth's bracket.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from psattn.experiments.configs import study_config
from psattn.experiments.study import Results, Study, check_mode
from psattn.experiments.summaries import best_gamma, critical_pairs, first_attention, summarise_by
from psattn.training.config import RunConfig

DEPTHS = (1, 2, 3, 4)
GAMMAS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
VARIANTS = ("symmetric", "key_only")
TASKS = ("mqar", "induction")
SEEDS = (0, 1)
STEPS = {"quick": 400, "full": 3000}
EVAL_EVERY = 10
#: the predecessor's law: gamma* = A * N ** B
PREDECESSOR = (4.17, -0.74)


def gamma_depth(mode: str = "quick") -> list[RunConfig]:
    """The γ grid at each depth, on each task of the depth-law study (psattn sweep gamma_depth)."""
    quick = check_mode(mode) == "quick"  # the full plan trains every run to its budget
    configs = {}
    for task in TASKS:
        for n in DEPTHS:
            for variant in VARIANTS:
                for gamma in GAMMAS:
                    for seed in SEEDS:
                        c = study_config("gamma_depth", variant, gamma, task=task, n_layers=n, steps=STEPS[mode],
                                         seed=seed, batch_size=32, early_stop=False, early_stop_evals=2 if quick else 0,
                                         eval_every=EVAL_EVERY, device="cpu" if quick else "auto")
                        configs[c.name] = c  # gamma 0 is the baseline for both variants: one run
    return list(configs.values())


def depth_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group in the depth-law table: task, depth, variant and γ."""
    a = first_attention(result)
    return {"task": result["config"]["task"]["name"], "depth": result["config"]["model"]["n_layers"],
            "variant": a["variant"], "gamma": a["gamma"]}


def depth_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, variant, depth): the best gamma, the critical gamma's label, and the grid's rows.
    The plain model (gamma 0) belongs to both variants' grids."""
    rows = summarise_by(results, depth_key)
    out = []
    for task in sorted({r["task"] for r in rows}):
        for variant in VARIANTS:
            for depth in sorted({r["depth"] for r in rows if r["task"] == task}):
                grid = sorted((dict(r, variant=variant) for r in rows if r["task"] == task and r["depth"] == depth
                               and (r["variant"] == variant or r["variant"] == "baseline")), key=lambda r: r["gamma"])
                if not any(r["gamma"] > 0 for r in grid):
                    continue
                critical = critical_pairs([dict(r, depth=depth) for r in grid], by="depth")[0][2]
                out.append({"task": task, "variant": variant, "depth": depth, "best_gamma": best_gamma(grid),
                            "critical_gamma": critical, "grid": grid})
    return out


def near_best(grid: list[dict[str, Any]], tolerance: float = EVAL_EVERY) -> list[float]:
    """The positive gammas of one depth's ``grid`` that succeed on every seed with a mean emergence
    step within ``tolerance`` of the fastest such gamma (empty when none succeeds on every seed)."""
    solved = [g for g in grid if g["gamma"] > 0 and g["seeds"] and g["successes"] == g["seeds"]]
    if not solved:
        return []
    fastest = min(g["mean_emergence_step"] for g in solved)
    return sorted(g["gamma"] for g in solved if g["mean_emergence_step"] <= fastest + tolerance)


def allowed_exponents(brackets: dict[int, tuple[float, float]]) -> tuple[float, float] | None:
    """The exponents b for which some a has a N^b inside ``brackets[N]`` (a gamma interval, 0 and inf
    allowed as its ends) at every depth N; None when no power law passes through them all. For a fixed b
    the condition is max_N (log lo_N - b log N) <= min_N (log hi_N - b log N), which holds iff it holds
    for every pair of depths."""
    def log(x: float) -> float:
        return -math.inf if x == 0 else math.log(x)
    lo_b, hi_b = -math.inf, math.inf
    for n, (lo_n, hi_n) in brackets.items():
        for m, (lo_m, hi_m) in brackets.items():
            if m <= n:
                continue
            span = math.log(m) - math.log(n)  # m > n
            lo_b = max(lo_b, (log(lo_m) - log(hi_n)) / span)
            hi_b = min(hi_b, (log(hi_m) - log(lo_n)) / span)
    return (lo_b, hi_b) if lo_b <= hi_b else None


def bracket(near: list[float]) -> tuple[float, float]:
    """Where the best gamma lies given its near-best set: within half a grid step of it (the positive
    grid doubles), and beyond the grid's end when the set reaches it."""
    positive = [g for g in GAMMAS if g > 0]
    half_step = math.sqrt(2.0)
    lo = 0.0 if near[0] == positive[0] else near[0] / half_step
    hi = math.inf if near[-1] == positive[-1] else near[-1] * half_step
    return lo, hi


def fit_depth_law(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """For ``rows`` of one task and variant (``depth_table``'s): the least-squares fit gamma* = a N^b of
    the best gammas, and the exponents the depths' brackets allow (``bracket`` of each ``near_best``
    set, then ``allowed_exponents``); None with fewer than three depths that have a gamma solved on
    every seed."""
    solved = [r for r in rows if r["best_gamma"] > 0 and near_best(r["grid"])]
    if len({r["depth"] for r in solved}) < 3:
        return None
    b, log_a = np.polyfit([math.log(r["depth"]) for r in solved], [math.log(r["best_gamma"]) for r in solved], 1)
    b = 0.0 if abs(b) < 1e-12 else float(b)  # the same best gamma at every depth
    allowed = allowed_exponents({r["depth"]: bracket(near_best(r["grid"])) for r in solved})
    return {"a": math.exp(log_a), "b": b, "points": len(solved), "b_allowed": allowed,
            "predecessor_b_inside": allowed is not None and allowed[0] <= PREDECESSOR[1] <= allowed[1]}


def _gamma_set(gammas: list[float]) -> str:
    if not gammas:
        return "—"
    return f"{gammas[0]:g}" if len(gammas) == 1 else f"{gammas[0]:g}–{gammas[-1]:g}"


def format_depth_table(rows: list[dict[str, Any]]) -> list[str]:
    """The table (per gamma: seeds at the threshold, with their mean emergence step after the @) and one
    fit per task and variant, as markdown lines."""
    lines = ["| task | variant | N | best γ | near-best γ | critical γ | "
             + " | ".join(f"γ = {g:g}" for g in GAMMAS) + " | the law's γ* |", "|---" * (7 + len(GAMMAS)) + "|"]
    for r in rows:
        per_gamma = {g["gamma"]: f"{g['successes']}/{g['seeds']}"
                     + ("" if g["mean_emergence_step"] is None else f" @{g['mean_emergence_step']:.0f}")
                     for g in r["grid"]}
        cells = " | ".join(per_gamma.get(g, "·") for g in GAMMAS)
        lines.append(f"| {r['task']} | {r['variant']} | {r['depth']} | {r['best_gamma']:g} | {_gamma_set(near_best(r['grid']))} "
                     f"| {r['critical_gamma']} | {cells} | {PREDECESSOR[0] * r['depth'] ** PREDECESSOR[1]:.2f} |")
    for task in sorted({r["task"] for r in rows}):
        for variant in VARIANTS:
            fit = fit_depth_law([r for r in rows if r["task"] == task and r["variant"] == variant])
            if fit is None:
                lines.append(f"\n{task}, {variant}: fewer than three depths solved on every seed; no fit.")
                continue
            allowed = fit["b_allowed"]
            if allowed is None:
                allows = "no power law passes through every depth's bracket"
            elif math.isinf(allowed[0]) and math.isinf(allowed[1]):
                allows = "the brackets allow any exponent"
            else:
                allows = f"the brackets allow exponents from {allowed[0]:.2f} to {allowed[1]:.2f}"
            lines.append(f"\n{task}, {variant}: least squares γ* = {fit['a']:.2f} N^{fit['b']:.2f}; {allows}: "
                         f"the predecessor's −0.74 is {'inside' if fit['predecessor_b_inside'] else 'outside'}")
    return lines


def depth_figure(results: dict[str, dict[str, Any]], path) -> Any:
    """The study's figure (``plot_depth_law``) with the predecessor's law marked."""
    from psattn.experiments.plots import plot_depth_law

    return plot_depth_law(depth_table(results), path, PREDECESSOR)


def _figure(results: Results, runs: Path, mode: str) -> list[str]:
    return [f"figure: {depth_figure(results, runs / 'gamma_depth.png')}"]


STUDIES = (Study("gamma_depth", gamma_depth,
                 "best gamma against depth (most seeds solved, then earliest mean emergence), the near-best set "
                 "(every seed solved within one evaluation of the fastest) and the critical gamma",
                 lambda results: format_depth_table(depth_table(results)), verdict=None, report=_figure),)
