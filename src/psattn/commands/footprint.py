"""``psattn footprint``: the memory a trained model needs on a device (weights, KV cache, one decode
step), and which budgets it fits."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from psattn.arguments import add_command, add_json, add_late_choices, positive_int, report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``footprint`` to the main parser's subcommands."""
    fp = add_command(subparsers, "footprint", "the memory a trained model needs on a device: weights, KV cache, one decode step",
                     "Bytes of weights at fp32, INT8 and INT4 (flash), of the KV cache per token and at a context "
                     "(PSA's fixed extra state shown apart), and of one decode step's tensors (RAM), for each run; "
                     "then which common SRAM and flash budgets each fits.")
    fp.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories to compare")
    fp.add_argument("--context", type=positive_int, help="tokens in the cache (default: each run's context)")
    add_late_choices(fp, "--measure", nargs="*", names=_runtimes, metavar="RUNTIME",
                     help="also measure the peak memory of a fresh process that decodes CONTEXT tokens (up to "
                          "65,536), in each RUNTIME (%(choices)s; default pytorch; onnx needs the export extra)")
    add_json(fp, "the footprints")
    fp.set_defaults(func=cmd_footprint)


def _runtimes() -> tuple[str, ...]:
    from psattn.export.footprint import RUNTIMES  # the footprint module imports torch

    return RUNTIMES


def _attention(model) -> str:
    """The attention of ``model``'s layers: "key_only γ=1", or one entry per layer where they differ
    ("baseline / key_only γ=1")."""
    labels = [a.variant + ("" if a.variant == "baseline" else f" γ={a.gamma:g}")
              for a in model.config.layer_attention_configs()]
    return labels[0] if len(set(labels)) == 1 else " / ".join(labels)


def cmd_footprint(args: argparse.Namespace) -> int:
    from psattn.export.footprint import (
        check_measurable,
        check_runtimes,
        footprint,
        format_footprints,
        format_rss,
        measured_decode_rss,
    )
    from psattn.training.config import RunConfig
    from psattn.training.run_dir import load_trained

    rows, rss, contexts = {}, {}, {}
    folders = [Path(run_dir).resolve().name for run_dir in args.run_dirs]
    for run_dir, folder in zip(args.run_dirs, folders, strict=True):
        model = load_trained(run_dir)
        context = args.context or RunConfig.from_file(Path(run_dir) / "config.json").task.seq_len
        where = folder if folders.count(folder) == 1 else str(run_dir)  # two runs in folders of one name: their paths
        name = f"{where} ({model.config.n_layers} layer{'s' * (model.config.n_layers > 1)}, {_attention(model)})"
        rows[name], contexts[name] = footprint(model, context), (run_dir, context)
        if args.measure is not None:
            check_measurable(rows[name], context)  # every run checked before any is measured
            check_runtimes(model, run_dir, args.measure or ["pytorch"])
    if args.measure is not None:
        for name, (run_dir, context) in contexts.items():
            with tempfile.TemporaryDirectory() as graphs:  # the run's ONNX export, for onnx and onnx-int8 alike
                rss[name] = {runtime: measured_decode_rss(run_dir, context, runtime, graphs=Path(graphs),
                                                          progress=not getattr(args, "quiet", False))
                             for runtime in args.measure or ["pytorch"]}
    lines = format_footprints(rows) + (["", *format_rss(rss, {n: c for n, (_, c) in contexts.items()})] if rss else [])
    data = {name: {**f.as_dict(), **({"measured_rss": rss[name]} if name in rss else {})} for name, f in rows.items()}
    report(args.json, "\n".join(lines), data)
    return 0
