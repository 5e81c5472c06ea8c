"""``psattn reproduce``: run the declared induction experiments and write ``report.md`` with figures,
each of the paper's numbers beside ours."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from psattn.experiments import induction as exp
from psattn.experiments import plots
from psattn.experiments.bode_model import bode_model
from psattn.experiments.markdown import fmt as _fmt
from psattn.experiments.markdown import table as _table
from psattn.experiments.plateau import attention_at_queries
from psattn.experiments.sweep import run_sweep, unique_configs
from psattn.experiments.text import text_experiment
from psattn.experiments.text_report import text_section
from psattn.models import ModelConfig
from psattn.models.heads import head_scores
from psattn.models.presets import preset_parameter_count
from psattn.provenance import git_revision, machine
from psattn.training.speed import trainer_vs_bare_loop
from psattn.training.trainer import build_model, eval_batch, load_trained
from psattn.version import __version__

PAPER = {
    "variants": {"key_only": "0.949", "symmetric": "0.811", "query_only": "chance", "baseline": "fails (one layer)"},
    "gamma_sweep": "91.3M parameters: gamma = 0.80 succeeds in 3/3 seeds at about 717 steps; "
                   "gamma = 0 in 2/3 seeds at about 2700 steps",
    "controls": "best gamma* = 0 on randomised-offset induction and no gain on multi-hop negation",
    "critical_exponent": "gamma_c ∝ d_k^-1.13",
}
#: The designs of the critical-gamma experiment: report heading -> experiment.
CRITICAL_DESIGNS = {
    "fixed width, more or fewer heads": "critical_gamma",
    "fixed head count, wider or narrower model": "critical_gamma_width",
    "fixed width and head count, wider or narrower heads": "critical_gamma_head_dim",
}
HEAD_VARIANTS = ("baseline", "symmetric", "key_only", "query_only")
#: experiments the quick reproduction leaves out, to stay short; ``psattn sweep NAME --mode quick``
#: trains them at the quick scale, and ``--full`` includes them
LEFT_OUT = {"quick": ("critical_gamma_width", "critical_gamma_head_dim", "text_seeds"), "full": ()}


def declared_experiments(mode: str) -> dict[str, list]:
    """The configs of every experiment the reproduction of ``mode`` runs (a left-out one declares none)."""
    return {name: [] if name in LEFT_OUT[mode] else fn(mode) for name, fn in exp.EXPERIMENTS.items()}


def _subset(results: dict[str, dict], configs) -> dict[str, dict]:
    return {c.name: results[c.name] for c in configs}


def plateau_rows(out: Path, configs, results: dict) -> list[dict]:
    """Attention statistics of the seed-0 single-answer key-only runs of the sensitivity table, freshly
    initialised and trained (loaded from their checkpoints)."""
    rows = []
    for c in configs:
        a = c.model.attention
        if c.train.seed != 0 or c.task.form != "single" or a.variant != "key_only":
            continue
        held = eval_batch(c)
        rows.append({"init": c.model.init, "when": "initialisation", **attention_at_queries(build_model(c), held)})
        rows.append({"init": c.model.init, "when": f"step {results[c.name]['steps']}",
                     **attention_at_queries(load_trained(out / "runs" / c.name), held),
                     "accuracy": results[c.name]["final_accuracy"]})
    return rows


def _init_order(init) -> tuple:
    """Numbers by size, then the named initialisations."""
    return (0, init, "") if isinstance(init, (int, float)) else (1, 0.0, init)


def _budget(row: dict) -> str:
    """The step budget of a summary row, starred when its runs stop once success is decided."""
    return f"{row['steps_budget']}*" if row.get("stops_when_decided") else str(row["steps_budget"])


def _stop_note(rows: list[dict], stop_after: int) -> list[str]:
    """The footnote for starred budgets, when a table has any."""
    if not any(r.get("stops_when_decided") for r in rows):
        return []
    return ["", f"\\* at most this many steps: the run stops once held-out accuracy has stayed at the threshold for "
                f"{stop_after} evaluations in a row (success and emergence step are decided then), so its accuracies "
                "are those at the stop."]


def _param_count(result: dict) -> str:
    return f"{preset_parameter_count(ModelConfig.from_dict(result['config']['model'])) / 1e6:.2f}M"


def induction_section(out: Path, mode: str, workers: int | None, progress: bool) -> tuple[list[str], dict]:
    declared = declared_experiments(mode)
    unique = unique_configs([c for configs in declared.values() for c in configs])
    results = run_sweep(unique, out / "runs", workers=workers, progress=progress)

    variants = exp.summarise_by(_subset(results, declared["variants"]), exp.form_variant_key)
    sensitivity = exp.summarise_by(_subset(results, declared["init_sensitivity"]), exp.init_key)
    plateau = plateau_rows(out, declared["init_sensitivity"], results)
    gammas = sorted(exp.summarise_by(_subset(results, declared["gamma_sweep"]), exp.gamma_key), key=lambda r: r["gamma"])
    controls = exp.summarise_by(_subset(results, declared["controls"]), exp.control_key)
    sizes = exp.summarise_by(_subset(results, declared["sizes"]), exp.size_key)
    mqar = exp.summarise_by(_subset(results, declared["mqar"]), exp.variant_key)
    designs = {name: exp.summarise_by(_subset(results, declared[experiment]), exp.head_dim_key)
               for name, experiment in CRITICAL_DESIGNS.items()}
    critical = next(iter(designs.values()))  # the fixed-width design, which the theory section fits
    pairs = exp.critical_pairs(critical)
    threshold, size = declared["variants"][0].train.threshold, _param_count(results[declared["variants"][0].name])

    figures = out / "figures"
    plots.plot_gamma_sweep(gammas, figures / "gamma_sweep.png")
    seed0 = {form: [c for c in declared["variants"] if c.train.seed == 0 and c.task.form == form] for form in exp.FORMS}
    first_seed = seed0["full"]
    for form, curves in (("full", "curves.png"), ("single", "curves_single.png")):
        plots.plot_training_curves({c.name: results[c.name]["history"] for c in seed0[form]}, figures / curves, threshold)
    scores, patterns = {}, {}
    for variant in HEAD_VARIANTS:
        config = next(c for c in first_seed
                      if c.model.attention.variant == variant and c.model.attention.placement == "post_rope")
        hs = head_scores(load_trained(out / "runs" / config.name), batch=16, half=24)
        scores[variant] = hs.as_dict()
        patterns[variant] = hs.patterns[0].numpy()
    plots.plot_head_scores(scores, figures / "head_scores.png")
    plots.plot_attention_patterns(patterns, figures / "attention_patterns.png")
    speed = trainer_vs_bare_loop(first_seed[0], steps=30, repeats=2)

    budget = declared["variants"][0].train.steps
    stop_after = exp.PLANS[mode].stop_after
    single_budget = next(c.train.steps for c in declared["variants"] if c.task.form == "single")
    lines = [
        "## Induction (one attention layer)",
        "",
        f"Model: 1 layer, d_model {declared['variants'][0].model.d_model}, {declared['variants'][0].model.n_heads} "
        f"heads, RoPE, MLP ({size} parameters), every matrix initialised N(0, 1/(3 d_model)); task: induction "
        f"(vocabulary 64, length 64) in two forms: **full-sequence** (every repeated token scored; at most {budget} "
        f"steps) and **single-answer** (one query at the end of each row whose earlier occurrence is unique, with 8 "
        f"repeated distractors: the form of the SHT task the paper builds on; at most {single_budget} steps, as it "
        f"scores one position a row); AdamW lr 3e-3, batch 64; held-out accuracy on 512 rows every 50 steps; a run "
        f"succeeds when it reaches {threshold} (its emergence step). Budgets of the secondary rows are stated in the "
        "tables' step column.",
        "",
        "### Variant table",
        "",
    ]
    for form, heading in (("full", "Full-sequence form"), ("single", "Single-answer form")):
        rows = [r for r in variants if r["form"] == form]
        lines += [f"**{heading}**", ""]
        lines += _table(
            ["variant", "gamma", "placement", "steps", "seeds", "success", "mean final acc", "mean best acc",
             "mean emergence step", "paper"],
            [[r["variant"], r["gamma"], r["placement"], _budget(r), r["seeds"], f"{r['successes']}/{r['seeds']}",
              r["mean_final_accuracy"], r["mean_best_accuracy"], _fmt(r["mean_emergence_step"], 0),
              PAPER["variants"].get(r["variant"], "—") if r["placement"] == "post_rope" else "—"] for r in rows],
        )
        lines += _stop_note(rows, stop_after)
        lines += ["", f"![training curves, {heading.lower()}](figures/{'curves' if form == 'full' else 'curves_single'}.png)", ""]
    lines += ["### Sensitivity to the initialisation", "",
              "Success and emergence against the scale every matrix is initialised at: a fixed std, the default "
              "N(0, 1/(3 d_model)) (\"scaled\", 0.051 here), and PyTorch's own module defaults (\"torch\": N(0, 1) "
              "embeddings, tied to the output layer). Same budgets as the variant table."
              + ("" if exp.PLANS[mode].sensitivity_baseline_every_init else
                 " The plain layer runs at the default initialisation alone: in `psattn sweep init_sensitivity --mode "
                 "full` (three seeds) it fails at every initialisation."), ""]
    lines += _table(["init", "form", "variant", "gamma", "steps", "seeds", "success", "mean emergence step",
                     "mean best acc"],
                    [[str(r["init"]), r["form"], r["variant"], r["gamma"], _budget(r), r["seeds"],
                      f"{r['successes']}/{r['seeds']}", _fmt(r["mean_emergence_step"], 0), r["mean_best_accuracy"]]
                     for r in sorted(sensitivity, key=lambda r: (r["form"], _init_order(r["init"]), r["variant"]))])
    lines += _stop_note(sensitivity, stop_after)
    lines += ["", "What the key-only layer's attention does at the single-answer query (layer 0, 64 held-out rows, "
              "seed 0), at initialisation and where its run ended: the entropy of the pattern over its maximum "
              "(1: uniform), the spread of the content score term T1 = q·k and the key-side momentum term T3 over the "
              "visible keys (scaled by 1/sqrt(d_k), as softmax sees them), the best head's attention on the target "
              "(uniform attention puts 0.016 there), and the norm of the attention output over the token embedding's.",
              ""]
    lines += _table(["init", "when", "entropy / max", "T1 spread", "T3 spread", "attention on target", "attention / embedding",
                     "held-out acc"],
                    [[str(r["init"]), r["when"], r["entropy_ratio"], r["t1_std"], r["t3_std"], r["target_mass"],
                      r["attention_to_embedding"], _fmt(r.get("accuracy"))] for r in plateau])
    lines += ["", "### Gamma sweep (symmetric PSA, full-sequence form)", "",
              f"Paper: {PAPER['gamma_sweep']}.", ""]
    lines += _table(["gamma", "seeds", "success", "mean emergence step", "mean final acc"],
                    [[r["gamma"], r["seeds"], f"{r['successes']}/{r['seeds']}", _fmt(r["mean_emergence_step"], 0),
                      r["mean_final_accuracy"]] for r in gammas])
    lines += ["", "![gamma sweep](figures/gamma_sweep.png)", "", "### Negative controls", "",
              f"Paper: {PAPER['controls']}. Best gamma: the highest final accuracy, where accuracies within "
              f"{exp.TIE} count as ties, broken by the earliest emergence and then the smallest gamma.", ""]
    for task in exp.CONTROL_TASKS:
        rows = sorted((r for r in controls if r["task"] == task), key=lambda r: r["gamma"])
        lines += [f"**{task}**: best gamma* = {exp.best_gamma(rows):g}", ""]
        lines += _table(["gamma", "final acc", "emergence step"],
                        [[r["gamma"], r["mean_final_accuracy"], _fmt(r["mean_emergence_step"], 0)] for r in rows])
        lines.append("")
    lines += ["### Multi-query associative recall (MQAR)", "",
              "Zoology's MQAR (8 key-value pairs, each key queried once; only the answers are scored) on the same "
              f"one-layer model, {declared['mqar'][0].train.steps} steps: recalling the value after a queried key is an "
              "induction pattern, so the key-side shear should help here too (a positive control; the paper reports "
              "no MQAR number).", ""]
    lines += _table(["variant", "gamma", "steps", "seeds", "success", "mean final acc", "mean emergence step"],
                    [[r["variant"], r["gamma"], _budget(r), r["seeds"], f"{r['successes']}/{r['seeds']}",
                      r["mean_final_accuracy"], _fmt(r["mean_emergence_step"], 0)] for r in mqar])
    lines += _stop_note(mqar, stop_after)
    lines += ["", "### Size scan", ""]
    lines += _table(["layers", "d_model", "variant", "gamma", "final acc", "emergence step"],
                    [[r["n_layers"], r["d_model"], r["variant"], r["gamma"], r["mean_final_accuracy"],
                      _fmt(r["mean_emergence_step"], 0)] for r in sorted(sizes, key=lambda r: (r["d_model"], r["variant"]))])
    lines += ["", "### Critical gamma against the head dimension", "",
              "Final accuracy per grid gamma, and the smallest gamma of the grid at which the symmetric shear "
              "succeeds, per head dimension d_k, in three designs: at fixed width and more or fewer heads (d_k and "
              "head count change together); at a fixed head count and a wider or narrower model (d_k and width "
              "change together); at fixed width and head count with a wider or narrower head (d_k and the "
              "attention's inner width change together). A bound (<= or >) means the grid did not bracket it; only "
              "bracketed values enter the least-squares fits, while the interval uses every bracket "
              f"(paper, trained models: {PAPER['critical_exponent']}). The theory section fits the first design"
              + (", the only one the quick reproduction trains." if LEFT_OUT[mode] else "."), ""]
    fits = {}
    for design, rows in designs.items():
        if not rows:
            experiment = CRITICAL_DESIGNS[design]
            lines += [f"**{design}**: left out of the quick reproduction; `psattn sweep {experiment} --mode quick` "
                      "trains it at this scale, and `psattn reproduce --full` includes it.", ""]
            continue
        design_pairs = exp.critical_pairs(rows)
        lines += [f"**{design}**", ""]
        lines += _table(["d_k"] + [f"gamma {g:g}" for g in sorted({r["gamma"] for r in rows})] + ["critical gamma"],
                        [[d_k] + [_fmt(r["mean_final_accuracy"]) for r in sorted(rows, key=lambda r: r["gamma"])
                                  if r["d_k"] == d_k] + [label] for d_k, _, label in design_pairs])
        fits[design] = _exponent_fit(design_pairs, exp.critical_brackets(rows))
        if any(r["stops_when_decided"] for r in rows):
            lines += ["", f"Each run: at most {rows[0]['steps_budget']} steps, stopping once held-out accuracy has "
                          f"stayed at the threshold for {stop_after} evaluations in a row; the accuracies are those at "
                          "the stop."]
        lines += ["", f"Exponent: {fits[design]['text']}.", ""]
    lines += ["", "### Heads", "",
              "Previous-token and induction scores of each head, measured on [BOS] + R + R rows (R: 24 random tokens) "
              "with the seed-0 models:", "", "![head scores](figures/head_scores.png)", "",
              "![attention patterns](figures/attention_patterns.png)", "",
              "### Trainer speed", "",
              f"Our trainer runs {speed['trainer_steps_per_s']:.2f} steps/s against {speed['bare_steps_per_s']:.2f} for a "
              f"bare PyTorch loop on the same model and batches: ratio {speed['ratio']:.3f} (measured interleaved in this run).",
              ""]
    data = {"variants": variants, "init_sensitivity": sensitivity, "attention_at_queries": plateau, "gamma_sweep": gammas,
            "controls": controls, "mqar": mqar, "sizes": sizes,
            "critical_gamma": critical, "critical_pairs": pairs, "critical_designs": designs,
            "critical_exponents": fits, "head_scores": scores,
            "trainer_speed": speed}
    return lines, data


def meanfield_section(out: Path, mode: str, progress: bool) -> tuple[list[str], dict]:
    """The mean-field experiment and theorem checks (their own report lies in ``meanfield/``)."""
    from psattn.meanfield.cli import reproduce as reproduce_meanfield

    result = reproduce_meanfield(out / "meanfield", quick=mode == "quick", progress=progress)
    lines = ["## Mean-field dynamics with auxiliary variables", "",
             "Full report, figures and animation: [meanfield/report.md](meanfield/report.md).", ""]
    lines += _table(["check", "result", "details"],
                    [[c["name"], "PASS" if c["passed"] else "FAIL", c["message"]] for c in result["checks"]])
    lines += [f"- skipped: {s}" for s in result["skipped"]] + [""]
    return lines, {"passed": result["passed"], "checks": [
        {"name": c["name"], "passed": c["passed"], "message": c["message"]} for c in result["checks"]]}


def _run_revision(run_dir: Path) -> str:
    meta = run_dir / "meta.json"
    revision = json.loads(meta.read_text()).get("git_revision") if meta.exists() else None
    return (revision or "unknown")[:7]


def _exponent_fit(pairs: list, brackets: list) -> dict:
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


def theory_section(out: Path, mode: str, critical_pairs: list | None) -> tuple[list[str], dict]:
    """Certificates, the reduced model against the closed-form law, spectra; the measured Bode plot
    reads the seed-0 symmetric model of the variant table when it has been trained."""
    from psattn.theory.report import reproduce as reproduce_theory

    symmetric = next(c for c in exp.variant_table(mode)
                     if c.model.attention.variant == "symmetric" and c.model.attention.placement == "post_rope")
    run_dir = out / "runs" / symmetric.name
    model, label = bode_model(out / "theory", mode == "quick", run_dir if (run_dir / "result.json").exists() else None)
    result = reproduce_theory(out / "theory", model, label, quick=mode == "quick",
                              sweep_results=[(d_k, g) for d_k, g, _ in critical_pairs or [] if g is not None] or None,
                              link_prefix="theory/")
    return [result["markdown"], ""], {k: v for k, v in result.items() if k != "markdown"}


SECTIONS = ("induction", "text", "theory", "meanfield")


def reproduce(
    out_dir: str | Path,
    mode: str = "quick",
    *,
    workers: int | None = None,
    progress: bool = True,
    sections: tuple[str, ...] = SECTIONS,
) -> Path:
    """Run everything ``mode`` declares into ``out_dir``; returns the path of ``report.md``."""
    if mode not in exp.MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {exp.MODES}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown report sections {sorted(unknown)}; expected some of {SECTIONS}")
    started = datetime.now(timezone.utc)
    lines, data, timings = [], {}, {}
    with _timed(timings, "training"):
        runs = train_all(out, mode, sections, workers, progress)
    if "induction" in sections:
        with _timed(timings, "induction tables, heads and figures"):
            part, data["induction"] = induction_section(out, mode, workers, progress)
        lines += part
    if "text" in sections:
        with _timed(timings, "real text: metrics, samples, edge export"):
            part, data["text"] = text_section(out, mode, workers, progress)
        lines += part
    if "theory" in sections:
        with _timed(timings, "theory and certificates"):
            part, data["theory"] = theory_section(out, mode, data.get("induction", {}).get("critical_pairs"))
        lines += part
    if "meanfield" in sections:
        with _timed(timings, "mean field"):
            part, data["meanfield"] = meanfield_section(out, mode, progress)
        lines += part
    data["timings"] = {"seconds": timings, "runs": runs}
    header = [
        f"# psattn reproduction ({mode})",
        "",
        f"Ran {started:%Y-%m-%d %H:%M} UTC on {machine()}, psattn {__version__}, "
        f"git {git_revision() or 'unknown'}, one torch thread per training process. "
        f"Command: `psattn reproduce --{mode} --out {out}`. Every number below "
        "comes from the runs saved under `runs/` (configs, metrics and checkpoints); rerunning the command skips "
        f"finished runs. Wall time: {(datetime.now(timezone.utc) - started).total_seconds() / 60:.1f} minutes.",
        "",
    ]
    if runs["seconds"]:
        header[-2] += (f" This invocation trained {runs['trained_now']} runs and reused {runs['reused']} "
                       "finished ones" + (f" (trained at git {', '.join(runs['reused_git_revisions'])})."
                                          if runs["reused"] else "."))
    header += timing_lines(timings, runs["seconds"])
    (out / "report.md").write_text("\n".join(header + lines) + "\n")
    (out / "results.json").write_text(json.dumps(data, indent=2, default=_json_default))
    return out / "report.md"


@contextmanager
def _timed(timings: dict[str, float], name: str):
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 1)


def train_all(out: Path, mode: str, sections, workers: int | None, progress: bool) -> dict[str, Any]:
    """Train every run the sections declare in one sweep, the longest first, so that the workers stay
    busy across experiments; the sections then read the finished runs. Returns how many runs were
    trained now and reused, and the training seconds of every run (those trained earlier included)."""
    configs = []
    if "induction" in sections:
        configs += [c for declared in declared_experiments(mode).values() for c in declared]
    if "text" in sections:
        configs += text_experiment(mode)
    unique = unique_configs(configs)
    reused = [c.name for c in unique if (out / "runs" / c.name / "result.json").exists()]
    results = run_sweep(unique, out / "runs", workers=workers, progress=progress)
    return {"trained_now": len(unique) - len(reused), "reused": len(reused),
            "reused_git_revisions": sorted({_run_revision(out / "runs" / name) for name in reused}),
            "seconds": {name: round(r["seconds"], 1) for name, r in results.items()}}


def timing_lines(timings: dict[str, float], runs: dict[str, float]) -> list[str]:
    """Where the wall time went, and the longest runs."""
    if not timings:
        return []
    longest = sorted(runs.items(), key=lambda kv: -kv[1])[:3]
    lines = ["| part | wall minutes |", "|---|---|"]
    lines += [f"| {name} | {seconds / 60:.1f} |" for name, seconds in timings.items()]
    lines += ["", f"Training: {len(runs)} runs, {sum(runs.values()) / 60:.1f} minutes of training in all (per "
                  "process, summed over the parallel workers); longest: "
              + ", ".join(f"{name} ({seconds:.0f} s)" for name, seconds in longest) + ".", ""]
    return lines


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"cannot serialise {type(x).__name__}")
