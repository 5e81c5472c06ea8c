"""Stop signals: a run checkpoints at the step boundary, exits with 128 + the signal's number and a
resume hint, and the same command resumes exactly; a sweep passes the signal on to its workers."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import default_action_raises, science, tiny_config
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import train

OVERRIDES = ["model.d_model=32", "model.n_heads=2", "task.vocab_size=16", "model.vocab_size=16", "task.seq_len=16",
             "task.form=all_positions", "train.batch_size=8", "train.eval_every=5", "train.eval_size=32",
             "train.checkpoint_every=1000", "train.early_stop=false", "train.threads=1"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_every_stop_signal_checkpoints_at_the_step_boundary_and_resumes(tmp_path, signum):
    reference = train(tiny_config())

    def stop(step, loss):
        if step == 13:
            os.kill(os.getpid(), signum)

    with pytest.raises(TrainingInterrupted, match=f"{signal.Signals(signum).name} at step 13") as info:
        train(tiny_config(), tmp_path, on_step=stop)
    assert info.value.signum == signum and info.value.step == 13
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 13
    assert science(train(tiny_config(), tmp_path).history) == science(reference.history)


def test_a_stop_signal_in_the_step_0_evaluation_checkpoints_and_resumes(tmp_path, monkeypatch):
    """The stop handlers were installed after the step-0 evaluation: a SIGTERM there ended psattn train
    with no line and no checkpoint."""
    from psattn.training import trainer

    reference = train(tiny_config())
    evaluate = trainer._Run.evaluate_and_log

    def signalled(run, *args):
        if run.state.step == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(run, *args)

    monkeypatch.setattr(trainer._Run, "evaluate_and_log", signalled)
    with default_action_raises(signal.SIGTERM), pytest.raises(TrainingInterrupted,
                                                              match="SIGTERM at step 1: checkpoint written"):
        train(tiny_config(), tmp_path)
    monkeypatch.undo()
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 1
    assert science(train(tiny_config(), tmp_path).history) == science(reference.history)


def test_a_stop_signal_while_a_finished_run_resumes_stops_it(tmp_path, monkeypatch):
    """A finished run has no step left: a SIGTERM while its checkpoint loaded was never looked at, and
    psattn train ended with exit code 0, as if it had not come."""
    from psattn.training import state

    config = tiny_config(steps=10)
    train(config, tmp_path)
    finished = (tmp_path / "result.json").read_text()
    load = state.TrainState.load

    def signalled(self, *args):
        os.kill(os.getpid(), signal.SIGTERM)
        return load(self, *args)

    monkeypatch.setattr(state.TrainState, "load", signalled)
    with pytest.raises(TrainingInterrupted, match="SIGTERM at step 10: checkpoint written") as info:
        train(config, tmp_path)
    assert info.value.signum == signal.SIGTERM
    assert (tmp_path / "result.json").read_text() == finished


def wait_for(path: Path, predicate, timeout=120.0):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if path.exists() and predicate(path):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{path} never became ready")


def psattn(*args):
    return [sys.executable, "-m", "psattn", *args]


@pytest.mark.slow
def test_sigterm_to_psattn_train_checkpoints_exits_143_and_the_same_command_resumes(tmp_path):
    run = tmp_path / "run"
    command = psattn("train", "--run-dir", str(run), "--set", *OVERRIDES, "train.steps=200")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(run / "metrics.jsonl", lambda p: len(p.read_text().splitlines()) >= 3)  # step 0, 10, 20
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM at step" in err and "run the same command again to resume" in err
    stopped = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
    assert 10 <= stopped < 200 and not (run / "result.json").exists()
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    whole = tmp_path / "whole"
    subprocess.run(psattn("train", "--run-dir", str(whole), "--set", *OVERRIDES, "train.steps=200"),
                   capture_output=True, text=True, timeout=300, check=True)
    lines = lambda d: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert science(lines(run)) == science(lines(whole))


@pytest.mark.slow
def test_sigterm_to_a_sweep_stops_its_workers_with_checkpoints_and_a_rerun_finishes(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(f"""
import dataclasses, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from helpers import tiny_config
from psattn.experiments.sweep import run_sweep
if __name__ == "__main__":  # spawned workers import this file again
    configs = [dataclasses.replace(tiny_config(150), name=f"run{{i}}") for i in range(4)]
    run_sweep(configs, sys.argv[1], workers=2, progress=False)
