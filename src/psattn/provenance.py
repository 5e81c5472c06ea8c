"""Where a result came from: library version, git revision, machine; ``provenance`` is the record
every run directory the project writes keeps (``meta.json`` of a training run, the mean-field
``config.json`` and ``summary.json``)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from psattn.version import __version__


def git_revision() -> str | None:
    """The commit of the source tree psattn runs from: ``$PSATTN_GIT_REVISION`` when set (a copy of a
    checkout sent to another machine, whose ``.git`` may be stale or absent), else ``git rev-parse HEAD``
    of the checkout that tracks this file; None outside one, as for an installed wheel, even one whose
    folder lies inside another project's git work tree (that project's commit says nothing of psattn's)."""
    if os.environ.get("PSATTN_GIT_REVISION"):
        return os.environ["PSATTN_GIT_REVISION"]
    here = Path(__file__).resolve()

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=here.parent)

    try:
        if git("ls-files", "--error-unmatch", "--", here.name).returncode != 0:
            return None  # not a file of this checkout (or no checkout at all)
        out = git("rev-parse", "HEAD").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or None


def machine() -> str:
    """One line: platform, processor architecture, CPU count, torch version."""
    return (f"{platform.platform()} ({platform.machine()}, {os.cpu_count()} CPUs), "
            f"torch {torch.__version__}")


def provenance(seed: int | None = None) -> dict[str, Any]:
    """Seed, versions, git revision, machine and start time, under the same keys everywhere."""
    return {
        "seed": seed,
        "psattn_version": __version__,
        "git_revision": git_revision(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.platform(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
