"""Whether a process still runs: how a staging folder or a cache build left by a killed process is
told from one that is still being written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tidy_staging(out: Path, prefix: str) -> None:
    """Remove the staging folders (``prefix`` then a process id) that runs killed before their move left in ``out``."""
    for folder in out.glob(prefix + "*"):
        pid = folder.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
