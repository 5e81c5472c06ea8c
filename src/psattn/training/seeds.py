"""The named seed streams of a run. Every random draw of a run comes from its ``train.seed`` and a
stream of its own, seeded by (seed << 32) + the stream's offset (+ the step, for the per-step
streams), so a resumed run draws exactly what an uninterrupted one would, with no generator state
to save; ``train.seed`` < 2**32 keeps every seed within 64 bits."""

from __future__ import annotations

import torch

#: offsets of the streams under (seed << 32): the training batch of each step, dropout at each step,
#: the held-out batch, and the training rows static INT8 calibrates on
TRAIN_BATCH, DROPOUT, HELD_OUT, CALIBRATION = 0, 1 << 30, (1 << 31) - 1, (1 << 31) - 2


def stream_seed(seed: int, stream: int, step: int = 0) -> int:
    """The seed of ``stream`` (one of the offsets above) of run seed ``seed``, at ``step``."""
    return (seed << 32) + stream + step


def stream_generator(seed: int, stream: int) -> torch.Generator:
    """A generator of ``stream`` (one drawn once: ``HELD_OUT``, ``CALIBRATION``)."""
    return torch.Generator().manual_seed(stream_seed(seed, stream))


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator that draws the training batch of ``step``."""
    return torch.Generator().manual_seed(stream_seed(seed, TRAIN_BATCH, step))


def seed_step_randomness(seed: int, step: int) -> None:
    """Seed dropout's generators (CPU and every CUDA device) from (seed, step), so a resumed run
    draws what the uninterrupted run drew, on any device, with no generator state to save."""
    torch.manual_seed(stream_seed(seed, DROPOUT, step))
