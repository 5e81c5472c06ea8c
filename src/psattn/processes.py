"""Whether a process still runs: how a staging folder or a cache build left by a killed process is
told from one that is still being written; the staging folder a set of files is written into; the stop
signals, which ``signals_unwind`` turns into an exception inside a block, so that its cleanup runs, and
``stop_signals_held`` holds back while files are written or moved in; and the memory
free on the host, which runs are checked against before they allocate."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

#: SIGINT is Ctrl-C; SIGTERM is how ``timeout``, SLURM, Kubernetes and most schedulers stop a job; SIGHUP comes
#: from a closing terminal
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def host_available_bytes() -> int | None:
    """Memory free for this process on the host now: the kernel's MemAvailable, within a cgroup's limit (what is left
    of it); the free pages where neither can be read; None where nothing can."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    if not found and hasattr(os, "sysconf"):
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    return min(found) if found else None


def tidy_staging(out: Path, prefix: str) -> None:
    """Remove the staging folders (``prefix`` then a process id) that runs killed before their move left in ``out``."""
    for folder in out.glob(prefix + "*"):
        pid = folder.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def remove_staging(folder: Path) -> None:
    """Remove the staging folder ``folder`` with all in it (one gone already is fine), the stop signals held: a
    stop that comes meanwhile (a second one, a scheduler's own deadline, while the first's cleanup runs) lands once
    it is gone, not midway, where it left half of it."""
    with stop_signals_held():
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def new_staging(parent: Path, prefix: str) -> Iterator[Path]:
    """A new staging folder in ``parent`` (``prefix`` then random characters) for the block, removed with all in it
    as the block ends (``remove_staging``; one moved away meanwhile is fine). The stop signals are held while it is
    made: one that came as the folder was made, before its name was in hand, left it behind."""
    staging: Path | None = None
    try:
        with stop_signals_held():
            staging = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        yield staging
    finally:
        if staging is not None:
            remove_staging(staging)


@contextlib.contextmanager
def folder_made(folder: Path) -> Iterator[None]:
    """Make ``folder`` and its missing parents for the block; when the block fails, remove again those
    it made that are still empty, so that a refused or failed write leaves no folder of its own."""
    made = list(itertools.takewhile(lambda path: not path.exists(), (folder, *folder.parents)))  # deepest first
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):  # not empty: something else was put there meanwhile
                path.rmdir()
        raise


@contextlib.contextmanager
def staged_folder(out: Path, prefix: str, moving: Callable[[], AbstractContextManager[Any]]) -> Iterator[Path]:
    """A staging folder inside ``out`` (made when missing; ``prefix`` then this process's id) for the block to write
    a set of files into. They are moved into ``out`` once the block has written all, inside ``moving()`` (the stop
    signals held, say), and the emptied folder is removed there too, before a stop held meanwhile ends the process:
    a stop or a failure midway leaves the earlier files whole, not a mix of two. SIGTERM and SIGHUP, which would end
    the process on the spot, remove the staging folder first and then end it (``signals_unwind``), and a second stop
    meanwhile waits until it is gone (``remove_staging``). Staging folders of killed runs go first (``tidy_staging``).
    A failure leaves no ``out`` that this call made (``folder_made``)."""
    with folder_made(out):
        tidy_staging(out, prefix)
        with signals_unwind(), new_staging(out, f"{prefix}{os.getpid()}-") as staging:
            yield staging
            with moving():
                for path in sorted(staging.iterdir()):
                    os.replace(path, out / path.name)
                staging.rmdir()


@contextlib.contextmanager
def on_stop_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """Route the stop signals to ``handler(signum, frame)`` inside the block (main thread only:
    elsewhere Python cannot install handlers, and the block runs unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Inside the block the stop signals are recorded, not handled; on leaving it (also by an exception)
    the handlers installed before handle them, in the order they came. ``signal.pthread_sigmask`` holds a
    signal back from one thread only, and the operating system hands it to any thread that does not block
    it (a progress bar's monitor, a CUDA or OpenMP thread), whereupon CPython runs its handler in the main
    thread all the same; this holds it wherever it lands. In another thread, where Python installs no
    handlers, the signals are blocked in that thread (``stop_signals_blocked``), as far as that goes."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        with stop_signals_blocked():
            yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        with on_stop_signals(lambda signum, _frame: came.append(signum)):
            yield
    finally:
        for signum in came:
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:  # restored by now: the default action (ending the process)
                _end_by(signum)


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Block the stop signals in this thread inside the block (where the platform can): processes and threads
    started inside it inherit the block, so a worker can install its own handling before any stop reaches it
    (and unblock them then); a signal that comes meanwhile is delivered on leaving the block."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``signum``), raised inside ``signals_unwind`` where its default action would have ended the
    process on the spot: a KeyboardInterrupt, so that what cleans up after Ctrl-C cleans up after it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self):  # rebuilt from its number across processes
        return type(self), (self.signum,)


def _end_by(signum: int) -> None:
    """End the process by ``signum``, whose handler is the default, as the signal itself would have: sent to the
    process, not to this thread alone (``signal.raise_signal``), which a caller may have blocked it in (while another
    thread, a progress bar's monitor, took the first), so that it stayed pending and the process went on."""
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def signals_unwind(end: bool = True) -> Iterator[None]:
    """Inside the block SIGTERM and SIGHUP, whose default action ends the process on the spot, raise ``StopSignal``
    instead, so that the block's cleanup runs; once it has, with ``end`` the process ends by that signal as it would
    have (``_end_by``), and without, the exception goes on to the caller (which says what the stop left). A second
    stop while the cleanup runs (a scheduler's own deadline) is held, not raised midway through it, and ends the
    process as the block ends. Signals with handlers of their own, and other threads (where Python installs no
    handlers), are left alone; the handlers are put back on leaving the block."""
    came: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        came.append(signum)
        if len(came) == 1:  # a second one would cut short the cleanup the first one started
            raise StopSignal(signum)

    main = threading.current_thread() is threading.main_thread()
    ours = [s for s in STOP_SIGNALS if s != signal.SIGINT and main and signal.getsignal(s) == signal.SIG_DFL]
    for s in ours:
        signal.signal(s, stop)
    try:
        yield
    finally:
        for s in ours:
            signal.signal(s, signal.SIG_DFL)
        if came and end:
            _end_by(came[0])
        elif len(came) > 1:  # a second stop, held while the first one's cleanup ran
            _end_by(came[1])
