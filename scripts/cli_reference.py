"""Write docs/cli.md, the command-line reference, from the ``psattn`` argument parser itself: every
command's and subcommand's ``-h`` page, in the parser's order. ``tests/cli/test_cli_reference.py``
fails when the committed page differs from what this script writes, so the page cannot drift.

    python scripts/cli_reference.py > docs/cli.md
"""

from __future__ import annotations

import argparse
import os
import sys

INTRO = """# Command-line reference

Every `psattn` command and its options, as `psattn COMMAND -h` prints them (generated from the
parser by `python scripts/cli_reference.py > docs/cli.md`; a test fails when this page and the
parser differ). Every command takes `-q/--quiet` and `-v/--verbose`; an option's default is shown
after its help. The commands in order:
"""


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(name path, one-line summary, parser) of every subcommand below ``parser``, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), summaries.get(name, ""), sub
                yield from commands(sub, (*path, name))


def reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps the help to the terminal's width: one width for the page
    from psattn.cli import build_parser

    parser = build_parser()
    found = list(commands(parser))
    lines = [INTRO]
    lines += [f"- [`psattn {' '.join(path)}`](#psattn-{'-'.join(path)}): {summary}" for path, summary, _ in found]
    lines += ["", "## psattn", "", "```text", parser.format_help().rstrip(), "```"]
    for path, _, sub in found:
        lines += ["", f"{'#' * min(len(path) + 1, 4)} psattn {' '.join(path)}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
