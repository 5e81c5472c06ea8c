"""Faults: SIGKILL at random moments, two processes on one run directory, corrupt or foreign
checkpoints, file permissions."""

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from helpers import science, tiny_config
from psattn.training.checkpoint import CheckpointError, load_checkpoint
from psattn.training.lock import RunLocked, run_lock
from psattn.training.run_dir import load_result, load_trained
from psattn.training.trainer import train

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TIMING = ("seconds",)  # the only fields of a result that depend on the wall clock


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(TESTS)])}


def _same_science(a: dict, b: dict) -> None:
    def kept(result):
        return {k: science(v) if k == "history" else v for k, v in result.items() if k not in TIMING}
    assert kept(a) == kept(b)


def _saved(run_dir: Path) -> dict:
    """The run's saved result as ``RunResult.to_dict`` gives it: result.json with metrics.jsonl's rows."""
    return {k: v for k, v in load_result(run_dir).items() if k != "config"}


def _check_intact(run_dir: Path) -> None:
    """What a kill may leave: any subset of whole files, each readable; never a half-written one."""
    if (run_dir / "config.json").exists():
        json.loads((run_dir / "config.json").read_text())
    if (run_dir / "checkpoint.pt").exists():
        load_checkpoint(run_dir / "checkpoint.pt")
    if (run_dir / "metrics.jsonl").exists():
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            json.loads(line)
    if (run_dir / "result.json").exists():
        json.loads((run_dir / "result.json").read_text())


TRAIN = textwrap.dedent("""
    import sys
    from helpers import tiny_config
    from psattn.training.trainer import train
    train(tiny_config(200, checkpoint_every=1, eval_every=5), sys.argv[1])
""")


def _checkpoint_step(run_dir: Path) -> int:
    """The step of the checkpoint on disk (0 before the first); reading races only with an atomic rename."""
    path = run_dir / "checkpoint.pt"
    return load_checkpoint(path)["step"] if path.exists() else 0


def _wait_for_step(proc, run_dir: Path, step: int, timeout: float = 120.0) -> None:
    """Polls every 2 ms, and reads the checkpoint again only once another has replaced it (a new file,
    renamed into place), so that the polling leaves the CPU to the run it waits for."""
    deadline, seen, reached = time.monotonic() + timeout, None, 0
    while proc.poll() is None and time.monotonic() < deadline and reached < step:
        with contextlib.suppress(FileNotFoundError):
            stat = (run_dir / "checkpoint.pt").stat()
            if (stat.st_ino, stat.st_mtime_ns, stat.st_size) != seen:
                seen, reached = (stat.st_ino, stat.st_mtime_ns, stat.st_size), _checkpoint_step(run_dir)
        time.sleep(0.002)


