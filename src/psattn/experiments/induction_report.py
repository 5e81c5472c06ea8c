"""The induction section of the reproduction report. ``induction_results`` computes its numbers
from the saved runs (training whatever is missing); ``induction_figures`` and
``induction_markdown`` draw and write them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psattn.experiments import plots, summaries
from psattn.experiments.configs import SHEARED
from psattn.experiments.declared import STUDIES
from psattn.experiments.markdown import fmt as _fmt
from psattn.experiments.markdown import table as _table
from psattn.experiments.plateau import attention_at_queries_table, plateau_rows
from psattn.experiments.studies import induction
from psattn.experiments.studies.two_layer import BUDGET as TWO_LAYER_BUDGET
from psattn.experiments.study import check_mode
from psattn.experiments.sweep import run_sweep, unique_configs
from psattn.models import ModelConfig
from psattn.models.heads import head_scores
from psattn.models.presets import preset_parameter_count
from psattn.training.run_dir import load_trained
from psattn.training.speed import trainer_vs_bare_loop

#: The paper's single-answer accuracy of each variant.
#: the paper's one-layer results on its single-answer task (the SHT task), so only the single-answer table quotes them
PAPER_VARIANTS = {"key_only": "0.949", "symmetric": "0.811", "query_only": "chance", "baseline": "fails (one layer)"}
PAPER = {
    "gamma_sweep": "91.3M parameters: gamma = 0.80 succeeds in 3/3 seeds at about 717 steps; "
                   "gamma = 0 in 2/3 seeds at about 2700 steps",
    "controls": "best gamma* = 0 on randomised-offset induction and no gain on multi-hop negation",
    "critical_exponent": induction.PAPER_CRITICAL_EXPONENT,
}
#: The designs of the critical-gamma experiment: report heading -> experiment.
CRITICAL_DESIGNS = {
    "fixed width, more or fewer heads": "critical_gamma",
    "fixed head count, wider or narrower model": "critical_gamma_width",
    "fixed width and head count, wider or narrower heads": "critical_gamma_head_dim",
}
HEAD_VARIANTS = ("baseline", "symmetric", "key_only", "query_only")
#: experiments the quick reproduction leaves out, to stay short; ``psattn sweep NAME --quick``
#: trains them at the quick scale, and ``--full`` includes them. The LONG_STUDIES are long experiments of
#: their own (an hour or more on a CPU), run by ``psattn sweep NAME`` alone.
LONG_STUDIES = ("text_corpora", "text_pilot", "text_phase", "text_mlp", "paper_form", "gamma_depth", "two_layer")
#: every critical-gamma design (about 6 training-minutes apiece), the initialisation table (1.4) and the
#: single-answer key-lag rows (2.0; ``key_lag``, whose full-sequence rows the variant table trains) are left out
#: of the quick reproduction, each its own `psattn sweep ... --quick`, which keeps the main job short
#: the sweeps that need a GPU, run piece by piece (benchmarks/gpu_sweeps.sh); their quick plans are tiny CPU checks
GPU_SWEEPS = ("paper_scale", "text_scale_pilot", "text_scale")
LEFT_OUT = {"quick": ("critical_gamma", "critical_gamma_width", "critical_gamma_head_dim", "init_sensitivity",
                      "key_lag", "text_seeds", *LONG_STUDIES, *GPU_SWEEPS),
            "full": (*LONG_STUDIES, *GPU_SWEEPS)}


def declared_experiments(mode: str) -> dict[str, list]:
    """The configs of every experiment the reproduction of ``mode`` runs (a left-out one declares none); a
    ``mode`` other than quick or full is a ValueError."""
    check_mode(mode)  # a KeyError on LEFT_OUT
    return {name: [] if name in LEFT_OUT[mode] else study.plan(mode) for name, study in STUDIES.items()}


def _subset(results: dict[str, dict], configs) -> dict[str, dict]:
    return {c.name: results[c.name] for c in configs}


def _init_order(init) -> tuple:
    """Numbers by size, then the named initialisations."""
    return (0, init, "") if isinstance(init, (int, float)) else (1, 0.0, init)


def _budget(row: dict) -> str:
    """The step budget of a summary row, starred when its runs stop once success is decided."""
    return f"{row['steps_budget']}*" if row.get("stops_early") else str(row["steps_budget"])


def _stop_note(rows: list[dict], early_stop_evals: int) -> list[str]:
    """The footnote for starred budgets, when a table has any."""
    if not any(r.get("stops_early") for r in rows):
        return []
    return ["", f"\\* at most this many steps: the run stops once held-out accuracy has stayed at the threshold for "
                f"{early_stop_evals} evaluations in a row (success and emergence step are decided then), so its accuracies "
                "are those at the stop."]


def _param_count(result: dict) -> str:
    return f"{preset_parameter_count(ModelConfig.from_dict(result['config']['model'])) / 1e6:.2f}M"


@dataclass
class InductionResults:
    """Everything the induction section reports: ``tables`` (the summaries, as written to results.json),
    ``facts`` (model size, budgets and threshold the prose quotes), and what the figures draw."""

    mode: str
    tables: dict[str, Any]
    facts: dict[str, Any]
    curves: dict[str, dict[str, list[dict[str, Any]]]]  # form -> seed-0 run name -> history
    patterns: dict[str, np.ndarray]  # variant -> (heads, T, T) attention of the seed-0 model


def induction_results(out: Path, mode: str, workers: int | None, progress: bool) -> InductionResults:
    """Train what is missing, then summarise every declared induction experiment."""
    declared = declared_experiments(mode)
    unique = unique_configs([c for configs in declared.values() for c in configs])
    results = run_sweep(unique, out / "runs", workers=workers, progress=progress)

    def summary(experiment: str, key) -> list[dict]:
        return summaries.summarise_by(_subset(results, declared[experiment]), key)

    designs = {name: summary(experiment, summaries.head_dim_key) for name, experiment in CRITICAL_DESIGNS.items()}
    critical = next(iter(designs.values()))  # the fixed-width design, which the theory section fits
    seed0 = {form: [c for c in declared["variants"] if c.train.seed == 0 and c.task.form == form
                    and c.model.n_layers == 1] for form in induction.FORMS}
    scores, patterns = {}, {}
    for variant in HEAD_VARIANTS:
        config = next(c for c in seed0["all_positions"]
                      if c.model.attention.variant == variant and c.model.attention.placement == "post_rope")
        hs = head_scores(load_trained(out / "runs" / config.name), batch=16, half=24)
        scores[variant] = hs.as_dict()
        patterns[variant] = hs.patterns[0].numpy()
    first = declared["variants"][0]
    tables = {
        "variants": summary("variants", summaries.form_variant_key),
        "init_sensitivity": summary("init_sensitivity", summaries.init_key),
        "attention_at_queries": plateau_rows(out / "runs", induction.init_sensitivity(mode), results),
        "gamma_sweep": sorted(summary("gamma_sweep", summaries.gamma_key), key=lambda r: r["gamma"]),
        "controls": summary("controls", summaries.control_key),
        "mqar": summary("mqar", summaries.variant_key),
        "sizes": summary("sizes", summaries.size_key),
        "critical_gamma": critical, "critical_pairs": summaries.critical_pairs(critical), "critical_designs": designs,
        "critical_exponents": {design: summaries.exponent_fit(summaries.critical_pairs(rows), summaries.critical_brackets(rows))
                               for design, rows in designs.items() if rows},
        "head_scores": scores,
        "trainer_speed": trainer_vs_bare_loop(seed0["all_positions"][0], steps=30, repeats=2),
    }
    facts = {
        "threshold": first.train.threshold, "size": _param_count(results[first.name]),
        "d_model": first.model.d_model, "n_heads": first.model.n_heads, "budget": first.train.steps,
        "single_budget": next(c.train.steps for c in declared["variants"] if c.task.form == "single"),
        "batch": first.train.batch_size, "single_batch": induction.PLANS[mode].training.single_batch_size,
        "lr": first.train.lr, "single_lr": next(c.train.lr for c in declared["variants"] if c.task.form == "single"),
        "critical_batch": induction.PLANS[mode].critical.batch_size,
        "mqar_steps": declared["mqar"][0].train.steps, "early_stop_evals": induction.PLANS[mode].training.early_stop_evals,
        "baseline_every_init": induction.PLANS[mode].sensitivity.baseline_every_init,
        "vocab": first.task.vocab_size, "length": first.task.seq_len, "eval_size": first.train.eval_size,
        "eval_every": first.train.eval_every, "layers": first.model.n_layers,
        "distractors": next(c.task.num_distractors for c in declared["variants"] if c.task.form == "single"),
        "two_layer_batch": induction.PLANS[mode].training.two_layer_batch_size,
        "two_layer_forms": induction.PLANS[mode].training.two_layer_forms,
        "single_key_lag": induction.PLANS[mode].training.single_key_lag,
    }
    curves = {form: {_curve_label(c): results[c.name]["history"] for c in configs} for form, configs in seed0.items()}
    return InductionResults(mode, tables, facts, curves, patterns)


def _curve_label(config) -> str:
    """variant, γ and placement of a run, as a legend entry."""
    a = config.model.attention
    return a.variant + (f" γ={a.gamma:g}" if a.variant in SHEARED else "") + (" (pre-RoPE)" if a.placement != "post_rope" else "")


def induction_figures(res: InductionResults, figures: Path) -> None:
    """Draw the induction part's figures (γ sweep, training curves, head scores) into ``figures``."""
    plots.plot_gamma_sweep(res.tables["gamma_sweep"], figures / "gamma_sweep.png")
    for form, name, what in (("all_positions", "curves.png", "full-sequence"), ("single", "curves_single.png", "single-answer")):
        plots.plot_training_curves(res.curves[form], figures / name, res.facts["threshold"],
                                   title=f"{what} induction, one layer, seed 0: held-out accuracy")
    plots.plot_head_scores(res.tables["head_scores"], figures / "head_scores.png")
    plots.plot_attention_patterns(res.patterns, figures / "attention_patterns.png")


