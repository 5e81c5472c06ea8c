from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from psattn.tasks import IGNORE_INDEX, InductionConfig, induction_targets
from psattn.tasks.induction import BOS
from tasks.checks import bad_configs_raise, config_property, seeded_batch


def reference_targets(row: list[int]) -> list[int]:
    """Brute force: target at t is row[j+1] for the largest j < t with row[j] == row[t]."""
    targets = []
    for t, token in enumerate(row):
        label = IGNORE_INDEX
        for j in range(t - 1, -1, -1):
            if row[j] == token:
                label = row[j + 1]
                break
        targets.append(label)
    return targets


def check_single_row(config: InductionConfig, row: list[int], labels: list[int]) -> None:
    """Every documented property of one single-form row."""
    query, body = row[-1], row[1:-1]
    assert row[0] == BOS and BOS not in row[1:]
    assert body.count(query) == 1
    i = body.index(query)
    assert i < len(body) - 1  # the answer lies inside the body
    assert labels[-1] == body[i + 1] and labels[-1] != query
    assert all(label == IGNORE_INDEX for label in labels[:-1])
    assert reference_targets(row)[-1] == labels[-1]
    filler = body[:i] + body[i + 1 :]
    counts = Counter(filler)
    distinct, extra = config.filler_layout
    assert len(counts) == distinct
    assert sum(1 for c in counts.values() if c >= 2) == config.num_distractors
    assert sum(c - 1 for c in counts.values()) == extra


# ----------------------------------------------------------------- documented examples


def test_full_form_docstring_example():
    row = [0, 3, 5, 3, 7, 5, 2, 6, 3, 2, 1, 4]
    expected = [IGNORE_INDEX] * 3 + [5, IGNORE_INDEX, 3, IGNORE_INDEX, IGNORE_INDEX, 7, 6] + [IGNORE_INDEX] * 2
    assert reference_targets(row) == expected
    assert induction_targets(torch.tensor([row])).tolist() == [expected]


def test_single_form_docstring_example():
    row = [0, 4, 9, 7, 2, 4, 11, 9, 5, 3, 8, 7]
    labels = [IGNORE_INDEX] * 11 + [2]
    check_single_row(InductionConfig(vocab_size=12, seq_len=12, num_distractors=2), row, labels)


# ----------------------------------------------------------------- induction_targets


def test_induction_targets_matches_brute_force_on_random_rows():
    rows = torch.randint(0, 6, (200, 30), generator=torch.Generator().manual_seed(0))
    got = induction_targets(rows).tolist()
    assert got == [reference_targets(row) for row in rows.tolist()]


def test_induction_targets_immediate_repeat_targets_itself():
    assert induction_targets(torch.tensor([[0, 5, 5, 5]])).tolist() == [[IGNORE_INDEX, IGNORE_INDEX, 5, 5]]


# ----------------------------------------------------------------- full form


@pytest.mark.parametrize("split", ["train", "eval"])
def test_full_form_targets_match_brute_force(split):
    config = InductionConfig(vocab_size=10, seq_len=40, form="all_positions")
    batch = seeded_batch(config, seed=3, batch_size=50, split=split)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        assert row[0] == BOS and BOS not in row[1:]
        assert labels == reference_targets(row)


def test_full_form_scores_about_the_expected_share_of_positions():
    config = InductionConfig(vocab_size=64, seq_len=64, form="all_positions")
    fraction = seeded_batch(config, batch_size=512).scored.float().mean().item()
    expected = (63 - 63 * (1 - (62 / 63) ** 63)) / 64  # repeated draws among 63 i.i.d. tokens
    assert abs(fraction - expected) < 0.02


def test_getting_started_describes_the_full_form_it_trains_on():
    """docs/getting-started.md's first model trains on this form: its sentence says what the rows are."""
    from pathlib import Path

    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text().split())
    assert "tokens drawn uniformly at random, so some repeat" in docs and "about a third of the positions" in docs
    config = InductionConfig(vocab_size=64, seq_len=64, form="all_positions")
    batch = seeded_batch(config, batch_size=256)
    assert 0.3 < batch.scored.float().mean().item() < 0.4
    halves_equal = (batch.inputs[:, 1:33] == batch.inputs[:, 32:]).all(dim=1)  # what the page used to say
    assert not halves_equal.any()


def counting_accuracy(batch, vocab_size: int) -> float:
    """Accuracy of guessing the most frequent token so far (BOS never; ties share the guess)."""
    seen = torch.nn.functional.one_hot(batch.inputs, vocab_size).cumsum(1)  # (B, T, V): counts up to t
    seen[..., BOS] = 0
    best = seen == seen.max(-1, keepdim=True).values  # (B, T, V)
    hit = best.gather(2, batch.targets.clamp(min=0)[..., None])[..., 0] / best.sum(-1)  # (B, T)
    return hit[batch.scored].mean().item()


