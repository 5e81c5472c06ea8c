import pytest

from psattn.experiments.configs import small_config
from psattn.training import train


@pytest.fixture(scope="session")
def induction_run(tmp_path_factory):
    """A one-layer key-only model trained on induction until it has learned it (300 steps), trained once
    per test process and shared by the tests that export a model whose accuracy must survive."""
    run = tmp_path_factory.mktemp("induction-run")
    train(small_config("key_only", 1.0, steps=300, early_stop=False), run)
    return run
