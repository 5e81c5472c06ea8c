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
    t = torch.arange(length, device=device)
    if isinstance(attention_mask, Tensor) and attention_mask.dim() == 4:
        Tk = attention_mask.shape[-1]
        if Tk < length:
            raise ValueError(f"the attention mask covers {Tk} keys, fewer than the chunk's {length} tokens")
        mask = attention_mask[:, 0].expand(-1, length, -1)  # (Bm, T, Tk)
        col = Tk - length + t - 1  # the predecessor's key column, one per query row
        seen = mask[:, t, col.clamp(min=0)]  # (Bm, T)
        if seen.dtype != torch.bool:
            seen = seen > torch.finfo(seen.dtype).min / 2
        starts = ~(seen & (col >= 0))
        starts = starts.expand(batch, length).clone()
    else:
        starts = torch.zeros(batch, length, dtype=torch.bool, device=device)
        if past == 0:
            starts[:, 0] = True
    if isinstance(position_ids, Tensor) and position_ids.dim() == 2 and position_ids.shape[-1] == length:
        starts |= (position_ids == 0).to(device).expand(batch, length)
    return starts