def induction_section(out: Path, mode: str, workers: int | None, progress: bool,
                      figures: Path | None = None) -> tuple[list[str], dict]:
    """The section's markdown lines and its results.json entry; its figures go to ``figures`` (``out/figures``)."""
    res = induction_results(out, mode, workers, progress)
    induction_figures(res, figures or out / "figures")
    return induction_markdown(res), res.tables


def induction_markdown(res: InductionResults) -> list[str]:
    """The induction part of the reproduction report, as markdown lines."""
    lines: list[str] = []
    for part in (_intro, _variant_lines, _sensitivity_lines, _gamma_lines, _control_lines, _mqar_lines, _size_lines,
                 _critical_lines, _heads_lines):
        if lines and lines[-1]:
            lines.append("")  # a blank line between a table and the next heading
        lines += part(res)
    return lines


def _intro(res: InductionResults) -> list[str]:
    """Model, task, budgets and success criterion."""
    f = res.facts
    lines = [
        "## Induction (one attention layer)",
        "",
        f"Model: {f['layers']} layer, d_model {f['d_model']}, {f['n_heads']} "
        f"heads, RoPE, MLP ({f['size']} parameters), every matrix initialised N(0, 1/(3 d_model)); task: induction "
        f"(vocabulary {f['vocab']}, length {f['length']}) in two forms: **full-sequence** (every repeated token scored; "
        f"at most {f['budget']} steps) and **single-answer** (one query at the end of each row whose earlier "
        f"occurrence is unique, with {f['distractors']} "
        f"repeated distractors: the form of the SHT task the paper builds on; at most {f['single_budget']} steps, as it "
        f"scores one position a row); AdamW at peak lr {f['lr']:g} on the full-sequence form and the control tasks and "
        f"{f['single_lr']:g} on the single-answer form (at {f['lr']:g} that form is learned on some seeds only); batch "
        f"{f['batch']} rows on the full-sequence form and the control "
        f"tasks and {f['single_batch']} on the single-answer form (a batch is sized by the positions it scores); "
        f"held-out accuracy on {f['eval_size']} rows every {f['eval_every']} steps; a run "
        f"succeeds when it reaches {f['threshold']} (its emergence step). Budgets of the secondary rows are stated in the "
        "tables' step column.",
        "",
        "### Variant table",
        "",
    ]
    return lines


