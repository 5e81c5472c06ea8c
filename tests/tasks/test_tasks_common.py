"""Properties every registered task shares: shapes, ranges, determinism, split disjointness."""

import dataclasses
import typing

import numpy as np
import pytest
import torch

from psattn.tasks import (
    IGNORE_INDEX,
    TASKS,
    AssociativeRecallConfig,
    InductionConfig,
    MultiHopConfig,
    RandomOffsetConfig,
    TaskConfig,
    in_split,
    make_task_config,
    sample_task,
    task_name,
)
from psattn.tasks.registry import canonical_task_section
from psattn.training.config import RunConfig

CONFIGS = {
    "induction_single": InductionConfig(vocab_size=32, seq_len=24, form="single", num_distractors=4),
    "induction_full": InductionConfig(vocab_size=16, seq_len=24, form="all_positions"),
    "random_offset": RandomOffsetConfig(num_keys=6, num_values=4, seq_len=24, num_pairs=4, num_queries=2),
    "multihop": MultiHopConfig(vocab_size=20, seq_len=40, num_entities=5, num_queries=3),
    "mqar": AssociativeRecallConfig(vocab_size=32, seq_len=24, num_pairs=4),
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request):
    return CONFIGS[request.param]


def _sample(config, seed, batch_size=64, split="train"):
    return sample_task(config, batch_size, torch.Generator().manual_seed(seed), split)


def test_shapes_dtypes_and_token_ranges(config):
    batch = _sample(config, 0)
    assert batch.inputs.shape == batch.targets.shape == (64, config.seq_len)
    assert batch.inputs.dtype == batch.targets.dtype == torch.int64
    assert int(batch.inputs.min()) >= 0 and int(batch.inputs.max()) < config.vocab_size
    assert bool((batch.inputs[:, 0] == 0).all())  # BOS
    labels = batch.targets[batch.scored]
    assert int(labels.min()) >= 0 and int(labels.max()) < config.vocab_size
    assert bool((batch.targets[~batch.scored] == IGNORE_INDEX).all())
    assert not bool(batch.scored[:, 0].any())


def test_every_row_is_scored_somewhere(config):
    scored_rows = _sample(config, 1).scored.any(dim=1)
    if isinstance(config, InductionConfig) and config.form == "all_positions":  # repeats are left to chance
        assert scored_rows.float().mean().item() > 0.9
    else:
        assert bool(scored_rows.all())


def test_same_seed_same_batch_different_seed_different_batch(config):
    first, again, other = _sample(config, 7), _sample(config, 7), _sample(config, 8)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert not torch.equal(first.inputs, other.inputs)


def test_consecutive_batches_from_one_generator_differ(config):
    generator = torch.Generator().manual_seed(3)
    first = sample_task(config, 32, generator)
    second = sample_task(config, 32, generator)
    assert not torch.equal(first.inputs, second.inputs)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_rows_belong_to_their_split(config, split):
    batch = _sample(config, 4, batch_size=128, split=split)
    assert bool(in_split(batch.inputs, split).all())


def test_train_and_eval_never_share_a_row(config):
    train = {tuple(row) for seed in range(4) for row in _sample(config, seed, 256, "train").inputs.tolist()}
    evaluation = {tuple(row) for seed in range(4) for row in _sample(config, seed, 256, "eval").inputs.tolist()}
    assert train and evaluation and not train & evaluation


def test_train_and_eval_never_share_a_row_in_a_tiny_row_space():
    # 3 content tokens, 4 positions: only 3**3 = 27 possible rows, so both splits repeat rows.
    config = InductionConfig(vocab_size=4, seq_len=4, form="all_positions")
    train = {tuple(row) for row in _sample(config, 0, 512, "train").inputs.tolist()}
    evaluation = {tuple(row) for row in _sample(config, 0, 512, "eval").inputs.tolist()}
    assert train and evaluation and not train & evaluation
    assert len(train | evaluation) == 27


def test_registry_names_and_defaults():
    assert set(TASKS) == {"induction", "random_offset", "multihop", "mqar", "text"}
    assert set(typing.get_args(TaskConfig)) == {config_cls for config_cls, _ in TASKS.values()}  # the type names them all
    for name, (config_cls, sampler) in TASKS.items():
        config = make_task_config(name)
        assert type(config) is config_cls and task_name(config) == name
        batch = sampler(config, 8, torch.Generator().manual_seed(0))
        assert batch.inputs.shape == (8, config.seq_len)
        assert int(batch.inputs.max()) < config.vocab_size


