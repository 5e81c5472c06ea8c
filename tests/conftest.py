import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """One intra-op thread for the whole suite: the tensors are small, the machine has two cores
    and tests run next to worker processes, so more threads only oversubscribe it."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
