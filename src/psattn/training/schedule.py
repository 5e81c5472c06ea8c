"""The optimiser of a run and its learning-rate schedule: AdamW with weight decay on matrices only,
linear warm-up then cosine decay, and the continuation of a run extended to more steps."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch


def lr_factor(train, extensions: Sequence[dict[str, Any]] = ()) -> Callable[[int], float]:
    """The learning-rate multiplier of each step: linear warm-up, then cosine decay to ``min_lr_ratio``
    at ``train.steps``. A run extended to more steps (``extensions``, recorded in its meta.json) keeps
    its schedule up to the step it was extended at, then decays by a new cosine from the factor it had
    there to ``min_lr_ratio`` at its new last step: nothing it already trained changes, and a finished
    run continues at its final learning rate."""
    horizon = extensions[0]["steps_before"] if extensions else train.steps

    def base(step: int) -> float:
        if step < train.warmup_steps:
            return (step + 1) / train.warmup_steps
        progress = (step - train.warmup_steps) / max(1, horizon - train.warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return train.min_lr_ratio + (1.0 - train.min_lr_ratio) * cosine

    def factor(step: int) -> float:
        for extension in reversed(extensions):
            at, end, start = extension["at_step"], extension["steps_after"], extension["lr_factor_at"]
            if step >= at:
                progress = (step - at) / max(1, end - at)
                return train.min_lr_ratio + (start - train.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return base(step)

    return factor


def fused_on(parameters: Iterable[torch.Tensor]) -> bool:
    """Whether AdamW runs fused: where every parameter is a floating-point tensor on a CUDA device, one
    ``_fused_adamw_`` dispatch a parameter group instead of foreach's dozen, for steps bound by the host's
    kernel launches. Everywhere else (the CPU) AdamW keeps torch's default, the for-loop implementation,
    so CPU runs reproduce their saved results bit for bit (``build_optimizer``: a resumed run keeps the
    implementation of its checkpoint)."""
    parameters = list(parameters)
    return bool(parameters) and all(p.device.type == "cuda" and p.is_floating_point() for p in parameters)


def build_optimizer(model: torch.nn.Module, train, extensions: Sequence[dict[str, Any]] = ()
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with weight decay on matrices only, fused on a GPU (``fused_on``), and the schedule of
    ``lr_factor``. A checkpoint's optimiser state carries its implementation: resumed, a run keeps the one
    it was saved with (a CPU checkpoint resumed on a GPU runs foreach there, not fused)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train.lr, betas=train.betas, fused=fused_on(model.parameters()) or None,
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(train, extensions))
