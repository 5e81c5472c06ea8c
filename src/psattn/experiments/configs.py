"""The default small induction setting that experiments vary.

One layer, d_model 128, 4 heads, RoPE, an MLP; full-sequence induction over a vocabulary of 64 at
length 64; AdamW at lr 3e-3 with batch 64. On a 2-core CPU the key-only shear at gamma = 1 reaches
0.9 held-out accuracy in about 600 steps while the baseline stays below 0.1.
"""

from __future__ import annotations

from ..models import AttentionConfig, ModelConfig
from ..tasks import make_task_config
from ..training.config import RunConfig, TrainConfig


def small_induction_config(
    variant: str = "key_only",
    gamma: float = 1.0,
    *,
    steps: int = 1000,
    seed: int = 0,
    early_stop: bool = True,
    placement: str = "post_rope",
    task: str = "induction",
    **task_fields,
) -> RunConfig:
    fields = dict(vocab_size=64, seq_len=64, form="full") if task == "induction" else {}
    fields.update(task_fields)
    return RunConfig(
        name=f"{task}-{variant}-{placement}-gamma{gamma:g}-seed{seed}",
        model=ModelConfig(vocab_size=64, d_model=128, n_layers=1, n_heads=4,
                          attention=AttentionConfig(variant, gamma, placement)),
        task=make_task_config(task, **fields),
        train=TrainConfig(steps=steps, batch_size=64, lr=3e-3, eval_every=50, eval_size=512,
                          early_stop=early_stop, seed=seed, threads=1),
    )
