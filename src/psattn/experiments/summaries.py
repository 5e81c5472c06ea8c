"""Tables from saved results (never from a live run): runs grouped by what a table compares, with
success counts, mean accuracies and emergence steps; the critical gamma per head dimension and its
grid brackets; the best gamma of a control task."""

from __future__ import annotations

import math
import statistics
from typing import Any


def first_attention(result: dict[str, Any]) -> dict[str, Any]:
    """The attention config of a saved result's (first) layer."""
    attention = result["config"]["model"]["attention"]
    return attention[0] if isinstance(attention, list) else attention


def _group_stats(results: list[dict[str, Any]]) -> dict[str, Any]:
    threshold = results[0]["config"]["train"]["threshold"]
    emerged = [r["emergence_step"] for r in results if r["emergence_step"] is not None]
    return {
        "seeds": len(results),
        "successes": len(emerged),
        "success_rate": len(emerged) / len(results),
        "mean_final_accuracy": statistics.fmean(r["final_accuracy"] for r in results),
        "mean_best_accuracy": statistics.fmean(r["best_accuracy"] for r in results),
        "mean_emergence_step": statistics.fmean(emerged) if emerged else None,
        "threshold": threshold,
        "steps_budget": results[0]["config"]["train"]["steps"],
        "stops_early": any(_stops_early(r) for r in results),
    }


def _stops_early(result: dict[str, Any]) -> bool:
    """Whether the run was to stop once it reached the threshold (and stayed there for
    ``train.early_stop_evals`` evaluations): its final accuracy is then the accuracy at that stop."""
    return bool(result["config"]["train"].get("early_stop"))


def summarise_by(results: dict[str, dict[str, Any]], key) -> list[dict[str, Any]]:
    """Group finished runs by ``key(result)`` (a tuple of named fields) and average over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for result in results.values():
        groups.setdefault(tuple(key(result).items()), []).append(result)
    return [{**dict(k), **_group_stats(v)} for k, v in groups.items()]


def variant_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group by its first layer's variant, γ and placement."""
    a = first_attention(result)
    return {"variant": a["variant"], "gamma": a["gamma"], "placement": a["placement"]}


def mlp_label(mlp: bool | list[bool]) -> str:
    """Which blocks have an MLP: "yes" (all), "no" (none), or "layer 2 only" and the like."""
    if isinstance(mlp, list) and not all(mlp) and any(mlp):
        return "layer " + ", ".join(str(i + 1) for i, m in enumerate(mlp) if m) + " only"
    return "yes" if (all(mlp) if isinstance(mlp, list) else mlp) else "no"


def form_variant_key(result: dict[str, Any]) -> dict[str, Any]:
    """Form, layer count, MLPs (``mlp_label``) and the first layer's attention."""
    model = result["config"]["model"]
    return {"form": result["config"]["task"].get("form", "all_positions"), "layers": model["n_layers"],
            "mlp": mlp_label(model.get("mlp", True)), **variant_key(result)}


def init_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group by initialisation, task form, variant and γ."""
    a = first_attention(result)
    return {"init": result["config"]["model"].get("init", 0.02), "form": result["config"]["task"]["form"],
            "variant": a["variant"], "gamma": a["gamma"]}


def gamma_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group by γ."""
    return {"gamma": first_attention(result)["gamma"]}


def control_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group by task and γ."""
    return {"task": result["config"]["task"]["name"], "gamma": first_attention(result)["gamma"]}


def size_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group by model size (width, depth), variant and γ."""
    m = result["config"]["model"]
    return {"d_model": m["d_model"], "n_layers": m["n_layers"], "variant": first_attention(result)["variant"],
            "gamma": first_attention(result)["gamma"]}


TIE = 0.01  # accuracies closer than this are within the noise of a 512-row held-out set