""")
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # stopped at step 10 or so of 150 (14 measured): seconds before run0 could finish, even on a busy machine
    wait_for(out / "run0" / "metrics.jsonl", lambda p: len(p.read_text().splitlines()) >= 2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "TrainingInterrupted" in err and "SIGTERM" in err
    started = [d for d in out.iterdir() if (d / "checkpoint.pt").exists()]
    assert started and not any((d / "result.json").exists() for d in out.iterdir())
    assert not any(d.name in ("run2", "run3") for d in started)  # not yet started: cancelled, not trained
    time.sleep(0.5)
    leftover = subprocess.run(["pgrep", "-f", "multiprocessing.spawn"], capture_output=True, text=True).stdout.split()
    assert not [pid for pid in leftover if _parent(pid) == proc.pid]  # no orphaned workers
    subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300, check=True)
    assert all((out / f"run{i}" / "result.json").exists() for i in range(4))


def _parent(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().split()[3])
    except (OSError, ValueError):
        return -1


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="tells a worker waiting on a lock by /proc/locks")
def test_a_ctrl_c_after_a_stop_kills_a_sweeps_blocked_workers_at_once(tmp_path):
    """A worker waiting on a run's lock (another sweep trains that run) cannot checkpoint: after the first
    SIGTERM the sweep waits for it, also through a second SIGTERM (a scheduler's own deadline: it once killed
    workers that were writing their checkpoints); a Ctrl-C kills the workers and ends the sweep in one line."""
    from psattn.training.lock import run_lock

    script = tmp_path / "sweep.py"
    script.write_text(f"""
import dataclasses, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from helpers import tiny_config
from psattn.experiments.sweep import run_sweep
if __name__ == "__main__":  # spawned workers import this file again
    run_sweep([dataclasses.replace(tiny_config(20), name="held")], sys.argv[1], workers=2, progress=False)
""")
    out = tmp_path / "runs"
    with run_lock(out / "held"):  # another sweep trains this run
        inode = os.stat(out / "held" / ".lock").st_ino
        proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        wait_for(Path("/proc/locks"), lambda p: any("->" in line and f":{inode} " in line
                                                    for line in p.read_text().splitlines()))  # the worker waits
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)  # at once, as timeout sends it to the process and to its group: one stop
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)  # the waiting worker cannot stop at a step
        workers = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "multiprocessing.spawn"], capture_output=True,
                                 text=True).stdout.split()
        assert workers
        time.sleep(1.5)  # past the window in which one stop sent twice counts once
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)  # still waiting for the workers
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
            time.sleep(0.5)
            alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
        finally:
            proc.kill()
            for pid in workers:  # an old sweep leaves them waiting
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    assert proc.returncode != 0 and "press Ctrl-C again" in err and "SIGINT again: the workers were killed" in err, err
    assert not alive  # no orphaned workers


def test_a_stop_signal_that_reaches_a_worker_while_it_starts_is_ignored(tmp_path):
    """Ctrl-C or timeout signal the whole process group; a spawned worker took the default action before its
    initializer told it to ignore stop signals, and the pool broke (BrokenProcessPool, a traceback)."""
    script = tmp_path / "sweep.py"
    script.write_text(f"""
import dataclasses, os, signal, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from helpers import tiny_config
from psattn.experiments.sweep import run_sweep
if __name__ == "__mp_main__":  # a worker importing this file as it starts: the group's signal reaches it now
    os.kill(os.getpid(), signal.SIGTERM)
if __name__ == "__main__":
    configs = [dataclasses.replace(tiny_config(3), name=f"run{{i}}") for i in range(2)]
    run_sweep(configs, sys.argv[1], workers=2, progress=False)
""")
    out = tmp_path / "runs"
    done = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert all((out / f"run{i}" / "result.json").exists() for i in range(2))


def _gone(pid: str) -> bool:
    """Whether the process has exited (a zombie its new parent has not reaped yet counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
def test_a_worker_whose_sweep_is_killed_checkpoints_and_exits(tmp_path):
    """SIGKILL reaches no handler: the sweep's workers used to train on, orphaned, and then wait for work
    forever on the pool's queue. Each now sees its parent gone at the next step, checkpoints and exits."""
    script = tmp_path / "sweep.py"
    script.write_text(f"""
import dataclasses, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from helpers import tiny_config
from psattn.experiments.sweep import run_sweep
if __name__ == "__main__":  # spawned workers import this file again
    config = tiny_config(100_000)  # far more steps than the test waits for; checkpoints only when stopped
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, checkpoint_every=100_000))
    run_sweep([dataclasses.replace(config, name=f"run{{i}}") for i in range(2)], sys.argv[1], workers=2, progress=False)
""")
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers: list[str] = []
    try:
        for i in range(2):
            wait_for(out / f"run{i}" / "metrics.jsonl", lambda p: len(p.read_text().splitlines()) >= 2)
        workers = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "multiprocessing.spawn"], capture_output=True,
                                 text=True).stdout.split()
        assert len(workers) == 2 and not any((out / f"run{i}" / "checkpoint.pt").exists() for i in range(2))
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in workers)  # they did not train on
    finally:
        proc.kill()
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for i in range(2):
        step = torch.load(out / f"run{i}" / "checkpoint.pt", weights_only=False)["step"]
        assert 0 < step < 100_000 and not (out / f"run{i}" / "result.json").exists()
