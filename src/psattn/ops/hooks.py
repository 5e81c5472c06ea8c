"""Named identity points at interesting tensors, and a context manager that records them.

A ``HookPoint`` returns its input unchanged; PyTorch forward hooks registered on it see the
tensor, and one that returns a value replaces it downstream (TransformerLens's semantics: activation
patching and ablation); the modules compute what follows a hook point from what it returns.
Modules check ``HookPoint.active`` before computing something only a listener needs
(the four score terms, the attention pattern), so an unhooked forward pays nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn


class HookPoint(nn.Module):
    """A named identity on a tensor; hooks registered on it read it, and a hook's return value replaces it."""
    def forward(self, x: Any) -> Any:
        """``x`` itself (the hooks see and may replace it)."""
        return x

    @property
    def active(self) -> bool:
        return bool(self._forward_hooks)


@contextmanager
def capture(model: nn.Module, *patterns: str) -> Iterator[dict[str, Any]]:
    """Record the values passing through hook points whose qualified names match any of the
    shell-style ``patterns`` (all hook points when none is given)::

        with capture(model, "*.hook_pattern") as seen:
            model(tokens)
        seen["blocks.0.attn.hook_pattern"]  # (B, H, T, T)
    """
    seen: dict[str, Any] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, HookPoint) and (not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)):
            handles.append(module.register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, out)))
    if patterns and not handles:
        raise ValueError(f"no hook point matches {patterns}")
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
