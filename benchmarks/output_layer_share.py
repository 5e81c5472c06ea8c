"""How much of a training step of the quick real-text models (docs/text.md) the output layer and its
softmax take: each model's step timed as the bare training loop runs it (forward, cross-entropy over the
vocabulary, backward, gradient clipping, AdamW) against the same step with the output layer left out
(the final norm's output goes to a squared-mean loss instead of the tied unembedding and the
cross-entropy), both interleaved in one process, one thread, on random tokens (the time does not depend
on their values). The difference is what the unembedding and its softmax cost a step.

    python benchmarks/output_layer_share.py [--layers 1 2] [--repeats 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import platform
from datetime import datetime, timezone

import torch
from torch import nn

from psattn.arguments import positive_int
from psattn.experiments.studies.text import TEXT_PLANS, text_config
from psattn.files import write_json
from psattn.provenance import git_revision
from psattn.timing import interleaved_medians
from psattn.training.loss import lm_loss
from psattn.training.run_dir import build_model
from psattn.training.schedule import build_optimizer

#: (layers, variant, gamma) of the quick plan's models
MODELS = {1: ("key_only", 1.0), 2: ("baseline", 0.0)}


def training_step(config, with_output_layer: bool):
    """One training step of ``config``'s model on a fixed random batch, as a function of no argument;
    without the output layer, the final norm's output (B, T, C) is the loss's input instead of the logits."""
    torch.manual_seed(0)
    model = build_model(config).train()
    if not with_output_layer:
        model.lm_head = nn.Identity()  # the tied embedding stays: the input layer is in both steps
    optimizer, _ = build_optimizer(model, config.train)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.model.vocab_size, (config.train.batch_size, config.task.seq_len + 1), generator=g)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]  # (B, T) each

    def step() -> None:
        out = model(inputs)  # (B, T, V) logits, or (B, T, C) without the output layer
        loss = lm_loss(out, targets) if with_output_layer else out.square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()

    return step


def measure(layers: int, repeats: int) -> dict:
    """Milliseconds a step with and without the output layer (medians of interleaved steps) and the share."""
    variant, gamma = MODELS[layers]
    config = text_config(TEXT_PLANS["quick"], layers, variant, gamma, seed=0)
    steps = {"with": training_step(config, True), "without": training_step(config, False)}
    ms = {name: 1e3 * s for name, s in interleaved_medians(steps, repeats, warmup=2).items()}
    return {"layers": layers, "variant": variant, "gamma": gamma, "vocab_size": config.model.vocab_size,
            "d_model": config.model.d_model, "batch": config.train.batch_size, "length": config.task.seq_len,
            "ms": ms, "output_layer_share": 1 - ms["without"] / ms["with"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the first paragraph
    parser.add_argument("--layers", type=int, nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--repeats", type=positive_int, default=20, help="timed steps of each (default 20)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(layers, args.repeats) for layers in args.layers]
    plan = TEXT_PLANS["quick"]
    print(f"quick real-text models (BPE {plan.vocab_size}, width {plan.d_model}, {plan.batch_size} rows of "
          f"{plan.seq_len} tokens), 1 thread, torch {torch.__version__}, {platform.machine()}")
    print("| model | ms a step | without the output layer | output layer and softmax |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['layers']} layer{'s' * (r['layers'] > 1)}, {r['variant']} | {r['ms']['with']:.1f} "
              f"| {r['ms']['without']:.1f} | {100 * r['output_layer_share']:.0f} % |")
    if args.json:
        write_json(args.json, {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "torch": torch.__version__, "machine": platform.machine(), "git": git_revision(),
                               "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
