"""``psattn plot``: the training curves of one or more runs in one figure."""

from __future__ import annotations

import argparse
from pathlib import Path

from psattn.arguments import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plot`` to the main parser's subcommands."""
    pl = add_command(subparsers, "plot", "draw the training curves of one or more runs into one figure",
                     "Draw metrics against step from the metrics.jsonl of each run directory, one line per run: "
                     "held-out accuracy and loss, or bits per byte and ICL score for text runs, unless --metric says.")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    pl.add_argument("--metric", nargs="+", help="metrics.jsonl columns to draw, one panel each")
    pl.add_argument("--out", metavar="PATH",
                    help="the figure (PNG; default: RUN_DIR/curves.png for one run, required for several)")
    pl.set_defaults(func=cmd_plot, needs_torch=False)  # psattn.cli imports no torch before it runs


def cmd_plot(args: argparse.Namespace) -> int:
    from psattn.jsonfile import read_jsonl

    histories = {}
    for run_dir in args.run_dirs:
        path = Path(run_dir) / "metrics.jsonl"
        if not path.exists():
            raise ValueError(f"{run_dir} holds no metrics.jsonl (not a run directory, or not started)")
        label = Path(run_dir).resolve().name
        rows = read_jsonl(path, what="metrics file")
        if not rows or not all(isinstance(row, dict) and "step" in row for row in rows):
            raise ValueError(f"{path} holds no metrics rows (empty, or cut short): nothing to plot")
        histories[label if label not in histories else str(run_dir)] = rows
    metrics = tuple(args.metric) if args.metric else (
        ("bits_per_byte", "icl_score") if all("bits_per_byte" in h[-1] for h in histories.values() if h)
        else ("eval_accuracy", "eval_loss"))
    missing = [m for m in metrics if not any(m in row for h in histories.values() for row in h)]
    if missing:
        raise ValueError(f"no run logged {missing}; a row has {sorted(next(iter(histories.values()))[0])}")
    if args.out is None and len(args.run_dirs) > 1:
        raise ValueError("--out PATH is required with several run directories (one run's figure goes into its folder)")
    out = args.out if args.out is not None else Path(args.run_dirs[0]) / "curves.png"
    from psattn.experiments.plots import plot_runs  # matplotlib: loaded once the runs have been read (a second)

    print(f"figure: {plot_runs(histories, out, metrics)}")
    return 0
