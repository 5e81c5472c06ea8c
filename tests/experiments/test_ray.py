"""Sweeps on a local Ray instance land in the same run directories as the process pool's."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch

from helpers import science
from psattn.experiments.configs import small_config
from psattn.experiments.sweep import run_sweep
from psattn.training.run_dir import load_result
from psattn.training.signals import WorkerLost

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="ray is not installed (pip install 'phase-space-attention[ray]')")


def tiny(config):
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, steps=4, eval_every=2, eval_size=32, batch_size=8))


@pytest.mark.slow
def test_ray_sweep_matches_local_and_skips_finished(tmp_path):
    """Also: the sweep leaves the process's SIGTERM handler as it found it. ray.init installed its own (sys.exit)
    and ray.shutdown left it, so a later SIGTERM skipped the handler of whatever ran next in the process."""
    import signal

    configs = [tiny(small_config("key_only", 1.0, seed=s, d_model=32, n_heads=2)) for s in (0, 1)]
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    on_ray = run_sweep(configs, tmp_path / "ray", ray_address="local", workers=2, progress=False)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    local = run_sweep(configs, tmp_path / "local", workers=1, progress=False)
    for name in local:
        assert science(on_ray[name]["history"]) == science(local[name]["history"])
    stamp = (tmp_path / "ray" / configs[0].name / "result.json").stat().st_mtime_ns
    assert run_sweep(configs, tmp_path / "ray", ray_address="local", progress=False) == on_ray
    assert (tmp_path / "ray" / configs[0].name / "result.json").stat().st_mtime_ns == stamp
    assert load_result(tmp_path / "ray" / configs[1].name)["steps"] == 4


@pytest.mark.slow
def test_a_run_that_fails_on_ray_raises_its_own_error_not_the_workers_traceback(tmp_path):
    """psattn sweep --ray printed a 1,150-character line: Ray's error text is the worker's traceback, in colour."""
    configs = [tiny(small_config("key_only", 1.0, seed=s, d_model=32, n_heads=2)) for s in (0, 1)]
    (tmp_path / configs[1].name).write_text("a file where the run's folder goes")
    with pytest.raises(OSError) as caught:
        run_sweep(configs, tmp_path, ray_address="local", workers=2, progress=False)
    assert type(caught.value) in (FileExistsError, NotADirectoryError)  # what the run met, not a Ray class
    assert caught.value.filename == str(tmp_path / configs[1].name)
    assert "ray::" not in str(caught.value) and "line" not in str(caught.value)


@pytest.mark.slow
def test_a_run_that_asks_for_cuda_on_a_local_ray_without_a_gpu_is_refused_not_left_waiting(tmp_path, monkeypatch):
    """Its task asked Ray for a GPU no node has, and the sweep waited for it forever (psattn sweep paper_scale --full
    --ray local on a machine without one)."""
    import ray

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setattr(ray, "wait", lambda *a, **k: pytest.fail("a task no node can run was submitted"))
    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, device="cuda"))
    with pytest.raises(ValueError, match=r"asks for train.device='cuda', and this machine's Ray instance has no GPU"):
        run_sweep([config], tmp_path, ray_address="local", workers=1, progress=False)


def test_a_run_whose_ray_worker_dies_on_every_retry_is_one_error_naming_it(tmp_path, monkeypatch):
    """The out-of-memory killer's SIGKILL to a run's Ray worker, on each of Ray's retries: psattn sweep --ray ended in a
    WorkerCrashedError traceback. (Ray is stood in for: the error is what ray.get raises then.)"""
    import ray

    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # a Ray instance the caller started
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1})
    monkeypatch.setattr(ray, "remote", lambda **resources: lambda f: type("Task", (), {"remote": lambda *a: "ref"}))
    monkeypatch.setattr(ray, "wait", lambda pending, num_returns: (pending[:num_returns], pending[num_returns:]))

    def crashed(refs):
        raise ray.exceptions.WorkerCrashedError()

    monkeypatch.setattr(ray, "get", crashed)
    with pytest.raises(WorkerLost, match=rf"Ray worker training {config.name} died \(WorkerCrashedError.*run the same"):
        run_sweep([config], tmp_path, ray_address="auto", progress=False)


SIGTERM_SWEEP = """
import dataclasses, os, signal, sys, threading, time
from pathlib import Path
from helpers import tiny_config
from psattn.experiments.sweep import run_sweep
from psattn.training.signals import TrainingInterrupted

out = Path(sys.argv[1])
def stop():
    while not (out / "run" / "checkpoint.pt").exists():
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=stop, daemon=True).start()
try:
    run_sweep([dataclasses.replace(tiny_config(100000, checkpoint_every=1), name="run")], out, ray_address="local",
              workers=1, progress=False)
except TrainingInterrupted as err:
    print(err.signum, err)
"""


@pytest.mark.slow
def test_a_sigterm_to_a_ray_sweep_stops_it_as_a_stop_signal(tmp_path):
    """A scheduler's SIGTERM to psattn sweep --ray: Ray's own handler aborted the process (exit -6) with a C++ trace."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]))
    done = subprocess.run([sys.executable, "-c", SIGTERM_SWEEP, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("15 SIGTERM: the sweep's Ray tasks were stopped"), done.stdout