def _variant_lines(res: InductionResults) -> list[str]:
    """The variant table, one per form, with its training curves."""
    t, f = res.tables, res.facts
    lines = []
    for form, heading, curves in (("all_positions", "Full-sequence form", "curves"),
                                  ("single", "Single-answer form", "curves_single")):
        rows = [r for r in t["variants"] if r["form"] == form]
        paper = PAPER_VARIANTS if form == "single" else {}  # the paper measured the single-answer form alone
        lines += [f"**{heading}**", ""]
        lines += _table(
            ["layers", "variant", "gamma", "placement", "steps", "seeds", "success", "mean final acc", "mean best acc",
             "mean emergence step", "paper"],
            [[_layers(r), r["variant"], r["gamma"], r["placement"], _budget(r), r["seeds"],
              f"{r['successes']}/{r['seeds']}", r["mean_final_accuracy"], r["mean_best_accuracy"],
              _fmt(r["mean_emergence_step"], 0),
              paper.get(r["variant"], "—") if r["placement"] == "post_rope" and r["layers"] == 1 else "—"]
             for r in rows],
        )
        if form != "single":
            lines += ["", "The paper column is empty here: the paper's accuracies are for the single-answer form "
                          "(below)."]
        lines += _stop_note(rows, f["early_stop_evals"])
        lines += _two_layer_note(rows, form, f)
        if form == "single" and not f["single_key_lag"]:
            lines += ["", "No learned key-lag rows on this form in this plan, to keep it short: `psattn sweep "
                          "key_lag --quick` trains them at this table's budget and seeds, `psattn sweep "
                          "init_sensitivity --full` on three seeds at three initialisations, and `psattn reproduce "
                          "--full` has them in this table."]
        lines += ["", f"![training curves, {heading.lower()}](figures/{curves}.png)", ""]
    return lines