def test_counting_alone_scores_what_the_docstring_says():
    """The docstring said only induction beats chance on the full form; counting does, five times over (the target
    is a token of the row, more often a frequent one), which is where a plain layer sits (0.081 in
    docs/getting-started.md, read there as chance against a uniform guess's 0.016)."""
    from psattn.tasks import induction

    full = seeded_batch(InductionConfig(vocab_size=64, seq_len=64, form="all_positions"), batch_size=1000)
    single = seeded_batch(InductionConfig(vocab_size=64, seq_len=64), batch_size=8000)
    assert 0.075 < counting_accuracy(full, 64) < 0.09 and 0.024 < counting_accuracy(single, 64) < 0.034
    doc = " ".join(induction.__doc__.split())
    assert "counting alone (guessing the most frequent token so far) scores about 0.08 at vocab 64" in doc
    assert "guessing the most frequent token scores about 0.03 at vocab 64" in doc


# ----------------------------------------------------------------- single form


@pytest.mark.parametrize(
    ("vocab_size", "seq_len", "num_distractors"),
    [(64, 64, 8), (64, 64, 0), (64, 64, 30), (16, 40, 5), (8, 20, 3), (5, 30, 1), (4, 4, 0)],
)
def test_single_form_rows_have_every_documented_property(vocab_size, seq_len, num_distractors):
    config = InductionConfig(vocab_size=vocab_size, seq_len=seq_len, num_distractors=num_distractors)
    batch = seeded_batch(config, batch_size=40)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        check_single_row(config, row, labels)


def test_single_form_answer_position_and_query_are_spread():
    config = InductionConfig(vocab_size=32, seq_len=16, num_distractors=2)
    batch = seeded_batch(config, batch_size=2000)
    first = (batch.inputs[:, 1:-1] == batch.inputs[:, -1:]).float().argmax(dim=1)  # body slot of the query
    assert set(first.tolist()) == set(range(13))  # every slot but the body's last
    assert set(batch.inputs[:, -1].tolist()) == set(range(1, 32))


def test_single_form_answer_is_a_uniform_filler_slot():
    # The answer is a repeated distractor as often as a random filler slot is: 2 * 8 / 61.
    config = InductionConfig(vocab_size=64, seq_len=64, num_distractors=8)
    batch = seeded_batch(config, batch_size=3000)
    answers = batch.targets[:, -1:]
    repeated = ((batch.inputs[:, 1:-1] == answers).sum(dim=1) >= 2).float().mean().item()
    assert abs(repeated - 16 / 61) < 0.03


test_single_form_property = config_property(
    InductionConfig, check_single_row, max_examples=40,
    vocab_size=st.integers(4, 40),
    seq_len=st.integers(4, 48),
    num_distractors=st.integers(0, 24),
)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(vocab_size=st.integers(3, 30), seq_len=st.integers(4, 48), seed=st.integers(0, 2**31))
def test_full_form_property(vocab_size, seq_len, seed):
    config = InductionConfig(vocab_size=vocab_size, seq_len=seq_len, form="all_positions")
    batch = seeded_batch(config, seed=seed, batch_size=8)
    for row, labels in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        assert labels == reference_targets(row)


# ----------------------------------------------------------------- config validation


test_bad_configs_raise_naming_the_field = bad_configs_raise(InductionConfig, [
    ({"form": "double"}, "unknown induction task form"),
    ({"seq_len": 3}, "seq_len must be >= 4"),
    ({"vocab_size": 2, "form": "all_positions"}, "vocab_size must be >= 3"),
    ({"vocab_size": 3}, "vocab_size must be >= 4 for form='single'"),
    ({"num_distractors": -1}, "num_distractors must be >= 0"),
    ({"vocab_size": 16, "seq_len": 64, "num_distractors": 0}, "vocab_size=16 too small for seq_len=64"),
    ({"vocab_size": 64, "seq_len": 20, "num_distractors": 9}, "num_distractors=9 too large for seq_len=20"),
    ({"vocab_size": 8, "seq_len": 64, "num_distractors": 7}, "num_distractors=7 exceeds"),
])


def test_num_distractors_is_ignored_by_the_full_form():
    InductionConfig(vocab_size=8, seq_len=64, form="all_positions", num_distractors=0)


@pytest.mark.parametrize(("inputs", "error", "message"), [
    (torch.tensor([0, 5, 5, 5]), ValueError, r"inputs must be \(B, T\), got shape \(4,\)"),  # not enough values to unpack
    (torch.tensor([[0.0, 5.0, 5.0]]), TypeError, "inputs must be an integer tensor of token ids, got torch.float32"),
    ([[0, 5, 5]], TypeError, r"inputs must be a torch.Tensor of token ids \(B, T\), got list"),
])
def test_induction_targets_and_row_hash_refuse_rows_that_are_not_integer_b_by_t(inputs, error, message):
    """A float tensor raised gather()'s dtype error (row_hash gave it a float hash), a (T,) row "not enough values
    to unpack", a list an AttributeError."""
    from psattn.tasks import row_hash

    for f in (induction_targets, row_hash):
        with pytest.raises(error, match=message):
            f(inputs)
