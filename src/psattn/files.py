"""Files written whole: a file is either its old or its new whole self, never half written.

A write goes to a temporary file beside the target (``.<name>.<random>.tmp``), is flushed to the disk and
renamed into place; a failed write removes the temporary file and raises one OSError naming the target
(``write_failed``); SIGTERM or SIGHUP, whose default action would end the process on the spot, leaving it,
remove it too, and then end the process (``psattn.processes.signals_unwind``; what a kill leaves,
``temporary_files`` finds). ``atomic_writes`` writes a set of files so, and renames none until all are written.
Files get the permissions any new file gets (0644 under the usual umask 022), not the private 0600 of the
temporary file they are written to. ``append_line`` appends a line whole or not at all.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any

from psattn.processes import signals_unwind, stop_signals_held

#: the process's umask, read once (setting it is the only way to read it)
_UMASK = os.umask(0)
os.umask(_UMASK)
#: the permissions a new file gets (0644 under the usual umask 022)
NEW_FILE_MODE = 0o666 & ~_UMASK


def temporary_files(path: str | Path) -> list[Path]:
    """The temporary files that writes of ``path`` cut short (by a kill) left beside it: ``.<name>.*.tmp``."""
    path = Path(path)
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` whole with ``write(f)`` on a binary file, making its folder when missing."""
    atomic_writes({path: write})


def atomic_writes(writes: dict[str | Path, Callable[[IO[bytes]], Any]],
                  replacing: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
    """Write each path of ``writes`` whole with its ``write(f)``, as ``atomic_write``, and as a set: every file
    is written to its temporary file first, so that a failed write (a full disk) replaces none of them, and only
    then are they renamed into place, one after the other inside ``replacing()`` (where a caller holds the stop
    signals, so that no stop falls between two renames). SIGTERM or SIGHUP removes the temporary files not yet
    renamed, as a failure does, and then ends the process (where their handlers are the default)."""
    written: list[tuple[Path, str]] = []  # (target, its temporary file), each as it is made
    with signals_unwind():  # SIGTERM and SIGHUP, which would end the process on the spot, remove them first
        try:
            for path, write in writes.items():
                _write_beside(Path(path), write, written)
            with replacing():
                for path, tmp in written:
                    try:
                        os.replace(tmp, path)
                    except OSError as err:
                        raise write_failed(path, err, "the file already there (if any) is intact") from None
        finally:
            with stop_signals_held():  # a second stop meanwhile waits until they are gone
                for _, tmp in written:
                    if os.path.exists(tmp):  # not renamed: a later write failed, or a stop came first
                        os.unlink(tmp)


def _write_beside(path: Path, write: Callable[[IO[bytes]], Any], written: list[tuple[Path, str]]) -> None:
    """Write a temporary file beside ``path`` (made with its folder when missing) whole with ``write(f)``, flushed to
    the disk, and append it to ``written``: it goes there as it is made, the stop signals held, so that a stop at any
    point leaves the caller its name to remove; a failed write removes it and raises one OSError naming ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with stop_signals_held():  # a stop as it is made lands once its name is in written
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # see temporary_files
            written.append((path, tmp))
            f = os.fdopen(fd, "wb")  # closed when dropped, also by a stop that lands as the block ends
    except OSError as err:  # named for the folder the caller gave, not the temporary file's hidden name
        raise cannot_create(path, err) from None
    try:
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, NEW_FILE_MODE)
    except BaseException as err:
        with stop_signals_held():
            if os.path.exists(tmp):
                os.unlink(tmp)
        if isinstance(err, (OSError, RuntimeError)):  # torch.save reports a failed write as RuntimeError
            raise write_failed(path, err, "the file already there (if any) is intact") from None
        raise


def cannot_create(path: Path, err: OSError) -> OSError:
    """The one-line error for a temporary file or staging folder that could not be made beside ``path``, to write
    it: named for ``path`` and its folder, not for the hidden name."""
    return OSError(f"cannot write {path}: {path.parent} refused a new entry ({err.strerror or type(err).__name__})")


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


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON (indented) to ``path`` whole."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2).encode()))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` as JSON lines to ``path`` whole."""
    atomic_write(path, lambda f: f.write("".join(json.dumps(r) + "\n" for r in rows).encode()))


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole."""
    atomic_write(path, lambda f: f.write(text.encode()))


def write_texts(texts: dict[str | Path, str], replacing: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
    """Write each of ``texts`` to its path whole, as a set (``atomic_writes``)."""

    def writing(text: str) -> Callable[[IO[bytes]], Any]:
        return lambda f: f.write(text.encode())

    atomic_writes({path: writing(text) for path, text in texts.items()}, replacing)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole."""
    atomic_write(path, lambda f: f.write(data))
