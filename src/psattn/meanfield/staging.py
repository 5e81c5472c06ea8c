"""Files written as one set: into a staging folder inside their folder, moved into place only once all are
complete, so that a failure or a kill midway leaves the earlier set whole, not a mix of two (``psattn
meanfield run``, and ``meanfield_report`` under ``psattn meanfield reproduce`` and ``psattn reproduce``; the
latter's figures and theory files too)."""

from __future__ import annotations

import shutil
from pathlib import Path

from psattn.processes import process_alive

#: the hidden folder a run writes its files into before they are moved into place (then its process id)
STAGING_PREFIX = ".meanfield-run-"


def tidy_staging(out: Path, prefix: str = STAGING_PREFIX) -> None:
    """Remove the staging folders (``prefix`` then a process id) that runs killed before their move left in ``out``."""
    for folder in out.glob(prefix + "*"):
        pid = folder.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
