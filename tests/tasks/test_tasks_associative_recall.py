import dataclasses
import json

import numpy as np
import pytest
from hypothesis import strategies as st

from psattn.tasks import IGNORE_INDEX, AssociativeRecallConfig
from psattn.tasks.associative_recall import BOS, FIRST_KEY, PAD
from tasks.checks import bad_configs_raise, config_property, seeded_batch


def reference_targets(config: AssociativeRecallConfig, row: list[int]) -> list[int]:
    """Brute force: read the pairs after BOS, then label each non-PAD query token with its value."""
    n = config.num_pairs
    pairs = {row[1 + 2 * i]: row[2 + 2 * i] for i in range(n)}
    targets = [IGNORE_INDEX] * (1 + 2 * n)
    targets += [pairs[token] if token != PAD else IGNORE_INDEX for token in row[1 + 2 * n :]]
    return targets


def check_row(config: AssociativeRecallConfig, row: list[int], labels: list[int]) -> None:
    n, half = config.num_pairs, config.vocab_size // 2
    assert row[0] == BOS
    keys, values = row[1 : 1 + 2 * n : 2], row[2 : 2 + 2 * n : 2]
    assert all(FIRST_KEY <= k < half for k in keys) and len(set(keys)) == n
    assert all(half <= v < config.vocab_size for v in values) and len(set(values)) == n
    section = row[1 + 2 * n :]
    offsets = [i for i, token in enumerate(section) if token != PAD]
    assert sorted(section[i] for i in offsets) == sorted(keys)  # every key queried exactly once
    assert all(i % 2 == 0 for i in offsets)
    assert labels == reference_targets(config, row)


def test_docstring_example():
    config = AssociativeRecallConfig(vocab_size=16, seq_len=13, num_pairs=2, power_a=1.0)
    row = [0, 3, 10, 6, 12, 3, 1, 1, 1, 6, 1, 1, 1]
    labels = [IGNORE_INDEX] * 5 + [10] + [IGNORE_INDEX] * 3 + [12] + [IGNORE_INDEX] * 3
    check_row(config, row, labels)


@pytest.mark.parametrize("split", ["train", "eval"])
@pytest.mark.parametrize("power_a", [0.01, 1.0])
def test_rows_match_the_brute_force_checker(split, power_a):
    config = AssociativeRecallConfig(vocab_size=64, seq_len=48, num_pairs=6, power_a=power_a)
    batch = seeded_batch(config, batch_size=60, split=split)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        check_row(config, row, labels)
    assert bool((batch.scored.sum(dim=1) == 6).all())


def test_power_law_favours_early_queries():
    def mean_offset(power_a):
        config = AssociativeRecallConfig(vocab_size=64, seq_len=81, num_pairs=4, power_a=power_a)
        batch = seeded_batch(config, batch_size=1000)
        positions = batch.scored.nonzero()[:, 1].float()
        return (positions - 9).mean().item()  # offset within the query section

    uniform, skewed = mean_offset(1.0), mean_offset(0.01)
    assert abs(uniform - 35) < 2  # gaps uniform in 0..35, four distinct: mean offset 2 * 17.5
    assert skewed < uniform - 10
    assert mean_offset(1e4) == 2 * (35 + 34 + 33 + 32) / 4  # a huge power_a: the four latest gaps, no overflow


def test_full_query_section_is_supported():
    config = AssociativeRecallConfig(vocab_size=32, seq_len=17, num_pairs=4)  # exactly 4 gaps for 4 queries
    batch = seeded_batch(config, batch_size=20)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        check_row(config, row, labels)


test_property = config_property(
    AssociativeRecallConfig, check_row,
    vocab_size=st.integers(4, 64),
    seq_len=st.integers(5, 60),
    num_pairs=st.integers(1, 12),
    power_a=st.sampled_from([0.01, 0.5, 1.0]),
)


test_bad_configs_raise_naming_the_field = bad_configs_raise(AssociativeRecallConfig, [
    ({"num_pairs": 0}, "num_pairs must be >= 1"),
    ({"vocab_size": 16, "num_pairs": 8}, "vocab_size=16 too small for num_pairs=8"),
    ({"seq_len": 32, "num_pairs": 8}, "seq_len=32 too short for num_pairs=8"),
    ({"power_a": 0.0}, r"power_a must be a finite number > 0, got 0.0"),
    ({"power_a": float("inf")}, r"power_a must be a finite number > 0, got inf"),
    ({"power_a": float("nan")}, r"power_a must be a finite number > 0, got nan"),
    ({"power_a": True}, r"power_a must be a finite number > 0, got True"),
    ({"power_a": "1"}, r"power_a must be a finite number > 0, got '1'"),
])


def test_a_numpy_power_a_is_stored_as_a_float_a_run_can_write():
    """np.float32(0.5) passed the checks and was kept: a run's config.json then failed with a TypeError
    traceback ('Object of type float32 is not JSON serializable')."""
    config = AssociativeRecallConfig(vocab_size=16, seq_len=17, num_pairs=2, power_a=np.float32(0.5))
    assert type(config.power_a) is float and config == AssociativeRecallConfig(vocab_size=16, seq_len=17, num_pairs=2,
                                                                                power_a=0.5)
    assert json.loads(json.dumps(dataclasses.asdict(config)))["power_a"] == 0.5
