"""Where a result came from: library version, git revision, machine."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch


def git_revision() -> str | None:
    """The commit of the source tree psattn runs from, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine() -> str:
    """One line: platform, processor architecture, CPU count, torch version."""
    return (f"{platform.platform()} ({platform.machine()}, {os.cpu_count()} CPUs), "
            f"torch {torch.__version__}")
