"""The ``psattn`` command line: ``psattn reproduce``, ``psattn demo``, ``psattn train``."""

from __future__ import annotations

import signal
import sys


def _interrupted_while_loading(signum, frame):
    """Ctrl-C while the command line loads (torch takes seconds): said like any other, exit code 130."""
    print("\npsattn: interrupted", file=sys.stderr)
    raise SystemExit(130)


try:  # until the imports below are done (the main thread only; a library import leaves Ctrl-C alone after)
    _SIGINT = signal.signal(signal.SIGINT, _interrupted_while_loading) \
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler else None
except ValueError:  # not the main thread
    _SIGINT = None

import argparse
import dataclasses
import logging
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

import torch

from psattn.arguments import (
    COMMON,
    CommandParser,
    HelpFormatter,
    add_command,
    add_device,
    add_json,
    add_plan_size,
    add_required,
    add_run_dir,
    report,
    required_run_dir,
    seed_int,
    wrap,
)
from psattn.commands.hf_demo import register as register_hf
from psattn.commands.meanfield import register as register_meanfield
from psattn.commands.theory import register as register_theory
from psattn.experiments import declared as experiments
from psattn.experiments import (
    gamma_depth,
    paper_form,
    paper_scale,
    summaries,
    text_phase,
    text_pilot,
    text_scale,
    two_layer,
)
from psattn.experiments.configs import small_induction_config
from psattn.export.footprint import RUNTIMES
from psattn.progress import console_line
from psattn.tasks.registry import task_name
from psattn.training.config import RunConfig, apply_overrides, holds_same_run, shipped_configs
from psattn.training.distributed import teardown_distributed
from psattn.training.reporting import summary_line
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import TrainingDiverged, train
from psattn.version import __version__

if _SIGINT is not None:  # loaded: Ctrl-C raises KeyboardInterrupt again, which main() reports
    signal.signal(signal.SIGINT, _SIGINT)

FORM_NAMES = {"full": "full-sequence ", "single": "single-answer "}