def test_sigkill_at_random_moments_never_corrupts_and_the_run_finishes_exactly(tmp_path):
    """Each process is killed once its run has checkpointed a random 1 to 20 steps past where it
    started, plus a random few milliseconds: with a checkpoint every step, many kills land inside a
    checkpoint or metrics write. The kills are counted in steps, not seconds, so a faster or slower
    machine sees the same six kills before the run of 200 steps can finish."""
    reference = train(tiny_config(200, checkpoint_every=1, eval_every=5)).to_dict()  # in memory: no checkpoint writes
    run_dir, rng, kills, steps = tmp_path / "run", random.Random(0), 0, []
    for _ in range(6):
        start = _checkpoint_step(run_dir)
        proc = subprocess.Popen([sys.executable, "-c", TRAIN, str(run_dir)], env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_step(proc, run_dir, start + rng.randint(1, 20))
        time.sleep(rng.uniform(0.0, 0.02))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        _check_intact(run_dir)
        if (run_dir / "result.json").exists():
            break
        steps.append(_checkpoint_step(run_dir))
    assert kills == 6 and steps == sorted(steps), steps  # progress is never lost
    subprocess.run([sys.executable, "-c", TRAIN, str(run_dir)], env=_env(), check=True, timeout=300)
    _same_science(_saved(run_dir), reference)
    assert not list(run_dir.glob(".*.tmp"))


SWEEP = textwrap.dedent("""
    import dataclasses, logging, sys
    from helpers import tiny_config
    from psattn.experiments.sweep import run_sweep
    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        configs = [dataclasses.replace(tiny_config(40, seed=i), name=f"run{i}") for i in range(4)]
        run_sweep(configs, sys.argv[1], workers=int(sys.argv[2]), progress=False)
""")


def _sweep(out, workers, **kw):
    return subprocess.Popen([sys.executable, "-c", SWEEP, str(out), str(workers)], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_sweep_killed_with_its_workers_resumes_every_run_exactly(tmp_path):
    out = tmp_path / "sweep"
    proc = _sweep(out, 2, start_new_session=True)
    deadline = time.monotonic() + 120  # killed once a run has checkpointed (40 steps each: mid-sweep on any machine)
    while not list(out.glob("run*/checkpoint.pt")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: the sweep and its workers
    proc.wait()
    for run_dir in out.glob("run*"):
        _check_intact(run_dir)
    again = _sweep(out, 2)
    assert again.wait(timeout=300) == 0, again.stdout.read()
    for i in range(4):
        alone = train(tiny_config(40, seed=i)).to_dict()
        _same_science(_saved(out / f"run{i}"), alone)


def test_two_sweeps_on_one_directory_train_each_run_once(tmp_path):
    out = tmp_path / "sweep"
    first, second = _sweep(out, 1), _sweep(out, 1)
    logs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], logs
    trained = sum(log.count(": training") for log in logs)
    waited = sum(log.count("finished by another process") for log in logs)
    assert trained == 4 and trained + waited <= 8
    for i in range(4):
        assert json.loads((out / f"run{i}" / "result.json").read_text())["steps"] == 40


def test_train_refuses_a_directory_another_process_holds(tmp_path):
    with run_lock(tmp_path / "run"):
        child = subprocess.run(
            [sys.executable, "-c", TRAIN, str(tmp_path / "run")], env=_env(), capture_output=True, text=True, timeout=120)
    assert child.returncode != 0 and "is being trained by another process" in child.stderr
    assert not (tmp_path / "run" / "config.json").exists()  # refused before writing anything
    train(tiny_config(2), tmp_path / "run")  # free again once the holder is gone


def test_lock_is_released_when_its_holder_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from psattn.training.lock import run_lock
        with run_lock({str(tmp_path / 'run')!r}):
            print("held", flush=True)
            time.sleep(60)
    """)], env=_env(), stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunLocked, match="another process"):
        with run_lock(tmp_path / "run"):
            pass
    holder.kill()
    holder.wait()
    with run_lock(tmp_path / "run"):
        pass


WHOLE = re.escape("not a readable psattn checkpoint (it is not a whole torch.save archive")


@pytest.mark.parametrize("content,match", [
    (b"", r"not a readable psattn checkpoint \(the file is empty\)"),
    (b"not a checkpoint at all", WHOLE),
    (b"\0" * 4096, WHOLE),  # torch blamed the legacy .tar format, or mmap, and said to save it again
    ("half", WHOLE),
])
def test_corrupt_checkpoint_is_refused_naming_the_file(tmp_path, content, match):
    train(tiny_config(10), tmp_path)
    if content == "half":
        content = (tmp_path / "checkpoint.pt").read_bytes()[:2000]
    (tmp_path / "checkpoint.pt").write_bytes(content)
    for action in (lambda: train(tiny_config(10), tmp_path), lambda: train(tiny_config(20), tmp_path),
                   lambda: load_trained(tmp_path)):  # resumed, grown (which reads the step first), loaded
        with pytest.raises(CheckpointError, match=match) as err:
            action()
        assert str(tmp_path / "checkpoint.pt") in str(err.value)
    assert (tmp_path / "checkpoint.pt").read_bytes() == content  # kept for inspection, never overwritten


def test_truncated_checkpoint_is_refused(tmp_path):
    train(tiny_config(10), tmp_path)
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="checkpoint.pt"):
        load_checkpoint(path)


class Payload:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def test_foreign_checkpoints_are_refused(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a psattn training checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    torch.save({"model": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="not a readable psattn checkpoint") as refused:
        load_checkpoint(tmp_path / "evil.pt", keys=("model",))  # weights_only: never unpickles code
    message = str(refused.value)  # one whole sentence, naming what it refused
    assert "holds Python objects" in message and "system" in message, message
    assert message.endswith("; move it away, or train it anew (psattn train --restart) or in another run directory"), message


def test_checkpoint_of_another_model_is_refused(tmp_path):
    train(tiny_config(10), tmp_path / "a")
    config = tiny_config(10)
    config.model.d_model = 64
    train(config, tmp_path / "b")
    (tmp_path / "a" / "checkpoint.pt").write_bytes((tmp_path / "b" / "checkpoint.pt").read_bytes())
    with pytest.raises(CheckpointError, match=r"trained with model.d_model = 64, but .*config.json says 32"):
        load_trained(tmp_path / "a")
    state = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    del state["binding"]  # a checkpoint from before bindings: its shapes still tell
    torch.save(state, tmp_path / "a" / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="does not hold the weights") as refused:
        load_trained(tmp_path / "a")
    assert "size mismatch for" in str(refused.value) and str(refused.value).endswith(")"), refused.value


def test_run_files_have_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        train(tiny_config(10), tmp_path)
    finally:
        os.umask(old)
    for name in ("config.json", "meta.json", "metrics.jsonl", "checkpoint.pt", "result.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


def test_temporary_files_left_by_a_kill_are_removed_when_the_run_is_opened(tmp_path):
    train(tiny_config(4), tmp_path)
    stale = [tmp_path / ".checkpoint.pt.abc123.tmp", tmp_path / ".result.json.xyz.tmp"]
    for path in stale:
        path.write_bytes(b"half a file")
    train(tiny_config(4), tmp_path)
    assert not any(path.exists() for path in stale)


def test_opening_a_run_removes_only_the_temporary_files_psattn_writes(tmp_path):
    mine = [tmp_path / ".notes.tmp", tmp_path / ".draft.json.abc12345.tmp", tmp_path / ".tensorboard.x.tmp"]
    for path in mine:
        path.write_text("the user's own")
    stale = tmp_path / ".metrics.jsonl.k2j4h6g8.tmp"
    stale.write_bytes(b"half a file")
    train(tiny_config(4), tmp_path)
    assert all(path.read_text() == "the user's own" for path in mine) and not stale.exists()
