"""``psattn sweep EXPERIMENT``: run one declared experiment (finished runs are skipped) and print its
summary, table, verdict and figures."""

from __future__ import annotations

import argparse
from pathlib import Path

from psattn.arguments import add_command, add_plan_size, positive_float, positive_int
from psattn.experiments import declared as experiments
from psattn.experiments import summaries
from psattn.experiments.studies import (
    gamma_depth,
    paper_form,
    paper_scale,
    text_phase,
    text_pilot,
    text_scale,
    two_layer,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the main parser's subcommands."""
    sw = add_command(subparsers, "sweep", "run one declared experiment (skips finished runs) and print its summary")
    sw.add_argument("experiment", choices=list(experiments.EXPERIMENTS), help="the declared experiment to run")
    add_plan_size(sw, quick="the quick plan's runs", full="the full plan's runs")
    sw.add_argument("--out", default="runs", metavar="DIR", help="directory of the run directories")
    sw.add_argument("--workers", type=positive_int, help="parallel training processes (default: one per core)")
    sw.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto' or an address")
    sw.add_argument("--time-limit", type=positive_float, metavar="SECONDS",
                    help="train the runs one after another in this process and stop cleanly after this long (the "
                         "run in progress checkpoints); the same command resumes: a sweep in pieces, on one GPU")
    sw.set_defaults(func=cmd_sweep)


#: the studies' summaries: experiment -> (title, results -> markdown lines)
STUDY_TABLES = {
    "text_pilot": ("phase change of two plain layers (first evaluation with a head's prefix-matching score >= 0.1, twice)",
                   lambda results: text_pilot.format_pilot_table(text_pilot.pilot_table(results))),
    "text_phase": ("real text past the phase change, at the end of training (mean ± sd over seeds; tokens per seed)",
                   lambda results: text_phase.format_phase_table(text_phase.phase_table(results))),
    "paper_form": ("the single-answer form (seeds averaged; success: held-out accuracy reached the threshold)",
                   lambda results: paper_form.format_paper_form_table(paper_form.paper_form_table(results))),
    "gamma_depth": ("best gamma against depth (most seeds solved, then earliest mean emergence), the near-best set "
                    "(every seed solved within one evaluation of the fastest) and the critical gamma",
                    lambda results: gamma_depth.format_depth_table(gamma_depth.depth_table(results))),
    "two_layer": ("two layers, with and without MLPs (seeds averaged)",
                  lambda results: two_layer.format_two_layer_table(two_layer.two_layer_table(results))),
    "paper_scale": ("the phase transition at the paper's scale (emergence: held-out accuracy at the threshold; "
                    "—: not within the cap)",
                    lambda results: paper_scale.format_scale_table(paper_scale.scale_table(results))),
    "text_scale_pilot": ("the pilot: each depth's plain model, its phase change against the budget",
                         text_scale.pilot_table),
    "text_scale": ("real text with MLPs at the end of training (mean ± sd over seeds; tokens per seed)",
                   lambda results: text_scale.format_scale_table(text_scale.scale_table(results))),
}


def cmd_sweep(args: argparse.Namespace) -> int:
    from psattn.experiments.sweep import run_sweep, run_within

    configs = experiments.EXPERIMENTS[args.experiment](args.mode)
    left: list[str] = []
    if args.time_limit is not None:
        if args.ray is not None:
            raise ValueError("--time-limit runs the sweep in this process, one run after another; it does not take --ray")
        results, left = run_within(configs, args.out, args.time_limit)
    else:
        results = run_sweep(configs, args.out, workers=args.workers, ray_address=args.ray)
    for name, r in results.items():
        last = r["history"][-1] if r.get("history") else {}
        if "bits_per_byte" in last:
            print(f"{name:48s} bits per byte {last['bits_per_byte']:.3f}  ICL score {last['icl_score']:+.3f}")
        else:
            emergence = "not reached" if r["emergence_step"] is None else f"step {r['emergence_step']}"
            print(f"{name:48s} final acc {r['final_accuracy']:.3f}  emergence {emergence}")
    if left:
        print(f"\ntime limit reached: {len(results)} of {len(configs)} runs finished in {args.out}, {len(left)} left "
              "(a run cut short kept its checkpoint); the same command resumes")
    if args.experiment in STUDY_TABLES and results:
        title, table = STUDY_TABLES[args.experiment]
        print(f"\n{title}")
        print("\n".join(table(results)))
    if left or not results:
        return 0
    if args.experiment == "paper_scale":
        print("\n" + "\n\n".join(paper_scale.scale_verdict(paper_scale.scale_table(results))))
    if args.experiment == "text_scale":
        print("\n" + "\n\n".join(text_scale.scale_verdict(results, text_scale.scale_table(results))))
    if args.experiment in STUDY_TABLES:
        if args.experiment == "text_pilot":
            print(f"figure: {text_pilot.pilot_figure(results, Path(args.out) / 'text_pilot.png')}")
        if args.experiment == "gamma_depth":
            print(f"figure: {gamma_depth.depth_figure(results, Path(args.out) / 'gamma_depth.png')}")
        if args.experiment == "text_phase":
            print("\n" + "\n\n".join(text_phase.phase_verdict(results, text_phase.phase_table(results))))
            report = text_phase.phase_report(results, Path(args.out), args.mode)
            print(f"report (figure, samples, ONNX sizes and speeds): {report}")
    elif args.experiment.startswith("text"):
        from psattn.experiments.studies.text import format_text_summary, summarise_text

        print("\nsummary (final evaluation, mean ± sd over seeds)")
        print("\n".join(format_text_summary(summarise_text(results))))
    key = summaries.SUMMARY_KEYS.get(args.experiment)
    if key is not None:
        print("\nsummary (seeds averaged; success: held-out accuracy reached the run's threshold)")
        for row in summaries.summarise_by(results, key):
            group = ", ".join(f"{k} {v}" for k, v in row.items() if k in key(next(iter(results.values()))))
            step = row["mean_emergence_step"]
            print(f"{group}: {row['successes']}/{row['seeds']} succeed, mean emergence step "
                  f"{'—' if step is None else f'{step:.0f}'}, mean best acc {row['mean_best_accuracy']:.3f}, "
                  f"mean final acc {row['mean_final_accuracy']:.3f}")
    if not (args.experiment.startswith("critical_gamma") or args.experiment == "init_sensitivity"):
        return 0  # the rest brings matplotlib, which a GPU machine may lack
    from psattn.experiments.induction_report import (  # brings matplotlib
        CRITICAL_DESIGNS,
        attention_at_queries_table,
        format_critical,
        plateau_rows,
    )

    if args.experiment in CRITICAL_DESIGNS.values():
        print("\n" + "\n".join(format_critical(summaries.summarise_by(results, summaries.head_dim_key))))
    if args.experiment == "init_sensitivity":
        print("\nthe key-only layer's attention at the single-answer query (seed 0), at initialisation and at its "
              "last checkpoint: entropy over its maximum, spreads of the score terms T1 and T3 over the keys, the best "
              "head's attention on the target, the attention output's norm over the token embedding's")
        print("\n".join(attention_at_queries_table(plateau_rows(Path(args.out), configs, results))))
    return 0
