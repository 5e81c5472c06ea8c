"""Which recipe lets two plain layers form the induction circuit on full-sequence induction?

Two layers (d_model 128, 4 heads) on the full-sequence form (vocabulary 64, length 64, seed 0), every
100 steps: held-out accuracy and, per layer, the best head's previous-token and induction score on
[BOS] + R + R rows. Each recipe changes one thing of the quick plan's recipe; some change the
initialisation after the model is built (not a config field), which is why this is a script and not a
sweep. Results go to one JSON file per recipe in OUT (a finished recipe is skipped), and a table is
printed. About 2 to 4 minutes a recipe of 1,500 steps on one core.

    python scripts/two_layer_recipes.py OUT [RECIPE ...]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from psattn.experiments.configs import small_config
from psattn.files import write_text
from psattn.models.heads import head_scores
from psattn.tasks.batch import IGNORE_INDEX
from psattn.tasks.registry import sample_task
from psattn.training.evaluation import evaluate
from psattn.training.loss import lm_loss
from psattn.training.run_dir import build_model, eval_batch
from psattn.training.schedule import build_optimizer
from psattn.training.seeds import step_generator

#: name -> (config fields, a change to the built model or None, steps)
RECIPES = {
    "default-b32": (dict(batch_size=32), None, 1500),
    "default-b64": (dict(batch_size=64), None, 1500),
    "attention-only-b32": (dict(batch_size=32, mlp=False), None, 1500),
    "attention-only-b64": (dict(batch_size=64, mlp=False), None, 1000),
    "lr1e-3-b64": (dict(batch_size=64), "lr=1e-3", 1500),
    "untied-b64": (dict(batch_size=64), "untied", 1500),
    "8-heads-b64": (dict(batch_size=64, n_heads=8), None, 1500),
    "d_mlp-128-b64": (dict(batch_size=64), "d_mlp=128", 1500),
    "embedding-std-1-b32": (dict(batch_size=32), "embedding std 1", 1500),
    "zero-mlp-output-b64": (dict(batch_size=64), "zero MLP output", 1500),
    "layer-1-norm-bias-b64": (dict(batch_size=64), "layer-1 norm bias N(0, 1)", 1500),
    # which MLP stands in the way: the second layer's alone, the first layer's alone, the first frozen at init
    "mlp-layer-2-only-b64": (dict(batch_size=64, mlp=[False, True]), None, 1500),
    "mlp-layer-1-only-b64": (dict(batch_size=64, mlp=[True, False]), None, 1500),
    "frozen-layer-1-mlp-b64": (dict(batch_size=64), "layer-1 MLP frozen at init", 1500),
    "default-b64-6000-steps": (dict(batch_size=64), None, 6000),
}


def config_for(fields: dict, change: str | None, steps: int):
    config = small_config("baseline", 0.0, n_layers=2, steps=steps, early_stop=False, device="cpu", **fields)
    if change == "lr=1e-3":
        config.train.lr = 1e-3
    if change == "untied":
        config.model.tie_embeddings = False
    if change == "d_mlp=128":
        config.model.d_mlp = 128
    return config


@torch.no_grad()
def change_model(model, change: str | None) -> None:
    if change == "embedding std 1":
        model.embed.weight.normal_(0.0, 1.0)
    if change == "zero MLP output":
        for block in model.blocks:
            block.mlp.down.weight.zero_()
    if change == "layer-1 norm bias N(0, 1)":
        g = torch.Generator().manual_seed(1)
        bias = model.blocks[0].norm_attn.bias
        bias.copy_(torch.randn(bias.shape, generator=g))
    if change == "layer-1 MLP frozen at init":
        model.blocks[0].mlp.requires_grad_(False)  # no gradient, so AdamW neither moves nor decays it


def run(name: str) -> dict:
    fields, change, steps = RECIPES[name]
    config = config_for(fields, change, steps)
    torch.set_num_threads(1)
    model = build_model(config)
    change_model(model, change)
    optimizer, schedule = build_optimizer(model, config.train)
    held_out, rows, start = eval_batch(config), [], time.perf_counter()
    for step in range(steps + 1):
        if step % 100 == 0 or step == steps:
            accuracy, _ = evaluate(model, held_out)
            scores = head_scores(model)
            rows.append({"step": step, "accuracy": accuracy, "seconds": time.perf_counter() - start,
                         "previous_token": [max(layer) for layer in scores.previous_token.tolist()],
                         "induction": [max(layer) for layer in scores.induction.tolist()]})
        if step == steps:
            break
        batch = sample_task(config.task, config.train.batch_size, step_generator(config.train.seed, step))
        scored = batch.targets != IGNORE_INDEX
        loss = lm_loss(model(batch.inputs, scored=scored), batch.targets[scored])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()
        schedule.step()
    return {"recipe": name, "change": change, "fields": fields, "steps": steps, "history": rows}


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    out, names = Path(argv[0]), argv[1:] or list(RECIPES)
    out.mkdir(parents=True, exist_ok=True)
    print("| recipe | final accuracy | step reaching 0.8 | layer 1 / layer 2 best previous-token | "
          "layer 1 / layer 2 best induction |\n|---|---|---|---|---|")
    for name in names:
        path = out / f"{name}.json"
        if not path.exists():
            write_text(path, json.dumps(run(name)))  # whole: a file cut short would be taken for a finished recipe
        history = json.loads(path.read_text())["history"]
        last = history[-1]
        reached = next((r["step"] for r in history if r["step"] > 0 and r["accuracy"] >= 0.8), None)
        print(f"| {name} | {last['accuracy']:.3f} | {reached or '—'} | "
              f"{last['previous_token'][0]:.2f} / {last['previous_token'][1]:.2f} | "
              f"{last['induction'][0]:.2f} / {last['induction'][1]:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
