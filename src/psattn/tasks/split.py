"""Train/eval disjointness: every possible input row belongs to exactly one split.

A row's split is a fixed function of its tokens: ``row_hash(row) % EVAL_BUCKETS == 0``
means "eval", anything else "train". ``row_hash`` is a polynomial hash modulo the
Mersenne prime 2^31 - 1, computed in int64 torch arithmetic (no overflow: every
product stays below 2^62). Samplers draw candidate rows from the generator and keep
only those of the requested split (rejection sampling, see ``sample_split``), so no
train row can ever equal an eval row, whatever seeds or batch sizes are used. About
1/EVAL_BUCKETS of all rows are eval rows; a fixed eval set is obtained by sampling
the eval split from a generator with a fixed seed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch
from torch import Tensor

from psattn.tasks.batch import TaskBatch, check_rows

SPLITS = ("train", "eval")
EVAL_BUCKETS = 4

_MODULUS = 2**31 - 1
_BASE = 1_103_515_245 % _MODULUS
_MIX = 48_271
_MAX_ROUNDS = 64


def check_split(split: str) -> None:
    """Raise ValueError unless ``split`` is one of ``SPLITS``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def check_draw(batch_size: int, generator: torch.Generator) -> None:
    """ValueError / TypeError naming the argument unless ``batch_size`` is an integer >= 1 and ``generator`` a
    ``torch.Generator`` (every sampler draws ``batch_size`` rows from it)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator (torch.Generator().manual_seed(seed)), "
                        f"got {type(generator).__name__}")


def row_hash(inputs: Tensor) -> Tensor:
    """(B,) int64 hash in [0, 2^31 - 1) of each row of ``inputs`` (B, T), tokens >= 0. ``inputs`` that are not an
    integer tensor are a TypeError, and a shape other than (B, T) a ValueError."""
    check_rows(inputs)  # float rows had a float hash
    seq_len = inputs.shape[1]
    powers = [1] * seq_len  # powers[t] = BASE^(T-1-t) mod p
    for t in range(seq_len - 2, -1, -1):
        powers[t] = powers[t + 1] * _BASE % _MODULUS
    weights = torch.tensor(powers, dtype=torch.int64, device=inputs.device)  # (T,)
    terms = (inputs.remainder(_MODULUS) + 1) * weights % _MODULUS  # (B, T), each < 2^31
    hashed = terms.sum(dim=1) % _MODULUS  # (B,)
    return (hashed * _MIX + seq_len) % _MODULUS


def in_split(inputs: Tensor, split: str) -> Tensor:
    """(B,) bool: which rows of ``inputs`` (B, T) belong to ``split``."""
    check_split(split)
    is_eval = row_hash(inputs) % EVAL_BUCKETS == 0
    return is_eval if split == "eval" else ~is_eval


def sample_split(draw: Callable[[int], TaskBatch], batch_size: int, split: str) -> TaskBatch:
    """``batch_size`` rows of ``split``, drawn by rejection from ``draw(n)``.

    ``draw`` must be a pure function of its argument and a generator's state, so the
    result is a pure function of the same state.
    """
    check_split(split)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    keep_rate = 1 / EVAL_BUCKETS if split == "eval" else 1 - 1 / EVAL_BUCKETS
    inputs: list[Tensor] = []
    targets: list[Tensor] = []
    have = 0
    for _ in range(_MAX_ROUNDS):
        candidates = draw(math.ceil(1.25 * (batch_size - have) / keep_rate) + 8)
        keep = in_split(candidates.inputs, split)
        inputs.append(candidates.inputs[keep])
        targets.append(candidates.targets[keep])
        have += int(keep.sum())
        if have >= batch_size:
            break
    else:
        raise ValueError(
            f"could not draw {batch_size} {split!r} rows in {_MAX_ROUNDS} rounds: the task's possible rows are too "
            f"few for a train/eval split; make them more (a longer seq_len, more keys or values)"
        )
    return TaskBatch(torch.cat(inputs)[:batch_size], torch.cat(targets)[:batch_size])
