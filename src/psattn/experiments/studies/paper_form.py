"""The paper's own task form at a budget long enough to decide it (``psattn sweep paper_form``).

The single-answer induction form (one query a row, repeated distractors; arXiv 2609.32319's form) for
every PSA variant, after RoPE and, for the two shears that learn, before it: up to 5,000 steps, each
run stopping once held-out accuracy has stayed at the threshold for two evaluations (the full plan
trains every run to 20,000 steps), three seeds, at two peak learning rates: 3e-3 (the full form's)
and 1e-3 (the reproduction's on this form).
It answers two questions the quick reproduction's 1,000 steps leave open: does the symmetric shear
learn this form at all given time (the paper reports key-only 0.949, symmetric 0.811, query-only at
chance), and does applying the shear before RoPE (the placement corollary's "Coriolis" error) cost
anything here.
"""

from __future__ import annotations

from typing import Any

from psattn.experiments.configs import study_config
from psattn.experiments.study import Study, check_mode
from psattn.experiments.summaries import summarise_by, variant_key
from psattn.training.config import RunConfig

#: (variant, gamma, placement) rows
PAPER_FORM_ROWS = (
    ("baseline", 0.0, "post_rope"),
    ("query_only", 1.0, "post_rope"),
    ("symmetric", 1.0, "post_rope"),
    ("key_only", 1.0, "post_rope"),
    ("symmetric", 1.0, "pre_rope"),
    ("key_only", 1.0, "pre_rope"),
)
#: the paper's reported accuracies on this form
PAPER = {"key_only": 0.949, "symmetric": 0.811, "query_only": "chance"}
STEPS = {"quick": 5000, "full": 20000}
#: peak learning rate -> the study's name for its runs (3e-3 came first, under the plain name)
LRS = {3e-3: "paper_form", 1e-3: "paper_form_lr1e-3"}
SEEDS = (0, 1, 2)
EARLY_STOP_EVALS = 2


def paper_form(mode: str = "quick") -> list[RunConfig]:
    """The single-answer form's runs: each variant and placement at two peak learning rates, every seed."""
    quick = check_mode(mode) == "quick"  # the full plan trains every run to its budget, as its other experiments do
    return [study_config(study, v, g, placement=p, form="single", steps=STEPS[mode], seed=s, batch_size=64, lr=lr,
                         early_stop=False, early_stop_evals=EARLY_STOP_EVALS if quick else 0, device="cpu" if quick else "auto")
            for lr, study in LRS.items() for v, g, p in PAPER_FORM_ROWS for s in SEEDS]


def lr_variant_key(result: dict[str, Any]) -> dict[str, Any]:
    """A run's group in the paper-form table: peak learning rate and variant."""
    return {"lr": result["config"]["train"].get("lr", 3e-3), **variant_key(result)}


def paper_form_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (learning rate, variant, placement): successes, mean emergence step, mean best and
    final accuracy."""
    order = {(v, p): i for i, (v, _, p) in enumerate(PAPER_FORM_ROWS)}
    rows = summarise_by(results, lr_variant_key)
    return sorted(rows, key=lambda r: (-r["lr"], order.get((r["variant"], r["placement"]), len(order))))


def format_paper_form_table(rows: list[dict[str, Any]]) -> list[str]:
    """The paper-form table's markdown lines, beside the paper's claims."""
    lines = ["| peak lr | variant | placement | succeed | mean emergence step | mean best held-out accuracy | paper |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        step = "—" if r["mean_emergence_step"] is None else f"{r['mean_emergence_step']:.0f}"
        paper = PAPER.get(r["variant"], "fails") if r["placement"] == "post_rope" else "—"
        lines.append(f"| {r['lr']:g} | {r['variant']} | {r['placement'].replace('_', '-')} | "
                     f"{r['successes']}/{r['seeds']} | {step} | {r['mean_best_accuracy']:.3f} | {paper} |")
    return lines


STUDIES = (Study("paper_form", paper_form,
                 "the single-answer form (seeds averaged; success: held-out accuracy reached the threshold)",
                 lambda results: format_paper_form_table(paper_form_table(results)), verdict=None),)
