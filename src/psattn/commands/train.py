"""``psattn train``: train one run, or resume it, from a config with overrides."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
from pathlib import Path

from psattn.arguments import add_command, non_negative_float


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``train`` to the main parser's subcommands."""
    tr = add_command(subparsers, "train", "train one run from a JSON config with overrides",
                     "Train one run: defaults, then --config, then --set overrides. The run directory keeps the "
                     "resolved config, metrics.jsonl, checkpoints and result.json; the same command resumes it.")
    tr.add_argument("--config", metavar="FILE", help="JSON file with sections model, task, train, or the name of a "
                    "shipped example (psattn configs lists them); without it, the run directory's own config.json "
                    "when it has one (so --run-dir alone continues a run, and starts none: a folder without one is "
                    "refused), else the defaults with --set's overrides")
    tr.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                    help="overrides such as model.attention.variant=key_only train.steps=500 "
                         "(several --set add up; each field once); overrides other than name= name a new run after "
                         "its directory (a run already there keeps its name)")
    tr.add_argument("--run-dir", metavar="DIR", help="directory for config, metrics and checkpoints (required to train)")
    tr.add_argument("--print-config", action="store_true",
                    help="print the resolved config (defaults, --config, --set) as JSON and exit")
    tr.add_argument("--restart", action="store_true", help="ignore an existing checkpoint and start from step 0")
    tr.add_argument("--time-limit", type=non_negative_float, metavar="SECONDS",
                    help="checkpoint and stop after this long; the same command resumes")
    tr.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from psattn.progress import console_line
    from psattn.training.config import RUNTIME_FIELDS, RunConfig, apply_overrides, holds_same_run, with_train_fields
    from psattn.training.distributed import teardown_distributed
    from psattn.training.reporting import summary_line
    from psattn.training.trainer import train

    saved = None if args.run_dir is None else Path(args.run_dir) / "config.json"
    if args.config is not None and not args.config.strip():
        raise ValueError("--config is empty: name a JSON config file or a shipped config (psattn configs lists them)")
    if saved is not None and not args.config and not args.set and not saved.is_file():
        _no_run_in(Path(args.run_dir))  # --run-dir alone continues a run; it starts none
    if args.config:
        config = RunConfig.from_file(args.config)
    elif saved is not None and saved.is_file():  # the run's own config: the same command continues it
        config = RunConfig.from_file(saved)
    else:
        config = RunConfig()
    config = apply_overrides(config, args.set)
    named_by_dir = args.run_dir is not None and args.set and not any(s.startswith("name=") for s in args.set)
    if named_by_dir and not args.config and saved is not None and not saved.is_file():
        config.name = Path(args.run_dir).resolve().name  # a new run from the defaults: not every such run "run"
    if named_by_dir and args.config:
        config.name = Path(args.run_dir).resolve().name  # the file's name describes the file's run, not this one
        if saved is not None and saved.is_file():  # the run there keeps its name as it continues (even one
            # started before runs were named, or by --config alone), also when it grows or changes its early stopping
            earlier = RunConfig.from_file(saved)
            continued = with_train_fields(dataclasses.replace(config, name=earlier.name), earlier,
                                          ("steps", "early_stop", "early_stop_evals", *RUNTIME_FIELDS))
            if holds_same_run(saved, continued):
                config.name = earlier.name
    if args.print_config:  # the resolved config, as a run directory would store it; nothing is trained
        import json

        print(json.dumps(config.to_dict(), indent=2))
        return 0
    if args.run_dir is None:
        raise ValueError("--run-dir is required to train (or pass --print-config)")
    try:
        lines = None if getattr(args, "quiet", False) else console_line
        result = train(config, args.run_dir, resume=not args.restart, progress=True, time_limit_s=args.time_limit,
                       report=lines, again="the same command without --restart" if args.restart else None)
    except BaseException:  # an error of this rank alone (say, RunLocked, which rank 0 alone checks) is psattn.cli's
        teardown_distributed(wait=False)  # one line: waiting for ranks that train on would hang the job
        raise
    teardown_distributed()  # under torchrun: leave the process group before exiting
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun rank 0 alone says how the run ended, as it alone writes
        return 0
    if result.timed_out:
        again = "the same command without --restart" if args.restart else "the same command"
        print(f"time limit reached at step {result.steps} of {config.train.steps}; checkpoint in {args.run_dir}, "
              f"run {again} to resume")
        return 0
    print(f"{summary_line(result, config)}; run directory {args.run_dir}")
    return 0


def _no_run_in(run_dir: Path) -> None:
    """Refuse ``--run-dir`` alone on ``run_dir``, which has no config.json to continue a run from: the defaults
    would start a new run there, which a mistyped name of a run does not ask for."""
    from psattn.training.run_dir import holds_progress

    start = "start one with --config FILE (psattn configs lists the shipped ones) or --set KEY=VALUE ..."
    in_the_way = next((p for p in (run_dir, *run_dir.parents) if p.is_file()), None)
    if in_the_way is not None:  # psattn.cli says so in its words for a file where a folder is needed
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(in_the_way))
    if not run_dir.exists():
        raise ValueError(f"there is no run in {run_dir} (no such folder): {start}, or check the folder's name")
    if holds_progress(run_dir):
        raise ValueError(f"{run_dir} has no config.json to continue its run from (its checkpoint, metrics or result "
                         "remain): restore it, or give the run's config with --config FILE or --set KEY=VALUE ...")
    raise ValueError(f"there is no run in {run_dir} (no config.json): {start}")
