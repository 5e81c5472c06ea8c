"""ruff (configured in pyproject.toml: pyflakes, pycodestyle, bugbear, pyupgrade, import order, absolute
imports only) passes on the whole tree."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes():
    assert importlib.util.find_spec("ruff"), "ruff is part of the test extra: pip install -e '.[test]'"
    folders = ["src", "tests", "benchmarks", "examples", "scripts"]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *folders],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
