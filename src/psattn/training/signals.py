"""Stopping cleanly: the signals a run checkpoints on, and the exceptions that say why a run stopped.

SIGINT is Ctrl-C; SIGTERM is how ``timeout``, SLURM, Kubernetes and most schedulers stop a job;
SIGHUP comes from a closing terminal. SIGKILL cannot be caught: a killed run resumes from its
last periodic checkpoint.
"""

from __future__ import annotations

import signal

# how the stop signals are routed, held and blocked lives beside them, where the mean-field code reaches it too
from psattn.processes import STOP_SIGNALS as STOP_SIGNALS
from psattn.processes import on_stop_signals
from psattn.processes import stop_signals_blocked as stop_signals_blocked
from psattn.processes import stop_signals_held as stop_signals_held


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