def head_dim_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group by head dimension d_k and γ."""
    m = result["config"]["model"]
    return {"d_k": m.get("d_head") or m["d_model"] // m["n_heads"], "gamma": first_attention(result)["gamma"]}


def critical_pairs(rows: list[dict[str, Any]], by: str = "d_k") -> list[tuple[int, float | None, str]]:
    """Per head dimension: (d_k, critical gamma, label). The critical gamma is the smallest positive
    gamma of the grid whose runs all succeeded, provided a smaller grid gamma failed; when the
    smallest positive grid gamma already succeeds, or none does, the value is censored (None) and
    the label gives the bound ("<= 0.1", "> 0.5"). A gamma-0 row, where the grid has one, is the
    plain layer: if it succeeds there is no critical gamma at all ("none: gamma 0 succeeds"). ``by``
    names the field the grids are grouped by (the head dimension, or the depth)."""
    pairs: list[tuple[int, float | None, str]] = []
    for d_k, grid, plain_succeeds in _grids(rows, by):
        passing = [r["gamma"] for r in grid if r["success_rate"] == 1.0]
        if plain_succeeds:
            pairs.append((d_k, None, "none: gamma 0 succeeds"))
        elif not passing:
            pairs.append((d_k, None, f"> {grid[-1]['gamma']:g}"))
        elif passing[0] == grid[0]["gamma"]:
            pairs.append((d_k, None, f"<= {passing[0]:g}"))
        else:
            pairs.append((d_k, passing[0], f"{passing[0]:g}"))
    return pairs


def critical_brackets(rows: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """Per head dimension: (d_k, lo, hi) with lo < critical gamma <= hi read off the grid: hi the
    smallest positive grid gamma whose runs all succeeded (inf if none did), lo the grid gamma below
    it (0 if there is none). Head dimensions where gamma 0 already succeeds have no bracket."""
    out = []
    for d_k, grid, plain_succeeds in _grids(rows):
        if plain_succeeds:
            continue
        passing = [r["gamma"] for r in grid if r["success_rate"] == 1.0]
        if not passing:
            out.append((d_k, grid[-1]["gamma"], math.inf))
            continue
        below = [r["gamma"] for r in grid if r["gamma"] < passing[0]]
        out.append((d_k, below[-1] if below else 0.0, passing[0]))
    return out


def _grids(rows: list[dict[str, Any]], by: str = "d_k"):
    """(value of ``by``, the positive-gamma rows sorted by gamma, whether a gamma-0 row succeeded) per value."""
    for d_k in sorted({r[by] for r in rows}):
        mine = sorted((r for r in rows if r[by] == d_k), key=lambda r: r["gamma"])
        yield d_k, [r for r in mine if r["gamma"] > 0], any(r["success_rate"] == 1.0 for r in mine if r["gamma"] == 0)


def best_gamma(rows: list[dict[str, Any]], tie: float = TIE) -> float:
    """The gamma with the highest mean final accuracy; among gammas within ``tie`` of the best,
    the earliest emergence wins, then the smallest gamma. When the runs stop once they succeed
    (``stops_early``), their final accuracies are those at the stop, a few evaluations past the
    threshold, and rank nothing: the gamma with the most successful seeds wins, then the earliest mean
    emergence, then the smallest gamma."""
    if any(r.get("stops_early") for r in rows):
        def stopped_rank(row):
            step = row["mean_emergence_step"]
            return (-row["successes"], step if step is not None else float("inf"), row["gamma"])
        return min(rows, key=stopped_rank)["gamma"]
    top = max(r["mean_final_accuracy"] for r in rows)
    contenders = [r for r in rows if r["mean_final_accuracy"] >= top - tie]
    def rank(row):
        step = row["mean_emergence_step"]
        return (step if step is not None else float("inf"), row["gamma"])
    return min(contenders, key=rank)["gamma"]


def exponent_fit(pairs: list, brackets: list) -> dict:
    """The least-squares fit gamma_critical ∝ d_k^alpha over the bracketed values, and the interval
    of alpha that every grid bracket (censored ones included) allows."""
    from psattn.theory.scaling import empirical_exponent, exponent_interval

    out: dict = {}
    bracketed = [(d_k, g) for d_k, g, _ in pairs if g is not None]
    if len(bracketed) >= 2:
        out = empirical_exponent(bracketed).to_dict()
        spread = "" if out["stderr"] is None else f" ± {out['stderr']:.2f}"
        text = f"{round(out['exponent'], 2) + 0.0:+.2f}{spread} (least squares on {len(bracketed)} bracketed values)"
    else:
        text = f"no least-squares fit ({len(bracketed)} bracketed value{'s' * (len(bracketed) != 1)}; 2 needed)"
    plain = [d_k for d_k, _, label in pairs if label.startswith("none")]
    if plain:
        text += f"; left out, as gamma 0 already succeeds there: d_k {', '.join(map(str, plain))}"
    if len(brackets) >= 2:
        lower, upper = exponent_interval(brackets)
        out["interval"] = [lower, upper]
        text += (f"; the grid brackets allow alpha in ({lower:+.2f}, {upper:+.2f})" if lower < upper
                 else "; no single power law passes through every grid bracket")
    return {**out, "text": text}


def format_summary(results: dict[str, dict[str, Any]], key) -> list[str]:
    """``summarise_by(results, key)`` as printable lines: per group, successes, mean emergence step and
    mean best and final accuracy."""
    lines = []
    for row in summarise_by(results, key):
        group = ", ".join(f"{k} {v}" for k, v in row.items() if k in key(next(iter(results.values()))))
        step = row["mean_emergence_step"]
        lines.append(f"{group}: {row['successes']}/{row['seeds']} succeed, mean emergence step "
                     f"{'—' if step is None else f'{step:.0f}'}, mean best acc {row['mean_best_accuracy']:.3f}, "
                     f"mean final acc {row['mean_final_accuracy']:.3f}")
    return lines
