"""A training batch on its way to the device: indexed on the host, copied without a wait.

A batch is sampled on the host. Its scored positions are indexed there (``psattn.models.scored``), where
that costs nothing, and on CUDA every tensor is copied from pinned memory, which lets the host go on
queueing the step while the copy runs; a copy from pageable memory waits for the device to finish the
work queued before it. So a step's forward, backward and optimiser update read nothing back, and a step
bound by the host overlaps the device's work instead of adding to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from psattn.models.scored import Scored
from psattn.tasks.batch import TaskBatch


@dataclass(frozen=True)
class DeviceBatch:
    """A ``TaskBatch`` on the model's device, with its scored positions indexed."""

    inputs: Tensor  # (B, T) int64
    targets: Tensor  # (B, T) int64, IGNORE_INDEX where unscored
    scored: Scored | None  # the positions with a label (None: not indexed, for a step that scores every logit)

    @property
    def scored_targets(self) -> Tensor:
        """(N,) the labels of the scored positions, in row-major order."""
        if self.scored is None:
            raise ValueError("this batch was moved without its scored positions (to_device(..., indexed=False))")
        return self.scored.take(self.targets)  # (B, T) -> (N,)


def to_device(batch: TaskBatch, device: torch.device, indexed: bool = True) -> DeviceBatch:
    """``batch`` (on the host) on ``device``, with its scored positions indexed on the host unless ``indexed``
    is false (a compiled step on a GPU computes every logit); on CUDA copied from pinned memory without waiting
    for the device."""
    scored = Scored(*(copied(t, device) for t in Scored.of(batch.scored).tensors())) if indexed else None
    return DeviceBatch(copied(batch.inputs, device), copied(batch.targets, device), scored)


def copied(x: Tensor, device: torch.device) -> Tensor:
    """``x`` on ``device``: from the host to CUDA through pinned memory, queued without a wait."""
    if device.type == "cuda" and x.device.type == "cpu":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)
