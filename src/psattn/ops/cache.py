"""A KV cache for PSA that stores sheared keys.

Because ``k̂_j = (1 + gamma_k) k_j - gamma_k k_{j-1}`` depends only on k_j and its predecessor, the cache
can store k̂ in place of k: the attention of a new query then needs nothing else from the past. The
only extra state per layer is the last raw key (and the last raw query when gamma_q != 0), needed to
shear the next token: O(1) in the sequence length, zero extra bytes per cached token. A layer with
gamma = 0 keeps no raw state at all: its cache is a plain KV cache.

Rolling back (speculative decoding) to an earlier length n needs the raw key at n - 1, so a cache
built with ``max_rollback = r`` keeps the last r + 1 raw keys instead of one; still O(1) in the
sequence length. The raw values and that rule live in ``psattn.ops.shear_state.ShearState``, which
the transformers cache layer uses too.

Keys and values live in buffers with room to grow (``KVBuffer``): a decode step writes its token in
place instead of copying the whole cache, as ``torch.cat`` would, and the room grows by a quarter when
it runs out (or to what ``PSACache.reserve`` asked for). Tokens once stored are never overwritten while
any cache can still read them, so ``fork`` stays a cheap shallow copy (prefix reuse): the first of two
forks to append writes in place, the other copies.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from numbers import Integral

import torch
from torch import Tensor

from psattn.ops.shear_state import ShearState, tensor_bytes


def extend_kv(keys: Tensor | None, values: Tensor | None, k_hat: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """The cached keys and values (B, Hkv, S, D), or None before the first chunk, extended by a chunk's
    k̂ and v (B, Hkv, T, D): -> (B, Hkv, S + T, D) each, as new tensors (what autograd and a traced
    graph need). The first chunk is stored contiguous: a layer's projections hand over transposed
    views of (B, T, Hkv, D), and ``torch.cat`` keeps an input's layout, so every later step would copy
    and attend over strided memory (about 10% of a CPU decode step)."""
    if keys is None or values is None:  # set together
        return k_hat.contiguous(), v.contiguous()
    return torch.cat([keys, k_hat], dim=2), torch.cat([values, v], dim=2)  # (B, Hkv, S + T, D)


#: the least room a new buffer has, in tokens
MIN_CAPACITY = 16


class KVBuffer:
    """Keys (B, Hkv, C, D) and values (B, Hkv, C, Dv) with room for C tokens, shared by a cache and its forks.

    ``written`` is how many tokens hold data some cache may read; a cache of that length may write the
    next ones in place. ``forked_at`` is the longest length at which a cache over this buffer was
    copied: no copy reads beyond it, so the cache that wrote the tail may give back tokens past it.
    A ``frozen`` buffer is never written again: autograd may hold views of it (it was made or read
    with gradients on), or it is a caller's own tensor.
    """

    __slots__ = ("keys", "values", "written", "forked_at", "frozen")

    def __init__(self, keys: Tensor, values: Tensor, written: int, frozen: bool = False):
        self.keys, self.values, self.written, self.forked_at, self.frozen = keys, values, written, 0, frozen

    @classmethod
    def holding(cls, keys: Tensor | None, values: Tensor | None, k_hat: Tensor, v: Tensor, capacity: int) -> KVBuffer:
        """A new buffer with room for ``capacity`` tokens (at least those given), holding the cached
        keys and values (B, Hkv, S, D), if any, then the chunk's (B, Hkv, T, D)."""
        S = 0 if keys is None else keys.shape[2]
        T = k_hat.shape[2]
        if torch.is_grad_enabled():  # autograd follows a cat, never writes into a buffer it may have saved
            return cls(*extend_kv(keys, values, k_hat, v), S + T, frozen=True)
        B, H, _, D = k_hat.shape
        room = max(capacity, S + T)
        key_dtype, value_dtype = k_hat.dtype, v.dtype
        if keys is not None and values is not None:  # a chunk in another dtype promotes, as torch.cat does
            key_dtype, value_dtype = torch.promote_types(keys.dtype, key_dtype), torch.promote_types(values.dtype, value_dtype)
        new_keys = k_hat.new_empty(B, H, room, D, dtype=key_dtype)  # (B, Hkv, C, D)
        new_values = v.new_empty(B, H, room, v.shape[3], dtype=value_dtype)  # (B, Hkv, C, Dv)
        for new, old, chunk in ((new_keys, keys, k_hat), (new_values, values, v)):
            if old is not None:
                new[:, :, :S] = old
            new[:, :, S : S + T] = chunk
        return cls(new_keys, new_values, S + T)

    @property
    def capacity(self) -> int:
        """Tokens the buffer has room for."""
        return self.keys.shape[2]

    def can_extend(self, length: int, k_hat: Tensor, v: Tensor) -> bool:
        """Whether a cache of ``length`` tokens may write the chunk k̂, v (B, Hkv, T, D) in place: gradients
        are off and the buffer is not frozen, no other cache wrote past ``length``, there is room, the dtypes
        match, and an inference tensor is written only in inference mode; never in a traced call, which extends
        into a new buffer (torch.compile cannot trace the inference-mode checks: a graph break at every layer)."""
        if torch.compiler.is_compiling():
            return False
        return (not self.frozen and not torch.is_grad_enabled() and self.written == length
                and length + k_hat.shape[2] <= self.capacity
                and k_hat.dtype == self.keys.dtype and v.dtype == self.values.dtype
                and (torch.is_inference_mode_enabled() or not self.keys.is_inference()))

    def write(self, length: int, k_hat: Tensor, v: Tensor) -> None:
        """Write the chunk (B, Hkv, T, D) at [length, length + T) (``can_extend`` said yes)."""
        T = k_hat.shape[2]
        self.keys[:, :, length : length + T] = k_hat
        self.values[:, :, length : length + T] = v
        self.written = length + T

    def give_back(self, length: int, kept: int) -> None:
        """A cache of ``length`` tokens rolls back to ``kept``: its tokens past ``kept`` may be written
        again if it wrote them last and no copy of a cache reads them."""
        if self.written == length and self.forked_at <= kept:
            self.written = kept


