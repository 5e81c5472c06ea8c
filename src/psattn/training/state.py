"""Everything a training checkpoint holds, in one object that saves and loads itself.

A run resumes exactly from its ``TrainState``: the model's weights, the optimiser's moments, the
learning-rate schedule's position, the step, the metrics rows so far, the step at which held-out
accuracy first reached the threshold, and the training seconds spent. Batches need no state: the
batch of a step is drawn from a generator seeded by (seed, step).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from psattn.training.checkpoint import load_checkpoint, load_model_weights, save_checkpoint


@dataclass
class TrainState:
    """What a checkpoint holds: model, optimiser, schedule, step, history, emergence step and seconds."""
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics rows, one per evaluation
    emergence_step: int | None = None  # first evaluated step at the accuracy threshold
    seconds: float = 0.0  # training wall seconds so far

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint: the modules' state dicts and the plain values, one key per field."""
        return {f.name: (value.state_dict() if hasattr(value, "state_dict") else value)
                for f in fields(self) for value in (getattr(self, f.name),)}

    def save(self, path: str | Path, binding: dict[str, Any] | None = None) -> None:
        """Write the checkpoint atomically (see ``save_checkpoint``), with the ``binding`` of its weights
        to their config and data (see ``psattn.training.binding``)."""
        save_checkpoint(path, {**self.state_dict(), **({"binding": binding} if binding is not None else {})})

    def load(self, path: str | Path, config_path: str | Path) -> None:
        """Continue from the checkpoint at ``path`` (written for the config at ``config_path``, named in
        the error when the weights do not fit the model)."""
        state = load_checkpoint(path, CHECKPOINT_KEYS)
        load_model_weights(self.model, state["model"], path, config_path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.step, self.history = state["step"], state["history"]
        self.emergence_step, self.seconds = state["emergence_step"], state["seconds"]


#: the keys of every training checkpoint
CHECKPOINT_KEYS = tuple(f.name for f in fields(TrainState))


def at_threshold_streak(history: list[dict[str, Any]], threshold: float) -> int:
    """How many of the latest evaluations in a row reached ``threshold`` held-out accuracy (the step-0
    row, taken before any training, never counts)."""
    streak = 0
    for row in reversed(history):
        if row["step"] == 0 or row["eval_accuracy"] < threshold:
            break
        streak += 1
    return streak
