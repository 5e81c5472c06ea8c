"""Positions, sequence starts and the attention mask of one forward pass, computed once per model
call and shared by all layers.

Three kinds of input share one rule set:

- plain batches: positions 0..T-1, causal attention (the SDPA ``is_causal`` fast path);
- left-padded batches (``attention_mask`` with zeros): positions count real tokens only, the first
  real token is a sequence start, padding is never attended to;
- packed batches (``position_ids`` restarting at 0): every restart begins a new document, which
  attends only within itself and starts its own momentum.

With a cache the chunk continues the cached tokens; its queries sit after them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from psattn.ops.cache import ChunkRecord, PSACache
from psattn.ops.rope import RotaryEmbedding
from psattn.ops.shear import check_mask_dtype, check_position_dtype, mask_values_error, sequence_starts


@dataclass
class AttentionContext:
    """Positions, sequence starts and mask of one forward pass, shared by every layer."""
    position_ids: Tensor  # (B, T)
    starts: Tensor | None  # (B, T) bool, or None when only t = 0 of a fresh sequence is a start
    attn_mask: Tensor | None  # (B, 1, T, S) bool, True = may attend
    is_causal: bool
    chunk: ChunkRecord | None = None  # with a cache: what it appends once the layers have run
    # RoPE tables of position_ids by RotaryEmbedding module and dtype, kept for one model call (DecoderLM sets
    # a dict); None: computed at every request (a context a caller keeps may outlive a module or its frequencies)
    tables: dict[tuple[int, torch.dtype], tuple[Tensor, Tensor]] | None = field(default=None, repr=False, compare=False)

    def rope_tables(self, rope: RotaryEmbedding, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``rope(position_ids, dtype)``, cos and sin (B, 1, T, r): with ``tables`` set, computed once for each
        RoPE module and dtype (layers that share one module share its tables); without, or under a compiler's
        trace, at every call."""
        if self.tables is None or torch.compiler.is_compiling():
            return rope(self.position_ids, dtype)
        key = (id(rope), dtype)
        if key not in self.tables:
            self.tables[key] = rope(self.position_ids, dtype)
        return self.tables[key]

    @classmethod
    def causal(cls, batch: int, length: int, device: torch.device | None = None) -> AttentionContext:
        """The context of a plain causal batch (B, T): positions 0..T-1, no padding or packing."""
        positions = torch.arange(length, device=device).expand(batch, length)  # (B, T)
        return cls(positions, None, None, True)

    @classmethod
    def continuing(cls, past: int, batch: int, length: int, device: torch.device | None = None) -> AttentionContext:
        """The context of a plain chunk (B, T) after ``past`` cached tokens of a plain batch: positions
        past..past+T-1, every query seeing the cached keys and the chunk's keys up to its own."""
        if past == 0:
            return cls.causal(batch, length, device)
        positions = torch.arange(past, past + length, device=device)  # (T,)
        if length <= 1:  # one query after all cached keys sees every key
            return cls(positions.expand(batch, length), None, None, False)  # positions (B, T)
        seen = torch.arange(past + length, device=device)[None, :] <= positions[:, None]  # (T, S)
        return cls(positions.expand(batch, length), None, seen[None, None], False)  # mask (1, 1, T, S)


def token_range_error(input_ids: Tensor, vocab_size: int) -> ValueError:
    """The error for token ids outside [0, vocab_size), naming the range given."""
    return ValueError(f"input_ids must be token ids in [0, {vocab_size}) (the model's vocab_size), got ids from "
                      f"{int(input_ids.min())} to {int(input_ids.max())}")


