"""Where a model lives. Every tensor psattn builds for a model is built on the model's device (or on
the device of the generator that draws it, then moved), never on PyTorch's default device: a model on
a GPU must never meet a tensor made on the CPU, and a caller's ``torch.set_default_device`` must not
change what psattn computes."""

from __future__ import annotations

import copy
from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (or buffer); the CPU for a model with neither."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def on_cpu(model: M) -> M:
    """``model`` itself when it is on the CPU, otherwise a copy of it moved there (exports trace and
    run their graphs on the CPU, whatever device the model trained on)."""
    if model_device(model).type == "cpu":
        return model
    return copy.deepcopy(model).cpu()
