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
    ``RunLocked`` when another process holds it. A block that leaves the directory as it found it (a
    start that failed before writing anything, in a new, empty or another program's folder) leaves no
    trace: the lock file goes when this call made it, and the directory too when this call created it."""
    if fcntl is None:
        yield
        return
    run_dir = Path(run_dir)
    created = not run_dir.exists()
    before = set() if created else {p.name for p in run_dir.iterdir()}
    fd = _acquire(run_dir, wait)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            if ".lock" not in before and {p.name for p in run_dir.iterdir()} == before | {".lock"}:
                (run_dir / ".lock").unlink()  # removed while held, so no one else holds it
                if created:
                    run_dir.rmdir()
        except OSError:
            pass  # another process created something there meanwhile: leave it
        os.close(fd)  # releases the lock


def _acquire(run_dir: Path, wait: bool) -> int:
    """An open descriptor of ``run_dir/.lock``, locked. A holder may remove the file it locked (see
    ``run_lock``), so the lock counts only when the file locked is still the one at that path."""
    while True:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunLocked(f"{run_dir} is being trained by another process (pid {holder}); wait for it to finish "
                            "or use another run directory") from None
        try:
            if os.fstat(fd).st_ino == os.stat(run_dir / ".lock").st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the file locked was removed by its last holder: lock the one there now
