"""Negative control 2 (arXiv 2609.32319): two-hop reasoning over facts with negation.

Vocabulary::

    0 BOS    1 PAD    2 "->" (IS)    3 "NOT->" (NOT)    4 "?" (QUERY)
    5 .. vocab_size-1   entities (interchangeable names, drawn afresh per row)

A fact is three tokens [s, REL, o]: "s -> o" reads "s points to o", "s NOT-> o" reads
"s does not point to o". Each row draws ``num_entities`` distinct entities ``e_0..e_{m-1}``
(a uniform subset in uniform order) and a pointer map f that is one cycle,
``f(e_i) = e_{i+1 mod m}``. For every entity s it states the positive fact "s -> f(s)" and
one negated fact "s NOT-> g(s)", g(s) uniform over the entities other than s, f(s) and
f(f(s)) (so no single fact about x names the answer); the 2m facts are shuffled. A
query is [?, x]; the position of x is scored with f(f(x)), the entity two positive
hops away. Queries ask for ``num_queries`` distinct entities.
Row = [BOS] + PAD * (seq_len - 1 - 6m - 2q) + facts + queries.

Why negation matters: every entity is the subject of one positive and one negated fact,
so a hop that ignores the marker picks the wrong object half the time, and a path with
a negated hop (f∘g, g∘f) never ends at the answer (g∘g only by chance). Because f is
one cycle, every entity is a subject twice and a positive object once, so counts give
next to nothing away, and f(f(x)) is never x or f(x). Two hops compose two lookups,
which a key-lag shear does not provide; the paper reports no gain here. Example (vocab 12:
entities 5..11; num_entities 4, num_queries 1, seq_len 28; one PAD), facts grouped::

    inputs   0  1 | 8 3 5 | 5 3 10 | 7 2 10 | 10 2 5 | 10 3 7 | 5 2 8 | 8 2 7 | 7 3 8 | 4  7
    targets  .  . | . . . | . .  . | . .  . |  . . . |  . . . | . . . | . . . | . . . | .  5

    positive facts 7 -> 10 -> 5 -> 8 -> 7 (the cycle f); negated facts 8 NOT-> 5,
    5 NOT-> 10, 10 NOT-> 7, 7 NOT-> 8. The query "? 7" (last two positions) is scored
    at the 7 with f(f(7)) = f(10) = 5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from psattn.fields import check_ints
from psattn.tasks._checks import check_at_least, check_seq_len, check_up_to, check_vocab_size
from psattn.tasks._random import random_subsets, shuffle_rows
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch
from psattn.tasks.split import check_draw, sample_split

BOS, PAD, IS, NOT, QUERY = 0, 1, 2, 3, 4
FIRST_ENTITY = 5


@dataclass(frozen=True)
class MultiHopConfig:
    """Two-hop pointer chasing with negated facts (see the module docstring)."""

    vocab_size: int = 64
    seq_len: int = 64
    num_entities: int = 8
    num_queries: int = 4

    def __post_init__(self) -> None:
        check_ints(self, "multi-hop task")
        check_vocab_size(self)
        check_at_least(self, "num_entities", 4, "a cycle with a separate negated object")
        if self.vocab_size < FIRST_ENTITY + self.num_entities:
            raise ValueError(
                f"vocab_size={self.vocab_size} too small for num_entities={self.num_entities}: "
                f"{FIRST_ENTITY} special tokens + entities needs {FIRST_ENTITY + self.num_entities}"
            )
        check_up_to(self, "num_queries", "num_entities")
        check_seq_len(
            self, 1 + 6 * self.num_entities + 2 * self.num_queries,
            "BOS + 6*num_entities fact tokens + 2*num_queries query tokens",
        )


def _draw(config: MultiHopConfig, rows: int, generator: torch.Generator) -> TaskBatch:
    device = generator.device
    m, n_queries = config.num_entities, config.num_queries
    entities = FIRST_ENTITY + random_subsets(rows, config.vocab_size - FIRST_ENTITY, m, generator)  # (B, m)
    index = torch.arange(m, device=device)
    positive = entities[:, (index + 1) % m]  # f(e_i) = e_{i+1}
    skip = torch.randint(3, m, (rows, m), generator=generator, device=device)  # g: any offset but 0, 1, 2
    negative = entities.gather(1, (index + skip) % m)
    relation = torch.full_like(entities, IS)
    facts = torch.cat(
        [
            torch.stack([entities, relation, positive], dim=-1),  # (B, m, 3)
            torch.stack([entities, relation + (NOT - IS), negative], dim=-1),
        ],
        dim=1,
    )  # (B, 2m, 3)
    facts = shuffle_rows(facts, generator).reshape(rows, 6 * m)  # (B, 6m)
    asked = random_subsets(rows, m, n_queries, generator)  # (B, q) indices into the cycle
    subjects = entities.gather(1, asked)
    answers = entities.gather(1, (asked + 2) % m)
    queries = torch.stack([torch.full_like(subjects, QUERY), subjects], dim=-1).reshape(rows, 2 * n_queries)
    padding = torch.full((rows, config.seq_len - 1 - 6 * m - 2 * n_queries), PAD, device=device)
    bos = torch.full((rows, 1), BOS, device=device)
    inputs = torch.cat([bos, padding, facts, queries], dim=1)  # (B, T)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, config.seq_len - 2 * n_queries + 1 :: 2] = answers
    return TaskBatch(inputs, targets)


def sample(
    config: MultiHopConfig, batch_size: int, generator: torch.Generator, split: str = "train"
) -> TaskBatch:
    """``batch_size`` two-hop rows of ``split`` (see the module docstring)."""
    check_draw(batch_size, generator)
    return sample_split(lambda rows: _draw(config, rows, generator), batch_size, split)
