"""``psattn export``: a trained run as ONNX graphs, an ExecuTorch program or a transformers checkpoint,
compared with PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path

from psattn.arguments import add_command, add_json, add_required, add_run_dir, report, required_run_dir, same_file

#: --format -> what the export writes
FORMATS = {
    "onnx": "two ONNX graphs (prefill, and a decode step carrying the cache) and one file of the weights both read, "
            "run in ONNX Runtime and compared with PyTorch (logits, greedy tokens, INT8 fidelity).",
    "executorch": "one .pte program (methods prefill and decode, the cache as explicit state, XNNPACK), run in "
                  "ExecuTorch's runtime and compared alike; --quantize adds int8 or int4 weight copies, "
                  "--external-weights puts each program's weights in a .ptd file beside it.",
    "hf": "a transformers checkpoint (the registered psattn model type) with the run's tokenizer, for "
          "AutoModelForCausalLM, pipeline and PEFT.",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export`` to the main parser's subcommands."""
    default = "onnx"
    described = (f"--format {name}{' (the default)' * (name == default)}: {text}" for name, text in FORMATS.items())
    ex = add_command(subparsers, "export", "export a trained run to ONNX, ExecuTorch or Hugging Face, and compare with PyTorch",
                     " ".join(described))
    add_run_dir(ex, "run directory (config.json + checkpoint.pt)")
    ex.add_argument("--format", choices=list(FORMATS), default=default, help="what to write")
    add_required(ex, "--out", "--onnx", "out", metavar="PATH",
                 help="onnx: the prefill graph's path (the decode step and the weights file go beside it); executorch: the .pte "
                      "program's path; hf: the model's folder")
    ex.add_argument("--int8", nargs="?", const="dynamic", choices=["dynamic", "static"],
                    help="onnx: also quantize both graphs to INT8 (dynamic, the default: the weights; or static: "
                         "every MatMul but the LM head, calibrated on training rows; the value projections and a "
                         "key-sheared layer's key projection stay fp32 in both) and compare accuracy")
    ex.add_argument("--quantize", nargs="+", choices=["int8", "int4"], metavar="{int8,int4}",
                    help="executorch: also write quantized programs beside the fp32 one (int8: int8 weights per "
                         "channel; int4: int4 weights in groups of 32; both with int8 dynamic activations) and "
                         "measure their agreement with fp32")
    ex.add_argument("--external-weights", action="store_true",
                    help="executorch: write each program's weights to <name>.ptd beside its .pte (ExecuTorch's "
                         "external data; the two files go together), which holds a tied embedding table once "
                         "where a self-contained fp32 .pte holds it twice")
    ex.add_argument("--force", action="store_true",
                    help="hf: replace the folder --out even when it holds files psattn did not write (an earlier "
                         "export's folder is replaced as a whole without it)")
    add_json(ex, "the comparison")
    ex.set_defaults(func=cmd_export)


def _export_files(args: argparse.Namespace) -> list[str]:
    """Every file the export may write or remove: --out and, for ONNX and ExecuTorch, the files beside it."""
    if args.format == "hf":
        return [args.out]
    if args.format == "executorch":
        from psattn.export.compare_executorch import executorch_family

        return [str(p) for p in executorch_family(args.out)]
    from psattn.export.compare import onnx_family

    return [str(p) for p in onnx_family(Path(args.out))]


def cmd_export(args: argparse.Namespace) -> int:
    if args.json is not None and args.format == "hf":
        raise ValueError("--json applies to --format onnx and executorch (a Hugging Face export makes no comparison)")
    if any(same_file(args.json, path) for path in _export_files(args)):
        raise ValueError(f"--json {args.json} would replace the export it describes (--out): name another file")
    if args.int8 and args.format != "onnx":
        raise ValueError("--int8 applies to --format onnx (ExecuTorch takes --quantize)")
    if args.quantize and args.format != "executorch":
        raise ValueError("--quantize applies to --format executorch (ONNX takes --int8)")
    if args.external_weights and args.format != "executorch":
        raise ValueError("--external-weights applies to --format executorch (ONNX writes its weights file "
                         "beside the graphs always; hf writes a folder)")
    if args.force and args.format != "hf":
        raise ValueError("--force applies to --format hf (ONNX and ExecuTorch files replace an earlier export's)")
    if args.format == "hf":
        from psattn.export.hf import export_hf

        print(f"Hugging Face model: {export_hf(required_run_dir(args), args.out, force=args.force)} "
              "(import psattn.integrations.hf, then AutoModelForCausalLM.from_pretrained)")
        return 0
    # a --json file is written by the export, moved in with it (a stop leaves both new or neither); "-" is printed here
    summary = None if args.json == "-" else args.json
    printed = None if summary else args.json
    if args.format == "executorch":
        from psattn.export.compare_executorch import executorch_and_compare, format_executorch_comparison

        result = executorch_and_compare(required_run_dir(args), args.out, quantize=tuple(args.quantize or ()),
                                        external_weights=args.external_weights, json_path=summary)
        report(printed, format_executorch_comparison(result), result)
        return 0
    from psattn.export.compare import export_and_compare, format_comparison

    result = export_and_compare(required_run_dir(args), args.out, int8=args.int8, json_path=summary)
    report(printed, format_comparison(result), result)
    return 0
