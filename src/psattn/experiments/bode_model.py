"""The trained model whose query and key streams the theory section measures against the closed-form
transfer function (arXiv 2609.32319): a saved run, or a short symmetric-PSA induction run trained here.

The post-RoPE shear is a fixed linear time-invariant filter of the stream, so the measured response
is the closed form for any weights (a random-initialised model gives the same r); the measurement
checks the implementation of the filter, and training does not change it."""

from __future__ import annotations

from pathlib import Path

from psattn.experiments.configs import small_induction_config
from psattn.models import DecoderLM
from psattn.theory.report import BODE_GAMMA
from psattn.training.run_dir import load_trained
from psattn.training.trainer import train_again


def bode_model(out_dir: str | Path, quick: bool = True, run_dir: str | Path | None = None,
               seed: int = 0) -> tuple[DecoderLM, str]:
    """(model, label): the model of ``run_dir``, or else a symmetric gamma = BODE_GAMMA layer trained
    for 100 (``quick``) or 600 steps into ``out_dir/bode_run`` (resumed, or reused when finished, where that
    folder holds the same run)."""
    if run_dir is not None:
        return load_trained(run_dir), f"trained run {Path(run_dir).name}"
    config = small_induction_config("symmetric", BODE_GAMMA, steps=100 if quick else 600, seed=seed, early_stop=False)
    target = Path(out_dir) / "bode_run"
    # the same command again resumes a run a stop cut short (as the stop's message says) and reuses a finished one;
    # a run of another size or seed there is trained anew
    result = train_again(config, target)
    return load_trained(target), (f"symmetric γ={BODE_GAMMA:g}, trained {result.steps} steps "
                                  f"(held-out induction accuracy {result.final_accuracy:.2f})")
