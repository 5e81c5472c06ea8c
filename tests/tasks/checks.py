"""Helpers shared by the task tests."""

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from psattn.tasks import sample_task


def seeded_batch(config, seed=0, batch_size=64, split="train"):
    """A batch of any registered task, drawn from a generator seeded with ``seed``."""
    return sample_task(config, batch_size, torch.Generator().manual_seed(seed), split)


def config_property(config_cls, check_row, max_examples=30, **fields):
    """A Hypothesis test: build ``config_cls`` from values drawn from the ``fields`` strategies (skipping
    invalid combinations) and check every row of a small seeded batch with ``check_row(config, row, labels)``."""

    @settings(max_examples=max_examples, deadline=None, derandomize=True)
    @given(seed=st.integers(0, 2**31), **fields)
    def test(seed, **values):
        try:
            config = config_cls(**values)
        except ValueError:
            assume(False)
        batch = seeded_batch(config, seed=seed, batch_size=8)
        for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
            check_row(config, row, labels)

    return test


def bad_configs_raise(config_cls, cases):
    """A test that ``config_cls(**kwargs)`` raises a ValueError matching ``message``, for each
    ``(kwargs, message)`` of ``cases``."""

    @pytest.mark.parametrize(("kwargs", "message"), cases)
    def test(kwargs, message):
        with pytest.raises(ValueError, match=message):
            config_cls(**kwargs)

    return test
