import os

import pytest
from filelock import FileLock

from psattn.experiments.configs import small_config
from psattn.training import train


@pytest.fixture(scope="session")
def induction_run(tmp_path_factory):
    """A one-layer key-only model trained on induction until it has learned it (300 steps), shared by
    the tests that export a model whose accuracy must survive. Trained once per test session: under
    pytest-xdist the first worker that needs it trains it, under a file lock, and the others read it."""
    base = tmp_path_factory.getbasetemp()
    run = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "induction-run"  # parent: the workers'
    with FileLock(f"{run}.lock"):
        if not (run / "result.json").exists():
            train(small_config("key_only", 1.0, steps=300, early_stop=False), run)
    return run
