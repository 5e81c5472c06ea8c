"""Whether a process still runs: how a staging folder or a cache build left by a killed process is
told from one that is still being written; and the staging folder a set of files is written into."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any


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


@contextlib.contextmanager
def staged_folder(out: Path, prefix: str, moving: Callable[[], AbstractContextManager[Any]]) -> Iterator[Path]:
    """A staging folder inside ``out`` (made when missing; ``prefix`` then this process's id) for the block to write
    a set of files into. They are moved into ``out`` once the block has written all, inside ``moving()`` (the stop
    signals held, say), and the emptied folder is removed there too, before a stop held meanwhile ends the process:
    a stop or a failure midway leaves the earlier files whole, not a mix of two. Staging folders of killed runs go
    first (``tidy_staging``)."""
    out.mkdir(parents=True, exist_ok=True)
    tidy_staging(out, prefix)
    staging = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=out))
    try:
        yield staging
        with moving():
            for path in sorted(staging.iterdir()):
                os.replace(path, out / path.name)
            staging.rmdir()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
