import pytest
import torch

from psattn.tasks import IGNORE_INDEX, TaskBatch, accuracy


def _batch() -> TaskBatch:
    inputs = torch.tensor([[0, 3, 4, 3], [0, 5, 5, 2]])
    targets = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 4], [IGNORE_INDEX, IGNORE_INDEX, 5, 1]])
    return TaskBatch(inputs, targets)


def test_scored_mask():
    assert _batch().scored.tolist() == [[False, False, False, True], [False, False, True, True]]


def test_accuracy_counts_scored_positions_only():
    batch = _batch()
    logits = torch.zeros(2, 4, 6)
    logits[0, 3, 4] = 1.0  # right
    logits[1, 2, 5] = 1.0  # right
    logits[1, 3, 2] = 1.0  # wrong (target 1)
    logits[0, 0, 0] = 1.0  # unscored, irrelevant
    assert accuracy(logits, batch) == pytest.approx(2 / 3)


def test_accuracy_perfect_from_one_hot_targets():
    batch = _batch()
    logits = torch.nn.functional.one_hot(batch.targets.clamp(min=0), 6).float()
    assert accuracy(logits, batch) == 1.0


def test_accuracy_rejects_mismatched_logits_and_empty_batches():
    batch = _batch()
    with pytest.raises(ValueError, match=r"logits must be \(B, T, V\) = \(2, 4, V\) for this batch, got shape \(2, 3, 6\)"):
        accuracy(torch.zeros(2, 3, 6), batch)
    empty = TaskBatch(batch.inputs, torch.full_like(batch.inputs, IGNORE_INDEX))
    with pytest.raises(ValueError, match="no scored"):
        accuracy(torch.zeros(2, 4, 6), empty)
    # an IndexError (too many indices for tensor of dimension 1), then "logits shape (2, 4) does not match targets (2, 4)"
    with pytest.raises(ValueError, match=r"logits must be \(B, T, V\) = \(2, 4, V\) for this batch, got shape \(2, 4\)"):
        accuracy(torch.zeros(2, 4), batch)
    with pytest.raises(TypeError, match=r"logits must be a torch.Tensor \(B, T, V\), got list"):
        accuracy([[0.0] * 4] * 2, batch)  # AttributeError: 'list' object has no attribute 'dim'
    with pytest.raises(TypeError, match="scores against a TaskBatch, got tuple"):
        accuracy(torch.zeros(2, 4, 6), (batch.inputs, batch.targets))  # AttributeError: no attribute 'targets'


def test_batch_validation():
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        TaskBatch(torch.zeros(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="targets shape"):
        TaskBatch(torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="int64"):
        TaskBatch(torch.zeros(2, 4, dtype=torch.int32), torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match="inputs must be a torch.Tensor .* got list"):  # was AttributeError: 'list' ... 'dim'
        TaskBatch([[1, 2]], torch.zeros(1, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match="targets must be a torch.Tensor .* got NoneType"):
        TaskBatch(torch.zeros(1, 2, dtype=torch.int64), None)
    with pytest.raises(ValueError, match="inputs are on cpu, targets on meta"):
        TaskBatch(torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, 2, dtype=torch.int64, device="meta"))


def test_batch_is_frozen_and_movable():
    batch = _batch()
    with pytest.raises(AttributeError):
        batch.inputs = batch.targets  # type: ignore[misc]
    moved = batch.to("cpu")
    assert torch.equal(moved.inputs, batch.inputs) and torch.equal(moved.targets, batch.targets)
    assert len(batch) == 2
