"""Training checkpoints: written whole (``psattn.files``), read back with one-line errors.

Checkpoints hold plain types and tensors only and are read with ``torch.load(weights_only=True)``:
opening one never runs code from the file.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from psattn.files import atomic_write

#: the way on from a refused run that ``psattn train`` gives, and any command that trains no run of its own
TRAIN_ANEW = "train it anew (psattn train --restart) or in another run directory"


class RunRefused(ValueError):
    """A run directory that training will not go on with: why (``reason``), what would let it go on (``fix``, which
    any command can do), and the way on that trains it anew (``anew``), which depends on the command that ran it:
    ``psattn train``'s by default (``TRAIN_ANEW``), another command's through ``with_anew``. One line:
    "REASON; FIX, or ANEW"."""

    def __init__(self, reason: str, fix: str | None = None, anew: str = TRAIN_ANEW):
        super().__init__(reason, fix, anew)  # (reason, fix, anew): how it pickles, to a sweep from its worker
        self.reason, self.fix, self.anew = reason, fix, anew

    def __str__(self) -> str:
        return f"{self.reason}; {self.fix}, or {self.anew}" if self.fix else f"{self.reason}; {self.anew}"

    def with_anew(self, anew: str) -> RunRefused:
        """This refusal, with ``anew`` as its way to train the run anew."""
        return type(self)(self.reason, self.fix, anew)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or that is not a psattn training checkpoint."""


class CheckpointRefused(RunRefused, CheckpointError):
    """A checkpoint a run cannot go on from (unreadable, non-finite, or no longer of its config, data or schedule)."""


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """torch.save ``state`` to ``path`` atomically (temporary file, fsync, rename). A failed write
    (a full disk, say) raises OSError naming the file; the checkpoint already there stays whole."""
    atomic_write(path, lambda f: torch.save(state, f))


def load_checkpoint(path: str | Path, keys: tuple[str, ...] = ("model", "step")) -> dict[str, Any]:
    """The state saved by ``save_checkpoint``, on the CPU. Raises ``CheckpointError``, naming
    the file, when it is missing, unreadable (truncated, corrupt, not written by torch.save), holds
    anything but tensors and plain values, or lacks one of ``keys`` (a training checkpoint's are
    ``psattn.training.state.CHECKPOINT_KEYS``)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a bad file: RuntimeError, UnpicklingError, EOFError, ...
        raise unreadable(path, err) from None
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is not a psattn training checkpoint (missing {missing})")
    weights = state.get("model") if isinstance(state, dict) else None
    if isinstance(weights, dict):
        bad = [name for name, t in weights.items()
               if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
        if bad:
            raise CheckpointRefused(f"{path} holds non-finite weights (NaN or inf in {', '.join(bad[:3])}"
                                    f"{', ...' if len(bad) > 3 else ''}): nothing trained or exported from it "
                                    "would mean anything")
    return state


def unreadable(path: Path, err: Exception) -> CheckpointRefused:
    """The one-line error for a checkpoint file torch cannot (or, holding code, will not) read."""
    if path.is_file() and path.stat().st_size == 0:
        reason = "the file is empty"
    elif path.is_file() and not zipfile.is_zipfile(path):  # torch's own words would blame its format, mmap or pickles
        reason = "it is not a whole torch.save archive: cut short, overwritten, or another kind of file"
    elif isinstance(err, pickle.UnpicklingError) and "weights only" in str(err).lower():
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL (\S+)", str(err))
        reason = ("it holds Python objects, not only tensors and plain values"
                  + (f" ({found.group(1)})" if found else "") + "; it is not opened, since opening it could run code")
    else:
        detail = " ".join(str(err).split())
        reason = f"{type(err).__name__}: {detail}" if detail else type(err).__name__
        if len(reason) > 160:
            reason = reason[:160].rsplit(" ", 1)[0] + " ..."
    return CheckpointRefused(f"{path} is not a readable psattn checkpoint ({reason})", "move it away")


def load_model_weights(model: torch.nn.Module, weights: dict[str, Any], path: str | Path,
                       config_path: str | Path) -> None:
    """``model.load_state_dict(weights)``, with a ``CheckpointError`` naming both files when they do not fit."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:  # shapes or names that do not fit the run's config
        problems = [line.strip().rstrip(".") for line in str(err).splitlines()[1:] if line.strip()]
        detail = "; ".join(problems[:2]) + (f"; and {len(problems) - 2} more" if len(problems) > 2 else "")
        raise CheckpointError(f"{path} does not hold the weights of the model in {config_path} "
                              f"({detail or 'its parameters differ'})") from None

