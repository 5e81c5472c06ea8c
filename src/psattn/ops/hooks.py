"""Named identity points at interesting tensors, the one table of them, and context managers that
record (``capture``) or replace (``patch``) what passes through them.

A ``HookPoint`` returns its input unchanged; PyTorch forward hooks registered on it see the
tensor, and one that returns a value replaces it downstream (TransformerLens's semantics: activation
patching and ablation); the modules compute what follows a hook point from what it returns.
Modules check ``HookPoint.active`` before computing something only a listener needs
(the four score terms, the attention pattern), so an unhooked forward pays nothing.

``HOOKS`` declares every hook point of a PSA attention layer once: its name, its shape and which
positions it covers. psattn's own layer (``psattn.models.attention``) and a transformers model
patched by ``psattn.integrations.hf.apply_psa`` both add exactly these, with these meanings. T is
the number of new positions of the forward call (the chunk), S the number of keys attended to
(past ones from a cache included).

TransformerLens names the rotated queries and keys ``hook_rot_q`` / ``hook_rot_k`` and the
unrotated ones ``hook_q`` / ``hook_k``; psattn's ``hook_q`` / ``hook_k`` are the rotated ones (where
the paper's shear acts), i.e. TransformerLens's ``hook_rot_q`` / ``hook_rot_k``, and the unrotated
streams have no hook point.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor, nn


class HookPoint(nn.Module):
    """A named identity on a tensor; hooks registered on it read it, and a hook's return value replaces it."""
    def forward(self, x: Any) -> Any:
        """``x`` itself (the hooks see and may replace it)."""
        return x

    @property
    def active(self) -> bool:
        """Whether a hook is registered on this point."""
        return bool(self._forward_hooks)

    def read(self, x: Any) -> None:
        """Pass ``x`` through a read-only point (``hook_score_terms``): a ValueError when a hook returns a
        replacement, which nothing after the point would use."""
        if self(x) is not x:
            raise ValueError("hook_score_terms is read-only: its hooks may only read (return None); the scores attention "
                             "uses are q̂ᵀk̂, so patch hook_q_sheared or hook_k_sheared instead")


@dataclass(frozen=True)
class Hook:
    """One hook point of a PSA attention layer: its attribute name, its shape, the positions it
    covers (``"chunk"``: the call's T new positions; ``"chunk x all"``: those queries against all S
    keys, past included; ``"chunk x chunk"``: the new queries against the new keys) and its meaning."""

    name: str
    shape: str
    positions: Literal["chunk", "chunk x all", "chunk x chunk"]
    meaning: str


#: every hook point of a PSA attention layer, in the order a forward pass reaches them
HOOKS: tuple[Hook, ...] = (
    Hook("hook_q", "(B, Hq, T, D)", "chunk", "raw post-RoPE queries, before the shear (TransformerLens: hook_rot_q); "
         "a replacement is sheared and is what a cache holds as the last raw query"),
    Hook("hook_k", "(B, Hkv, T, D)", "chunk", "raw post-RoPE keys, before the shear (TransformerLens: hook_rot_k); "
         "a replacement is sheared and is what a cache holds as the last raw key"),
    Hook("hook_q_sheared", "(B, Hq, T, D)", "chunk", "the sheared queries q̂ that enter attention"),
    Hook("hook_k_sheared", "(B, Hkv, T, D)", "chunk", "the sheared keys k̂ of the new positions, before a cache "
         "stores them: a replacement is what attention uses and the cache keeps"),
    Hook("hook_v", "(B, Hkv, T, Dv)", "chunk", "the values of the new positions, before a cache stores them"),
    Hook("hook_score_terms", "ScoreTerms of (B, Hq, T, T)", "chunk x chunk", "T1..T4, unscaled, whose sum is q̂ᵀk̂; "
         "read-only (patch hook_q_sheared / hook_k_sheared instead), and only without a cache"),
    Hook("hook_pattern", "(B, Hq, T, S)", "chunk x all", "the attention pattern; when hooked, the layer attends "
         "with this explicit (and possibly replaced) pattern"),
    Hook("hook_out", "(B, T, Hq * Dv)", "chunk", "the attention output, before the output projection"),
)
HOOK_NAMES: tuple[str, ...] = tuple(hook.name for hook in HOOKS)


