"""One PSA layer against two plain layers, on both induction forms (``psattn sweep two_layer``).

The PSA paper's case is that one key-sheared layer does what otherwise costs a second layer. This is
the second layer's side of that comparison: two plain layers and two key-only layers, each with and
without MLPs, two seeds, on the full-sequence form (1,500 steps) and on the single-answer form (3,000
steps), every run stopping once held-out accuracy has stayed at the threshold for two evaluations. The
one-layer rows are the variant table's (``psattn sweep variants``).

With an MLP in every block, two plain layers miss the circuit on the full form under every recipe
tried (docs/text.md): within 200 steps all four second-layer heads become previous-token heads and the
first layer's stay diffuse, so no head can compose with them. The first layer's MLP is what locks them
(it does so even frozen at its initialisation): without MLPs, or with an MLP in the second layer
alone, the first layer takes the previous-token role and the second forms induction heads by step 500.
"""

from __future__ import annotations

from typing import Any

from psattn.experiments.configs import study_config
from psattn.experiments.study import Study, check_mode
from psattn.experiments.summaries import first_attention, mlp_label, summarise_by
from psattn.training.config import RunConfig

#: (variant, gamma, MLPs: in both blocks, in neither, or one flag per layer)
TWO_LAYER_ROWS = (("baseline", 0.0, True), ("baseline", 0.0, False), ("baseline", 0.0, [False, True]),
                  ("key_only", 1.0, True), ("key_only", 1.0, False))
BUDGET = {"all_positions": 1500, "single": 3000}
SEEDS = (0, 1)


def two_layer(mode: str = "quick") -> list[RunConfig]:
    """The two-layer study's runs: with and without MLPs, each form, every seed."""
    quick = check_mode(mode) == "quick"  # the full plan trains every run to four times the budget
    return [study_config("two_layer", v, g, n_layers=2, mlp=mlp, form=form, steps=BUDGET[form] * (1 if quick else 4),
                         seed=s, batch_size=64, early_stop=False, early_stop_evals=2 if quick else 0,
                         device="cpu" if quick else "auto")
            for form in BUDGET for v, g, mlp in TWO_LAYER_ROWS for s in SEEDS]


def two_layer_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group in the two-layer table: form, layers, MLPs, variant and γ."""
    m, a = result["config"]["model"], first_attention(result)
    return {"form": result["config"]["task"].get("form", "all_positions"), "layers": m["n_layers"],
            "mlp": mlp_label(m.get("mlp", True)), "variant": a["variant"], "gamma": a["gamma"]}




def two_layer_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The two-layer table's rows, seeds averaged, in the page's order."""
    rows = summarise_by(results, two_layer_key)
    order = {"yes": 0, "no": 1}
    return sorted(rows, key=lambda r: (r["form"], r["variant"] != "baseline", order.get(r["mlp"], 2)))


def format_two_layer_table(rows: list[dict[str, Any]], parameters: dict[tuple, int] | None = None) -> list[str]:
    """The two-layer table's markdown lines."""
    lines = ["| form | layers | MLPs | variant | succeed | mean emergence step | mean best held-out accuracy | budget |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        step = "—" if r["mean_emergence_step"] is None else f"{r['mean_emergence_step']:.0f}"
        name = r["variant"] + (f" γ={r['gamma']:g}" if r["variant"] != "baseline" else "")
        lines.append(f"| {r['form']} | {r['layers']} | {r['mlp']} | {name} | {r['successes']}/{r['seeds']} | "
                     f"{step} | {r['mean_best_accuracy']:.3f} | {r['steps_budget']} |")
    return lines


STUDIES = (Study("two_layer", two_layer, "two layers, with and without MLPs (seeds averaged)",
                 lambda results: format_two_layer_table(two_layer_table(results)), verdict=None),)
