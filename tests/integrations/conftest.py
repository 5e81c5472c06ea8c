"""Fixtures for the transformers integration tests."""

import pytest
import torch

from integrations.hf_tiny import VOCAB


@pytest.fixture(autouse=True)
def _single_thread():
    """One intra-op thread: the machine is shared, and these tiny models do not gain from more."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def prompt():
    torch.manual_seed(7)
    return torch.randint(1, VOCAB, (1, 9))