def _layers(row: dict) -> str:
    """"1", "2", or "2, no MLP": the model of a variant-table row."""
    return str(row["layers"]) + ("" if row["mlp"] == "yes" else f", MLP: {row['mlp']}")


def _two_layer_note(rows: list[dict], form: str, f: dict) -> list[str]:
    """What the two-layer rows are, or why a form has none."""
    if any(r["layers"] == 2 for r in rows):
        return ["", f"Two-layer rows: the second layer's side of \"one PSA layer does what otherwise costs a second "
                    f"layer\", at {f['two_layer_batch']} rows a step; more seeds and a third recipe (an MLP in the "
                    "second layer alone) in `psattn sweep two_layer`."]
    if form not in f["two_layer_forms"]:
        budget = f"{TWO_LAYER_BUDGET[form]:,}"
        return ["", "No two-layer rows in this plan: two plain layers need more steps than its budget to be decided "
                    f"(`psattn sweep two_layer` trains two plain and two key-only layers, with and without MLPs, "
                    f"on this form for up to {budget} steps; docs/text.md); `psattn reproduce --full` has them "
                    "in this table."]
    return []


def _sensitivity_lines(res: InductionResults) -> list[str]:
    """Success against the initialisation (or where to train it), and the attention at the single-answer query."""
    t, f = res.tables, res.facts
    scales = ("a fixed std, the default N(0, 1/(3 d_model)) (\"scaled\", 0.051 here), and PyTorch's own module "
              "defaults (\"torch\": N(0, 1) embeddings, tied to the output layer)")
    lines = ["### Sensitivity to the initialisation", ""]
    if not t["init_sensitivity"]:
        lines += [f"The table of success and emergence against the scale every matrix is initialised at ({scales}) "
                  "is left out of the quick reproduction to keep it short: `psattn sweep init_sensitivity --quick` "
                  "trains the key-only layer at the other two scales on both forms at this plan's budgets, and "
                  "`psattn sweep init_sensitivity --full` every variant at every scale on three seeds "
                  "(docs/reproduction.md)."]
    else:
        lines += [f"Success and emergence against the scale every matrix is initialised at: {scales}. Same budgets "
                  "as the variant table."
                  + ("" if f["baseline_every_init"] else
                     " The plain layer runs at the default initialisation alone: in `psattn sweep init_sensitivity "
                     "--full` (three seeds) it fails at every initialisation."), ""]
        lines += _table(["init", "form", "variant", "gamma", "steps", "seeds", "success", "mean emergence step",
                         "mean best acc"],
                        [[str(r["init"]), r["form"], r["variant"], r["gamma"], _budget(r), r["seeds"],
                          f"{r['successes']}/{r['seeds']}", _fmt(r["mean_emergence_step"], 0), r["mean_best_accuracy"]]
                         for r in sorted(t["init_sensitivity"], key=lambda r: (r["form"], _init_order(r["init"]), r["variant"]))])
        lines += _stop_note(t["init_sensitivity"], f["early_stop_evals"])
    lines += ["", "What the key-only layer's attention does at the single-answer query (layer 1, 64 held-out rows, "
              "seed 0), at initialisation and where its run ended, for every run trained here: the entropy of the "
              "pattern over its maximum (1: uniform), the spread of the content score term T1 = q·k and the key-side "
              "momentum term T3 over the visible keys (scaled by 1/sqrt(d_k), as softmax sees them), the best head's "
              "attention on the target (uniform attention puts 0.016 there), and the norm of the attention output over "
              "the token embedding's.", ""]
    lines += attention_at_queries_table(t["attention_at_queries"])
    return lines


