"""mypy (configured in pyproject.toml: default strictness, per-module exceptions only) passes on the
package, and the package ships its ``py.typed`` marker so that type checkers read its annotations."""

import importlib.resources
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is part of the test extra: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "mypy", "src/psattn"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_package_is_marked_typed():
    assert (importlib.resources.files("psattn") / "py.typed").is_file()
