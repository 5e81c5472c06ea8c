"""mkdocs hooks (mkdocs.yml: ``hooks``): docs/cli.md's marker becomes the command-line reference that
scripts/cli_reference.py writes from the parser, at every build."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- psattn-cli-reference -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))  # this checkout's psattn, as mkdocstrings reads it
    reference = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"))["reference"]
    return markdown.replace(MARKER, reference())
