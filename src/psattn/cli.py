"""The ``psattn`` command line: the parser, built from the command modules of ``psattn.commands`` (one per
command family, each with its ``register(subparsers)`` and its handlers), ``main()``, the one-line error and
Ctrl-C while the command line loads. Building the parser imports no torch, so that help, ``--version``, a
refused command line, ``psattn configs``, ``psattn plot``, ``theory gamma-c`` and ``theory fit-exponent`` answer
at once; any other command imports it before it runs."""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_loading(signum, frame):
    """Ctrl-C while the command line loads (torch takes seconds): said like any other, exit code 130.

    It ends the process at once (``os._exit``): only imports have run, so nothing is lost, and an exception
    raised here may land inside torch's C++ import code, which turns it into an abort (rc -6) and a trace."""
    print("\npsattn: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def _running_as_the_command() -> bool:
    """Whether this process is the ``psattn`` command (``psattn ...``, ``python -m psattn``), not a
    program that imports the command line (which keeps its own Ctrl-C)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None:
        return spec.name == "psattn.__main__"
    return os.path.basename((getattr(sys, "argv", None) or [""])[0]) == "psattn"  # the installed script


def _end_at_once_on_ctrl_c():
    """Have Ctrl-C end this process at once (``_interrupted_while_loading``) where it is the ``psattn`` command
    and Ctrl-C raises KeyboardInterrupt; the handler it replaced, to put back once loaded, or None."""
    if not _running_as_the_command() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    try:
        return signal.signal(signal.SIGINT, _interrupted_while_loading)
    except ValueError:  # not the main thread
        return None


_SIGINT = _end_at_once_on_ctrl_c()  # until the imports below are done; then Ctrl-C raises KeyboardInterrupt again

import argparse
import importlib
import logging
from pathlib import Path

from psattn.arguments import COMMON, CommandParser, HelpFormatter, wrap
from psattn.commands import (
    configs,
    demo,
    evaluate,
    export,
    footprint,
    generate,
    hf_demo,
    meanfield,
    plot,
    reproduce,
    sweep,
    theory,
    train,
)
from psattn.training.signals import TrainingDiverged, TrainingInterrupted, WorkerLost
from psattn.version import __version__

if _SIGINT is not None:  # loaded: Ctrl-C raises KeyboardInterrupt again, which main() reports
    signal.signal(signal.SIGINT, _SIGINT)

#: the command modules, in the order ``psattn --help`` lists their commands
COMMANDS = (reproduce, train, sweep, demo, generate, plot, evaluate, footprint, configs, export, theory, meanfield, hf_demo)

#: optional libraries -> the extra that installs them
EXTRAS = {"matplotlib": "plot", "scipy": "theory", "sympy": "theory", "transformers": "hf", "accelerate": "hf",
          "tokenizers": "text", "onnx": "export", "onnxruntime": "export", "onnxscript": "export", "ray": "ray",
          "tensorboard": "tensorboard", "triton": "gpu", "peft": "test", "executorch": "executorch", "torchao": "executorch"}


def _one_line(err: Exception) -> str:
    missing = (getattr(err, "name", None) or "").split(".")[0] if isinstance(err, ModuleNotFoundError) else ""
    if missing in EXTRAS:
        extra = EXTRAS[missing]
        return f"this needs {missing}, from the {extra} extra: pip install 'phase-space-attention[{extra}]'"
    in_the_way = _file_in_the_way(err)
    if in_the_way is not None:
        return f"{in_the_way} is a file, where a folder is needed: name a folder (or move the file away)"
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.strerror or type(err).__name__}: {err.filename}"
    text = " ".join(str(err).split())
    return text or type(err).__name__


def _file_in_the_way(err: Exception) -> Path | None:
    """The file that stands where a folder was to be made or entered (``--out FILE``, ``--run-dir FILE``), for
    the ``File exists`` or ``Not a directory`` of ``mkdir`` and of opening a path beneath it; None otherwise."""
    if not isinstance(err, (FileExistsError, NotADirectoryError)) or err.filename is None:
        return None
    path = Path(os.fsdecode(err.filename))
    return next((p for p in (path, *path.parents) if p.is_file()), None)


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: Python's MemoryError, or torch's CPU or GPU allocator."""
    text = str(err).lower()
    return isinstance(err, MemoryError) or "can't allocate memory" in text or "out of memory" in text


def _load_torch() -> None:
    """Import torch (seconds) before a command runs, a Ctrl-C meanwhile handled as while the command line loads."""
    held = _end_at_once_on_ctrl_c()
    try:
        importlib.import_module("torch")
    finally:
        if held is not None:
            signal.signal(signal.SIGINT, held)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="psattn", formatter_class=HelpFormatter, parents=[COMMON],
        description=wrap("Phase Space Attention toolkit: train, reproduce, certify, export.\n"
                         "Every command takes -q/--quiet and -v/--verbose; `psattn COMMAND -h` shows its options."))
    parser.add_argument("--version", action="version", version=f"psattn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


#: the exit code of a command whose reader closed its stdout early (``psattn configs text | head -3``): a
#: shell's code for a process that SIGPIPE ended (128 + 13), as ``yes | head`` gives; the output was cut short
STDOUT_CLOSED = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 141


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments); its exit code. A reader that closes
    stdout early ends the command quietly (the recipe of Python's ``signal`` docs, "Note on SIGPIPE")."""
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # here, not at exit: a reader that has gone is seen below
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere at exit, without a message
        return STDOUT_CLOSED


def _run(argv: list[str] | None) -> int:
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
    for dest in ("run_dir", "out"):  # '' is the current folder to a path: a run or report would land there
        value = getattr(args, dest, None)
        if isinstance(value, str) and not value.strip():
            getattr(args, "command_parser", parser).error(
                f"argument --{dest.replace('_', '-')}: expected a path, got {value!r} (write . for the current folder)")
    verbose, quiet = getattr(args, "verbose", False), getattr(args, "quiet", False)
    if verbose and quiet:
        parser.error("-q/--quiet and -v/--verbose cannot be combined")
    if quiet:
        os.environ["TQDM_DISABLE"] = "1"  # no bars here or in worker processes
    level = logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING
    logging.basicConfig(level=level, format="%(message)s")
    if not verbose:  # notes about libraries' internals: torch's deprecations of torchao's enums, and torchao's
        # optional kernels it cannot load (built for another Python or GPU), when transformers imports it
        for name in ("torch.utils._pytree", "torchao"):
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        if getattr(args, "needs_torch", True):  # all but configs, plot, gamma-c and fit-exponent
            _load_torch()
        return args.func(args)
    except BrokenPipeError:  # stdout's reader has gone: main() ends quietly
        raise
    except (ValueError, OSError, ImportError) as err:  # bad input or a missing extra: one line, exit code 2
        if verbose:
            logging.exception("details")
        parser.exit(2, f"psattn: error: {_one_line(err)}\n")
    except (TrainingDiverged, WorkerLost) as err:  # the run, the step or the signal, and what is kept
        print(f"psattn: error: {err}", file=sys.stderr)
        return 1
    except (MemoryError, RuntimeError) as err:  # the allocator's refusal, where no check could tell beforehand
        if not _out_of_memory(err):
            raise
        if verbose:
            logging.exception("details")
        parser.exit(2, f"psattn: error: this does not fit in memory ({_one_line(err)[:200]}); ask for less "
                       "(shorter prompts or contexts, fewer tokens, rows or particles, a smaller model)\n")
    except TrainingInterrupted as err:  # checkpointed: the message says how to resume
        print(f"\npsattn: stopped by {err}", file=sys.stderr)
        return 128 + err.signum
    except KeyboardInterrupt as err:  # its text, where it has one, says what the stop left (an export in place)
        signum = getattr(err, "signum", signal.SIGINT)  # SIGTERM or SIGHUP stopping a block that cleans up as for Ctrl-C
        if signum != signal.SIGINT:  # a shell's code for a process that signal ended, as training's
            print(f"\npsattn: stopped by {err}", file=sys.stderr)
            return 128 + signum
        print("\npsattn: interrupted" + (f" {err}" if str(err) else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
