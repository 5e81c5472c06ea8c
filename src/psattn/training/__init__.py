"""Training runs: a typed config (model + task + train) and the trainer."""

from .config import RunConfig, TrainConfig, apply_overrides
from .signals import TrainingInterrupted
from .trainer import RunResult, TrainingDiverged, load_trained, train

__all__ = ["RunConfig", "RunResult", "TrainConfig", "TrainingDiverged", "TrainingInterrupted", "apply_overrides", "load_trained", "train"]