def test_make_task_config_overrides_and_errors():
    assert make_task_config("induction", seq_len=32, form="all_positions") == InductionConfig(seq_len=32, form="all_positions")
    with pytest.raises(ValueError, match=r"unknown task .copy.*induction.*mqar.*multihop.*random_offset.*text"):
        make_task_config("copy")
    with pytest.raises(ValueError, match=r"unknown task 'random_offset' fields \['vocab_size'\].*num_keys"):
        make_task_config("random_offset", vocab_size=64)
    with pytest.raises(ValueError, match="unknown induction task form"):
        make_task_config("induction", form="double")
    with pytest.raises(ValueError, match=r"unknown task \['induction'\]"):
        make_task_config(["induction"])  # unhashable type: 'list'


def test_the_old_spelling_of_the_all_positions_form_reads_as_it():
    old = make_task_config("induction", seq_len=32, form="full")
    assert old == InductionConfig(seq_len=32, form="all_positions") and old.form == "all_positions"
    assert torch.equal(sample_task(old, 4, torch.Generator().manual_seed(0)).targets,
                       sample_task(InductionConfig(seq_len=32, form="all_positions"), 4,
                                   torch.Generator().manual_seed(0)).targets)
    assert canonical_task_section({"name": "induction", "form": "full", "seq_len": 8}) == {
        "name": "induction", "form": "all_positions", "seq_len": 8}
    assert canonical_task_section({"name": "mqar", "form": "full"}) == {"name": "mqar", "form": "full"}
    with pytest.raises(TypeError, match=r"induction task form must be one of \['single', 'all_positions'\], got \['full'\]"):
        make_task_config("induction", form=["full"])  # a value of the wrong type is a TypeError (it was a ValueError)


def test_sample_task_rejects_foreign_configs():
    """Something that is no task config is a type mistake: a TypeError (it was a ValueError)."""
    with pytest.raises(TypeError, match="object is not a registered task config"):
        sample_task(object(), 4, torch.Generator())


@pytest.mark.parametrize("name", ["induction", "random_offset", "multihop", "mqar"])
def test_every_integer_field_of_a_synthetic_task_refuses_a_non_integer(name):
    """A float or a bool passed the range checks and crashed later, inside sampling. Built in Python it is a
    TypeError (it was a ValueError, as a value out of range is); a run config read from a file or --set still
    refuses it with a ValueError."""
    config_cls = TASKS[name][0]
    fields = [f for f in dataclasses.fields(config_cls) if f.type in (int, "int")]
    assert fields
    for field in fields:
        for bad in (float(getattr(make_task_config(name), field.name)) + 0.5, True, "8"):
            with pytest.raises(TypeError, match=f"{field.name} must be an integer, got {bad!r}"):
                make_task_config(name, **{field.name: bad})
            with pytest.raises(ValueError, match=f"malformed task section: .*{field.name} must be an integer, got {bad!r}"):
                RunConfig.from_dict({"task": {"name": name, field.name: bad}})
        good = getattr(make_task_config(name), fields[0].name)
        numpy_int = make_task_config(name, **{fields[0].name: np.int64(good)})
        assert type(getattr(numpy_int, fields[0].name)) is int and numpy_int == make_task_config(name)


@pytest.mark.parametrize("batch_size", [2.5, True, "4", 0])
def test_a_batch_size_that_is_no_positive_integer_is_one_line(config, batch_size):
    """2.5 raised 'slice indices must be integers', '4' a '<' TypeError, True drew one row."""
    with pytest.raises(ValueError, match=f"batch_size must be an integer >= 1, got {batch_size!r}"):
        sample_task(config, batch_size, torch.Generator().manual_seed(0))
    assert len(sample_task(config, np.int64(3), torch.Generator().manual_seed(0))) == 3  # NumPy's ints are integers


@pytest.mark.parametrize("generator", [None, 0])
def test_a_generator_that_is_no_torch_generator_is_named(config, generator):
    """Every sampler raised "'NoneType' object has no attribute 'device'"."""
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        sample_task(config, 4, generator)


@pytest.mark.parametrize("cls", [InductionConfig, AssociativeRecallConfig, MultiHopConfig])
def test_a_vocabulary_beyond_2_to_the_20_is_refused_and_the_largest_draws(cls):
    """vocab_size=10**12 was accepted, and drawing four rows asked for tens of TB (a row's draw ranks every token)."""
    with pytest.raises(ValueError, match=r"vocab_size=1000000000000 exceeds 2\*\*20 = 1048576"):
        cls(vocab_size=10**12)
    largest = cls(vocab_size=2**20)
    assert int(_sample(largest, 0, batch_size=2).inputs.max()) < 2**20
