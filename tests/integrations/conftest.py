"""Fixtures for the transformers integration tests."""

import pytest
import torch

from integrations.hf_tiny import VOCAB


@pytest.fixture
def prompt():
    torch.manual_seed(7)
    return torch.randint(1, VOCAB, (1, 9))


def pytest_collection_modifyitems(config, items):
    """The full model-type matrix runs only when asked for with ``-m hf_matrix``."""
    if "hf_matrix" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="one of the full transformers model-type matrix: run it with -m hf_matrix")
    for item in items:
        if item.get_closest_marker("hf_matrix") is not None:
            item.add_marker(skip)
