"""Fixtures for the transformers integration tests."""

import pytest
import torch

from integrations.hf_tiny import VOCAB


@pytest.fixture
def prompt():
    torch.manual_seed(7)
    return torch.randint(1, VOCAB, (1, 9))
