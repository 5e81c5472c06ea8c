"""Data-parallel training: two gloo processes on the CPU train exactly what one process trains."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from helpers import tiny_config
from psattn.training.checkpoint import load_checkpoint
from psattn.training.run_dir import load_result
from psattn.training.trainer import train


def torchrun(config, run_dir, *extra, background=False):
    path = run_dir.parent / f"{run_dir.name}.json"
    path.write_text(json.dumps(config.to_dict()))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "psattn", "train", "--config", str(path), "--run-dir", str(run_dir), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if background:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def same_history(a, b):
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert (x["train_loss"] is None) == (x["step"] == 0) == (y["train_loss"] is None)  # no step-0 loss
        for key in ("train_loss", "eval_loss", "eval_accuracy") if x["step"] else ("eval_loss", "eval_accuracy"):
            assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-5), (key, x, y)


@pytest.mark.slow
def test_two_process_ddp_equals_one_process(tmp_path):
    config = tiny_config(steps=30)
    single = train(config, tmp_path / "single")
    out = torchrun(config, tmp_path / "ddp")
    assert out.count("trained 30 steps") == 1, out  # rank 0 alone says how the run ended (every rank said it)
    ddp = load_result(tmp_path / "ddp")
    same_history(ddp["history"], single.history)
    files = {p.name for p in (tmp_path / "ddp").iterdir()}
    assert {"config.json", "meta.json", "metrics.jsonl", "checkpoint.pt", "result.json"} <= files
    assert len((tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()) == 4  # rank 0 alone: step 0 and 3 evaluations


@pytest.mark.slow
def test_ddp_time_limit_stops_every_rank_and_a_run_resumes_after_it_and_after_a_kill(tmp_path):
    """Two ways a DDP run ends early, one after the other on one run directory (each torchrun starts three
    processes): a time limit of 0 stops every rank at step 1; the run resumed from there is killed past step
    10; the run resumed again finishes as one process trains it."""
    config = tiny_config(steps=60, checkpoint_every=5)
    reference = train(config)
    run_dir = tmp_path / "ddp"
    out = torchrun(config, run_dir, "--time-limit", "0")
    assert out.count("time limit reached at step 1") == 1, out  # rank 0's line alone
    assert load_checkpoint(run_dir / "checkpoint.pt")["step"] == 1 and not (run_dir / "result.json").exists()
    proc = torchrun(config, run_dir, background=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        ckpt = run_dir / "checkpoint.pt"
        if ckpt.exists() and load_checkpoint(ckpt)["step"] >= 10:
            break
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = load_checkpoint(run_dir / "checkpoint.pt")["step"]
    assert 10 <= killed_at < 60 and not (run_dir / "result.json").exists()
    torchrun(config, run_dir)
    same_history(load_result(run_dir)["history"], reference.history)


AGREE = """
import json, sys
import torch.distributed as dist
from psattn.training.distributed import agree_on_stop, setup_distributed, teardown_distributed
ctx = setup_distributed("cpu")
sent = []
def all_reduce(tensor, **kwargs):  # what goes over the process group
    sent.append(tensor.device.type)
    return reduce(tensor, **kwargs)
reduce, dist.all_reduce = dist.all_reduce, all_reduce
import torch
torch.set_default_device("meta")  # another default device (a GPU's): the agreement stays on the host
answers = [agree_on_stop(*case[ctx.rank], ctx) for case in json.loads(sys.argv[2])]
open(f"{sys.argv[1]}/rank{ctx.rank}", "w").write(json.dumps([answers, sent]))
teardown_distributed()
"""

# each case: (timed_out, signum) on rank 0, then on rank 1
CASES = [[[True, None], [False, None]], [[False, None], [False, 15]], [[False, 2], [True, 15]], [[False, None]] * 2]


@pytest.mark.slow
def test_every_rank_stops_when_one_rank_ran_out_of_time_or_saw_a_signal(tmp_path):
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), str(tmp_path), json.dumps(CASES)]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = [[True, None], [False, 15], [True, 15], [False, None]]
    for rank in (0, 1):
        answers, sent = json.loads((tmp_path / f"rank{rank}").read_text())
        assert answers == expected
        assert sent == ["cpu"] * len(CASES)  # one host all-reduce a step: no wait for a device's queue


def test_on_cuda_the_process_group_carries_host_tensors_over_gloo(monkeypatch):
    import torch.distributed as dist

    from psattn.training import distributed
    asked = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend: asked.append(backend))
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    assert distributed.setup_distributed("cuda").rank == 1
    distributed.setup_distributed("cpu")
    assert asked == ["cpu:gloo,cuda:nccl", "gloo"]


def test_batch_must_split_evenly(monkeypatch):
    from psattn.tasks import TaskBatch
    from psattn.training.distributed import Distributed, shard
    batch = TaskBatch(torch.zeros(6, 4, dtype=torch.long), torch.zeros(6, 4, dtype=torch.long))
    assert len(shard(batch, Distributed(rank=1, world_size=2))) == 3
    with pytest.raises(ValueError, match="divisible"):
        shard(batch, Distributed(rank=0, world_size=4))


ONE_RANK_SIGNALLED = """
import json, os, signal, sys
sys.path.insert(0, sys.argv[3])
from helpers import tiny_config
from psattn.training.checkpoint import load_checkpoint
from psattn.training.distributed import setup_distributed
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import train
ctx = setup_distributed("cpu")
def on_step(step, _loss):  # the signal reaches rank 1 only, after its step 3
    if ctx.rank == 1 and step == 3:
        os.kill(os.getpid(), signal.SIGINT)
try:
    train(tiny_config(steps=40), sys.argv[1], on_step=on_step)
except TrainingInterrupted as err:
    open(f"{sys.argv[2]}/rank{ctx.rank}", "w").write(json.dumps([err.step, err.signum]))
"""


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_every_rank_at_one_step(tmp_path):
    script = tmp_path / "one_rank.py"
    script.write_text(ONE_RANK_SIGNALLED)
    tests = os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), str(tmp_path / "run"), str(tmp_path), tests]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=120)  # before: rank 1 waited in the checkpoint's barrier, rank 0 trained on
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads((tmp_path / f"rank{r}").read_text()) for r in (0, 1)] == [[3, signal.SIGINT]] * 2
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 3


@pytest.mark.slow
def test_ddp_into_a_run_directory_another_process_holds_is_refused_at_once(tmp_path):
    from psattn.training.lock import run_lock

    run_dir = tmp_path / "ddp"
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps(tiny_config(steps=100000).to_dict()))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "psattn", "train", "--config", str(path), "--run-dir", str(run_dir)]
    with run_lock(run_dir):  # rank 0 is refused; before, it waited in the teardown's barrier and rank 1 trained on
        done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                              timeout=120)
    assert done.returncode != 0 and "being trained by another process" in done.stderr, done.stderr[-3000:]


def test_train_device_is_auto_by_default_and_auto_is_cuda_where_there_is_one(monkeypatch):
    """docs/scale-out.md says the device is chosen automatically (train.device=auto): neither the default nor what
    auto resolves to had a test."""
    from psattn.training.config import TrainConfig
    from psattn.training.distributed import resolve_device

    assert TrainConfig().device == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda:0") and resolve_device("auto", 1) == torch.device("cuda:1")
