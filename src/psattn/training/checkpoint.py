"""Atomic file writes: a file is either its old or its new whole self, never half written.

Files get the permissions any new file gets (0644 under the usual umask 022), not the private
0600 of the temporary file they are written to. Checkpoints hold plain types and tensors only and
are read with ``torch.load(weights_only=True)``: opening one never runs code from the file.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import pickle
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

_UMASK = os.umask(0)
os.umask(_UMASK)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or that is not a psattn training checkpoint."""


def temporary_files(path: str | Path) -> list[Path]:
    """The temporary files that writes of ``path`` cut short (by a kill) left beside it: ``.<name>.*.tmp``."""
    path = Path(path)
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # see temporary_files
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, (OSError, RuntimeError)):  # torch.save reports a failed write as RuntimeError
            raise write_failed(path, err, "the file already there (if any) is intact") from None
        raise


def write_failed(path: Path, err: OSError | RuntimeError, kept: str) -> OSError:
    """The one-line error for a failed write to ``path``, saying what is ``kept``, and asking whether the
    disk is full when it may be."""
    detail = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    full = isinstance(err, RuntimeError) or err.errno == errno.ENOSPC
    return OSError(f"writing {path} failed ({detail}); {kept}" + (". Is the disk full?" if full else ""))


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` to the file at ``path``, whole or not at all: a failed write (a full disk) is cut
    back off and raises OSError naming the file."""
    data = memoryview(line.encode())
    with open(path, "ab", buffering=0) as f:  # unbuffered: what failed is known here, not at close
        start = f.seek(0, os.SEEK_END)
        try:
            while data:
                data = data[f.write(data):]
        except OSError as err:
            f.truncate(start)
            raise write_failed(Path(path), err, "its earlier lines are intact") from None


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """torch.save ``state`` to ``path`` atomically (temporary file, fsync, rename). A failed write
    (a full disk, say) raises OSError naming the file; the checkpoint already there stays whole."""
    _atomic_write(Path(path), lambda f: torch.save(state, f))


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
            raise CheckpointError(f"{path} holds non-finite weights (NaN or inf in {', '.join(bad[:3])}"
                                  f"{', ...' if len(bad) > 3 else ''}); nothing trained or exported from it "
                                  "would mean anything: restart the run (psattn train --restart)")
    return state


def unreadable(path: Path, err: Exception) -> CheckpointError:
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
    return CheckpointError(f"{path} is not a readable psattn checkpoint ({reason}); "
                           "move it away or start the run over (psattn train --restart)")


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


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file renamed into place)."""
    _atomic_write(Path(path), lambda f: f.write(json.dumps(data, indent=2).encode()))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` as JSON lines to ``path`` atomically."""
    _atomic_write(Path(path), lambda f: f.write("".join(json.dumps(r) + "\n" for r in rows).encode()))


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    _atomic_write(Path(path), lambda f: f.write(text.encode()))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    _atomic_write(Path(path), lambda f: f.write(data))
