"""Negative control 1 (arXiv 2609.32319): random-offset retrieval, solvable in one layer.

Design. Each key–value pair is *fused into a single token* F(k, v); a query token
Q(k) at the end of the row asks for the value bound to key k, answered by V(v)::

    id 0                          BOS (starts every row)
    1 .. K                        Q(k)   query for key k           (K = num_keys)
    K+1 .. K+N                    V(v)   value v / answer / noise  (N = num_values)
    K+N+1 + k*N + v               F(k,v) "key k holds value v"
    vocab_size = 1 + K + N + K*N

Row = [BOS] + context (seq_len - 1 - num_queries tokens) + num_queries query tokens.
The context holds ``num_pairs`` fused tokens with distinct keys (uniform), uniform
values, at uniformly random context positions; every other context slot is noise: a
uniform V(v). The queries ask for distinct keys among those present (a uniform
choice, in random order); each query position is scored with the value bound to its
key. Nothing else is scored.

Why this is the control the paper describes (a "randomised-offset" task that the
baseline already solves and where the shear gives nothing):

* One layer suffices. The answer sits inside the very token the query must find, at a
  random offset from the query, so a single softmax head whose query–key score matches
  Q(k) with F(k, ·) and whose value–output map sends F(·, v) to V(v) solves it: plain
  content-addressed retrieval, with no composition of heads.
* The predecessor is irrelevant. The token before F(k, v) (and before each query) is
  noise or another pair, independent of the answer, and the target does not change
  when the context is permuted. The lag-one momentum ``k_j - k_{j-1}`` therefore carries
  no signal, only the predecessor's noise; the shear can only add variance (γ* = 0).

Contrast with induction, where key and value are *adjacent tokens* and one layer must
reach the predecessor. Example (K = 3, N = 2: Q(k) = 1 + k, V(v) = 4 + v,
F(k, v) = 6 + 2k + v; seq_len 10, num_pairs 2, num_queries 2)::

    pos      0  1  2  3  4  5  6  7  8  9
    inputs   0  4  5  8 11  5  5  5  3  2
    targets  .  .  .  .  .  .  .  .  5  4      (. = IGNORE_INDEX)

    8 = F(1, 0) and 11 = F(2, 1) are the pairs, 4 and 5 elsewhere are noise;
    pos 8 holds 3 = Q(2) -> V(1) = 5, pos 9 holds 2 = Q(1) -> V(0) = 4.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from psattn.fields import check_ints
from psattn.tasks._checks import MAX_VOCAB, check_at_least, check_seq_len, check_up_to, check_vocab_size
from psattn.tasks._random import random_subsets
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch
from psattn.tasks.split import check_draw, sample_split

BOS = 0


@dataclass(frozen=True)
class RandomOffsetConfig:
    """Random-offset retrieval; ``vocab_size`` is derived (see the module docstring)."""

    num_keys: int = 16
    num_values: int = 8
    seq_len: int = 64
    num_pairs: int = 8
    num_queries: int = 1

    def __post_init__(self) -> None:
        check_ints(self, "random-offset task")
        check_at_least(self, "num_keys", 1)
        check_at_least(self, "num_values", 2)
        keys, values = self.num_keys, self.num_values  # vocab_size - 1 = (keys + 1)(values + 1) - 1
        most_keys, most_values = (MAX_VOCAB - 1 - values) // (values + 1), (MAX_VOCAB - 1 - keys) // (keys + 1)
        check_vocab_size(self, "1 + num_keys + num_values + num_keys*num_values",
                         f"with num_values={values}, num_keys may be up to {most_keys}" if most_keys >= 1 else
                         f"with num_keys={keys}, num_values may be up to {most_values}" if most_values >= 2 else
                         "make both smaller")
        check_up_to(self, "num_pairs", "num_keys", "keys are distinct")
        check_up_to(self, "num_queries", "num_pairs")
        check_seq_len(self, 1 + self.num_pairs + self.num_queries, "BOS + num_pairs + num_queries")

    @property
    def vocab_size(self) -> int:
        """1 + num_keys + num_values + num_keys * num_values."""
        return 1 + self.num_keys + self.num_values + self.num_keys * self.num_values

    def query_token(self, key: int) -> int:
        """Token id of Q(key)."""
        return 1 + key

    def value_token(self, value: int) -> int:
        """Token id of V(value)."""
        return 1 + self.num_keys + value

    def pair_token(self, key: int, value: int) -> int:
        """Token id of F(key, value)."""
        return 1 + self.num_keys + self.num_values + key * self.num_values + value


def _draw(config: RandomOffsetConfig, rows: int, generator: torch.Generator) -> TaskBatch:
    device = generator.device
    n_pairs, n_queries = config.num_pairs, config.num_queries
    context_len = config.seq_len - 1 - n_queries
    keys = random_subsets(rows, config.num_keys, n_pairs, generator)  # (B, P), random order
    values = torch.randint(0, config.num_values, (rows, n_pairs), generator=generator, device=device)
    pairs = config.pair_token(0, 0) + keys * config.num_values + values  # (B, P)
    noise = torch.randint(0, config.num_values, (rows, context_len), generator=generator, device=device)
    context = config.value_token(0) + noise  # (B, C)
    context.scatter_(1, random_subsets(rows, context_len, n_pairs, generator), pairs)
    queries = config.query_token(0) + keys[:, :n_queries]  # (B, Q): keys are in random order
    bos = torch.full((rows, 1), BOS, device=device)
    inputs = torch.cat([bos, context, queries], dim=1)  # (B, T)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, -n_queries:] = config.value_token(0) + values[:, :n_queries]
    return TaskBatch(inputs, targets)


def sample(
    config: RandomOffsetConfig, batch_size: int, generator: torch.Generator, split: str = "train"
) -> TaskBatch:
    """``batch_size`` random-offset retrieval rows of ``split`` (see the module docstring)."""
    check_draw(batch_size, generator)
    return sample_split(lambda rows: _draw(config, rows, generator), batch_size, split)
