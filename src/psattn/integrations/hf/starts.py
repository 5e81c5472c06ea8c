"""Sequence starts of one chunk, read from what a transformers attention module receives.

The boundary rule (see ``psattn.ops.shear``) sets the momentum to 0 at every sequence start. A
token at chunk position t is a start when

- it has no predecessor at all (t = 0 of a chunk with no cached past), or
- the attention mask hides its predecessor from it (the first real token after left padding, the
  first token of a packed document when transformers builds a block mask from ``position_ids``), or
- its ``position_ids`` entry is 0 (packed documents, and ``generate``'s left-padded prompts).

The mask is the 4D mask the model built for this layer, (B, 1, Tq, Tk) boolean (True = attend) or
additive float, with the chunk's own keys in its last Tq columns; None means plain causal
attention without padding.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import Tensor


def chunk_starts(
    batch: int,
    length: int,
    past: int,
    position_ids: Tensor | None,
    attention_mask: Tensor | None,
    device: torch.device,
) -> Tensor:
    """(B, T) bool: which tokens of a chunk of ``length`` tokens after ``past`` cached ones start a
    sequence."""
    starts: Tensor | None = None
    if isinstance(attention_mask, Tensor) and attention_mask.dim() == 4:
        Tk = attention_mask.shape[-1]
        if attention_mask.dtype != torch.bool and not attention_mask.is_floating_point():  # what SDPA and eager take
            raise TypeError(f"a 4D attention_mask must be bool (True = attend) or additive float, got {attention_mask.dtype}")
        if Tk < length:
            raise ValueError(f"the attention mask covers {Tk} keys, fewer than the chunk's {length} tokens")
        t = torch.arange(length, device=device)
        mask = attention_mask[:, 0].expand(-1, length, -1)  # (Bm, T, Tk)
        col = Tk - length + t - 1  # the predecessor's key column, one per query row
        seen = mask[:, t, col.clamp(min=0)]  # (Bm, T)
        if seen.dtype != torch.bool:
            seen = seen > torch.finfo(seen.dtype).min / 2
        starts = ~(seen & (col >= 0))
        starts = starts.expand(batch, length)
    elif past == 0:  # nothing before the chunk: its first token starts a sequence
        starts = torch.zeros(batch, length, dtype=torch.bool, device=device)
        starts[:, 0] = True
    if isinstance(position_ids, Tensor) and position_ids.dim() == 2 and position_ids.shape[-1] == length:
        restarts = (position_ids == 0).to(device).expand(batch, length)
        starts = restarts if starts is None else starts | restarts
    if starts is None:  # a chunk after cached tokens, with neither a mask nor positions to say otherwise
        starts = torch.zeros(batch, length, dtype=torch.bool, device=device)
    return starts


def prepare_generation_positions(model, inputs: Tensor, model_kwargs: dict) -> Tensor:
    """``generate``'s position ids on a patched model (``apply_psa`` puts this in the model's
    ``_prepare_position_ids_for_generation``): transformers' own, after a ValueError unless its 2D ``attention_mask``
    holds 0 and 1 alone (bool, integer or float). transformers counts positions with
    ``attention_mask.long().cumsum(-1)`` and attends wherever the mask is not 0: a 0.5 or a -1 there gives a later
    real token position 0, which PSA takes for a sequence start while the attention still sees the tokens before it."""
    mask = model_kwargs.get("attention_mask")
    if isinstance(mask, Tensor) and mask.dtype != torch.bool:
        odd = mask[(mask != 0) & (mask != 1)]  # (N,): one read of the device per generate call
        if odd.numel():
            raise ValueError(f"attention_mask must hold 1 at real tokens and 0 at padding, got {odd[0].item():g}")
    return type(model)._prepare_position_ids_for_generation(model, inputs, model_kwargs)


class StartsMemo:
    """The starts of the chunks a model's attention modules saw in this forward pass, reused by every
    layer that receives the same mask and position ids (the same tensor objects, unchanged since: their
    version counters are compared too, where a tensor keeps one). ``apply_psa`` has the model
    ``forget`` them at the start of every forward pass. Holds weak references only, so a prefill's
    large mask is not kept alive until the next forward.

    Starts with no True entry come back as None (a decode step past the prompt), so that the shear takes its
    one-``lerp`` path instead of a per-row select in every layer. Reading that waits for the device once per
    forward pass of a chunk after cached tokens (``generate`` waits at every step anyway, for its stopping
    criteria); a chunk at position 0 always has a start, and is not read.
    """

    #: at most this many inputs remembered (a forward pass brings one mask per attention type)
    SIZE = 8

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Drop the remembered starts."""
        self._seen: dict[tuple, tuple[Any, Any, Tensor | None]] = {}  # key -> (references to the inputs, starts)

    def __getstate__(self) -> dict:
        """Nothing: a pickled or deep-copied model starts with an empty memo (weak references do not pickle)."""
        return {}

    def __setstate__(self, state: dict) -> None:
        self.forget()

    def starts(self, batch: int, length: int, past: int, position_ids: Tensor | None, attention_mask: Tensor | None,
               device: torch.device) -> Tensor | None:
        """``chunk_starts`` of these arguments, or None where that has no True entry (a chunk after cached tokens)."""
        if torch.compiler.is_compiling():  # a traced graph must compute them from its inputs
            return chunk_starts(batch, length, past, position_ids, attention_mask, device)
        # every layer asks: the key and the check are spelled out, without generators, to cost a layer little
        key = (batch, length, past, device, id(position_ids), id(attention_mask), _version(position_ids),
               _version(attention_mask))
        seen = self._seen.get(key)
        if seen is not None and _same(seen[0], position_ids) and _same(seen[1], attention_mask):
            return seen[2]
        computed = chunk_starts(batch, length, past, position_ids, attention_mask, device)
        starts = computed if past == 0 or bool(computed.any()) else None  # (B, T), or None: no start
        if len(self._seen) >= self.SIZE:
            self._seen.clear()
        self._seen[key] = (_reference(position_ids), _reference(attention_mask), starts)
        return starts


def _version(x) -> int | None:
    """A tensor's version counter (bumped by every in-place change), None for anything else and for an
    inference-mode tensor, which keeps none."""
    return x._version if isinstance(x, Tensor) and not x.is_inference() else None


def _reference(x) -> Any:
    """A weak reference to a tensor, or the value itself."""
    return weakref.ref(x) if isinstance(x, Tensor) else x


def _same(ref, x) -> bool:
    """Whether ``x`` is the object ``ref`` (a weak reference to a tensor, or the value itself) stands for."""
    return ref() is x if isinstance(ref, weakref.ref) else ref is x
