"""Shared test helpers."""

import torch

from psattn.models import AttentionConfig, DecoderLM, ModelConfig
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
