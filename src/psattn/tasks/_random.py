"""Batched random subsets and shuffles drawn from a ``torch.Generator``."""

from __future__ import annotations

import torch
from torch import Tensor


def random_subsets(rows: int, pool: int, size: int, generator: torch.Generator) -> Tensor:
    """(rows, size) int64: per row, ``size`` distinct indices of ``range(pool)`` in random order."""
    scores = torch.rand(rows, pool, generator=generator, device=generator.device)  # (rows, pool)
    return scores.topk(size, dim=1).indices


def shuffle_rows(x: Tensor, generator: torch.Generator) -> Tensor:
    """``x`` (rows, n, ...) with each row's first axis independently permuted."""
    order = random_subsets(x.shape[0], x.shape[1], x.shape[1], generator)  # (rows, n)
    index = order.view(*order.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)
