"""One grammar for every ``psattn`` subcommand.

- every command has a description and every option a help text, with its default shown;
- ``-q/--quiet`` and ``-v/--verbose`` are accepted by every command (before or after its name);
- the same idea has the same flag: ``--quick/--full`` for a plan's size, ``--run-dir DIR`` for a run
  directory, ``--out DIR`` for an output directory, ``--json [PATH]`` for machine-readable results
  (written to PATH, or printed when PATH is left out or is ``-``); flags are lowercase;
- an old spelling keeps working for one release and says on stderr what replaces it;
- choices taken from a registry that imports torch (studies, kernels) are read once the command is used
  (``add_late_choices``): building the parser imports no torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import textwrap
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from psattn.files import write_text

#: the number an argparse type parses
_Number = TypeVar("_Number", int, float)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and ``(default: X)`` after the help of every option with a default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or not action.option_strings or default is None or isinstance(default, bool)
                or default is argparse.SUPPRESS or default == [] or isinstance(action, argparse._StoreConstAction)):
            return text
        return text + " (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """psattn's parser and each command's: a bad command line is one line on stderr (exit code 2), which
    names the help to read instead of printing the usage; a required option that an old spelling may
    stand in for (``add_required``) is reported as argparse reports any required option."""

    def error(self, message: str) -> NoReturn:
        one = re.fullmatch(r"one of the arguments (\S+) is required", message)
        text = " ".join((f"the following arguments are required: {one.group(1)}" if one else message).split())
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} -h)\n")


def common_options() -> argparse.ArgumentParser:
    """The options every command takes (a parent parser)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("output")
    # SUPPRESS: an option given before the command name is not reset by the command's own parser
    group.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                       help="no progress bars or log messages; results and errors only")
    group.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="log progress messages, and the traceback of an error")
    return parent


COMMON = common_options()


def add_command(subparsers: argparse._SubParsersAction, name: str, summary: str,
                description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand with the common options, ``summary`` in the command list and a description on
    its own help page (``summary`` as a sentence unless given)."""
    text = description or summary[0].upper() + summary[1:] + "."
    command = subparsers.add_parser(name, help=summary, description=wrap(text), formatter_class=HelpFormatter,
                                    parents=[COMMON])
    command.set_defaults(command_parser=command)  # whose usage an error shows (see psattn.cli.main)
    return command


def wrap(text: str, width: int = 88) -> str:
    """``text`` wrapped to ``width``, each of its lines (paragraphs) on its own."""
    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())


class LateChoices(Collection[str]):
    """An argument's choices, read by ``read()`` (which imports their registry) the first time argparse checks a
    value or shows the command's help, not when the parser is built."""

    def __init__(self, read: Callable[[], Iterable[str]]) -> None:
        self.read = read

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(self.read())

    def __contains__(self, value: object) -> bool:
        return value in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def add_late_choices(parser: argparse.ArgumentParser, *flags: str, names: Callable[[], Iterable[str]],
                     **kwargs: Any) -> argparse.Action:
    """``parser.add_argument(*flags, **kwargs)`` whose choices are ``names()``, called once the command is used
    (``LateChoices``): for a registry that imports torch, which building psattn's parser does not."""
    action = parser.add_argument(*flags, **kwargs)
    action.choices = LateChoices(names)  # after add_argument, which reads the choices to check the metavar
    return action


class _Deprecated(argparse.Action):
    """An old spelling of an option: a note on stderr naming the new one, then the same effect."""

    def __init__(self, option_strings, dest, replacement: str, **kwargs):
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"psattn: {option_string} is deprecated and will be removed in the next release; "
              f"use {self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if values is None else values)


def add_deprecated(parser: argparse._ActionsContainer, old: str, replacement: str, dest: str, **kwargs: Any) -> None:
    """Accept ``old`` (hidden from the help) as a spelling of ``replacement``."""
    parser.add_argument(old, dest=dest, action=_Deprecated, replacement=replacement, help=argparse.SUPPRESS,
                        default=argparse.SUPPRESS, **kwargs)


def add_plan_size(parser: argparse.ArgumentParser, quick: str, full: str, default: str = "quick") -> None:
    """``--quick`` / ``--full`` (into ``args.mode``), and the old ``--mode {quick,full}``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", dest="mode", action="store_const", const="quick",
                       help=quick + (" (the default)" if default == "quick" else ""))
    group.add_argument("--full", dest="mode", action="store_const", const="full",
                       help=full + (" (the default)" if default == "full" else ""))
    add_deprecated(group, "--mode", "--quick or --full", "mode", choices=("quick", "full"))  # not beside them either
    parser.set_defaults(mode=default)


def add_required(parser: argparse.ArgumentParser, flag: str, old: str, dest: str, **kwargs: Any) -> None:
    """A required option ``flag`` (shown without brackets in the usage line) that its old spelling ``old``
    may stand in for."""
    either = parser.add_mutually_exclusive_group(required=True)
    either.add_argument(flag, dest=dest, **kwargs)
    add_deprecated(either, old, flag, dest)


def add_run_dir(parser: argparse.ArgumentParser, help: str) -> None:
    """The required ``--run-dir DIR`` (into ``args.run_dir``), and the old ``--run``."""
    add_required(parser, "--run-dir", "--run", "run_dir", metavar="DIR", help=help)


def required_run_dir(args: argparse.Namespace) -> str:
    if getattr(args, "run_dir", None) is None:
        raise ValueError("--run-dir DIR is required")
    return args.run_dir


def add_device(parser: argparse.ArgumentParser) -> None:
    """``--device``: where a trained model runs, whichever device it trained on."""
    parser.add_argument("--device", default="auto", type=device_name, metavar="DEVICE",
                        help="cpu, cuda, cuda:N or auto (CUDA when available)")


def device_name(text: str) -> str:
    """argparse type: cpu, cuda, cuda:N or auto."""
    if text in ("cpu", "cuda", "auto") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or auto, got {text!r}")


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json [PATH]``: ``what`` as JSON, written to PATH or printed."""
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH", type=json_output,
                        help=f"{what} as JSON, written to PATH (printed when PATH is left out or is '-')")


