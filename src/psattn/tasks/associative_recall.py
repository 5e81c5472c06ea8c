"""Multi-query associative recall (MQAR, Zoology; arXiv 2609.32319).

Vocabulary (Zoology's halves, with our BOS in front)::

    0 BOS    1 PAD (filler in the query section)
    2 .. vocab_size//2 - 1              keys
    vocab_size//2 .. vocab_size - 1     values

Row = [BOS] + k_1 v_1 ... k_n v_n + query section (seq_len - 1 - 2n tokens). Keys are
distinct, values are distinct (as in Zoology), both uniform. Every key is queried
exactly once: the query section is PAD except key k_i at offset 2·gap_i, with distinct
gaps in 0..section//2 - 1 drawn with P(gap) ∝ (gap + 1)^(power_a - 1) (Zoology's power
law: power_a = 1 is uniform, small values favour early queries). Each query key's
position is scored with its value; nothing else is scored. As in Zoology the values
are not repeated after the query keys; unlike Zoology, rows start with BOS and the
filler is PAD = 1 rather than 0. Example (vocab 16: keys 2..7, values 8..15; seq_len
13, num_pairs 2, power_a 1)::

    pos      0  1  2  3  4  5  6  7  8  9 10 11 12
    inputs   0  3 10  6 12  3  1  1  1  6  1  1  1
    targets  .  .  .  .  . 10  .  .  . 12  .  .  .      (. = IGNORE_INDEX)

    pairs 3 -> 10 and 6 -> 12; the query keys sit at pos 5 and 9 (gaps 0 and 2).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from psattn.fields import check_ints
from psattn.tasks._checks import check_at_least, check_seq_len, check_vocab_size
from psattn.tasks._random import random_subsets
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch
from psattn.tasks.split import check_draw, sample_split

BOS, PAD = 0, 1
FIRST_KEY = 2


@dataclass(frozen=True)
class AssociativeRecallConfig:
    """MQAR: ``num_pairs`` key-value pairs, each key queried once."""

    vocab_size: int = 128
    seq_len: int = 64
    num_pairs: int = 8
    power_a: float = 0.01

    def __post_init__(self) -> None:
        check_ints(self, "MQAR task")
        check_vocab_size(self)
        check_at_least(self, "num_pairs", 1)
        if self.num_keys < self.num_pairs or self.num_values < self.num_pairs:
            raise ValueError(
                f"vocab_size={self.vocab_size} too small for num_pairs={self.num_pairs}: it gives "
                f"{max(self.num_keys, 0)} keys and {max(self.num_values, 0)} values, each must be >= num_pairs "
                f"(vocab_size >= {2 * self.num_pairs + FIRST_KEY})"
            )
        check_seq_len(
            self, 1 + 4 * self.num_pairs,
            "BOS + 2*num_pairs pair tokens + a query section of 2*num_pairs", given="num_pairs",
        )
        a = self.power_a
        if isinstance(a, bool) or not isinstance(a, numbers.Real) or not (math.isfinite(a) and a > 0):
            raise ValueError(f"power_a must be a finite number > 0, got {a!r}")
        if type(a) not in (int, float):  # NumPy's float32 too: a run writes its config as JSON
            object.__setattr__(self, "power_a", float(a))

    @property
    def num_keys(self) -> int:
        """Key ids available: 2 .. vocab_size//2 - 1."""
        return self.vocab_size // 2 - FIRST_KEY

    @property
    def num_values(self) -> int:
        """Value ids available: vocab_size//2 .. vocab_size - 1."""
        return self.vocab_size - self.vocab_size // 2


def _draw(config: AssociativeRecallConfig, rows: int, generator: torch.Generator) -> TaskBatch:
    device = generator.device
    n = config.num_pairs
    keys = FIRST_KEY + random_subsets(rows, config.num_keys, n, generator)  # (B, n)
    values = config.vocab_size // 2 + random_subsets(rows, config.num_values, n, generator)  # (B, n)
    pairs = torch.stack([keys, values], dim=-1).reshape(rows, 2 * n)  # (B, 2n): k1 v1 k2 v2 ...
    section = config.seq_len - 1 - 2 * n
    gap = torch.arange(1, section // 2 + 1, device=device, dtype=torch.float64)
    log_weights = (config.power_a - 1) * gap.log()  # (section // 2,): P(gap) ∝ (gap + 1)^(a - 1), in logs
    # n distinct gaps as torch.multinomial draws them without replacement (the n largest weight / E, E ~ Exp(1):
    # Efraimidis and Spirakis, 2006), with the same draws, in logs: no weight overflows or underflows at large a
    noise = torch.empty(rows, len(gap), device=device, dtype=torch.float64).exponential_(generator=generator)
    slots = 2 * (log_weights - noise.log()).topk(n, dim=-1).indices  # (B, n)
    queries = torch.full((rows, section), PAD, device=device).scatter_(1, slots, keys)
    answers = torch.full((rows, section), IGNORE_INDEX, device=device).scatter_(1, slots, values)
    bos = torch.full((rows, 1), BOS, device=device)
    inputs = torch.cat([bos, pairs, queries], dim=1)  # (B, T)
    unscored = torch.full((rows, 1 + 2 * n), IGNORE_INDEX, device=device)  # BOS and the pairs
    targets = torch.cat([unscored, answers], dim=1)  # (B, T)
    return TaskBatch(inputs, targets)


def sample(
    config: AssociativeRecallConfig, batch_size: int, generator: torch.Generator, split: str = "train"
) -> TaskBatch:
    """``batch_size`` MQAR rows of ``split`` (see the module docstring)."""
    check_draw(batch_size, generator)
    return sample_split(lambda rows: _draw(config, rows, generator), batch_size, split)
