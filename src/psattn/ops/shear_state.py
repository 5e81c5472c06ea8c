"""The state of a shear applied chunk by chunk: the raw values it needs, and the one rollback rule.

Shearing a chunk at positions [p, p + T) continues the stream from the raw value at p - 1 (the
sheared value ``x̂_j = (1 + gamma) x_j - gamma x_{j-1}`` needs only its predecessor). Rolling the
stream back to n tokens (speculative or assisted decoding) therefore needs the raw value at n - 1:
a rollback is possible exactly when that value is still held. ``ShearState`` holds the raw queries
and keys of the last positions, shears new chunks against them, and crops them to a length; both
KV caches (``psattn.ops.cache.LayerCache`` and the transformers ``PSALayer``) keep one and only
store the sheared keys and values beside it.

Which positions are held: the last ``max_rollback + 1`` (enough to continue after a rollback of
``max_rollback`` tokens); with ``keep_last_call`` also every position of the last chunk and the one
before it (transformers expects any crop within the last forward call to be exact); with
``record_past`` every position until the next crop (what transformers asks of a cache before a
generation that rolls back).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from psattn.ops.shear import MAX_GAMMA
from psattn.ops.shear import shear as library_shear

#: the two streams a PSA layer shears: queries and keys
Stream = Literal["q", "k"]


def tensor_bytes(x: Tensor | None) -> int:
    """Bytes a tensor holds (0 for None)."""
    return 0 if x is None else x.numel() * x.element_size()


def owned(x: Tensor) -> Tensor:
    """``x``, copied out of its storage when that holds more than twice ``x`` (a view of a few rows of a
    long stream), so that keeping ``x`` keeps only its own bytes."""
    if torch.compiler.is_compiling() or x.untyped_storage().nbytes() <= 2 * tensor_bytes(x):
        return x
    return x.clone(memory_format=torch.contiguous_format)


def _one_row_after(x: Tensor, prev: Tensor, starts: Tensor | None, gamma: float) -> bool:
    """Whether x is one decoded row (B, H, 1, D) continuing from ``prev``, of its shape, dtype and device, with
    no sequence start and a valid gamma: all that ``shear`` would check. Its checks and the general path cost
    a decode step more than its one lerp (``x̂ = (1 + gamma) x - gamma prev``)."""
    return (starts is None and isinstance(x, Tensor) and x.shape == prev.shape and x.shape[-2] == 1
            and x.dtype == prev.dtype and x.device == prev.device and x.is_floating_point()
            and type(gamma) is float and -MAX_GAMMA <= gamma <= MAX_GAMMA  # False for NaN
            and not torch.compiler.is_exporting())  # exported graphs write the shear in adds (no lerp in ExecuTorch)


class RawWindow:
    """Raw stream values (B, H, W, D) at the positions [start, start + W) of one layer.

    The rollback rule of every PSA cache: the sheared stream can continue after n tokens only if the
    window holds the raw value at position n - 1 (``can_crop``); how many positions a cache keeps
    is its own choice. The values are held as the chunks they came in, joined only when read
    (``values``): a decode step's row is kept beside its predecessor without a copy.
    """

    def __init__(self) -> None:
        self._chunks: list[Tensor] = []  # consecutive (B, H, Ti, D), oldest first
        self.start = 0
        self._length = 0

    def __copy__(self) -> RawWindow:
        """A twin holding the same (never mutated) tensors in a list of its own."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._chunks = list(self._chunks)
        return twin

    @property
    def values(self) -> Tensor | None:
        """(B, H, W, D): every raw value held, or None."""
        self._join()
        return self._chunks[0] if self._chunks else None

    def _join(self) -> None:
        """Hold the values in one chunk."""
        if len(self._chunks) > 1:
            self._chunks = [torch.cat(self._chunks, dim=-2)]  # (B, H, W, D)

    def _hold(self, values: Tensor | None, start: int) -> None:
        """Hold ``values`` (B, H, W, D; None: nothing) at [start, start + W), in one chunk that owns its memory."""
        self._chunks = [] if values is None else [owned(values)]
        self.start, self._length = (start, values.shape[-2]) if values is not None else (0, 0)

    @property
    def end(self) -> int:
        """One past the last position held (``start`` when empty)."""
        return self.start + self._length

    def last(self) -> Tensor | None:
        """(B, H, 1, D): the raw value at position end - 1."""
        if not self._chunks:
            return None
        chunk = self._chunks[-1]
        return chunk if chunk.shape[-2] == 1 else chunk[..., -1:, :]  # a decoded row is its own last row

    def nbytes(self) -> int:
        """Bytes of the raw values held."""
        return sum(tensor_bytes(x) for x in self._chunks)

    def can_crop(self, length: int) -> bool:
        """Whether the stream can continue after ``length`` tokens (always, for an empty window or 0)."""
        return not self._chunks or length == 0 or self.start <= length - 1 < self.end

    def push(self, chunk: Tensor, position: int, keep_from: int | None) -> None:
        """Add the chunk (B, H, T, D) at [position, position + T); keep positions >= ``keep_from``
        (None: keep all). What is kept owns its memory: a row kept from a long chunk does not hold
        the whole chunk alive (a prompt's rotated stream, as large as its keys); otherwise it is held as it
        is, not copied, so a chunk must not be written to after the push."""
        if self._chunks and position != 0 and self.end != position:
            raise RuntimeError(f"raw window ends at {self.end}, but the new chunk starts at {position}")
        if not self._chunks or position == 0 or (keep_from is not None and keep_from >= position):
            # the chunk alone holds every position kept (a decode step's row replaces the last one)
            start = position if keep_from is None else max(keep_from, position)
            self._hold(chunk if start == position else chunk[..., start - position :, :], start)  # (B, H, W, D)
            return
        if chunk.shape[-2]:  # an empty chunk adds no position (and must not stand where ``last`` reads)
            self._chunks.append(owned(chunk))
            self._length += chunk.shape[-2]
        if keep_from is not None:
            self._trim(keep_from)
        if torch.compiler.is_compiling():  # a traced graph joins them at once (a list that grows would recompile it)
            self._join()

    def _trim(self, keep_from: int) -> None:
        """Drop the positions before ``keep_from``: whole chunks, then the front of the first one kept."""
        drop = keep_from - self.start
        while drop > 0 and self._chunks:
            first = self._chunks[0]
            n = min(first.shape[-2], drop)
            self._chunks[0:1] = [] if n == first.shape[-2] else [owned(first[..., n:, :])]
            self.start, self._length, drop = self.start + n, self._length - n, drop - n

    def crop(self, length: int, keep: int) -> None:
        """Keep positions < ``length``, and of those only the last ``keep``."""
        values = self.values
        if values is None:
            return
        if length == 0:
            self._hold(None, 0)
            return
        if not self.start <= length - 1 < self.end:
            raise RuntimeError(f"no raw value at position {length - 1} (window holds [{self.start}, {self.end}))")
        start = max(length - keep, self.start)
        self._hold(values[..., start - self.start : length - self.start, :], start)

    def apply(self, fn: Callable[[Tensor], Tensor]) -> None:
        """Apply ``fn`` to the held raw values (reordering, moving)."""
        values = self.values
        if values is not None:
            self._chunks = [fn(values)]

    def clear(self) -> None:
        """Drop the held raw values."""
        self._hold(None, 0)


