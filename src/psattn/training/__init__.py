"""Training runs: a typed config (model + task + train) and the trainer."""

from psattn.training.config import RunConfig, TrainConfig, apply_overrides
from psattn.training.run_dir import RunResult, load_result, load_trained, run_tokenizer
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import TrainingDiverged, train

__all__ = ["RunConfig", "RunResult", "TrainConfig", "TrainingDiverged", "TrainingInterrupted", "apply_overrides",
           "load_result", "load_trained", "run_tokenizer", "train"]
