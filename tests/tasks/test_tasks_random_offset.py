import pytest
import torch
from hypothesis import strategies as st

from psattn.tasks import IGNORE_INDEX, RandomOffsetConfig
from psattn.tasks.random_offset import BOS
from psattn.tasks.registry import sample_task
from tasks.checks import bad_configs_raise, config_property, seeded_batch


def decode(config: RandomOffsetConfig, token: int) -> tuple[str, int | tuple[int, int]]:
    """('bos', 0) | ('query', k) | ('value', v) | ('pair', (k, v)), by brute force over the layout."""
    if token == BOS:
        return "bos", 0
    for k in range(config.num_keys):
        if token == config.query_token(k):
            return "query", k
        for v in range(config.num_values):
            if token == config.pair_token(k, v):
                return "pair", (k, v)
    for v in range(config.num_values):
        if token == config.value_token(v):
            return "value", v
    raise AssertionError(f"token {token} outside the vocabulary")


def reference_targets(config: RandomOffsetConfig, row: list[int]) -> list[int]:
    """Brute force: each query Q(k) is labelled V(v) for the context's F(k, v); order is ignored."""
    bound = {}
    for token in row:
        kind, what = decode(config, token)
        if kind == "pair":
            key, value = what
            assert key not in bound, "a key is bound twice"
            bound[key] = value
    targets = []
    for token in row:
        kind, what = decode(config, token)
        targets.append(config.value_token(bound[what]) if kind == "query" else IGNORE_INDEX)
    return targets


def check_row(config: RandomOffsetConfig, row: list[int], labels: list[int]) -> None:
    kinds = [decode(config, token)[0] for token in row]
    n_q = config.num_queries
    assert kinds[0] == "bos" and "bos" not in kinds[1:]
    assert kinds[-n_q:] == ["query"] * n_q and "query" not in kinds[:-n_q]
    assert kinds.count("pair") == config.num_pairs
    assert set(kinds[1:-n_q]) <= {"pair", "value"}
    asked = [decode(config, token)[1] for token in row[-n_q:]]
    assert len(set(asked)) == n_q
    assert labels == reference_targets(config, row)


def test_docstring_example():
    config = RandomOffsetConfig(num_keys=3, num_values=2, seq_len=10, num_pairs=2, num_queries=2)
    assert config.vocab_size == 12
    assert (config.query_token(2), config.value_token(1), config.pair_token(2, 1)) == (3, 5, 11)
    row = [0, 4, 5, 8, 11, 5, 5, 5, 3, 2]
    labels = [IGNORE_INDEX] * 8 + [5, 4]
    check_row(config, row, labels)


def test_layout_is_a_bijection_onto_the_vocabulary():
    config = RandomOffsetConfig(num_keys=4, num_values=3, num_pairs=4)
    tokens = {BOS}
    tokens |= {config.query_token(k) for k in range(4)} | {config.value_token(v) for v in range(3)}
    tokens |= {config.pair_token(k, v) for k in range(4) for v in range(3)}
    assert tokens == set(range(config.vocab_size)) and config.vocab_size == 1 + 4 + 3 + 12


@pytest.mark.parametrize("split", ["train", "eval"])
def test_rows_match_the_brute_force_checker(split):
    config = RandomOffsetConfig(num_keys=6, num_values=4, seq_len=20, num_pairs=5, num_queries=3)
    batch = seeded_batch(config, batch_size=60, split=split)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        check_row(config, row, labels)


def test_target_does_not_depend_on_context_order():
    config = RandomOffsetConfig(num_keys=8, num_values=4, seq_len=24, num_pairs=6, num_queries=2)
    batch = seeded_batch(config, batch_size=30)
    generator = torch.Generator().manual_seed(9)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        context = row[1:-2]
        shuffled = [context[i] for i in torch.randperm(len(context), generator=generator).tolist()]
        assert reference_targets(config, [row[0], *shuffled, *row[-2:]]) == labels


def test_predecessor_of_the_answer_pair_carries_no_information():
    # The token before the queried pair names the answer's value no more often than chance (1/N).
    config = RandomOffsetConfig(num_keys=16, num_values=8, seq_len=64, num_pairs=8, num_queries=1)
    batch = seeded_batch(config, batch_size=4000)
    agree = 0
    offsets = set()
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        _, key = decode(config, row[-1])
        answer_pair = ("pair", (key, labels[-1] - config.value_token(0)))
        position = next(j for j, token in enumerate(row) if decode(config, token) == answer_pair)
        offsets.add(len(row) - 1 - position)
        kind, what = decode(config, row[position - 1])
        predecessor_value = what[1] if kind == "pair" else what if kind == "value" else -1
        agree += config.value_token(predecessor_value) == labels[-1]
    assert abs(agree / len(batch) - 1 / config.num_values) < 0.03
    assert len(offsets) > 50  # the answer sits at (almost) every possible offset


test_property = config_property(
    RandomOffsetConfig, check_row,
    num_keys=st.integers(1, 8),
    num_values=st.integers(2, 6),
    seq_len=st.integers(3, 30),
    num_pairs=st.integers(1, 8),
    num_queries=st.integers(1, 4),
)


test_bad_configs_raise_naming_the_field = bad_configs_raise(RandomOffsetConfig, [
    ({"num_keys": 0}, "num_keys must be >= 1"),
    ({"num_values": 1}, "num_values must be >= 2"),
    ({"num_keys": 4, "num_pairs": 5}, r"num_pairs must be in \[1, num_keys=4\]"),
    ({"num_pairs": 2, "num_queries": 3}, r"num_queries must be in \[1, num_pairs=2\]"),
    ({"seq_len": 9, "num_pairs": 8, "num_queries": 1}, "seq_len=9 too short"),
    # the vocabulary grows as num_keys * num_values: 10**9 keys drew 4 GB of floats per row (~48 GB a batch)
    ({"num_keys": 10**9}, r"vocab_size=9000000009 .* exceeds 2\*\*20 = 1048576.*num_keys may be up to 116507"),
    ({"num_keys": 116508}, r"vocab_size=1048581 .*num_keys may be up to 116507"),
    ({"num_values": 10**9}, r"num_values may be up to 61679"),
    ({"num_keys": 10**9, "num_values": 10**9}, "make both smaller"),
])


def test_the_largest_vocabulary_allowed_draws():
    config = RandomOffsetConfig(num_keys=116507)
    batch = sample_task(config, 2, torch.Generator().manual_seed(0))
    assert config.vocab_size <= 2**20 and batch.inputs.shape == (2, 64) and int(batch.inputs.max()) < config.vocab_size
