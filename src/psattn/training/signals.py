"""Stopping cleanly: the signals a run checkpoints on, and the exceptions that say why a run stopped.

SIGINT is Ctrl-C; SIGTERM is how ``timeout``, SLURM, Kubernetes and most schedulers stop a job;
SIGHUP comes from a closing terminal. SIGKILL cannot be caught: a killed run resumes from its
last periodic checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

from psattn.processes import STOP_SIGNALS


class TrainingInterrupted(KeyboardInterrupt):
    """A stop signal arrived; what was running was checkpointed and resumes when run again."""

    def __init__(self, message: str, signum: int = signal.SIGINT, step: int = 0):
        super().__init__(message)
        self.signum, self.step = signum, step

    def __reduce__(self):  # keep signum and step across processes (sweep workers)
        return type(self), (str(self), self.signum, self.step)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the run, the step and the checkpoint kept."""


class WorkerLost(RuntimeError):
    """A sweep's worker process ended without a word (SIGKILL, as from the out-of-memory killer); the message
    names its run, which resumes from its last checkpoint when the sweep runs again."""


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
                signal.raise_signal(signum)


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


class StopFlag:
    """Turns a stop signal into a request honoured at the next step boundary (then checkpoint, raise)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def installed(self):
        """A context in which the stop signals set this flag instead of stopping the process (main thread only)."""
        return on_stop_signals(lambda signum, _frame: setattr(self, "signum", signum))
