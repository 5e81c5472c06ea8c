"""Helpers shared by the task tests."""

import torch
from hypothesis import assume

from psattn.tasks import sample_task


def seeded_batch(config, seed=0, batch_size=64, split="train"):
    """A batch of any registered task, drawn from a generator seeded with ``seed``."""
    return sample_task(config, batch_size, torch.Generator().manual_seed(seed), split)


def check_random_config(config_cls, args, check_row, seed):
    """Property-test body: build ``config_cls(*args)`` (skipping invalid combinations) and check every
    row of a small seeded batch with ``check_row(config, row, labels)``."""
    try:
        config = config_cls(*args)
    except ValueError:
        assume(False)
    batch = seeded_batch(config, seed=seed, batch_size=8)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        check_row(config, row, labels)
