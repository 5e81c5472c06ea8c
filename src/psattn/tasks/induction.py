"""SHT hop-1 induction (arXiv 2609.32319): copy the token that followed the previous occurrence.

Vocabulary: id 0 is BOS and starts every row; ids 1..vocab_size-1 are content tokens,
all interchangeable (their names carry no meaning; only in-context repeats matter).

Full-sequence form (``form="all_positions"``: every repeat is scored; ``"full"``, its older
spelling, is still read as ``"all_positions"``). Row = [BOS] + seq_len-1 content tokens drawn
i.i.d. uniformly (with replacement), so repeats occur at random offsets; how many
depends on vocab_size / seq_len (about 37% of positions at vocab 64, length 64).
Position t is scored iff inputs[t] occurred at some j < t; its target is inputs[j+1]
for the most recent such j (see ``induction_targets``). The successor is an independent
uniform token, so only induction tells which one it is; but it is a token of the row, more
often one that occurs often, so counting alone (guessing the most frequent token so far)
scores about 0.08 at vocab 64, length 64: five times a uniform guess's 1/63, and the level a
model that does not copy sits at. Example (vocab 8, length 12)::

    pos      0  1  2  3  4  5  6  7  8  9 10 11
    inputs   0  3  5  3  7  5  2  6  3  2  1  4
    targets  .  .  .  5  .  3  .  .  7  6  .  .      (. = IGNORE_INDEX)

(the 3 at pos 8 looks back to the most recent 3, at pos 3, so its target is 7).

Single-answer form (``form="single"``). Row = [BOS] + body (seq_len-2 tokens) + [q].
The query q (the last token) occurs exactly once in the body, at a uniform position
that is not the body's last slot; the target, scored only at the last position, is
the token after it. The other seq_len-3 body slots ("filler") never hold q and carry
*repeated distractors*: exactly ``num_distractors`` distinct tokens occur two or more
times (each with its own random successors), every other filler token once. Filler
tokens are a random subset of the vocabulary minus {BOS, q}; when the filler is longer
than that pool can cover with ``num_distractors`` extra copies, every pool token is used
and the surplus copies are spread over the distractors. The answer is the token in a
uniformly random filler slot, so its in-context count has the same law as any filler
token's: counting (unigram statistics) does not identify it (guessing the most frequent token
scores about 0.03 at vocab 64, length 64, against a uniform guess's 1/62), and the distractors mean
"copy after the repeated token" is not a shortcut either. Example (vocab 12, length 12,
num_distractors 2: 4 and 9 repeat)::

    pos      0  1  2  3  4  5  6  7  8  9 10 11
    inputs   0  4  9  7  2  4 11  9  5  3  8  7
    targets  .  .  .  .  .  .  .  .  .  .  .  2      (q = 7, seen at pos 3, then 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from psattn.fields import check_choices, check_ints
from psattn.tasks._checks import check_vocab_size
from psattn.tasks._random import random_subsets
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch, check_rows
from psattn.tasks.split import check_draw, sample_split

BOS = 0
Form = Literal["single", "all_positions"]
FORMS: tuple[str, ...] = get_args(Form)
#: older spellings of a form, read as the form they name (a config saved before the rename still loads)
FORM_ALIASES = {"full": "all_positions"}


@dataclass(frozen=True)
class InductionConfig:
    """Induction task. ``num_distractors`` is used by the single form only."""

    vocab_size: int = 64
    seq_len: int = 64
    form: Form = "single"
    num_distractors: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.form, str):  # frozen: the old spelling is replaced once, here
            object.__setattr__(self, "form", FORM_ALIASES.get(self.form, self.form))
        check_choices(self, "induction task")
        check_ints(self, "induction task")
        if self.seq_len < 4:
            raise ValueError(f"seq_len must be >= 4 (BOS, query, answer, query), got {self.seq_len}")
        if self.vocab_size < 3:
            raise ValueError(f"vocab_size must be >= 3 (BOS and two content tokens), got {self.vocab_size}")
        check_vocab_size(self)
        if self.num_distractors < 0:
            raise ValueError(f"num_distractors must be >= 0, got {self.num_distractors}")
        if self.form == "single":
            self._check_single()

    def _check_single(self) -> None:
        fill, pool, d = self.seq_len - 3, self.vocab_size - 2, self.num_distractors
        if self.vocab_size < 4:
            raise ValueError(f"vocab_size must be >= 4 for form='single', got {self.vocab_size}")
        if fill - d <= pool and 2 * d > fill:
            raise ValueError(
                f"num_distractors={d} too large for seq_len={self.seq_len}: each distractor "
                f"needs two of the seq_len-3={fill} filler slots (max {fill // 2})"
            )
        if fill - d > pool and d == 0:
            raise ValueError(
                f"vocab_size={self.vocab_size} too small for seq_len={self.seq_len} with "
                f"num_distractors=0: the filler must repeat tokens; use vocab_size >= "
                f"{self.seq_len - 1} or num_distractors >= 1"
            )
        if fill - d > pool and d > pool:
            raise ValueError(
                f"num_distractors={d} exceeds the vocab_size-2={pool} tokens other than BOS and the query"
            )

    @property
    def filler_layout(self) -> tuple[int, int]:
        """Single form: (distinct filler tokens, extra copies spread over the distractors)."""
        fill, pool = self.seq_len - 3, self.vocab_size - 2
        distinct = min(pool, fill - self.num_distractors)
        return distinct, fill - distinct


def induction_targets(inputs: Tensor) -> Tensor:
    """(B, T) hop-1 labels: at t, inputs[j+1] for the most recent j < t with inputs[j] == inputs[t].

    Positions whose token did not occur before hold IGNORE_INDEX. ``inputs`` that are not an integer tensor are
    a TypeError, and a shape other than (B, T) a ValueError.
    """
    check_rows(inputs)  # a float tensor raised gather()'s error, a (T,) row "not enough values to unpack"
    rows, seq_len = inputs.shape
    positions = torch.arange(seq_len, device=inputs.device)
    keys, order = (inputs * seq_len + positions).sort(dim=1)  # (B, T): by token, then position
    same = keys[:, 1:] // seq_len == keys[:, :-1] // seq_len  # (B, T-1): same token as sorted neighbour
    previous_sorted = torch.full_like(inputs, -1)
    previous_sorted[:, 1:] = torch.where(same, order[:, :-1], -1)
    previous = torch.empty_like(inputs).scatter_(1, order, previous_sorted)  # (B, T) most recent j or -1
    successor = inputs.gather(1, previous + 1)  # previous + 1 <= t
    return torch.where(previous >= 0, successor, IGNORE_INDEX)


def _draw_full(config: InductionConfig, rows: int, generator: torch.Generator) -> TaskBatch:
    device = generator.device
    body = torch.randint(1, config.vocab_size, (rows, config.seq_len - 1), generator=generator, device=device)
    inputs = torch.cat([torch.full((rows, 1), BOS, device=device), body], dim=1)  # (B, T)
    return TaskBatch(inputs, induction_targets(inputs))


def _draw_single(config: InductionConfig, rows: int, generator: torch.Generator) -> TaskBatch:
    device = generator.device
    vocab, seq_len, d = config.vocab_size, config.seq_len, config.num_distractors
    fill = seq_len - 3
    distinct, extra = config.filler_layout
    query = torch.randint(1, vocab, (rows, 1), generator=generator, device=device)  # (B, 1)
    pool_index = random_subsets(rows, vocab - 2, distinct, generator)  # (B, distinct)
    tokens = pool_index + 1 + (pool_index >= query - 1).long()  # skip BOS and the query
    # The first d tokens (a random choice) are the distractors: one extra copy each, the rest at random.
    if extra:
        copies = torch.randint(0, d, (rows, extra), generator=generator, device=device)
        copies[:, :d] = torch.arange(d, device=device)
        tokens = torch.cat([tokens, tokens.gather(1, copies)], dim=1)  # (B, fill)
    filler = tokens.gather(1, random_subsets(rows, fill, fill, generator))  # (B, fill), shuffled
    slot = torch.randint(0, fill, (rows, 1), generator=generator, device=device)  # query's body slot
    body_slots = torch.arange(fill + 1, device=device).expand(rows, -1)  # (B, T-2)
    body = filler.gather(1, body_slots - (body_slots > slot).long())
    body = torch.where(body_slots == slot, query, body)
    bos = torch.full((rows, 1), BOS, device=device)
    inputs = torch.cat([bos, body, query], dim=1)  # (B, T)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, -1:] = filler.gather(1, slot)
    return TaskBatch(inputs, targets)


def sample(
    config: InductionConfig, batch_size: int, generator: torch.Generator, split: str = "train"
) -> TaskBatch:
    """``batch_size`` induction rows of ``split`` (see the module docstring)."""
    draw = _draw_single if config.form == "single" else _draw_full
    check_draw(batch_size, generator)
    return sample_split(lambda rows: draw(config, rows, generator), batch_size, split)
