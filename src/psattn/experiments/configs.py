"""The default small setting that the experiments vary.

One layer, d_model 128, 4 heads, RoPE, an MLP, the default initialisation; full-sequence induction
over a vocabulary of 64 at length 64 (``form="single"`` for the single-answer form); AdamW at lr 3e-3
with batch 64, evaluated every 50 steps on 512 held-out rows. On a 2-core CPU the key-only shear at
gamma = 1 reaches 0.8 held-out accuracy in about 100 steps on the full form and 650-700 on the
single-answer form (two seeds of three within 1000 steps), while the baseline stays near what
counting alone scores (0.08 on the full form: ``psattn.tasks.induction``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from psattn.models import AttentionConfig, ModelConfig
from psattn.models.config import Variant
from psattn.models.presets import preset
from psattn.ops.variants import Placement
from psattn.tasks import make_task_config
from psattn.training.config import RunConfig, TrainConfig

DEFAULT_TASK_FIELDS: dict[str, dict[str, Any]] = {
    "induction": dict(vocab_size=64, seq_len=64, form="all_positions"),
    # dense enough (6 scored queries a row) that one layer solves it in a few hundred steps
    "random_offset": dict(num_keys=8, num_values=8, num_pairs=6, num_queries=6, seq_len=64),
}


SHEARED = ("symmetric", "key_only", "query_only")


DEFAULT_INIT = ModelConfig().init


#: evaluations (held-out accuracy, emergence) every this many steps, unless a study asks otherwise
EVAL_EVERY = 50

#: the held-out rows of every evaluation
EVAL_SIZE = 512


def run_name(task: str, variant: str, gamma: float, placement: str, size: str, seed: int,
             init: float | str = DEFAULT_INIT, tag_init: bool = False, early_stop_evals: int = 0,
             eval_every: int = EVAL_EVERY) -> str:
    """The run's directory name; the initialisation appears when it is not the default (or ``tag_init``),
    ``-stop{n}`` when the run stops once its accuracy has stayed at the threshold for n evaluations, and
    ``-e{n}`` when it evaluates every n steps instead of every EVAL_EVERY."""
    where = "" if placement == "post_rope" else f"-{placement}"
    coupling = f"-g{gamma:g}" if variant in SHEARED else ""
    tag = "" if init == DEFAULT_INIT and not tag_init else f"-init{init:g}" if isinstance(init, (int, float)) else f"-init{init}"
    stop = f"-stop{early_stop_evals}" if early_stop_evals else ""
    every = "" if eval_every == EVAL_EVERY else f"-e{eval_every}"
    return f"{task}-{size}-{variant}{coupling}{where}{tag}{stop}{every}-s{seed}"


def small_config(
    variant: str = "key_only",
    gamma: float = 1.0,
    *,
    task: str = "induction",
    placement: str = "post_rope",
    seed: int = 0,
    steps: int = 1000,
    early_stop: bool = True,
    early_stop_evals: int = 0,
    threshold: float = 0.8,
    d_model: int = 128,
    n_heads: int = 4,
    n_layers: int = 1,
    mlp: bool | list[bool] = True,
    d_head: int | None = None,
    model_preset: str | None = None,
    device: str = "auto",
    init: float | str = DEFAULT_INIT,
    tag_init: bool = False,
    batch_size: int = 64,
    lr: float = 3e-3,
    eval_every: int = EVAL_EVERY,
    **task_fields,
) -> RunConfig:
    """A one-layer (by default) run; ``model_preset`` swaps in a named preset with the task's
    vocabulary. ``early_stop`` and ``early_stop_evals`` are ``TrainConfig``'s
    one stopping rule: ``early_stop_evals`` > 0 ends the run once held-out accuracy has stayed at the
    threshold for that many evaluations in a row (and turns ``early_stop`` on; the name says
    ``-stop{n}``). A key-only or symmetric run at
    gamma = 0 is the baseline itself, so it is named and configured as the baseline (sweeps then share
    those runs). ``mlp=False`` gives attention-only blocks (the name says ``-attnonly``); a list gives one
    flag per layer (the name says which layers have one, e.g. ``-mlp2`` for the second layer alone)."""
    if variant == "baseline" or (gamma == 0.0 and variant in SHEARED):
        variant, gamma, placement = "baseline", 0.0, "post_rope"
    fields = {**DEFAULT_TASK_FIELDS.get(task, {}), **task_fields}
    task_config = make_task_config(task, **fields)
    attention = AttentionConfig(cast(Variant, variant), gamma, cast(Placement, placement))  # AttentionConfig checks them
    if model_preset is not None:
        model = preset(model_preset, vocab_size=task_config.vocab_size, attention=attention, init=init)
        size = model_preset
    else:
        model = ModelConfig(vocab_size=task_config.vocab_size, d_model=d_model, n_layers=n_layers,
                            n_heads=n_heads, attention=attention, d_head=d_head, init=init, mlp=mlp)
        size = (f"L{n_layers}d{d_model}h{n_heads}" + ("" if model.d_head is None else f"k{model.d_head}")
                + _mlp_tag(mlp))
    form = getattr(task_config, "form", "all_positions")
    label = task if form == "all_positions" else f"{task}-{form}"
    return RunConfig(
        name=run_name(label, variant, gamma, placement, size, seed, init, tag_init, early_stop_evals, eval_every),
        model=model,
        task=task_config,
        train=TrainConfig(steps=steps, batch_size=batch_size, lr=lr, eval_every=eval_every, eval_size=EVAL_SIZE,
                          early_stop=early_stop or early_stop_evals > 0, early_stop_evals=max(1, early_stop_evals),
                          threshold=threshold, seed=seed, threads=1, device=device),
    )


def _mlp_tag(mlp: bool | list[bool]) -> str:
    if isinstance(mlp, list) and all(mlp):
        mlp = True
    if isinstance(mlp, list) and any(mlp):
        return "-mlp" + "".join(str(i + 1) for i, m in enumerate(mlp) if m)
    return "" if mlp else "-attnonly"


def study_config(study: str, variant: str = "key_only", gamma: float = 1.0, **kwargs) -> RunConfig:
    """``small_config`` named after the long study it belongs to (``<study>-<run name>``), so that
    it never shares a name with a run of the reproduction's experiments."""
    config = small_config(variant, gamma, **kwargs)
    return dataclasses.replace(config, name=f"{study}-{config.name}")


def small_induction_config(variant: str = "key_only", gamma: float = 1.0, **kwargs) -> RunConfig:
    """``small_config`` on the induction task."""
    return small_config(variant, gamma, task="induction", **kwargs)
