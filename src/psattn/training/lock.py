"""One process at a time per run directory: an advisory lock on ``<run_dir>/.lock``.

The lock is a ``flock`` on an open file, so the kernel releases it when the holder exits, however
it exits (SIGKILL included): a stale lock cannot outlive a crashed run. ``psattn train`` refuses a
directory another process holds; sweep workers wait for it instead, and then find the run finished
(see ``psattn.experiments.sweep``). Where ``fcntl`` does not exist (Windows) the lock is a no-op.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # the lock is then a no-op


class RunLocked(ValueError):
    """Another process is training in this run directory."""


@contextlib.contextmanager
def run_lock(run_dir: str | Path, *, wait: bool = False) -> Iterator[None]:
    """Hold the lock of ``run_dir`` for the duration of the block. Without ``wait``, raise
    ``RunLocked`` when another process holds it."""
    if fcntl is None:
        yield
        return
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunLocked(f"{run_dir} is being trained by another process (pid {holder}); wait for it to finish "
                            "or use another run directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
