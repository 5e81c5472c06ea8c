"""psattn.processes: the staging folder a set of files is written into, under stop signals; the host's free memory."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_inside_a_staged_folder_removes_it_and_ends_the_process_by_that_signal(tmp_path, signum):
    """SIGTERM or SIGHUP while a command (theory bode, phase-diagram, report, sweep text_phase) wrote into its staging
    folder ended the process on the spot and left the folder, with the files written so far, in --out."""
    out = tmp_path / "out"
    script = tmp_path / "stage.py"
    script.write_text(f"""
import contextlib, os, signal, time
from pathlib import Path
from psattn.processes import staged_folder

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
with staged_folder(Path({str(out)!r}), ".files-", contextlib.nullcontext) as staging:
    (staging / "figure.png").write_text("half a report")
    os.kill(os.getpid(), signal.{signum})
    time.sleep(30)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the signal, as before
    assert list(out.iterdir()) == []  # no staging folder, no file of the stopped run


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_second_stop_signal_while_the_staging_folder_is_removed_waits_until_it_is_gone(tmp_path, signum):
    """A second SIGTERM or SIGHUP (a scheduler's own deadline) while the first's cleanup removed the staging folder
    raised there, midway, and the process ended with half the folder left in --out."""
    out = tmp_path / "out"
    script = tmp_path / "stage.py"
    script.write_text(f"""
import contextlib, os, signal, time
from pathlib import Path
from psattn.processes import staged_folder

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
unlink = os.unlink

def unlink_then_stop(path, *args, **kwargs):  # the second stop as the first file of the folder goes
    unlink(path, *args, **kwargs)
    os.unlink = unlink
    os.kill(os.getpid(), signal.{signum})

with staged_folder(Path({str(out)!r}), ".files-", contextlib.nullcontext) as staging:
    for name in ("a.png", "b.png", "c.png"):
        (staging / name).write_text("half a report")
    os.unlink = unlink_then_stop
    os.kill(os.getpid(), signal.{signum})
    time.sleep(30)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the signal, as before
    assert list(out.iterdir()) == []  # the staging folder removed whole


_SECOND_STOP = """
import contextlib, os, signal, sys, time
from pathlib import Path

out, site = Path(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGTERM, signal.SIG_DFL)
unlink = os.unlink

def unlink_then_stop(path, *args, **kwargs):  # the second stop as the first file of the staging folder goes
    unlink(path, *args, **kwargs)
    os.unlink = unlink
    os.kill(os.getpid(), signal.SIGTERM)

def written_then_stopped(folder):  # three files in the staging folder, then the first stop
    for name in ("a.png", "b.png", "c.png"):
        (folder / name).write_text("half of it")
    os.unlink = unlink_then_stop
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)

out.mkdir()
if site == "hf export":
    from psattn.export.staging import staged_folder
    with staged_folder(out / "hf") as staging:
        written_then_stopped(staging)
elif site == "onnx export":
    from psattn.export.staging import staged_files
    with staged_files(out / "model.onnx", lambda target: [target]) as path:
        written_then_stopped(path.parent)
elif site == "meanfield run":
    from psattn import cli
    from psattn.commands import meanfield
    meanfield._write_run = lambda folder, config, traj: written_then_stopped(folder)
    sys.exit(cli.main(["meanfield", "run", "--n", "8", "--tau", "0.1", "--no-animation", "--out", str(out)]))
elif site == "meanfield report":
    from psattn.meanfield import reproduce
    reproduce._write_report = lambda folder, *args: written_then_stopped(folder)
    reproduce.meanfield_report(out)
