"""The paper's central claim at CPU scale: one layer learns induction with the key-side shear and
not without it, from the same seed and step budget."""

import pytest

from psattn.experiments.configs import small_induction_config
from psattn.training.trainer import train

BUDGET = 800  # PSA needs about 600 steps


@pytest.mark.slow
def test_one_layer_key_only_psa_learns_induction_and_the_baseline_does_not():
    psa = train(small_induction_config("key_only", 1.0, steps=BUDGET, seed=0))
    assert psa.best_accuracy >= 0.9, psa.history
    baseline = train(small_induction_config("baseline", 0.0, steps=BUDGET, seed=0, early_stop=False))
    assert baseline.final_accuracy < 0.3, baseline.history
