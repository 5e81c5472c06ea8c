"""ruff (configured in pyproject.toml: pyflakes, pycodestyle, bugbear, pyupgrade, import order, absolute
imports only) passes on the whole tree."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the test extra: pip install -e '.[test]'"
    done = subprocess.run([ruff, "check", "--no-cache", "src", "tests", "benchmarks", "examples", "scripts"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
