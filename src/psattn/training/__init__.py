"""Training runs: a typed config (model + task + train) and the trainer.

The names below are imported on first use (PEP 562), as ``psattn``'s are, so that the command line reads
``psattn.training.signals`` without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psattn.lazy import lazy_names

if TYPE_CHECKING:
    from psattn.training.config import RunConfig, TrainConfig, apply_overrides
    from psattn.training.run_dir import RunResult, load_result, load_trained, run_tokenizer
    from psattn.training.signals import TrainingDiverged, TrainingInterrupted
    from psattn.training.trainer import train

#: each name below -> the module that defines it
_NAMES = {
    **dict.fromkeys(("RunConfig", "TrainConfig", "apply_overrides"), "psattn.training.config"),
    **dict.fromkeys(("RunResult", "load_result", "load_trained", "run_tokenizer"), "psattn.training.run_dir"),
    **dict.fromkeys(("TrainingDiverged", "TrainingInterrupted"), "psattn.training.signals"),
    "train": "psattn.training.trainer",
}

__all__ = ["RunConfig", "RunResult", "TrainConfig", "TrainingDiverged", "TrainingInterrupted", "apply_overrides",
           "load_result", "load_trained", "run_tokenizer", "train"]


__getattr__, __dir__ = lazy_names(__name__, _NAMES)
