"""Whether a process still runs: how a staging folder or a cache build left by a killed process is
told from one that is still being written."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
