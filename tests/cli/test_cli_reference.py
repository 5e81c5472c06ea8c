"""docs/cli.md is what scripts/cli_reference.py writes from the parser: the page lists every command with
its -h page, and cannot drift from the code."""

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_reference_page_is_the_parser_s_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    written = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"))["reference"]()
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == written, "docs/cli.md is out of date: python scripts/cli_reference.py > docs/cli.md"
    for command in ("train", "generate", "footprint", "configs", "hf-demo", "certify", "theory gamma-c", "meanfield run"):
        assert f"psattn {command}" in page
