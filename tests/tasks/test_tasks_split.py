import pytest
import torch

from psattn.tasks import EVAL_BUCKETS, IGNORE_INDEX, TaskBatch, in_split, row_hash
from psattn.tasks.split import sample_split


def test_row_hash_is_a_function_of_the_row_only():
    rows = torch.randint(0, 50, (64, 32), generator=torch.Generator().manual_seed(0))
    hashed = row_hash(rows)
    assert hashed.shape == (64,) and hashed.dtype == torch.int64
    assert torch.equal(hashed, row_hash(rows.clone()))
    assert torch.equal(hashed[5:6], row_hash(rows[5:6]))  # independent of the other rows
    assert bool((hashed >= 0).all()) and bool((hashed < 2**31 - 1).all())


def test_row_hash_sees_every_position_and_the_length():
    row = torch.zeros(1, 40, dtype=torch.int64)
    base = row_hash(row)
    for t in range(40):
        changed = row.clone()
        changed[0, t] = 1
        assert row_hash(changed) != base
    assert row_hash(torch.zeros(1, 39, dtype=torch.int64)) != base


def test_eval_bucket_holds_about_one_in_eval_buckets_rows():
    rows = torch.randint(0, 64, (20000, 48), generator=torch.Generator().manual_seed(1))
    fraction = in_split(rows, "eval").float().mean().item()
    assert abs(fraction - 1 / EVAL_BUCKETS) < 0.015


def test_splits_partition_rows():
    rows = torch.randint(0, 64, (1000, 16), generator=torch.Generator().manual_seed(2))
    train, evaluation = in_split(rows, "train"), in_split(rows, "eval")
    assert bool((train ^ evaluation).all())


def test_unknown_split_and_bad_batch_size():
    rows = torch.zeros(2, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="split must be one of"):
        in_split(rows, "test")
    zeros = torch.zeros(64, 4, dtype=torch.int64)
    draw = lambda n: TaskBatch(zeros[:n], zeros[:n])  # noqa: E731
    with pytest.raises(ValueError, match="split must be one of"):
        sample_split(draw, 4, "validation")
    with pytest.raises(ValueError, match="batch_size"):
        sample_split(draw, 0, "train")


def test_sample_split_gives_up_when_a_split_is_empty():
    row = torch.arange(6).view(1, 6)
    split = "train" if bool(in_split(row, "eval")) else "eval"  # the split this row is not in
    draw = lambda n: TaskBatch(row.expand(n, -1).clone(), torch.full((n, 6), IGNORE_INDEX))  # noqa: E731
    with pytest.raises(ValueError, match="possible rows are too few for a train/eval split"):
        sample_split(draw, 3, split)