def active(module: nn.Module, *names: str) -> bool:
    """Whether a hook is registered on any of ``module``'s hook points ``names`` (``"hook_pattern"``, ...),
    or on any of its hook points at all when no name is given."""
    points = [getattr(module, name, None) for name in names] if names else list(module.children())
    return any(isinstance(point, HookPoint) and point.active for point in points)


def add_hook_points(module: nn.Module) -> None:
    """Give ``module`` a ``HookPoint`` for every entry of ``HOOKS`` (``module.hook_q``, ...)."""
    for name in HOOK_NAMES:
        setattr(module, name, HookPoint())


def _matching(model: nn.Module, patterns) -> Iterator[tuple[str, HookPoint]]:
    """The hook points of ``model`` whose qualified names match any of the shell-style ``patterns``
    (all of them when none is given)."""
    for name, module in model.named_modules():
        if isinstance(module, HookPoint) and (not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)):
            yield name, module


@contextmanager
def capture(model: nn.Module, *patterns: str) -> Iterator[dict[str, Any]]:
    """Record the values passing through hook points whose qualified names match any of the
    shell-style ``patterns`` (all hook points when none is given; a ValueError when one matches none)::

        with capture(model, "*.hook_pattern") as seen:
            model(tokens)
        seen["blocks.0.attn.hook_pattern"]  # (B, H, T, T)
    """
    not_names = [p for p in patterns if not isinstance(p, str)]
    if not_names:  # fnmatch raised "expected str, bytes or os.PathLike object"
        raise TypeError(f"capture's patterns must be hook point names or shell-style patterns, got {not_names!r}")
    missing = [p for p in patterns if next(_matching(model, [p]), None) is None]
    if missing:  # as patch refuses them: a misspelt name among several recorded nothing for it, silently
        raise ValueError(f"no hook point matches {missing}")
    seen: dict[str, Any] = {}
    handles = [point.register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, out))
               for name, point in _matching(model, patterns)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def _replacement(name: str, value: Any, new: Any) -> Any:
    """``new``, what a hook returned for ``value`` at hook point ``name``: None (no change) or, for a tensor, a
    tensor of its shape; a TypeError for what is not a tensor, a ValueError for a tensor of another shape."""
    if new is None or not isinstance(value, Tensor):
        return new
    if not isinstance(new, Tensor) or new.shape != value.shape:
        error = ValueError if isinstance(new, Tensor) else TypeError
        got = f"shape {tuple(new.shape)}" if isinstance(new, Tensor) else type(new).__name__
        raise error(f"the hook at {name} returned {got}; a replacement must be a tensor of the shape of the "
                    f"value it replaces, {tuple(value.shape)} (or None to keep it)")
    return new


@contextmanager
def patch(model: nn.Module, hooks: Mapping[str, Callable[[Any], Any]]) -> Iterator[nn.Module]:
    """Run ``model`` with hook functions attached, and always detach them on exit (TransformerLens's
    ``run_with_hooks``). ``hooks`` maps a hook point's qualified name, or a shell-style pattern of
    names, to ``fn(x)``, which returns the replacement of the value x passing through, or None to
    leave it as it is::

        with patch(model, {"blocks.0.attn.hook_v": torch.zeros_like}):
            logits = model(tokens)  # layer 0 attends to zero values

    Raises a ValueError (attaching nothing) when a name or pattern matches no hook point or a function is not
    callable, and a ValueError when a replacement is not a tensor of the shape of the value it replaces
    (attention would read past a shorter one: CPU SDPA does not check the lengths of k and v).
    """
    if not isinstance(hooks, Mapping):
        raise TypeError(f"hooks must map hook point names (or patterns) to functions, got {type(hooks).__name__}")
    matched = {pattern: list(_matching(model, [pattern])) for pattern in hooks}
    missing = [pattern for pattern, points in matched.items() if not points]
    if missing:
        raise ValueError(f"no hook point matches {missing}")
    uncallable = [pattern for pattern, fn in hooks.items() if not callable(fn)]
    if uncallable:
        raise ValueError(f"the hooks for {uncallable} are not functions")
    handles = [point.register_forward_hook(lambda _m, _i, out, fn=fn, name=name: _replacement(name, out, fn(out)))
               for pattern, fn in hooks.items() for name, point in matched[pattern]]
    try:
        yield model
    finally:
        for h in handles:
            h.remove()
