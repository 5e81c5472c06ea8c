"""Fixtures for the task tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread():
    """Run each test on one intra-op thread: the samplers' small ops are faster that way
    on a shared two-core machine, and results do not depend on the thread count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
