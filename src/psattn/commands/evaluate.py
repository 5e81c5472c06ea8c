"""``psattn eval``: score a trained run on held-out data of its task, another task or another corpus."""

from __future__ import annotations

import argparse

from psattn.arguments import add_command, add_device, add_json, add_run_dir, positive_int, report, required_run_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eval`` to the main parser's subcommands."""
    ev = add_command(subparsers, "eval", "score a trained run on held-out data of its task, another task or another corpus",
                     "Held-out accuracy and loss of the run's last checkpoint, and its task's metrics (bits per "
                     "byte, ICL score and copying for text; head scores for induction), on the run's own task "
                     "or one changed by --set task.FIELD=VALUE; --corpus (or --set task.corpus) scores a text run on "
                     "another corpus. A text run is always scored with its own tokenizer; the first lines say when "
                     "the text is not what it trained on, or holds fewer windows than --rows asks.")
    add_run_dir(ev, "the run directory to score")
    ev.add_argument("--corpus", help="another corpus for a text run: a shipped name, a file, a folder or a glob")
    ev.add_argument("--set", nargs="*", action="extend", default=[], metavar="task.FIELD=VALUE",
                    help="change the task (several --set add up; each field once)")
    ev.add_argument("--rows", type=positive_int, help="held-out rows to score (default: the run's eval_size)")
    add_device(ev)
    add_json(ev, "the scores")
    ev.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from psattn.progress import console_line
    from psattn.training.evaluation import evaluate_run, format_evaluation

    result = evaluate_run(required_run_dir(args), args.set, corpus=args.corpus, rows=args.rows, device=args.device,
                          report=console_line)
    report(args.json, format_evaluation(result), result)
    return 0
