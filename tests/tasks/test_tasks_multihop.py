import pytest
import torch
from hypothesis import strategies as st

from psattn.tasks import IGNORE_INDEX, MultiHopConfig
from psattn.tasks.multihop import BOS, FIRST_ENTITY, IS, NOT, PAD, QUERY
from tasks.checks import bad_configs_raise, config_property, seeded_batch


def parse(config: MultiHopConfig, row: list[int]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Brute force: (facts as (subject, relation, object), queried entities), checking the layout."""
    m, q = config.num_entities, config.num_queries
    n_pad = config.seq_len - 1 - 6 * m - 2 * q
    assert row[0] == BOS and row[1 : 1 + n_pad] == [PAD] * n_pad
    fact_tokens = row[1 + n_pad : 1 + n_pad + 6 * m]
    facts = [tuple(fact_tokens[i : i + 3]) for i in range(0, 6 * m, 3)]
    query_tokens = row[config.seq_len - 2 * q :]
    assert query_tokens[0::2] == [QUERY] * q
    return facts, query_tokens[1::2]


def reference_targets(config: MultiHopConfig, row: list[int]) -> list[int]:
    """Brute force: follow two positive facts from each queried entity; ignore negated ones."""
    facts, _ = parse(config, row)
    points_to = {}
    for subject, relation, obj in facts:
        if relation == IS:
            assert subject not in points_to, "two positive facts about one subject"
            points_to[subject] = obj
    targets = [IGNORE_INDEX] * len(row)
    for t in range(1, len(row)):
        if row[t - 1] == QUERY:
            targets[t] = points_to[points_to[row[t]]]
    return targets


def check_row(config: MultiHopConfig, row: list[int], labels: list[int]) -> None:
    facts, asked = parse(config, row)
    entities = {s for s, _, _ in facts}
    assert len(entities) == config.num_entities
    assert all(token >= FIRST_ENTITY for token in entities)
    assert all(relation in (IS, NOT) and obj in entities for _, relation, obj in facts)
    positive = {s: o for s, r, o in facts if r == IS}
    negative = {s: o for s, r, o in facts if r == NOT}
    assert set(positive) == set(negative) == entities  # one fact of each polarity per entity
    start, seen, current = next(iter(entities)), [], None  # f is one cycle through every entity
    current = start
    for _ in range(config.num_entities):
        seen.append(current)
        current = positive[current]
    assert current == start and len(set(seen)) == config.num_entities
    for s in entities:
        assert negative[s] not in (s, positive[s], positive[positive[s]])
    assert len(set(asked)) == config.num_queries and set(asked) <= entities
    assert labels == reference_targets(config, row)


def test_docstring_example():
    config = MultiHopConfig(vocab_size=12, seq_len=28, num_entities=4, num_queries=1)
    row = [0, 1, 8, 3, 5, 5, 3, 10, 7, 2, 10, 10, 2, 5, 10, 3, 7, 5, 2, 8, 8, 2, 7, 7, 3, 8, 4, 7]
    labels = [IGNORE_INDEX] * 27 + [5]
    check_row(config, row, labels)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_rows_match_the_brute_force_checker(split):
    config = MultiHopConfig(vocab_size=30, seq_len=64, num_entities=8, num_queries=4)
    batch = seeded_batch(config, batch_size=60, split=split)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        check_row(config, row, labels)


def test_only_query_entity_positions_are_scored():
    config = MultiHopConfig(vocab_size=30, seq_len=64, num_entities=8, num_queries=4)
    batch = seeded_batch(config)
    expected = torch.zeros(64, dtype=torch.bool)
    expected[64 - 8 + 1 :: 2] = True
    assert bool((batch.scored == expected).all())


def test_ignoring_negation_gets_the_answer_wrong():
    # Following the negated fact at either hop never lands on the answer.
    config = MultiHopConfig(vocab_size=40, seq_len=64, num_entities=8, num_queries=2)
    batch = seeded_batch(config, batch_size=50)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        facts, asked = parse(config, row)
        f = {s: o for s, r, o in facts if r == IS}
        g = {s: o for s, r, o in facts if r == NOT}
        answers = [label for label in labels if label != IGNORE_INDEX]
        for x, answer in zip(asked, answers, strict=True):
            assert answer == f[f[x]]
            assert answer not in (g[x], f[g[x]], g[f[x]])


test_property = config_property(
    MultiHopConfig, check_row,
    vocab_size=st.integers(9, 30),
    seq_len=st.integers(20, 80),
    num_entities=st.integers(4, 10),
    num_queries=st.integers(1, 5),
)


test_bad_configs_raise_naming_the_field = bad_configs_raise(MultiHopConfig, [
    ({"num_entities": 3}, "num_entities must be >= 4"),
    ({"vocab_size": 12, "num_entities": 8}, "vocab_size=12 too small for num_entities=8"),
    ({"num_queries": 0}, r"num_queries must be in \[1, num_entities=8\]"),
    ({"num_entities": 4, "num_queries": 5}, r"num_queries must be in \[1, num_entities=4\]"),
    ({"seq_len": 50, "num_entities": 8, "num_queries": 4}, "seq_len=50 too short"),
])
