"""The command-line reference, from the ``psattn`` argument parser itself: every command's and
subcommand's ``-h`` page, in the parser's order. The site's build writes it into docs/cli.md where the
page says ``<!-- psattn-cli-reference -->`` (``scripts/mkdocs_hooks.py``), so the page cannot drift
from the code; ``tests/test_docs_site.py`` checks the built page against the parser.

    python scripts/cli_reference.py     # the same text, printed
"""

from __future__ import annotations

import argparse
import os
import sys


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(name path, one-line summary, parser) of every subcommand below ``parser``, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), summaries.get(name, ""), sub
                yield from commands(sub, (*path, name))


def reference() -> str:
    os.environ["COLUMNS"] = "86"  # argparse wraps the help to the terminal's width: the text column's
    from psattn.cli import build_parser

    parser = build_parser()
    found = list(commands(parser))
    lines = [f"- [`psattn {' '.join(path)}`](#psattn-{'-'.join(path)}): {summary}" for path, summary, _ in found]
    lines += ["", "## psattn", "", "```text", parser.format_help().rstrip(), "```"]
    for path, _, sub in found:
        lines += ["", f"{'#' * min(len(path) + 1, 4)} psattn {' '.join(path)}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
