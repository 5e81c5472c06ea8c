"""Training throughput of ``train`` against a bare PyTorch loop on the
same model, data and optimiser, and of ``train`` under ``train.compile`` against itself eager,
measured interleaved in one process.

Each is timed from the end of its first optimiser step to the end of its last, through the
``on_step`` callback, so set-up, compilation (at the first step) and the trainer's final evaluation
are not counted: the ratio is one of training steps per second.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch

from psattn.tasks.batch import IGNORE_INDEX
from psattn.tasks.registry import sample_task
from psattn.training.config import RunConfig
from psattn.training.loss import lm_loss
from psattn.training.run_dir import build_model
from psattn.training.schedule import build_optimizer
from psattn.training.seeds import step_generator
from psattn.training.trainer import train


def bare_loop(config: RunConfig, steps: int, on_step: Callable[[int, float | None], None] | None = None) -> None:
    """The minimal loop with the same recipe: sample, forward (logits at the scored positions, as the
    trainer does), loss, backward, gradient clipping, AdamW step, learning-rate schedule. ``on_step`` is called
    as ``train`` calls it: ``on_step(step, loss)``, loss None for a batch that scored no position."""
    t = config.train
    model = build_model(config).train()
    optimizer, schedule = build_optimizer(model, t)
    for step in range(steps):
        batch = sample_task(config.task, t.batch_size, step_generator(t.seed, step))
        keep = batch.targets != IGNORE_INDEX
        loss = lm_loss(model(batch.inputs, scored=keep), batch.targets[keep])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        optimizer.step()
        schedule.step()
        if on_step is not None:
            on_step(step + 1, loss.item() if keep.any() else None)  # the mean over no position is NaN


def trainer_vs_bare_loop(config: RunConfig, steps: int = 30, repeats: int = 3) -> dict[str, float]:
    """Steps per second of both (median over interleaved repeats) and their ratio."""
    if steps < 2:
        raise ValueError("time at least 2 steps")
    timed = _timed(config, steps)
    bare_loop(timed, 3)  # warm up allocator and kernels before timing anything
    times = _interleaved({"trainer": lambda mark: train(timed, on_step=mark),
                          "bare": lambda mark: bare_loop(timed, steps, mark)}, steps, repeats)
    trainer_sps, bare_sps = 1 / statistics.median(times["trainer"]), 1 / statistics.median(times["bare"])
    return {"trainer_steps_per_s": trainer_sps, "bare_steps_per_s": bare_sps, "ratio": trainer_sps / bare_sps}


def compiled_vs_eager(config: RunConfig, steps: int = 30, repeats: int = 3) -> dict[str, float]:
    """Steps per second of ``train`` eagerly and under ``train.compile=true`` (median over interleaved
    repeats; the compiled runs' first step, which compiles, is not timed) and their ratio, compiled over eager."""
    if steps < 2:
        raise ValueError("time at least 2 steps")
    timed = _timed(config, steps)
    compiled = dataclasses.replace(timed, train=dataclasses.replace(timed.train, compile=True))
    times = _interleaved({"eager": lambda mark: train(timed, on_step=mark),
                          "compiled": lambda mark: train(compiled, on_step=mark)}, steps, repeats)
    eager_sps, compiled_sps = 1 / statistics.median(times["eager"]), 1 / statistics.median(times["compiled"])
    return {"eager_steps_per_s": eager_sps, "compiled_steps_per_s": compiled_sps, "ratio": compiled_sps / eager_sps}


def _timed(config: RunConfig, steps: int) -> RunConfig:
    """``config`` trained for ``steps`` steps, evaluated and checkpointed once at the end, never stopped early;
    torch's threads set to its ``train.threads`` (as ``train`` sets them), for what runs before it."""
    if config.train.threads is not None:
        torch.set_num_threads(config.train.threads)
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, steps=steps, eval_every=steps, checkpoint_every=steps, early_stop=False))


def _interleaved(runs: dict[str, Callable[[Callable[[int, float | None], None]], object]], steps: int,
                 repeats: int) -> dict[str, list[float]]:
    """Seconds per step of each ``run(on_step)``, from its first step's end to its last's, in ``repeats``
    rounds that alternate the runs' order."""
    marks: list[float] = []

    def mark(step: int, loss: float | None) -> None:
        if step in (1, steps):
            marks.append(time.perf_counter())

    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(repeats):
        for name, run in (list(runs.items()) if i % 2 == 0 else list(runs.items())[::-1]):
            marks.clear()
            run(mark)
            times[name].append((marks[1] - marks[0]) / (steps - 1))
    return times