def describe_run(config: RunConfig) -> str:
    """The model, task and optimiser of ``config`` in one sentence, read off the config."""
    m, t, task = config.model, config.train, config.task
    mlp = "MLP" if all(m.layer_mlps()) else "no MLP" if not any(m.layer_mlps()) else "MLP in some layers"
    return (f"Model: {m.n_layers} layer{'s' * (m.n_layers > 1)}, d_model {m.d_model}, {m.n_heads} heads, RoPE, {mlp}; "
            f"task: {FORM_NAMES.get(getattr(task, 'form', ''), '')}{task_name(task)}, vocabulary {task.vocab_size}, length "
            f"{task.seq_len}; AdamW lr {t.lr:g}, batch {t.batch_size}; held-out set of {t.eval_size} rows.")


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out)
    rows = []
    for variant, gamma in (("baseline", 0.0), ("key_only", 1.0)):
        config = small_induction_config(variant, gamma, steps=args.steps, seed=args.seed, early_stop=False)
        result = train(config, out / config.name, resume=False, progress=True)
        rows.append((config, result))
        emergence = "not reached" if result.emergence_step is None else f"step {result.emergence_step}"
        print(f"{config.name:20s} held-out induction accuracy {result.final_accuracy:.3f} "
              f"(emergence: {emergence}, {result.seconds:.0f} s)")
    lines = [
        "# psattn demo: one attention layer on induction, with and without PSA",
        "",
        f"Ran {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.platform()} "
        f"(torch {torch.__version__}, psattn {__version__}); command: `psattn demo --steps {args.steps} "
        f"--seed {args.seed}`.",
        "",
        describe_run(rows[0][0]),
        "",
        f"| variant | gamma | steps | held-out accuracy | emergence step (acc >= {rows[0][0].train.threshold:g}) |",
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

    report = reproduce(args.out or f"reports/reproduce-{args.mode}", args.mode, workers=args.workers,
                       executorch=args.executorch)
    print(f"report: {report}")
    return 0


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
        from psattn.experiments.text import format_text_summary, summarise_text

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


def cmd_export(args: argparse.Namespace) -> int:
    if args.int8 and args.format != "onnx":
        raise ValueError("--int8 applies to --format onnx (ExecuTorch takes --quantize)")
    if args.quantize and args.format != "executorch":
        raise ValueError("--quantize applies to --format executorch (ONNX takes --int8)")
    if args.force and args.format != "hf":
        raise ValueError("--force applies to --format hf (ONNX and ExecuTorch files replace an earlier export's)")
    if args.format == "hf":
        from psattn.export.hf import export_hf

        print(f"Hugging Face model: {export_hf(required_run_dir(args), args.out, force=args.force)} "
              "(import psattn.integrations.hf, then AutoModelForCausalLM.from_pretrained)")
        return 0
    if args.format == "executorch":
        from psattn.export.compare_executorch import executorch_and_compare, format_executorch_comparison

        result = executorch_and_compare(required_run_dir(args), args.out, quantize=tuple(args.quantize or ()))
        report(args.json, format_executorch_comparison(result), result)
        return 0
    from psattn.export.compare import export_and_compare, format_comparison

    result = export_and_compare(required_run_dir(args), args.out, int8=args.int8)
    report(args.json, format_comparison(result), result)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    saved = None if args.run_dir is None else Path(args.run_dir) / "config.json"
    if args.config is not None and not args.config.strip():
        raise ValueError("--config is empty: name a JSON config file or a shipped config (psattn configs lists them)")
    if args.config:
        config = RunConfig.from_file(args.config)
    elif saved is not None and saved.is_file():  # the run's own config: the same command continues it
        config = RunConfig.from_file(saved)
    else:
        config = RunConfig()
    config = apply_overrides(config, args.set)
    if args.config and args.run_dir is not None and args.set and not any(s.startswith("name=") for s in args.set):
        config.name = Path(args.run_dir).resolve().name  # the file's name describes the file's run, not this one
        if saved is not None and saved.is_file():  # a run started before runs were named so keeps its name
            earlier = RunConfig.from_file(saved).name
            if holds_same_run(saved, dataclasses.replace(config, name=earlier)):
                config.name = earlier
    if args.print_config:  # the resolved config, as a run directory would store it; nothing is trained
        import json

        print(json.dumps(config.to_dict(), indent=2))
        return 0
    if args.run_dir is None:
        raise ValueError("--run-dir is required to train (or pass --print-config)")
    try:
        lines = None if getattr(args, "quiet", False) else console_line
        result = train(config, args.run_dir, resume=not args.restart, progress=True, time_limit_s=args.time_limit,
                       report=lines)
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
    print(f"{summary_line(result, config)}; run directory {args.run_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from psattn.training.evaluation import evaluate_run, format_evaluation

    result = evaluate_run(required_run_dir(args), args.set, corpus=args.corpus, rows=args.rows, device=args.device)
    report(args.json, format_evaluation(result), result)
    return 0


def cmd_footprint(args: argparse.Namespace) -> int:
    from psattn.export.footprint import check_measurable, footprint, format_footprints, format_rss, measured_decode_rss
    from psattn.training.run_dir import load_trained

    rows, rss, contexts = {}, {}, {}
    for run_dir in args.run_dirs:
        model = load_trained(run_dir)
        context = args.context or RunConfig.from_file(Path(run_dir) / "config.json").task.seq_len
        a = model.config.layer_attention_configs()[0]
        name = f"{Path(run_dir).resolve().name} ({model.config.n_layers} layer{'s' * (model.config.n_layers > 1)}, " \
               f"{a.variant}{'' if a.variant == 'baseline' else f' γ={a.gamma:g}'})"
        rows[name], contexts[name] = footprint(model, context), (run_dir, context)
        if args.measure is not None:
            check_measurable(rows[name], context)  # every run checked before any is measured
    if args.measure is not None:
        for name, (run_dir, context) in contexts.items():
            rss[name] = {runtime: measured_decode_rss(run_dir, context, runtime, progress=not getattr(args, "quiet", False))
                         for runtime in args.measure or ["pytorch"]}
    lines = format_footprints(rows) + (["", *format_rss(rss, context)] if rss else [])
    data = {name: {**f.as_dict(), **({"measured_rss": rss[name]} if name in rss else {})} for name, f in rows.items()}
    report(args.json, "\n".join(lines), data)
    return 0


def cmd_configs(args: argparse.Namespace) -> int:
    import json

    shipped = shipped_configs()
    if args.name is None:
        for name, path in shipped.items():
            config = json.loads(path.read_text())
            print(f"{name:16s} {config['task']['name']}: {config['name']}")
        print("\npsattn train --config NAME --run-dir DIR trains one; psattn configs NAME > my.json copies it")
        return 0
    if args.name not in shipped:
        raise ValueError(f"no shipped config {args.name!r}; shipped: {', '.join(shipped)}")
    print(shipped[args.name].read_text().rstrip())
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from psattn.experiments.plots import plot_runs
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
    print(f"figure: {plot_runs(histories, out, metrics)}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from psattn.text.generate import continue_text, run_tokenizer
    from psattn.training.run_dir import load_trained

    if not (Path(required_run_dir(args)) / "checkpoint.pt").exists():
        raise ValueError(f"{args.run_dir} holds no trained run (no checkpoint.pt)")
    tokenizer = run_tokenizer(args.run_dir)
    model = load_trained(args.run_dir, args.device)
    context = RunConfig.from_file(Path(args.run_dir) / "config.json").task.seq_len
    for i in range(args.samples):  # sample i is what --seed SEED+i alone gives
        text = continue_text(model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                             top_k=args.top_k, top_p=args.top_p, seed=args.seed + i, context=context)
        if args.samples > 1:
            print(f"{'' if i == 0 else chr(10)}--- sample {i + 1} of {args.samples} (seed {args.seed + i}) ---")
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


def probability(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


#: optional libraries -> the extra that installs them
EXTRAS = {"matplotlib": "plot", "scipy": "theory", "sympy": "theory", "transformers": "hf", "accelerate": "hf",
          "tokenizers": "text", "onnx": "export", "onnxruntime": "export", "onnxscript": "export", "ray": "ray",
          "tensorboard": "tensorboard", "triton": "gpu", "peft": "test", "executorch": "executorch", "torchao": "executorch"}


def _one_line(err: Exception) -> str:
    missing = (getattr(err, "name", None) or "").split(".")[0] if isinstance(err, ModuleNotFoundError) else ""
    if missing in EXTRAS:
        extra = EXTRAS[missing]
        return f"this needs {missing}, from the {extra} extra: pip install 'phase-space-attention[{extra}]'"
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.strerror or type(err).__name__}: {err.filename}"
    text = " ".join(str(err).split())
    return text or type(err).__name__


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="psattn", formatter_class=HelpFormatter, parents=[COMMON],
        description=wrap("Phase Space Attention toolkit: train, reproduce, certify, export.\n"
                         "Every command takes -q/--quiet and -v/--verbose; `psattn COMMAND -h` shows its options."))
    parser.add_argument("--version", action="version", version=f"psattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)

    rep = add_command(sub, "reproduce", "run the declared experiments and write report.md with figures",
                      "Train every declared run (skipping finished ones, resuming interrupted ones), then write "
                      "report.md, results.json and figures: induction, real text, theory, mean field.")
    add_plan_size(rep, quick="CPU scale, 11 to 17 minutes on 2 cores", full="paper scale, for a GPU")
    rep.add_argument("--out", metavar="DIR", help="output directory (default: reports/reproduce-quick or -full)")
    rep.add_argument("--workers", type=positive_int, help="parallel training processes (default: one per core)")
    rep.add_argument("--executorch", action="store_true",
                     help="the real-text device table also gets ExecuTorch rows (fp32 and int8 programs; needs the "
                          "executorch extra, a few minutes more)")
    rep.set_defaults(func=cmd_reproduce)

    tr = add_command(sub, "train", "train one run from a JSON config with overrides",
                     "Train one run: defaults, then --config, then --set overrides. The run directory keeps the "
                     "resolved config, metrics.jsonl, checkpoints and result.json; the same command resumes it.")
    tr.add_argument("--config", metavar="FILE", help="JSON file with sections model, task, train, or the name of a "
                    "shipped example (psattn configs lists them); without it, the run directory's own config.json "
                    "when it has one (so --run-dir alone continues a run), else the defaults. --set overrides "
                    "other than name= name the run after its directory")
    tr.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides such as model.attention.variant=key_only train.steps=500")
    tr.add_argument("--run-dir", metavar="DIR", help="directory for config, metrics and checkpoints (required to train)")
    tr.add_argument("--print-config", action="store_true",
                    help="print the resolved config (defaults, --config, --set) as JSON and exit")
    tr.add_argument("--restart", action="store_true", help="ignore an existing checkpoint and start from step 0")
    tr.add_argument("--time-limit", type=float, metavar="SECONDS",
                    help="checkpoint and stop after this long; the same command resumes")
    tr.set_defaults(func=cmd_train)

    sw = add_command(sub, "sweep", "run one declared experiment (skips finished runs) and print its summary")
    sw.add_argument("experiment", choices=list(experiments.EXPERIMENTS), help="the declared experiment to run")
    add_plan_size(sw, quick="the quick plan's runs", full="the full plan's runs")
    sw.add_argument("--out", default="runs", metavar="DIR", help="directory of the run directories")
    sw.add_argument("--workers", type=positive_int, help="parallel training processes (default: one per core)")
    sw.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto' or an address")
    sw.add_argument("--time-limit", type=positive_float, metavar="SECONDS",
                    help="train the runs one after another in this process and stop cleanly after this long (the "
                         "run in progress checkpoints); the same command resumes: a sweep in pieces, on one GPU")
    sw.set_defaults(func=cmd_sweep)

    demo = add_command(sub, "demo", "train one layer with and without PSA on induction; write a report")
    demo.add_argument("--steps", type=positive_int, default=800, help="training steps of each run")
    demo.add_argument("--seed", type=seed_int, default=0, help="seed of both runs")
    demo.add_argument("--out", default="reports/demo", metavar="DIR", help="output directory")
    demo.set_defaults(func=cmd_demo)

    gen = add_command(sub, "generate", "continue a prompt with a text run's model and tokenizer")
    add_run_dir(gen, "run directory of a text run")
    gen.add_argument("--prompt", required=True, help="text to continue")
    gen.add_argument("--max-new-tokens", type=positive_int, default=200,
                     help="tokens to generate; past the context the run trained on, the window slides")
    gen.add_argument("--temperature", type=float, default=0.8, help="sampling temperature; 0 is greedy")
    gen.add_argument("--top-k", type=positive_int, help="sample among the k most likely tokens only")
    gen.add_argument("--top-p", type=probability, metavar="P",
                     help="sample among the fewest most likely tokens that hold probability P (nucleus sampling)")
    gen.add_argument("--samples", type=positive_int, default=1, metavar="N",
                     help="continuations to write, with seeds SEED, SEED+1, ...")
    gen.add_argument("--seed", type=seed_int, default=0, help="sampling seed")
    add_device(gen)
    gen.set_defaults(func=cmd_generate)

    pl = add_command(sub, "plot", "draw the training curves of one or more runs into one figure",
                     "Draw metrics against step from the metrics.jsonl of each run directory, one line per run: "
                     "held-out accuracy and loss, or bits per byte and ICL score for text runs, unless --metric says.")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    pl.add_argument("--metric", nargs="+", help="metrics.jsonl columns to draw, one panel each")
    pl.add_argument("--out", metavar="PATH",
                    help="the figure (PNG; default: RUN_DIR/curves.png for one run, required for several)")
    pl.set_defaults(func=cmd_plot)

    ev = add_command(sub, "eval", "score a trained run on held-out data of its task, another task or another corpus",
                     "Held-out accuracy and loss of the run's last checkpoint, and its task's metrics (bits per "
                     "byte, ICL score and copying for text; head scores for induction), on the run's own task "
                     "or one changed by --set task.FIELD=VALUE; --corpus (or --set task.corpus) scores a text run on "
                     "another corpus. A text run is always scored with its own tokenizer; the first lines say when "
                     "the text is not what it trained on, or holds fewer windows than --rows asks.")
    add_run_dir(ev, "the run directory to score")
    ev.add_argument("--corpus", help="another corpus for a text run: a shipped name, a file, a folder or a glob")
    ev.add_argument("--set", nargs="*", default=[], metavar="task.FIELD=VALUE", help="change the task")
    ev.add_argument("--rows", type=positive_int, help="held-out rows to score (default: the run's eval_size)")
    add_device(ev)
    add_json(ev, "the scores")
    ev.set_defaults(func=cmd_eval)

    fp = add_command(sub, "footprint", "the memory a trained model needs on a device: weights, KV cache, one decode step",
                     "Bytes of weights at fp32, INT8 and INT4 (flash), of the KV cache per token and at a context "
                     "(PSA's fixed extra state shown apart), and of one decode step's tensors (RAM), for each run; "
                     "then which common SRAM and flash budgets each fits.")
    fp.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories to compare")
    fp.add_argument("--context", type=positive_int, help="tokens in the cache (default: each run's context)")
    fp.add_argument("--measure", nargs="*", choices=RUNTIMES, metavar="RUNTIME",
                    help="also measure the peak memory of a fresh process that decodes CONTEXT tokens (up to "
                         f"65,536), in each RUNTIME ({', '.join(RUNTIMES)}; default pytorch; onnx needs the export extra)")
    add_json(fp, "the footprints")
    fp.set_defaults(func=cmd_footprint)

    cf = add_command(sub, "configs", "list the shipped example run configs, or print one",
                     "The example configs ship inside the package, one per task, each a run of the quick "
                     "reproduction; psattn train --config NAME trains one.")
    cf.add_argument("name", nargs="?", help="the config to print as JSON (default: list them all)")
    cf.set_defaults(func=cmd_configs)

    ex = add_command(sub, "export", "export a trained run to ONNX, ExecuTorch or Hugging Face, and compare with PyTorch",
                     "--format onnx (the default): two ONNX graphs (prefill, and a decode step carrying the cache), "
                     "run in ONNX Runtime and compared with PyTorch (logits, greedy tokens, INT8 fidelity). "
                     "--format executorch: one .pte program (methods prefill and decode, the cache as explicit "
                     "state, XNNPACK), run in ExecuTorch's runtime and compared alike; --quantize adds int8 or int4 "
                     "weight copies. --format hf: a transformers checkpoint (the registered psattn model type) with "
                     "the run's tokenizer, for AutoModelForCausalLM, pipeline and PEFT.")
    add_run_dir(ex, "run directory (config.json + checkpoint.pt)")
    ex.add_argument("--format", choices=["onnx", "executorch", "hf"], default="onnx", help="what to write")
    add_required(ex, "--out", "--onnx", "out", metavar="PATH",
                 help="onnx: the prefill graph's path (the decode step goes beside it); executorch: the .pte "
                      "program's path; hf: the model's folder")
    ex.add_argument("--int8", nargs="?", const="dynamic", choices=["dynamic", "static"],
                    help="onnx: also quantize both graphs to INT8 (dynamic, the default: the weights; or static: "
                         "every MatMul but the LM head, calibrated on training rows; the value projections and a "
                         "key-sheared layer's key projection stay fp32 in both) and compare accuracy")
    ex.add_argument("--quantize", nargs="+", choices=["int8", "int4"], metavar="{int8,int4}",
                    help="executorch: also write quantized programs beside the fp32 one (int8: int8 weights per "
                         "channel; int4: int4 weights in groups of 32; both with int8 dynamic activations) and "
                         "measure their agreement with fp32")
    ex.add_argument("--force", action="store_true",
                    help="hf: replace the folder --out even when it holds files psattn did not write (an earlier "
                         "export's folder is replaced as a whole without it)")
    add_json(ex, "the comparison")
    ex.set_defaults(func=cmd_export)

    register_theory(sub)
    register_meanfield(sub)
    register_hf(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # imports each command's module
    except KeyboardInterrupt:
        print("\npsattn: interrupted", file=sys.stderr)
        return 130
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not the top-level one
        command = getattr(args, "command_parser", parser)
        hint = " (a run directory goes after --run-dir)" if any(
            "--run-dir" in a.option_strings for a in command._actions) and not extra[0].startswith("-") else ""
        command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    verbose, quiet = getattr(args, "verbose", False), getattr(args, "quiet", False)
    if verbose and quiet:
        parser.error("-q/--quiet and -v/--verbose cannot be combined")
    if quiet:
        os.environ["TQDM_DISABLE"] = "1"  # no bars here or in worker processes
    level = logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING
    logging.basicConfig(level=level, format="%(message)s")
    try:
        return args.func(args)
    except (ValueError, OSError, ImportError) as err:  # bad input or a missing extra: one line, exit code 2
        if verbose:
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