def build_context(
    batch: int,
    length: int,
    device: torch.device,
    *,
    position_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    cache: PSACache | None = None,
    input_ids: Tensor | None = None,
    vocab_size: int | None = None,
) -> AttentionContext:
    """Work out positions, starts and mask for a chunk of ``length`` tokens after the tokens of
    ``cache``, which is read, not changed: the context's ``chunk`` is what the cache appends after the
    forward pass. ``attention_mask`` (B, T) covers the new tokens only (1 = real, 0 = padding). With
    ``input_ids`` and ``vocab_size``, an id outside [0, vocab_size) is a ValueError, read in the one wait
    for the device a chunk with a mask, positions or a cache has here (before the embedding, which on
    CUDA would stop the device); a plain chunk has no such wait, and is not checked here."""
    B, T = batch, length
    for name, size in (("batch", B), ("length", T)):  # a negative one raised torch.arange's "inconsistent with step sign"
        if isinstance(size, bool) or not isinstance(size, (int, torch.SymInt)):
            raise TypeError(f"{name} must be an integer >= 0, got {size!r}")
        if isinstance(size, int) and size < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {size!r}")
    for name, x in (("position_ids", position_ids), ("attention_mask", attention_mask)):
        if x is not None and not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (B, T) or None, got {type(x).__name__}")
        if x is not None and tuple(x.shape) != (B, T):
            raise ValueError(f"{name} must be (B, T) = {(B, T)}, got {tuple(x.shape)}")
    if attention_mask is not None:  # its values, 0 and 1 only, are checked below in the one read of the device
        check_mask_dtype(attention_mask)
    if position_ids is not None:  # .long() would truncate 0.5 to a start
        check_position_dtype(position_ids)
    if cache is None and position_ids is None and attention_mask is None:
        return AttentionContext.causal(B, T, device)  # no data-dependent checks: no host sync, no graph break
    past = 0 if cache is None else len(cache)
    if cache is not None and cache.key_pos is not None and cache.key_pos.shape[0] != B:
        raise ValueError(f"the cache holds {cache.key_pos.shape[0]} rows, the input {B}")
    valid = torch.ones(B, T, dtype=torch.bool, device=device) if attention_mask is None else attention_mask.bool()
    odd = valid.new_zeros(())  # a mask value other than 0 and 1 (2 read as a real token)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        odd = ((attention_mask != 0) & (attention_mask != 1)).any()
    if cache is not None and attention_mask is not None:
        seen = (cache.key_valid.any(1, keepdim=True) if cache.key_valid is not None
                else torch.zeros(B, 1, dtype=torch.bool, device=device))
        right_padded = (~valid & (seen | (valid.long().cumsum(1) > 0))).any()  # padding after a real token
        odd_now, right_padded = torch.stack([odd, right_padded]).tolist()
        if odd_now:
            raise mask_values_error(attention_mask)
        if right_padded:
            raise ValueError(
                "with a cache, padding must come before each row's tokens (left padding): a row padded on the "
                "right would continue from its padding"
            )
    given = position_ids is not None
    if position_ids is None:
        first = None if cache is None else cache.next_position()  # None for an empty cache
        if first is None:
            first = torch.zeros(B, dtype=torch.long, device=device)
        position_ids = (first[:, None] + valid.long().cumsum(1) - 1).clamp(min=0)  # (B, T)
    position_ids = position_ids.long()

    starts = sequence_starts(position_ids, attention_mask, check_values=False)  # odd: read with the rest below
    if past == 0:
        starts[:, :1] = True  # the first token (none in an empty chunk) starts its sequence
    elif cache is not None and cache.key_valid is not None:  # a padding run the cache ends with gives way to a real token
        starts[:, :1] |= valid[:, :1] & ~cache.key_valid[:, -1:]
    held_seq = None if cache is None else cache.key_seq  # None for an empty cache
    prev_seq = held_seq[:, -1:] if held_seq is not None else torch.full((B, 1), -1, dtype=torch.long, device=device)
    seq = prev_seq + starts.long().cumsum(1)  # (B, T): sequence index of each token
    # read at once, the one wait for the device here: what picks the path, and whether a real token was
    # given a negative position (padding's positions change no real token: transformers gives them 0, 1 or -1)
    negative = ((position_ids < 0) & valid).any() if given else valid.new_zeros(())
    unknown = valid.new_zeros(())
    if input_ids is not None and vocab_size is not None:
        unknown = ((input_ids < 0) | (input_ids >= vocab_size)).any().to(device)
    all_valid, later_start, first_start, bad, bad_id, bad_mask = torch.stack(
        [valid.all(), starts[:, 1:].any(), starts[:, :1].any(), negative, unknown, odd]).tolist()
    if bad_mask:
        raise mask_values_error(attention_mask)  # type: ignore[arg-type]  # odd is set: a mask was given
    if bad_id:
        raise token_range_error(input_ids, vocab_size)  # type: ignore[arg-type]  # both given: unknown is set
    if bad:
        raise ValueError(f"position_ids must be >= 0 at every real token (each document counts from 0), got "
                         f"{int(position_ids[valid].min())}")
    simple = all_valid and not later_start and not (past and first_start)
    chunk = None if cache is None else ChunkRecord(valid, seq, position_ids, simple)
    simple = simple and (cache is None or cache.simple)

    if simple:
        shear_starts = None
        if past == 0:
            return AttentionContext(position_ids, None, None, True, chunk)
        if T == 1:  # one query after all cached keys sees every key
            return AttentionContext(position_ids, None, None, False, chunk)
    else:
        shear_starts = starts

    S = past + T
    q_idx = torch.arange(past, S, device=device)  # (T,)
    k_idx = torch.arange(S, device=device)  # (S,)
    causal = k_idx[None, :] <= q_idx[:, None]  # (T, S)
    if simple:
        mask = causal[None, None]  # (1, 1, T, S)
    else:
        held_valid = None if cache is None else cache.key_valid
        k_valid = torch.cat([held_valid, valid], dim=1) if held_valid is not None else valid  # (B, S)
        k_seq = torch.cat([held_seq, seq], dim=1) if held_seq is not None else seq  # (B, S)
        same_seq = k_seq[:, None, :] == seq[:, :, None]  # (B, T, S)
        self_key = k_idx[None, :] == q_idx[:, None]  # a query always sees itself: no empty row
        mask = ((causal & same_seq & k_valid[:, None, :]) | self_key)[:, None]  # (B, 1, T, S)
    return AttentionContext(position_ids, shear_starts, mask, False, chunk)
