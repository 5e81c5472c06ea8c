"""Shared test helpers."""

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock

from psattn.models import AttentionConfig, DecoderLM, ModelConfig, generate
from psattn.ops.variants import PLACEMENTS, VARIANTS
from psattn.tasks import make_task_config
from psattn.training.config import RunConfig, TrainConfig

ALL_VARIANTS = [(v, p) for v in VARIANTS for p in PLACEMENTS]


def random_model(variant="key_only", placement="post_rope", gamma=0.8, *, seed=0, std=0.3, boundary="replicate",
                 **overrides):
    """A small float64 model with weights large enough that its outputs depend strongly on the
    input (so that equivalence tests compare non-trivial outputs at tight tolerance)."""
    fields = dict(vocab_size=37, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2)
    fields.update(overrides)
    gamma = 0.0 if variant == "baseline" else gamma  # the baseline has no shear
    config = ModelConfig(**fields, attention=AttentionConfig(variant, gamma, placement, boundary=boundary))
    torch.manual_seed(seed)
    model = DecoderLM(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and ".key_lag." not in name:
                p.normal_(0.0, std)
    return model


def tiny_config(steps=40, **train_fields) -> RunConfig:
    fields = dict(steps=steps, batch_size=16, eval_every=10, eval_size=64, checkpoint_every=10,
                  early_stop=False, warmup_steps=5, threads=1)
    fields.update(train_fields)
    return RunConfig(
        model=ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2,
                          attention=AttentionConfig("key_only", 1.0)),
        task=make_task_config("induction", vocab_size=16, seq_len=16, form="all_positions"),
        train=TrainConfig(**fields),
    )


WALL_CLOCK = ("seconds",)  # the only fields of a metrics row that depend on the machine's speed


def science(history: list[dict]) -> list[dict]:
    """A run's metrics rows without their wall-clock fields: what equal runs must share exactly."""
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in history]


def check_bad_inputs_are_refused(runtime, model):
    """What an exported model's wrapper (OnnxLM, ExecuTorchLM) says of inputs PyTorch refuses or handles."""
    V = model.config.vocab_size
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {V}\).*from -1 to 3"):
        runtime.logits(np.array([[1, -1, 3]]))  # ONNX's Gather read -1 as the last row of the table
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {V}\)"):
        runtime.generate(np.array([[1, V]]), 2)
    with pytest.raises(ValueError, match="integer token ids, got dtype float64"):
        runtime.logits(np.array([[1.7, 2.0]]))  # was truncated to [[1, 2]]
    with pytest.raises(ValueError, match=r"\(batch, length\) array of token ids, got shape \(3,\)"):
        runtime.logits(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="at least one token"):
        runtime.generate(np.zeros((1, 0), dtype=np.int64), 3)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0, got -1"):
        runtime.generate(np.array([[1, 2]]), -1)
    for count in (2.5, True):  # a type mistake is a TypeError, as in PyTorch's generate (it was a ValueError here)
        with pytest.raises(TypeError, match=f"max_new_tokens must be an integer >= 0, got {count}"):
            runtime.generate(np.array([[1, 2]]), count)
        with pytest.raises(TypeError, match=f"max_new_tokens must be an integer >= 0, got {count}"):
            generate(model, torch.tensor([[1, 2]]), count)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with torch.no_grad():
        assert runtime.logits(ids[:, :0].numpy()).shape == model(ids[:, :0]).shape == (2, 0, V)  # no position
    seqs, logits = runtime.generate(ids.numpy(), 0)  # as PyTorch: the prompt, and no logits
    ours = generate(model, ids, 0)
    assert (seqs == ours.sequences.numpy()).all() and logits.shape == tuple(ours.logits.shape) == (2, 0, V)


class Ended(Exception):
    """What a signal's default action would do (end the process), raised in the test instead."""


@contextlib.contextmanager
def default_action_raises(signum: int, seen: Callable[[], object] | None = None):
    """``signum`` raises ``Ended`` while the block runs, where no handler of the code under test takes it. With
    ``seen``, what it returns when the signal comes (what a process it ended there would leave: the ``finally``
    blocks run after it here) is appended to the list the block gets."""
    came: list[object] = []

    def end(received, frame):
        if seen is not None:
            came.append(seen())
        raise Ended

    previous = signal.signal(signum, end)
    try:
        yield came
    finally:
        signal.signal(signum, previous)


def stop_on_moving_into(monkeypatch, folder: Path, signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to this process as each ``os.replace`` puts a file into ``folder`` or a folder of it not
    hidden (not into a staging folder there), as a stop that comes while a command moves its files in."""
    replace = os.replace

    def replace_then_stop(src, dst):
        replace(src, dst)
        target, root = Path(dst).resolve(), folder.resolve()
        if root in target.parents and not any(part.startswith(".") for part in target.relative_to(root).parts):
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(os, "replace", replace_then_stop)


def hidden_entries(folder: Path) -> list[str]:
    """The hidden entries of ``folder`` (a staging folder left behind, say)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@contextlib.contextmanager
def file_size_limit(size: int):
    """Writes past ``size`` bytes fail with EFBIG, as on a full disk (the signal that would kill the process ignored)."""
    resource = pytest.importorskip("resource")
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def shared(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """The folder ``name``, made by ``make(folder)`` once per test session: under pytest-xdist the first
    worker that needs it makes it, under a file lock, in the workers' common base folder, and the others read
    it. What is shared is read-only: a test that writes beside it copies it first."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / name  # parent: the workers'
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if not Path(f"{folder}.made").exists():
            make(folder)
            Path(f"{folder}.made").touch()
    return folder
