"""The positions a forward pass is scored on, indexed once.

A model trained on a few scored positions (a task's answer tokens) computes their outputs alone
(``psattn.models.marked``). Indexing with a bool mask makes the host wait for the device, since how
many positions are marked decides the result's shape. ``Scored`` holds the indices and counts that
indexing needs, computed once where the mask is: on the host for a batch sampled there, so that a
training step on a GPU reads nothing back from it. The counts are the index tensors' shapes, which the
host knows without asking the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def check_scored(scored: Tensor, shape: tuple[int, ...]) -> None:
    """ValueError / TypeError unless ``scored`` is a bool tensor of ``shape`` (B, T): a mask of the positions
    to keep (0/1 integers would index rows instead)."""
    if not isinstance(scored, Tensor):
        raise TypeError(f"scored must be a torch.Tensor, a Scored or None, got {type(scored).__name__}")
    if tuple(scored.shape) != shape:
        raise ValueError(f"scored must be (B, T) = {shape}, got {tuple(scored.shape)}")
    if scored.dtype != torch.bool:
        raise TypeError(f"scored must be a bool tensor (True at the positions to score), got {scored.dtype}")


@dataclass(frozen=True)
class Scored:
    """The marked positions of a (B, T) mask, as the indices that select them: build it with ``Scored.of``.

    ``flat`` (N,) holds ``b * T + t`` of every marked position in row-major order; ``first`` (B, Tq) each
    row's marked positions first, in order (Tq: the most marked in a row), padded with unmarked ones;
    ``filled`` (B, Tq) which entries of ``first`` are marked; ``filled_flat`` (N,) ``b * Tq + j`` of those
    entries in row-major order, the same order as ``flat``.
    """

    mask: Tensor  # (B, T) bool
    flat: Tensor  # (N,) int64
    first: Tensor  # (B, Tq) int64
    filled: Tensor  # (B, Tq) bool
    filled_flat: Tensor  # (N,) int64

    def __post_init__(self) -> None:
        """Shapes, dtypes and devices (what the host knows); the indices' values are ``Scored.of``'s to get right."""
        for name, dtype in (("mask", torch.bool), ("flat", torch.int64), ("first", torch.int64), ("filled", torch.bool),
                            ("filled_flat", torch.int64)):
            value = getattr(self, name)
            if not isinstance(value, Tensor) or value.dtype != dtype:
                got = value.dtype if isinstance(value, Tensor) else type(value).__name__
                raise TypeError(f"a Scored's {name} must be a {dtype} tensor, got {got}: build it with Scored.of")
        check_scored(self.mask, tuple(self.mask.shape) if self.mask.dim() == 2 else (-1, -1))
        B = self.mask.shape[0]
        if self.first.dim() != 2 or self.first.shape[0] != B or self.filled.shape != self.first.shape:
            raise ValueError(f"a Scored of a ({B}, T) mask needs first and filled of one shape (B, Tq), "
                             f"got {tuple(self.first.shape)} and {tuple(self.filled.shape)}: build it with Scored.of")
        if self.flat.dim() != 1 or self.filled_flat.shape != self.flat.shape:
            raise ValueError(f"a Scored needs flat and filled_flat of one shape (N,), got {tuple(self.flat.shape)} "
                             f"and {tuple(self.filled_flat.shape)}: build it with Scored.of")
        if any(t.device != self.mask.device for t in (self.flat, self.first, self.filled, self.filled_flat)):
            raise ValueError(f"a Scored's tensors must be on one device, its mask's {self.mask.device}")

    @classmethod
    def of(cls, mask: Tensor) -> Scored:
        """The indices of ``mask`` (B, T) bool, on its device (where that is a GPU, reading the counts back
        is one wait for it)."""
        if not isinstance(mask, Tensor):
            raise TypeError(f"scored must be a (B, T) bool tensor, got {type(mask).__name__}")
        if mask.dim() != 2:
            raise ValueError(f"scored must be a (B, T) bool tensor, got {tuple(mask.shape)}")
        check_scored(mask, tuple(mask.shape))
        B, T = mask.shape
        counts = mask.sum(1)  # (B,)
        Tq = int(counts.max()) if B and T else 0
        first = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :Tq]  # (B, Tq)
        filled = torch.arange(Tq, device=mask.device) < counts[:, None]  # (B, Tq)
        # flat: the marked of (B T,) as (N,); filled_flat: the filled of (B Tq,) as (N,)
        return cls(mask, mask.flatten().nonzero().squeeze(1), first, filled, filled.flatten().nonzero().squeeze(1))

    @property
    def count(self) -> int:
        """N, the number of marked positions (a shape: no device read)."""
        return self.flat.shape[0]

    @property
    def device(self) -> torch.device:
        return self.mask.device

    def tensors(self) -> tuple[Tensor, ...]:
        """mask, flat, first, filled, filled_flat: ``Scored(*fn(t) for t in s.tensors())`` maps them."""
        return self.mask, self.flat, self.first, self.filled, self.filled_flat

    def to(self, device: torch.device | str) -> Scored:
        """The same indices on ``device``."""
        return Scored(*(t.to(device) for t in self.tensors()))

    def take(self, x: Tensor) -> Tensor:
        """x (B, T, ...) -> (N, ...): the rows at the marked positions, in row-major order (``x[mask]``)."""
        return x.flatten(0, 1).index_select(0, self.flat)  # (B T, ...) -> (N, ...)

    def take_filled(self, y: Tensor) -> Tensor:
        """y (B, Tq, ...), laid out as ``first`` -> (N, ...): its marked entries, in row-major order (``y[filled]``)."""
        return y.flatten(0, 1).index_select(0, self.filled_flat)  # (B Tq, ...) -> (N, ...)


def scored_of(scored: Tensor | Scored, shape: tuple[int, ...], device: torch.device) -> Scored:
    """``scored`` as a ``Scored``, a mask indexed here; ValueError / TypeError unless it marks (B, T) = ``shape``
    (a ``Scored`` also on ``device``, the input's)."""
    if isinstance(scored, Scored):
        if tuple(scored.mask.shape) != shape:
            raise ValueError(f"scored must be (B, T) = {shape}, got a Scored of {tuple(scored.mask.shape)}")
        if scored.device != device:
            raise ValueError(f"scored is a Scored on {scored.device}, the input on {device}: move it with .to(device)")
        return scored
    check_scored(scored, shape)
    return Scored.of(scored)