class LayerCache:
    """Sheared keys (B, Hkv, S, D), values (B, Hkv, S, Dv) and the ``ShearState`` of the raw streams
    (the last ``max_rollback + 1`` raw keys, and queries when ``keep_query``)."""

    def __init__(self, keep_query: bool, keep_key: bool = True, max_rollback: int = 0):
        self.keep_query, self.keep_key = keep_query, keep_key
        self.buffer: KVBuffer | None = None
        self.length = 0
        self.reserved = 0  # room the next new buffer makes, in tokens (``PSACache.reserve``)
        self.shear_state = ShearState(max_rollback)

    @property
    def keys(self) -> Tensor | None:
        """The sheared keys (B, Hkv, S, D), a view into the buffer; None while empty. After a ``crop`` the view's
        last tokens may be written over by the next append: clone what must outlive a rollback."""
        return None if self.buffer is None else self._read(self.buffer.keys)

    @property
    def values(self) -> Tensor | None:
        """The values (B, Hkv, S, Dv), a view into the buffer (as ``keys``); None while empty."""
        return None if self.buffer is None else self._read(self.buffer.values)

    def _read(self, stored: Tensor) -> Tensor:
        """The first ``length`` tokens of a buffer's keys or values; read with gradients on, the buffer freezes."""
        if torch.is_grad_enabled():
            assert self.buffer is not None  # read from it
            self.buffer.frozen = True
        return stored[:, :, : self.length]

    def __len__(self) -> int:
        return self.length

    def __copy__(self) -> LayerCache:
        """A twin sharing the buffer, with a shear state of its own (``PSACache.fork``): it reads the tokens so far."""
        twin = self.snapshot()
        self.mark_read()
        return twin

    def snapshot(self) -> LayerCache:
        """A twin to ``PSACache.restore`` this cache from, which reads no token itself (``PSACache.snapshot``)."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.shear_state = copy.copy(self.shear_state)
        return twin

    def mark_read(self) -> None:
        """Another cache reads this one's tokens: none of them is ever written over."""
        if self.buffer is not None:
            self.buffer.forked_at = max(self.buffer.forked_at, self.length)

    def last_raw(self) -> tuple[Tensor | None, Tensor | None]:
        """(prev_q, prev_k), each (B, H, 1, D) or None: the raw stream values at the last position."""
        return self.shear_state.last()

    def append(self, k_hat: Tensor, v: Tensor, raw_k: Tensor | None = None,
               raw_q: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Add a chunk of T tokens, sheared keys ``k_hat`` (B, Hkv, T, D) and values ``v`` (B, Hkv, T, Dv), with
        the raw keys ``raw_k`` (B, Hkv, T, D) and queries ``raw_q`` (B, Hq, T, D) the shear acted on, where this
        cache keeps them (a ValueError when one it keeps is missing); returns all sheared keys and values so far."""
        keys, values = self.keys, self.values
        if k_hat.dim() != 4 or v.dim() != 4 or k_hat.shape[:3] != v.shape[:3]:
            raise ValueError(f"k_hat and v must be (B, Hkv, T, D) of one batch, head count and length, got "
                             f"{tuple(k_hat.shape)} and {tuple(v.shape)}")
        if keys is not None and values is not None and (
                k_hat.shape[:2] != keys.shape[:2] or k_hat.shape[3] != keys.shape[3] or v.shape[3] != values.shape[3]):
            raise ValueError(f"a chunk of keys {tuple(k_hat.shape)} and values {tuple(v.shape)} does not continue the "
                             f"cached {tuple(keys.shape)} and {tuple(values.shape)} (B, Hkv, S, D)")
        if keys is not None and not k_hat.device == v.device == keys.device:
            raise ValueError(f"a chunk of keys on {k_hat.device} and values on {v.device} does not continue a cache on "
                             f"{keys.device}")
        if self.keep_key and raw_k is None:
            raise ValueError("this cache keeps the last raw key (gamma_k != 0); pass raw_k")
        if self.keep_query and raw_q is None:
            raise ValueError("this cache keeps the last raw query (gamma_q != 0); pass raw_q")
        past, new = self.length, self.length + k_hat.shape[2]
        if self.buffer is not None and self.buffer.can_extend(past, k_hat, v):
            self.buffer.write(past, k_hat, v)
        else:  # a new buffer: as large as reserved, or a quarter larger than needed
            room = self.reserved if new <= self.reserved else new + max(new // 4, MIN_CAPACITY)
            self.buffer = KVBuffer.holding(keys, values, k_hat, v, room)
        self.length = new
        if self.keep_key:
            assert raw_k is not None  # checked above
            self.shear_state.remember("k", raw_k, past)
        if self.keep_query:
            assert raw_q is not None  # checked above
            self.shear_state.remember("q", raw_q, past)
        keys, values = self.keys, self.values
        assert keys is not None and values is not None  # just stored
        return keys, values

    def check_crop(self, length: int) -> None:
        """Raise a ValueError (changing nothing) unless ``crop`` to ``length`` tokens is possible."""
        S = len(self)
        if not 0 <= length <= S:
            raise ValueError(f"cannot crop a cache of length {S} to {length}")
        self.shear_state.check_crop(length, S)

    def crop(self, length: int) -> None:
        """Roll back to the first ``length`` tokens (at most ``max_rollback`` tokens back)."""
        self.check_crop(length)
        self.shear_state.crop(length, len(self))
        self._roll_back(length)

    def _roll_back(self, length: int) -> None:
        """Keep the first ``length`` tokens of the keys and values."""
        if self.buffer is not None:
            self.buffer.give_back(self.length, length)
        if length == 0:
            self.buffer = None
        self.length = length

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search)."""
        keys, values = self.keys, self.values
        if keys is not None and values is not None:
            self.buffer = KVBuffer(keys.index_select(0, index), values.index_select(0, index), self.length)
        self.shear_state.apply(lambda x: x.index_select(0, index))

    def kv_bytes(self) -> int:
        """Bytes of the cached keys and values (what a plain KV cache holds); the buffer may have room for more
        (``reserved_bytes``)."""
        return tensor_bytes(self.keys) + tensor_bytes(self.values)

    def reserved_bytes(self) -> int:
        """Bytes of the buffer, its room for later tokens included."""
        return 0 if self.buffer is None else tensor_bytes(self.buffer.keys) + tensor_bytes(self.buffer.values)

    def extra_state_bytes(self) -> int:
        """Bytes held beyond the plain KV tensors (the raw windows)."""
        return self.shear_state.extra_state_bytes()


@dataclass(frozen=True)
class ChunkRecord:
    """The bookkeeping of a new chunk of tokens that a cache appends (each (B, T))."""

    valid: Tensor  # bool: a real token, not padding
    seq: Tensor  # int64: index of the sequence each token belongs to
    pos: Tensor  # int64: RoPE position of each token
    simple: bool  # no padding and no sequence restart in the chunk


class PSACache:
    """Per-layer caches plus the per-token bookkeeping all layers share (which keys are real,
    which sequence each belongs to, its position) and that any KV cache needs for masking."""

    def __init__(self, layers: list[LayerCache]):
        self.layers = layers
        self.key_valid: Tensor | None = None  # (B, S) bool: a real token, not padding
        self.key_seq: Tensor | None = None  # (B, S) int64: index of the sequence each key belongs to
        self.key_pos: Tensor | None = None  # (B, S) int64: RoPE position of each key
        self.simple = True  # no padding and no sequence restart so far: plain causal masking
        self.reads = True  # a fork reads its tokens; a snapshot only restores

    def __len__(self) -> int:
        return 0 if self.key_pos is None else self.key_pos.shape[1]

    def next_position(self) -> Tensor | None:
        """(B,) position of the next token, or None for an empty cache."""
        if self.key_pos is None:
            return None
        assert self.key_valid is not None  # the three bookkeeping tensors are set together
        return torch.where(self.key_valid[:, -1], self.key_pos[:, -1] + 1, 0)

    def record(self, chunk: ChunkRecord) -> None:
        """Append the bookkeeping of a new chunk (the model does, once its layers have appended their keys)."""
        if self.key_pos is None:
            self.key_valid, self.key_seq, self.key_pos = chunk.valid, chunk.seq, chunk.pos
        else:
            assert self.key_valid is not None and self.key_seq is not None
            self.key_valid = torch.cat([self.key_valid, chunk.valid], dim=1)  # (B, S + T)
            self.key_seq = torch.cat([self.key_seq, chunk.seq], dim=1)
            self.key_pos = torch.cat([self.key_pos, chunk.pos], dim=1)
        self.simple = self.simple and chunk.simple

    def crop(self, length: int) -> None:
        """Roll every layer back to its first ``length`` tokens (speculative decoding); all or nothing. ``length``
        is a length, not a count to remove; one outside [0, len(self)], or more than ``max_rollback`` tokens back
        from the longest the cache has been, is a ValueError that changes nothing (one that is not an integer a
        TypeError)."""
        S = len(self)
        if isinstance(length, bool) or not isinstance(length, Integral):  # 2.5 was refused as a rollback too far
            raise TypeError(f"a cache is cropped to a whole number of tokens, got {length!r}")
        if not 0 <= length <= S:
            raise ValueError(f"cannot crop a cache of length {S} to {length}")
        for layer in self.layers:
            layer.check_crop(length)
        for layer in self.layers:
            layer.crop(length)
        if length == 0:
            self.key_valid = self.key_seq = self.key_pos = None
            self.simple = True
        else:
            assert self.key_valid is not None and self.key_seq is not None and self.key_pos is not None
            self.key_valid, self.key_seq, self.key_pos = (
                self.key_valid[:, :length], self.key_seq[:, :length], self.key_pos[:, :length]
            )

    def reserve(self, tokens: int) -> None:
        """Make room for ``tokens`` tokens in every layer when it next needs a new buffer (at the first
        chunk, say): a generation that knows its length then never copies its cache to grow it."""
        if isinstance(tokens, bool) or not isinstance(tokens, Integral):
            raise TypeError(f"reserve takes a number of tokens >= 0, got {tokens!r}")
        if tokens < 0:
            raise ValueError(f"reserve takes a number of tokens >= 0, got {tokens!r}")
        for layer in self.layers:
            layer.reserved = int(tokens)

    def fork(self) -> PSACache:
        """An independent copy sharing the stored tokens, which neither overwrites: continue two suffixes."""
        twin = self.snapshot()
        twin.reads = True
        for layer in self.layers:
            layer.mark_read()
        return twin

    def snapshot(self) -> PSACache:
        """A copy to ``restore`` this cache from, as a ``fork`` but reading nothing itself: once restored
        from, or no longer needed, drop it (a forward pass that fails part-way restores its cache from one)."""
        twin = copy.copy(self)
        twin.layers = [layer.snapshot() for layer in self.layers]
        twin.reads = False
        return twin

    def restore(self, saved: PSACache) -> None:
        """Return to the state of ``saved``, a ``fork`` or ``snapshot`` of this cache taken earlier."""
        for layer, before in zip(self.layers, saved.layers, strict=True):
            if layer.buffer is not None and layer.buffer is before.buffer:  # the tokens written since may be written again
                layer.buffer.give_back(layer.length, before.length)
            layer.__dict__.update(before.__dict__)
            layer.shear_state = copy.copy(before.shear_state)  # restoring twice from one copy gives the same state twice
            if saved.reads:  # the fork and this cache both read its tokens now
                layer.mark_read()
        self.__dict__.update({k: v for k, v in saved.__dict__.items() if k not in ("layers", "reads")})

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search) by ``index`` (N,), an int64 or int32 tensor of row numbers; nothing
        to do for an empty cache."""
        if not isinstance(index, Tensor):
            raise TypeError(f"reorder takes a 1-D int64 or int32 tensor of batch rows, got a {type(index).__name__}")
        if index.dim() != 1 or index.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"reorder takes a 1-D int64 or int32 tensor of batch rows, got a {index.dtype} tensor of "
                             f"shape {tuple(index.shape)}")
        if self.key_pos is None:
            return
        try:
            for layer in self.layers:
                layer.reorder(index)
        except IndexError:  # the first layer refuses before anything changes: every layer holds the same rows
            raise ValueError(f"reorder's index must hold batch rows in [0, {self.key_pos.shape[0]}), got "
                             f"{int(index.min())} to {int(index.max())}") from None
        assert self.key_valid is not None and self.key_seq is not None
        self.key_valid, self.key_seq, self.key_pos = (
            x.index_select(0, index) for x in (self.key_valid, self.key_seq, self.key_pos)
        )

    def kv_bytes(self) -> int:
        """Bytes of every layer's cached keys and values."""
        return sum(layer.kv_bytes() for layer in self.layers)

    def extra_state_bytes(self) -> int:
        """Bytes of PSA's fixed extra state over every layer (the last raw key, and query)."""
        return sum(layer.extra_state_bytes() for layer in self.layers)
