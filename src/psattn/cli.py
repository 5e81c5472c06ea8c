"""The ``psattn`` command line: ``psattn reproduce``, ``psattn demo``, ``psattn train``."""

from __future__ import annotations

import argparse
import logging
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from psattn.commands.theory import register as register_theory
from psattn.experiments import induction as experiments
from psattn.experiments.configs import small_induction_config
from psattn.integrations.hf_demo import register as register_hf
from psattn.meanfield.cli import register as register_meanfield
from psattn.training.config import RunConfig, apply_overrides
from psattn.training.distributed import teardown_distributed
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import TrainingDiverged, train
from psattn.version import __version__


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    rows = []
    for variant, gamma in (("baseline", 0.0), ("key_only", 1.0)):
        config = small_induction_config(variant, gamma, steps=args.steps, seed=args.seed, early_stop=False)
        result = train(config, out / config.name, resume=False, progress=True)
        rows.append((config, result))
        print(f"{config.name:20s} held-out induction accuracy {result.final_accuracy:.3f} "
              f"(emergence step: {result.emergence_step}, {result.seconds:.0f} s)")
    lines = [
        "# psattn demo: one attention layer on induction, with and without PSA",
        "",
        f"Ran {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.platform()} "
        f"(torch {torch.__version__}, psattn {__version__}); command: `psattn demo --steps {args.steps} "
        f"--seed {args.seed}`.",
        "",
        "Model: 1 layer, d_model 128, 4 heads, RoPE, MLP; task: full-sequence induction, vocabulary 64, "
        "length 64; AdamW lr 3e-3, batch 64; held-out set of 512 rows.",
        "",
        "| variant | gamma | steps | held-out accuracy | emergence step (acc >= 0.9) |",
        "|---|---|---|---|---|",
    ]
    for config, result in rows:
        a = config.model.layer_attention_configs()[0]
        lines.append(f"| {a.variant} | {a.gamma:g} | {result.steps} | {result.final_accuracy:.3f} | "
                     f"{result.emergence_step if result.emergence_step is not None else 'not reached'} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print(f"report: {out / 'report.md'}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from psattn.experiments.reproduce import reproduce

    mode = "full" if args.full else "quick"
    report = reproduce(args.out or f"reports/reproduce-{mode}", mode, workers=args.workers)
    print(f"report: {report}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from psattn.experiments.sweep import run_sweep

    configs = experiments.EXPERIMENTS[args.experiment](args.mode)
    results = run_sweep(configs, args.out, workers=args.workers, ray_address=args.ray)
    for name, r in results.items():
        print(f"{name:48s} final acc {r['final_accuracy']:.3f}  emergence step {r['emergence_step']}")
    if args.experiment.startswith("text"):
        from psattn.experiments.text import format_text_summary, summarise_text

        print("\nsummary (final evaluation, mean ± sd over seeds)")
        print("\n".join(format_text_summary(summarise_text(results))))
    key = experiments.SUMMARY_KEYS.get(args.experiment)
    if key is not None:
        print("\nsummary (seeds averaged; success: held-out accuracy reached the run's threshold)")
        for row in experiments.summarise_by(results, key):
            group = ", ".join(f"{k} {v}" for k, v in row.items() if k in key(next(iter(results.values()))))
            step = row["mean_emergence_step"]
            print(f"{group}: {row['successes']}/{row['seeds']} succeed, mean emergence step "
                  f"{'—' if step is None else f'{step:.0f}'}, mean best acc {row['mean_best_accuracy']:.3f}, "
                  f"mean final acc {row['mean_final_accuracy']:.3f}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import json

    from psattn.export.compare import export_and_compare, format_comparison

    result = export_and_compare(args.run, args.onnx, int8=args.int8)
    print(format_comparison(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    config = RunConfig.from_file(args.config) if args.config else RunConfig()
    config = apply_overrides(config, args.set)
    if args.print_config:  # the resolved config, as a run directory would store it; nothing is trained
        import json

        print(json.dumps(config.to_dict(), indent=2))
        return 0
    if args.run_dir is None:
        raise ValueError("--run-dir is required to train (or pass --print-config)")
    try:
        result = train(config, args.run_dir, resume=not args.restart, progress=True, time_limit_s=args.time_limit)
    except TrainingDiverged as err:  # every rank sees the same global loss, so all stop here together
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        teardown_distributed()  # under torchrun: leave the process group before exiting
    if result.timed_out:
        again = "the same command without --restart" if args.restart else "the same command"
        print(f"time limit reached at step {result.steps} of {config.train.steps}; checkpoint in {args.run_dir}, "
              f"run {again} to resume")
        return 0
    print(f"final held-out accuracy {result.final_accuracy:.3f}, emergence step {result.emergence_step}, "
          f"{result.steps} steps; run directory {args.run_dir}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from psattn.text.generate import continue_text, run_tokenizer
    from psattn.training.trainer import load_trained

    if not (Path(args.run_dir) / "checkpoint.pt").exists():
        raise ValueError(f"{args.run_dir} holds no trained run (no checkpoint.pt)")
    tokenizer = run_tokenizer(args.run_dir)
    model = load_trained(args.run_dir)
    text = continue_text(model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                         top_k=args.top_k, seed=args.seed)
    print(args.prompt + text)
    return 0


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _one_line(err: Exception) -> str:
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.strerror or type(err).__name__}: {err.filename}"
    text = " ".join(str(err).split())
    return text or type(err).__name__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="psattn", description="Phase Space Attention toolkit")
    parser.add_argument("--version", action="version", version=f"psattn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train one layer with and without PSA on induction; write a report")
    demo.add_argument("--steps", type=positive_int, default=800)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default="reports/demo")
    demo.set_defaults(func=cmd_demo)

    rep = sub.add_parser("reproduce", help="run the declared experiments and write report.md with figures")
    size = rep.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="CPU scale, about 25 minutes on 2 cores (default)")
    size.add_argument("--full", action="store_true", help="paper scale, for a GPU")
    rep.add_argument("--out", help="output directory (default reports/reproduce-MODE)")
    rep.add_argument("--workers", type=positive_int, help="parallel training processes (default: one per core)")
    rep.set_defaults(func=cmd_reproduce)

    sw = sub.add_parser("sweep", help="run one declared experiment (skips finished runs)")
    sw.add_argument("experiment", choices=list(experiments.EXPERIMENTS))
    sw.add_argument("--mode", choices=experiments.MODES, default="quick")
    sw.add_argument("--out", default="runs")
    sw.add_argument("--workers", type=positive_int, help="parallel training processes (default: one per core)")
    sw.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto' or an address")
    sw.set_defaults(func=cmd_sweep)

    ex = sub.add_parser("export", help="export a trained run to ONNX, run it in ONNX Runtime, compare")
    ex.add_argument("--run", required=True, help="run directory (config.json + checkpoint.pt)")
    ex.add_argument("--onnx", required=True, help="output path of the prefill graph; the decode step goes beside it")
    ex.add_argument("--int8", nargs="?", const="dynamic", choices=["dynamic", "static"],
                    help="also quantize both graphs to INT8 (dynamic, the default, or static: calibrated on "
                         "training rows) and compare accuracy")
    ex.add_argument("--json", help="write the comparison to this JSON file")
    ex.set_defaults(func=cmd_export)

    gen = sub.add_parser("generate", help="continue a prompt with a text run's model and tokenizer")
    gen.add_argument("--run", "--run-dir", dest="run_dir", required=True, help="run directory of a text run")
    gen.add_argument("--prompt", required=True, help="text to continue")
    gen.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate (default 200)")
    gen.add_argument("--temperature", type=float, default=0.8, help="sampling temperature; 0 is greedy (default 0.8)")
    gen.add_argument("--top-k", type=int, help="sample among the k most likely tokens only")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    gen.set_defaults(func=cmd_generate)

    register_theory(sub)
    register_meanfield(sub)
    register_hf(sub)

    tr = sub.add_parser("train", help="train one run from a JSON config with overrides")
    tr.add_argument("--config", help="JSON file with sections model, task, train")
    tr.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides such as model.attention.variant=key_only train.steps=500")
    tr.add_argument("--run-dir", help="directory for config, metrics and checkpoints (required to train)")
    tr.add_argument("--print-config", action="store_true",
                    help="print the resolved config (defaults, --config, --set) as JSON and exit")
    tr.add_argument("--restart", action="store_true", help="ignore an existing checkpoint")
    tr.add_argument("--time-limit", type=float, metavar="SECONDS",
                    help="checkpoint and stop after this long; the same command resumes")
    tr.set_defaults(func=cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return args.func(args)
    except (ValueError, OSError) as err:  # bad input: one line, exit code 2 (-v adds the traceback)
        if args.verbose:
            logging.exception("details")
        parser.exit(2, f"psattn: error: {_one_line(err)}\n")
    except TrainingInterrupted as err:  # checkpointed: the message says how to resume
        print(f"\npsattn: stopped by {err}", file=sys.stderr)
        return 128 + err.signum
    except KeyboardInterrupt:
        print("\npsattn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