class ShearState:
    """Raw queries (B, Hq, W, D) and keys (B, Hkv, W, D) of one layer's last positions: shear a chunk,
    remember its raw values, crop to a length.

    Args:
        max_rollback: how many tokens back ``crop`` can always go (>= 0).
        keep_last_call: True to also hold every position of the last chunk (and the one before it) until
            the next chunk, so that any crop within it is exact (a bool: anything else is a TypeError).
    """

    def __init__(self, max_rollback: int = 0, keep_last_call: bool = False):
        if isinstance(max_rollback, bool) or not isinstance(max_rollback, int):
            raise TypeError(f"max_rollback must be an int >= 0, got {max_rollback!r}")
        if max_rollback < 0:
            raise ValueError(f"max_rollback must be an int >= 0, got {max_rollback!r}")
        if not isinstance(keep_last_call, bool):  # "no" was kept as a true value
            raise TypeError(f"keep_last_call must be True or False, got {keep_last_call!r}")
        self.max_rollback, self.keep_last_call = max_rollback, keep_last_call
        self.record_past = False  # hold every position until the next crop
        self.raw_q, self.raw_k = RawWindow(), RawWindow()
        # the longest the streams have been since they began: a crop can always go back to max_rollback tokens
        # short of it, not of the current length (an earlier crop and a shorter chunk leave fewer positions held)
        self.longest = 0

    def __copy__(self) -> ShearState:
        """A twin sharing the (never mutated) tensors, with windows of its own."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.raw_q, twin.raw_k = copy.copy(self.raw_q), copy.copy(self.raw_k)
        return twin

    def window(self, stream: Stream) -> RawWindow:
        """The raw window of ``stream`` (``"q"`` or ``"k"``; anything else is a ValueError: it was read as ``"k"``)."""
        if stream == "q":
            return self.raw_q
        if stream == "k":
            return self.raw_k
        raise ValueError(f"stream must be 'q' or 'k', got {stream!r}")

    def last(self) -> tuple[Tensor | None, Tensor | None]:
        """(prev_q, prev_k), each (B, H, 1, D) or None: the raw values at the last position held."""
        return self.raw_q.last(), self.raw_k.last()

    def shear(self, stream: Stream, x: Tensor, gamma: float, position: int, *, starts: Tensor | None = None,
              boundary: str = "replicate", shear_fn: Callable[..., Tensor] = library_shear) -> Tensor:
        """x̂ (B, H, T, D) of the raw chunk x at positions [position, position + T), continuing the stream
        from the raw value at position - 1; remembers x (held as it is: do not write to it afterwards). A stream
        with gamma = 0 is its own shear and keeps no raw state."""
        if gamma == 0.0:
            return x
        window = self.window(stream)
        if position and window.end != position:
            raise RuntimeError(f"the held raw {stream} stream ends at {window.end}, but the chunk starts at {position}")
        prev = window.last() if position else None
        if prev is not None and shear_fn is library_shear and _one_row_after(x, prev, starts, gamma):
            x_hat = torch.lerp(prev, x, 1.0 + gamma)  # (B, H, 1, D): shear's own lerp, without its checks
        else:
            x_hat = shear_fn(x, gamma, starts=starts, prev=prev, boundary=boundary)
        self.remember(stream, x, position)
        return x_hat

    def remember(self, stream: Stream, raw: Tensor, position: int) -> None:
        """Hold the raw chunk (B, H, T, D) at [position, position + T), dropping what no crop will need."""
        end = position + raw.shape[-2]
        self.longest = end if position == 0 else max(self.longest, end)
        window_start = end - 1 - self.max_rollback  # the last max_rollback + 1 positions
        keep_from = None if self.record_past else (
            min(position - 1, window_start) if self.keep_last_call else window_start)
        self.window(stream).push(raw, position, keep_from)

    def check_crop(self, length: int, now: int) -> None:
        """Raise a ValueError (changing nothing) unless the streams, ``now`` tokens long, can continue
        after ``length`` tokens."""
        for name, window in (("query", self.raw_q), ("key", self.raw_k)):
            if not window.can_crop(length):
                longest = max(self.longest, now)  # what max_rollback counts back from
                since = "" if longest == now else (f", and a crop brings back none that were dropped when the streams "
                                                   f"were {longest} tokens long")
                raise ValueError(
                    f"cannot roll back {now - length} tokens (to {length}): the raw {name} at position {length - 1} "
                    f"is no longer held (positions >= {window.start} are{since}); build the cache with "
                    f"max_rollback >= {longest - length}"
                )

    def crop(self, length: int, now: int) -> None:
        """Roll the streams, ``now`` tokens long, back to their first ``length`` tokens, and shrink the
        windows back to their working size (``length == now`` only shrinks)."""
        if not 0 <= length <= now:
            raise ValueError(f"cannot crop a stream of length {now} to {length}")
        self.check_crop(length, now)
        for window in (self.raw_q, self.raw_k):
            window.crop(length, keep=self.max_rollback + 1)
        if length == 0:
            self.longest = 0

    def apply(self, fn: Callable[[Tensor], Tensor]) -> None:
        """Apply ``fn`` to every held raw value (reordering or repeating batch rows, moving)."""
        for window in (self.raw_q, self.raw_k):
            window.apply(fn)

    def clear(self) -> None:
        """Drop every held raw value."""
        for window in (self.raw_q, self.raw_k):
            window.clear()
        self.longest = 0

    def extra_state_bytes(self) -> int:
        """Bytes of the held raw values (what a PSA cache holds beyond a plain KV cache)."""
        return self.raw_q.nbytes() + self.raw_k.nbytes()
