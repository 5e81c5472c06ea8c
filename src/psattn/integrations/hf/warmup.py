"""Converting a trained model to PSA without a jump in its outputs: warm γ up from 0.

At γ = 0 the shear is the identity, so a freshly converted model computes exactly what the original
did; raising γ over the first steps of fine-tuning lets the weights follow. ``gamma_warmup`` is
the schedule for custom loops, ``GammaWarmup`` the same schedule as a ``transformers.Trainer``
callback::

    apply_psa(model, "key_only", gamma=0.0)
    trainer = Trainer(model, args, train_dataset=..., callbacks=[GammaWarmup(gamma=1.0, warmup_steps=200)])

Both work through wrappers such as PEFT's ``PeftModel`` (the shear has no parameters, so only the
adapters train).
"""

from __future__ import annotations

from torch import nn
from transformers import TrainerCallback

from psattn.integrations.hf.patch import set_psa_gamma
from psattn.ops.shear import check_gamma


def gamma_warmup(step: int, gamma: float, warmup_steps: int) -> float:
    """γ at optimizer step ``step``: linear from 0 at step 0 to ``gamma`` at ``warmup_steps``, then constant.
    ``gamma`` is checked as ``set_psa_gamma`` checks it (a finite real number within ±``MAX_GAMMA``), so
    ``GammaWarmup`` refuses one as it is built, not when training begins."""
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int):
        raise TypeError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
    gamma = check_gamma(gamma)  # what set_psa_gamma takes, checked before the first step
    if warmup_steps == 0:
        return gamma
    return gamma * min(max(step, 0) / warmup_steps, 1.0)


class GammaWarmup(TrainerCallback):
    """Set γ of every PSA layer from ``gamma_warmup`` before each optimizer step."""

    def __init__(self, gamma: float, warmup_steps: int):
        gamma_warmup(0, gamma, warmup_steps)  # validate now, not at the first step
        self.gamma, self.warmup_steps = check_gamma(gamma), warmup_steps

    def _set(self, model: nn.Module | None, step: int) -> None:
        if model is None:
            raise ValueError("GammaWarmup needs the model; use it as a transformers.Trainer callback")
        set_psa_gamma(model, gamma_warmup(step, self.gamma, self.warmup_steps))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Set γ for the step training starts at."""
        self._set(model, state.global_step)

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        """Set γ for the coming step."""
        self._set(model, state.global_step)
