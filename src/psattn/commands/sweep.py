"""``psattn sweep EXPERIMENT``: run one declared study (finished runs are skipped) and print its runs, then
what the study reads off them (``psattn.experiments.study.Study``): its table, its verdict and its report."""

from __future__ import annotations

import argparse
from pathlib import Path

from psattn.arguments import add_command, add_late_choices, add_plan_size, positive_float, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the main parser's subcommands."""
    sw = add_command(subparsers, "sweep", "run one declared study (skips finished runs) and print its table and verdict")
    add_late_choices(sw, "experiment", names=_study_names, help="the declared study to run")
    add_plan_size(sw, quick="the quick plan's runs", full="the full plan's runs")
    sw.add_argument("--out", default="runs", metavar="DIR", help="directory of the run directories")
    sw.add_argument("--workers", type=positive_int,
                    help="parallel training processes (default: one per core; one with --time-limit)")
    sw.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto' or an address")
    sw.add_argument("--time-limit", type=positive_float, metavar="SECONDS",
                    help="train the runs one after another in this process (--workers N: N at a time, sharing "
                         "the machine) and stop cleanly after this long (the runs in progress checkpoint); the same "
                         "command resumes: a sweep in pieces, on one GPU")
    sw.set_defaults(func=cmd_sweep)


def _study_names() -> list[str]:
    from psattn.experiments.declared import STUDIES  # the studies' modules import torch

    return list(STUDIES)


def cmd_sweep(args: argparse.Namespace) -> int:
    from psattn.experiments.declared import STUDIES
    from psattn.experiments.sweep import run_sweep, run_within
    from psattn.training.signals import TrainingDiverged

    study = STUDIES[args.experiment]
    configs = study.plan(args.mode)
    left: list[str] = []
    if args.time_limit is not None:
        if args.ray is not None:
            raise ValueError("--time-limit runs the sweep in this process, one run after another; it does not take --ray")
        results, left = run_within(configs, args.out, args.time_limit, workers=args.workers or 1)
    else:
        results = run_sweep(configs, args.out, workers=args.workers, ray_address=args.ray)
    for name, r in results.items():
        last = r["history"][-1] if r.get("history") else {}
        if r.get("diverged_at") is not None:  # its numbers are those of the last evaluation before
            print(f"{name:48s} diverged at step {r['diverged_at']} (the loss was not finite)")
        elif "bits_per_byte" in last:
            print(f"{name:48s} bits per byte {last['bits_per_byte']:.3f}  ICL score {last['icl_score']:+.3f}")
        else:
            emergence = "not reached" if r["emergence_step"] is None else f"step {r['emergence_step']}"
            print(f"{name:48s} final acc {r['final_accuracy']:.3f}  emergence {emergence}")
    if left:
        print(f"\ntime limit reached: {len(results)} of {len(configs)} runs finished in {args.out}, {len(left)} left "
              "(a run cut short kept its checkpoint); the same command resumes")
    diverged = [f"{name} (at step {r['diverged_at']})" for name, r in results.items() if r.get("diverged_at") is not None]
    if diverged and not study.shows_divergence:  # its table would count them as runs that failed
        raise TrainingDiverged(f"{len(diverged)} run{'s' * (len(diverged) > 1)} of {study.name} diverged "
                               f"({', '.join(diverged)}), as their result.json records, and its table has no place for "
                               f"them; delete their folders under {args.out} to train them again")
    if study.table is not None and results:
        print(f"\n{study.title}")
        print("\n".join(study.table(results)))
    if left or not results:
        return 0  # the verdict and the report read every run
    if study.verdict is not None:
        print("\n" + "\n\n".join(study.verdict(results)))
    if study.report is not None:
        print("\n" + "\n".join(study.report(results, Path(args.out), args.mode)))
    return 0