def _gamma_lines(res: InductionResults) -> list[str]:
    """The gamma sweep."""
    t = res.tables
    lines = ["### Gamma sweep (symmetric PSA, full-sequence form)", "",
             f"Paper: {PAPER['gamma_sweep']}.", ""]
    lines += _table(["gamma", "seeds", "success", "mean emergence step", "mean final acc"],
                    [[r["gamma"], r["seeds"], f"{r['successes']}/{r['seeds']}", _fmt(r["mean_emergence_step"], 0),
                      r["mean_final_accuracy"]] for r in t["gamma_sweep"]])
    lines += ["", "![gamma sweep](figures/gamma_sweep.png)", ""]
    return lines


def _control_lines(res: InductionResults) -> list[str]:
    """The negative controls and their best gamma."""
    t = res.tables
    lines = ["### Negative controls", "",
             f"Paper: {PAPER['controls']}. Best gamma: the highest final accuracy, where accuracies within "
             f"{summaries.TIE} count as ties, broken by the earliest emergence and then the smallest gamma.", ""]
    for task in induction.CONTROL_TASKS:
        rows = sorted((r for r in t["controls"] if r["task"] == task), key=lambda r: r["gamma"])
        lines += [f"**{task}**: best gamma* = {summaries.best_gamma(rows):g}", ""]
        lines += _table(["gamma", "final acc", "emergence step"],
                        [[r["gamma"], r["mean_final_accuracy"], _fmt(r["mean_emergence_step"], 0)] for r in rows])
        lines.append("")
    return lines


def _mqar_lines(res: InductionResults) -> list[str]:
    """MQAR, a positive control."""
    t, f = res.tables, res.facts
    lines = ["### Multi-query associative recall (MQAR)", "",
             "Zoology's MQAR (8 key-value pairs, each key queried once; only the answers are scored) on the same "
             f"one-layer model, {f['mqar_steps']} steps: recalling the value after a queried key is an "
             "induction pattern, so the key-side shear should help here too (a positive control; the paper reports "
             "no MQAR number).", ""]
    lines += _table(["variant", "gamma", "steps", "seeds", "success", "mean final acc", "mean emergence step"],
                    [[r["variant"], r["gamma"], _budget(r), r["seeds"], f"{r['successes']}/{r['seeds']}",
                      r["mean_final_accuracy"], _fmt(r["mean_emergence_step"], 0)] for r in t["mqar"]])
    lines += _stop_note(t["mqar"], f["early_stop_evals"])
    return lines


