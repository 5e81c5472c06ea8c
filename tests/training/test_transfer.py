"""A training step reads nothing back from the device.

On a GPU every read of a device tensor on the host (``.item()``, a bool mask's indexing, a test of the
loss for finiteness) makes the host wait until the device has finished what was queued, so a step bound
by the host (small models, short sequences) pays the device's time on top of its own. A CPU-only machine
cannot see those waits, so these tests run the step's device part on the meta device, where a tensor has
a shape and no values: anything that reads one raises there. The batch is sampled and indexed on the
host, as on a GPU. What the meta device cannot show: the copy from pinned memory (CUDA only), and the
paths of a GPU's own (torch.compile, bf16 autocast, fused AdamW, DDP); ``benchmarks/gpu_check.py``'s step
profiles list every line that waits for the device there.
"""

import dataclasses

import pytest
import torch

from helpers import tiny_config
from psattn.models.config import AttentionConfig
from psattn.tasks.registry import sample_task
from psattn.training.config import RunConfig, apply_overrides, shipped_configs
from psattn.training.distributed import Distributed
from psattn.training.seeds import step_generator
from psattn.training.trainer import _Run
from psattn.training.transfer import to_device

TINY = ["model.d_model=32", "model.n_heads=2", "model.n_layers=2", "train.batch_size=4", "train.eval_size=8",
        "train.device=cpu", "train.threads=1"]


def steps_on_meta(config: RunConfig, steps: int = 2) -> _Run:
    run = _Run(config, None, Distributed(), torch.device("meta"))
    for _ in range(steps):
        loss = run.train_step()
        assert loss.device.type == "meta" and loss.shape == ()
    return run


def test_the_meta_device_catches_a_read():
    with pytest.raises(RuntimeError):
        torch.ones(2, device="meta").sum().item()
    with pytest.raises(NotImplementedError):
        torch.ones(2, 3, device="meta")[torch.ones(2, 3, dtype=torch.bool, device="meta")]


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_every_shipped_tasks_training_step_reads_nothing_from_the_device(name):
    if name == "text":
        pytest.importorskip("tokenizers")
    run = steps_on_meta(apply_overrides(RunConfig.from_file(shipped_configs()[name]), TINY))
    assert run.state.step == 2 and len(run.unchecked) == 2  # the losses wait for the next look


@pytest.mark.parametrize("variant, gamma, fields", [
    ("symmetric", 0.8, {}), ("baseline", 0.0, {}), ("query_only", 0.5, {"n_kv_heads": 1}),
    ("key_only", 1.0, {"d_mlp": 64, "dropout": 0.1}), ("canon", 0.0, {}), ("symmetric", 0.8, {"rotary_fraction": 0.5}),
])
def test_every_variants_training_step_reads_nothing_from_the_device(variant, gamma, fields):
    """Both induction forms: every position scored, and one answer a row (the marked-queries path)."""
    config = tiny_config(steps=4)
    model = dataclasses.replace(config.model, n_layers=2, attention=AttentionConfig(variant, gamma), **fields)
    for form in ("all_positions", "single"):
        task = dataclasses.replace(config.task, form=form, seq_len=32)  # the single form needs room for its distractors
        steps_on_meta(dataclasses.replace(config, model=model, task=task))


def test_the_batch_on_the_device_holds_the_labels_of_its_scored_positions():
    config = tiny_config()
    batch = sample_task(config.task, 8, step_generator(0, 3))
    moved = to_device(batch, torch.device("cpu"))
    assert torch.equal(moved.scored_targets, batch.targets[batch.scored])
    assert torch.equal(moved.scored.take(moved.inputs), batch.inputs[batch.scored])


def test_a_batch_moved_for_a_compiled_step_on_a_gpu_carries_no_indices():
    batch = sample_task(tiny_config().task, 8, step_generator(0, 3))
    moved = to_device(batch, torch.device("cpu"), indexed=False)
    assert moved.scored is None and torch.equal(moved.targets, batch.targets)
    with pytest.raises(ValueError, match="without its scored positions"):
        _ = moved.scored_targets