#: the files of a run directory (``psattn.training.run_dir.run_files``), which no ``--json`` replaces
RUN_FILES = ("config.json", "meta.json", "metrics.jsonl", "checkpoint.pt", "result.json", "tokenizer.json", "data.json")


def json_output(text: str) -> str:
    """argparse type of ``--json PATH``: '-', or a file to write that is neither a folder nor a file of a
    run directory (one beside a config.json), checked before the command works."""
    path = Path(text)
    if text == "-":
        return text
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file to write the JSON to, or '-' to print it, got ''")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; name the JSON file to write")
    if path.name in RUN_FILES and (path.parent / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"{text} is a file of the run directory {path.parent}; name another file")
    held = next((folder for folder in path.parents if folder.exists()), None)  # the folders missing are made
    if held is not None and not held.is_dir():
        raise argparse.ArgumentTypeError(f"{held} is a file, not a folder; name a JSON file in a folder")
    return text


def same_file(a: str | None, b: str | None) -> bool:
    """Whether paths ``a`` and ``b`` (either may be None or '-') name the same file."""
    return a not in (None, "-") and b not in (None, "-") and Path(a).resolve() == Path(b).resolve()


def report(json_path: str | None, text: str, data: Any) -> None:
    """Print ``text`` (unless ``--json`` prints the JSON itself) and write ``data`` where ``--json`` said."""
    if json_path != "-":
        print(text)
    if json_path:
        write_json_output(json_path, data)


def write_json_output(path: str, data: Any) -> None:
    """Where ``--json`` said: standard output for '-', else the file, written whole in its folder, which
    is made when missing (``psattn.files``)."""
    text = json.dumps(data, indent=2)
    if path == "-":
        print(text)
    else:
        write_text(path, text + "\n")


def _parse(parse: Callable[[str], _Number], text: str, expected: str) -> _Number:
    """``parse(text)``; a ValueError becomes the argparse error "expected EXPECTED, got 'TEXT'"."""
    try:
        return parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def seed_int(text: str) -> int:
    """argparse type: a seed, an integer in [0, 2**32)."""
    value = _parse(int, text, "an integer seed")
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"a seed must lie in [0, 2**32 = {2**32}), got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _parse(int, text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    value = _parse(float, text, "a positive number")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    value = _parse(float, text, "a non-negative number")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def probability(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    value = _parse(float, text, "a number in (0, 1]")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value
