"""psattn.files: files written whole, and no temporary file left beside them by a stop signal."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

_WRITER = """
import os, signal, sys
from pathlib import Path
from psattn import files

target, when, signum = Path(sys.argv[1]), sys.argv[2], getattr(signal, sys.argv[3])
signal.signal(signum, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored

def write(f):
    f.write(b"new")
    if when == "writing":
        os.kill(os.getpid(), signum)

replace = os.replace

def stop_then_replace(src, dst):
    os.kill(os.getpid(), signum)
    replace(src, dst)

open_, unlink = os.open, os.unlink

def open_then_stop(path, *args, **kwargs):  # the stop as the temporary file is made, before its name is returned
    fd = open_(path, *args, **kwargs)
    if str(path).endswith(".tmp"):
        os.open = open_
        os.kill(os.getpid(), signum)
    return fd

def unlink_then_stop(path, *args, **kwargs):  # a second stop as the first temporary file is removed
    unlink(path, *args, **kwargs)
    os.unlink = unlink
    os.kill(os.getpid(), signum)

if when in ("renaming", "renaming, stopped twice"):
    files.os.replace = stop_then_replace
if when == "renaming, stopped twice":
    os.unlink = unlink_then_stop
if when == "creating":
    os.open = open_then_stop
files.atomic_writes({target: write, target.with_name("other.txt"): lambda f: f.write(b"other")})
"""


@pytest.mark.parametrize("when", ["writing", "renaming"])
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_during_an_atomic_write_leaves_no_temporary_file(tmp_path, signum, when):
    """SIGTERM or SIGHUP between the write and the rename ended the process on the spot: the target was intact,
    but its hidden ``.NAME.*.tmp`` stayed beside it, and nothing ever removed it."""
    script, target = tmp_path / "writer.py", tmp_path / "out" / "file.txt"
    script.write_text(_WRITER)
    target.parent.mkdir()
    target.write_text("old")
    done = subprocess.run([sys.executable, str(script), str(target), when, signum], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the signal, as before
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.txt"]  # no temporary file, no half set
    assert target.read_text() == "old"


@pytest.mark.parametrize("when", ["creating", "renaming, stopped twice"])
def test_a_stop_signal_as_the_temporary_file_is_made_or_a_second_one_as_it_is_removed_leaves_none(tmp_path, when):
    """SIGTERM as the temporary file was made (inside ``tempfile.mkstemp``, before its name came back to be
    recorded), or a second SIGTERM while the first one's cleanup removed the temporary files (raised there, midway),
    ended the process with a hidden ``.NAME.*.tmp`` left beside the target."""
    script, target = tmp_path / "writer.py", tmp_path / "out" / "file.txt"
    script.write_text(_WRITER)
    target.parent.mkdir()
    target.write_text("old")
    done = subprocess.run([sys.executable, str(script), str(target), when, "SIGTERM"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]  # ended by the signal, as before
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.txt"]  # no temporary file
    assert target.read_text() == "old"
