"""Run the command-line tutorial of docs/getting-started.md ("Train on your own text") as written, in the
current folder, with 20 training steps instead of 200.

CI runs it from a wheel install in an empty folder outside the checkout (``.ci/run``), and
``tests/test_readme.py`` runs it from the checkout's sources in a temporary folder: the tutorial needs
nothing a checkout alone has. Each command runs in bash with ``psattn`` and ``python`` from PATH.

    python scripts/run_getting_started.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"
SECTION = "## Train on your own text"
#: the page's training length -> the check's
SHORTER = {"train.steps=200": "train.steps=20", "train.eval_every=50": "train.eval_every=10"}


def tutorial_commands(page: Path = PAGE) -> list[str]:
    """The section's shell commands, in order (comment lines dropped)."""
    block = re.search(rf"^{SECTION}\n.*?```bash\n(.*?)```", page.read_text(), flags=re.S | re.M)
    if block is None:
        raise SystemExit(f"{page} has no bash block under {SECTION!r}")
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def main() -> int:
    for command in tutorial_commands():
        for long, short in SHORTER.items():
            command = command.replace(long, short)
        print(f"$ {command}", flush=True)
        done = subprocess.run(["bash", "-c", command])
        if done.returncode != 0:
            print(f"failed with exit code {done.returncode}: {command}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
