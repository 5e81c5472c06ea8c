"""A batch of a synthetic task: token rows and aligned labels.

Labels are already aligned with the inputs: the model's logits at position t predict
``targets[t]``, so the caller never shifts anything. Unscored positions hold
``IGNORE_INDEX`` (the default ``ignore_index`` of ``torch.nn.functional.cross_entropy``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

IGNORE_INDEX = -100


def check_rows(inputs: Tensor, name: str = "inputs") -> None:
    """A TypeError unless ``inputs`` is a tensor of int64 or int32 token ids, a ValueError unless it is (B, T);
    the message calls it ``name``."""
    if not isinstance(inputs, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids (B, T), got {type(inputs).__name__}")
    if inputs.dim() != 2:
        raise ValueError(f"{name} must be (B, T), got shape {tuple(inputs.shape)}")
    if inputs.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor of token ids, got {inputs.dtype}")


@dataclass(frozen=True)
class TaskBatch:
    """Token rows ``inputs`` (B, T) int64 and labels ``targets`` (B, T) int64."""

    inputs: Tensor
    targets: Tensor

    def __post_init__(self) -> None:
        for name in ("inputs", "targets"):
            if not isinstance(getattr(self, name), Tensor):
                raise TypeError(f"{name} must be a torch.Tensor (B, T) of int64, got {type(getattr(self, name)).__name__}")
        if self.inputs.device != self.targets.device:
            raise ValueError(f"inputs are on {self.inputs.device}, targets on {self.targets.device}: move both to one device")
        if self.inputs.dim() != 2:
            raise ValueError(f"inputs must be (B, T), got shape {tuple(self.inputs.shape)}")
        if self.targets.shape != self.inputs.shape:
            raise ValueError(
                f"targets shape {tuple(self.targets.shape)} != inputs shape {tuple(self.inputs.shape)}"
            )
        for name in ("inputs", "targets"):
            dtype = getattr(self, name).dtype
            if dtype != torch.int64:
                raise ValueError(f"{name} must be int64, got {dtype}")

    @property
    def scored(self) -> Tensor:
        """(B, T) bool: positions that carry a label."""
        return self.targets != IGNORE_INDEX

    def to(self, device: torch.device | str) -> TaskBatch:
        """The same batch on ``device``."""
        return TaskBatch(self.inputs.to(device), self.targets.to(device))

    def __len__(self) -> int:
        return self.inputs.shape[0]


def accuracy(logits: Tensor, batch: TaskBatch) -> float:
    """Fraction of scored positions where ``argmax(logits)`` equals the target.

    ``logits`` is (B, T, V), aligned with ``batch.inputs`` (no shift). Logits of another shape, and a batch
    with no scored position, are a ValueError. A batch that is not a ``TaskBatch``, and logits that are not a
    tensor, are a TypeError.
    """
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"accuracy scores against a TaskBatch, got {type(batch).__name__}")
    if not isinstance(logits, Tensor):  # an AttributeError on .dim
        raise TypeError(f"logits must be a torch.Tensor (B, T, V), got {type(logits).__name__}")
    if logits.dim() != 3 or logits.shape[:2] != batch.targets.shape:  # (B, T) logits raised an IndexError
        rows, length = batch.targets.shape
        # "logits shape (2, 4) does not match targets (2, 4)" for (B, T) logits: the shapes it named looked alike
        raise ValueError(f"logits must be (B, T, V) = ({rows}, {length}, V) for this batch, got shape {tuple(logits.shape)}")
    mask = batch.scored.to(logits.device)
    if not bool(mask.any()):
        raise ValueError("batch has no scored positions")
    predicted = logits.argmax(dim=-1)  # (B, T)
    correct = predicted[mask] == batch.targets.to(logits.device)[mask]
    return correct.float().mean().item()