"""


@pytest.mark.parametrize("site", ["hf export", "onnx export", "meanfield run", "meanfield report"])
def test_a_second_stop_signal_while_a_commands_staging_folder_is_removed_waits_until_it_is_gone(tmp_path, site):
    """The exports, ``psattn meanfield run`` and the mean-field report remove their staging folder on a first
    SIGTERM; a second one meanwhile (a scheduler's own deadline) raised there, midway, and left half the folder."""
    script, out = tmp_path / "stage.py", tmp_path / "out"
    script.write_text(_SECOND_STOP)
    done = subprocess.run([sys.executable, str(script), str(out), site], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode != 0, done.stderr[-2000:]  # stopped
    assert list(out.iterdir()) == []  # no staging folder, no half of one


def test_a_stop_taken_by_another_thread_while_this_one_blocks_it_still_ends_the_process_by_it(tmp_path):
    """With the stop signals blocked in the main thread (a caller's signal mask) and open in another (a progress
    bar's monitor), the other took SIGTERM and the main thread removed its staging folder, but then sent the signal
    to itself alone, where it stayed pending: the process went on and ended with a traceback and exit code 1, not by
    the signal a scheduler sent."""
    out = tmp_path / "out"
    script = tmp_path / "stage.py"
    script.write_text(f"""
import contextlib, os, signal, threading, time
from pathlib import Path
from psattn.processes import STOP_SIGNALS, staged_folder

signal.signal(signal.SIGTERM, signal.SIG_DFL)
threading.Thread(target=threading.Event().wait, daemon=True).start()  # the signals open in it
signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
with staged_folder(Path({str(out)!r}), ".files-", contextlib.nullcontext) as staging:
    (staging / "figure.png").write_text("half a report")
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(600):  # short sleeps: the handler runs in this thread between two
        time.sleep(0.05)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert list(out.iterdir()) == []  # the staging folder removed first


def test_a_stop_signal_as_the_staging_folder_is_made_leaves_none(tmp_path):
    """SIGTERM as the staging folder was made (inside ``tempfile.mkdtemp``, before its name came back to be removed)
    ended the process with the empty folder left in --out, for the next run there to tidy."""
    out = tmp_path / "out"
    script = tmp_path / "stage.py"
    script.write_text(f"""
import contextlib, os, signal
from pathlib import Path
from psattn.processes import staged_folder

signal.signal(signal.SIGTERM, signal.SIG_DFL)
mkdir = os.mkdir

def mkdir_then_stop(path, *args, **kwargs):  # the stop as the staging folder is made
    mkdir(path, *args, **kwargs)
    if os.path.basename(path).startswith(".files-"):
        os.mkdir = mkdir
        os.kill(os.getpid(), signal.SIGTERM)

os.mkdir = mkdir_then_stop
with staged_folder(Path({str(out)!r}), ".files-", contextlib.nullcontext) as staging:
    (staging / "figure.png").write_text("a report")
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert list(out.iterdir()) == []  # no staging folder, no file


def test_the_hosts_free_memory_is_memavailable_within_the_cgroups_limit(tmp_path, monkeypatch):
    """What a run is checked against on the CPU: the kernel's MemAvailable, or less where a cgroup's limit leaves
    less of it (a container's), not the machine's free memory beyond the limit the OOM killer enforces."""
    import io
    from pathlib import Path

    from psattn import processes

    meminfo = "MemTotal:       33554432 kB\nMemAvailable:    8388608 kB\n"  # 8 GiB available
    monkeypatch.setattr(processes, "open", lambda path, *a, **k: io.StringIO(meminfo), raising=False)
    monkeypatch.setattr(processes, "Path", lambda path: tmp_path if path == "/sys/fs/cgroup" else Path(path))
    assert processes.host_available_bytes() == 8 * 2**30  # no cgroup files: MemAvailable
    (tmp_path / "memory.max").write_text("max\n")
    assert processes.host_available_bytes() == 8 * 2**30  # no limit
    (tmp_path / "memory.max").write_text(f"{2 * 2**30}\n")
    (tmp_path / "memory.current").write_text(f"{2**29}\n")
    assert processes.host_available_bytes() == 3 * 2**29  # 2 GiB limit, 0.5 GiB used: 1.5 GiB left
