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

``fit_depth_law`` fits log gamma* = log a + b log N by least squares over the depths with a
positive best gamma and gives 95% intervals (Student t) for a and b.
"""

from __future__ import annotations

import math
from typing import Any

from psattn.experiments.configs import study_config
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
    if mode not in STEPS:
        raise ValueError(f"unknown mode {mode!r}; expected one of {tuple(STEPS)}")
    quick = mode == "quick"  # the full plan trains every run to its budget
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


def fit_depth_law(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Least-squares fit of log best-gamma against log depth over ``rows`` (one task and variant) with a
    positive best gamma: gamma* = a N^b, with 95% intervals; None with fewer than three such depths."""
    from scipy import stats

    points = [(r["depth"], r["best_gamma"]) for r in rows if r["best_gamma"] > 0]
    if len(points) < 3 or len({n for n, _ in points}) < 3:
        return None
    fit = stats.linregress([math.log(n) for n, _ in points], [math.log(g) for _, g in points])
    t = stats.t.ppf(0.975, len(points) - 2)
    b, log_a, b_err, log_a_err = fit.slope, fit.intercept, fit.stderr, fit.intercept_stderr
    if len({g for _, g in points}) == 1:  # the same best gamma at every depth: exponent 0, no spread
        b, log_a, b_err, log_a_err = 0.0, math.log(points[0][1]), 0.0, 0.0
    return {"a": math.exp(log_a), "b": b, "points": len(points),
            "a_interval": (math.exp(log_a - t * log_a_err), math.exp(log_a + t * log_a_err)),
            "b_interval": (b - t * b_err, b + t * b_err),
            "predecessor_b_inside": b - t * b_err <= PREDECESSOR[1] <= b + t * b_err}


def format_depth_table(rows: list[dict[str, Any]]) -> list[str]:
    """The table (successes per gamma, with the mean emergence step after the @) and one fit per
    task and variant, as markdown lines."""
    lines = ["| task | variant | depth | best γ | critical γ | successes @ mean emergence step, per γ ("
             + ", ".join(f"{g:g}" for g in GAMMAS) + ") | predecessor's γ* |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        per_gamma = {g["gamma"]: f"{g['successes']}/{g['seeds']}"
                     + ("" if g["mean_emergence_step"] is None else f" @{g['mean_emergence_step']:.0f}")
                     for g in r["grid"]}
        cells = ", ".join(per_gamma.get(g, "·") for g in GAMMAS)
        lines.append(f"| {r['task']} | {r['variant']} | {r['depth']} | {r['best_gamma']:g} | {r['critical_gamma']} | "
                     f"{cells} | {PREDECESSOR[0] * r['depth'] ** PREDECESSOR[1]:.2f} |")
    for task in sorted({r["task"] for r in rows}):
        for variant in VARIANTS:
            fit = fit_depth_law([r for r in rows if r["task"] == task and r["variant"] == variant])
            if fit is None:
                lines.append(f"\n{task}, {variant}: fewer than three depths with a positive best γ; no fit.")
            else:
                lines.append(f"\n{task}, {variant}: γ* = {fit['a']:.2f} N^{fit['b']:.2f} "
                             f"(95% interval of the exponent {fit['b_interval'][0]:.2f} to {fit['b_interval'][1]:.2f}; "
                             f"the predecessor's −0.74 is {'inside' if fit['predecessor_b_inside'] else 'outside'})")
    return lines
