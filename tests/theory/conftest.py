"""Fixtures for the theory tests."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """One intra-op thread for the whole session (module-scoped fixtures included): the small
    tensors here are faster that way, and a shared two-core machine is not oversubscribed."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