def _size_lines(res: InductionResults) -> list[str]:
    """The size scan."""
    t = res.tables
    lines = ["### Size scan", ""]
    lines += _table(["layers", "d_model", "variant", "gamma", "final acc", "emergence step"],
                    [[r["n_layers"], r["d_model"], r["variant"], r["gamma"], r["mean_final_accuracy"],
                      _fmt(r["mean_emergence_step"], 0)] for r in sorted(t["sizes"], key=lambda r: (r["d_model"], r["variant"]))])
    return lines


def _critical_lines(res: InductionResults) -> list[str]:
    """Critical gamma against the head dimension, per design, with the exponent fits."""
    t, f = res.tables, res.facts
    if not any(t["critical_designs"].values()):
        commands = "; ".join(f"{design}: `psattn sweep {experiment} --quick`"
                             for design, experiment in CRITICAL_DESIGNS.items())
        return ["### Critical gamma against the head dimension", "",
                "The smallest gamma at which the symmetric shear succeeds, against the head dimension d_k "
                f"(paper, trained models: {PAPER['critical_exponent']}), is measured in three designs, each left out "
                f"of the quick reproduction to keep it short and trained at this scale by its own sweep ({commands}); "
                "`psattn reproduce --full` includes all three.", ""]
    lines = ["### Critical gamma against the head dimension", "",
             "Final accuracy per grid gamma, and the smallest gamma of the grid at which the symmetric shear "
             "succeeds, per head dimension d_k, in three designs: at fixed width and more or fewer heads (d_k and "
             "head count change together); at a fixed head count and a wider or narrower model (d_k and width "
             "change together); at fixed width and head count with a wider or narrower head (d_k and the "
             "attention's inner width change together). A bound (<= or >) means the grid did not bracket it; only "
             "bracketed values enter the least-squares fits, while the interval uses every bracket "
             f"(paper, trained models: {PAPER['critical_exponent']}). The grids train on batches of "
             f"{f['critical_batch']} rows" + (f" (not {f['batch']}: near the critical gamma the symmetric shear learns "
             "more slowly on smaller batches, and the grid would measure the budget)" if f["critical_batch"] != f["batch"]
             else "") + ". The theory section fits the first design when it has been trained.", ""]
    for design, rows in t["critical_designs"].items():
        if not rows:
            experiment = CRITICAL_DESIGNS[design]
            lines += [f"**{design}**: left out of the quick reproduction; `psattn sweep {experiment} --quick` "
                      "trains it at this scale, and `psattn reproduce --full` includes it.", ""]
            continue
        design_pairs = summaries.critical_pairs(rows)
        lines += [f"**{design}**", ""]
        lines += _table(["d_k"] + [f"gamma {g:g}" for g in sorted({r["gamma"] for r in rows})] + ["critical gamma"],
                        [[d_k] + [_fmt(r["mean_final_accuracy"]) for r in sorted(rows, key=lambda r: r["gamma"])
                                  if r["d_k"] == d_k] + [label] for d_k, _, label in design_pairs])
        if any(r["stops_early"] for r in rows):
            lines += ["", f"Each run: at most {rows[0]['steps_budget']} steps, stopping once held-out accuracy has "
                          f"stayed at the threshold for {f['early_stop_evals']} evaluations in a row; the accuracies are "
                          "those at the stop."]
        lines += ["", f"Exponent: {t['critical_exponents'][design]['text']}.", ""]
    return lines


def _heads_lines(res: InductionResults) -> list[str]:
    """Head diagnostics and the trainer's speed."""
    speed = res.tables["trainer_speed"]
    return ["### Heads", "",
            "Previous-token and induction scores of each head, measured on [BOS] + R + R rows (R: 24 random tokens) "
            "with the seed-0 models:", "", "![head scores](figures/head_scores.png)", "",
            "![attention patterns](figures/attention_patterns.png)", "",
            "### Trainer speed", "",
            f"Our trainer runs {speed['trainer_steps_per_s']:.2f} steps/s against {speed['bare_steps_per_s']:.2f} for a "
            f"bare PyTorch loop on the same model and batches: ratio {speed['ratio']:.3f} (measured interleaved in this run).",
            ""]
