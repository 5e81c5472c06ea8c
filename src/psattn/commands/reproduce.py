"""``psattn reproduce``: train every declared run, then write the reproduction report."""

from __future__ import annotations

import argparse

from psattn.arguments import add_command, add_plan_size, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``reproduce`` to the main parser's subcommands."""
    rep = add_command(subparsers, "reproduce", "run the declared experiments and write report.md with figures",
                      "Train every declared run (skipping finished ones, resuming interrupted ones), then write "
                      "report.md, results.json and figures: induction, real text, theory, mean field.")
    add_plan_size(rep, quick="CPU scale, about 7 to 17 minutes on 2 cores", full="paper scale, for a GPU")
    rep.add_argument("--out", metavar="DIR", help="output directory (default: reports/reproduce-quick or -full)")
    rep.add_argument("--workers", type=positive_int, help="parallel training processes (default: one per core)")
    rep.add_argument("--executorch", action="store_true",
                     help="the real-text device table also gets ExecuTorch rows (fp32 and int8 programs; needs the "
                          "executorch extra, a few minutes more)")
    rep.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from psattn.experiments.reproduce import reproduce

    report = reproduce(args.out or f"reports/reproduce-{args.mode}", args.mode, workers=args.workers,
                       executorch=args.executorch)
    print(f"report: {report}")
    return 0
