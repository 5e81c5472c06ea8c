"""What the attention does at the scored positions of induction rows, read from the hook points:
how far its pattern is from uniform, how large the score terms are, and how much of it lands on the
target (the position after the query token's previous occurrence, where an induction head looks).

Used to explain plateaus: a layer whose attention is uniform and whose score terms are tiny cannot
tell the target from the other positions; one whose attention is already sharp on the wrong places
has to unlearn that first.
"""

from __future__ import annotations

import math

import torch

from psattn.ops.hooks import capture
from psattn.tasks.batch import TaskBatch


def previous_occurrence(inputs: torch.Tensor, b: int, t: int) -> int | None:
    """The last position before ``t`` in row ``b`` holding the token at ``t`` (None if there is none)."""
    same = (inputs[b, :t] == inputs[b, t]).nonzero()
    return int(same[-1]) if len(same) else None


@torch.no_grad()
def attention_at_queries(model, batch: TaskBatch, rows: int = 64) -> dict[str, float]:
    """Averages over the scored positions of the first ``rows`` rows (layer 0, all heads):
    ``entropy_ratio`` (entropy / log of the number of visible keys; 1 = uniform), ``t1_std`` and
    ``t3_std`` (spread of the content term q·k and of the key-side momentum term over the visible
    keys, both scaled by 1/sqrt(d_k) as softmax sees them), ``target_mass`` (attention on the target,
    the best head), ``uniform_mass`` (what uniform attention would put there) and
    ``attention_to_embedding`` (norm of the attention layer's output over the token embedding's: how
    much what attention copies can move the residual stream)."""
    inputs, targets = batch.inputs[:rows], batch.targets[:rows]
    was_training = model.training
    model.eval()
    outputs = []
    handle = model.blocks[0].attn.register_forward_hook(lambda _m, _i, out: outputs.append(out))
    try:
        with capture(model, "blocks.0.attn.hook_pattern", "blocks.0.attn.hook_score_terms") as seen:
            model(inputs)
    finally:
        handle.remove()
    model.train(was_training)
    embedded = model.embed(inputs)  # (B, T, C)
    pattern, terms = seen["blocks.0.attn.hook_pattern"], seen["blocks.0.attn.hook_score_terms"]  # (B, H, T, T)
    scale = model.blocks[0].attn.head_dim ** -0.5
    sums = {"entropy_ratio": 0.0, "t1_std": 0.0, "t3_std": 0.0, "target_mass": 0.0, "uniform_mass": 0.0,
            "attention_to_embedding": 0.0}
    count = 0
    for b, t in (targets != -100).nonzero().tolist():
        j = previous_occurrence(inputs, b, t)
        if j is None or t == 0:
            continue
        p = pattern[b, :, t, : t + 1]  # (H, t + 1)
        entropy = -(p * p.clamp_min(1e-12).log()).sum(-1)
        sums["entropy_ratio"] += float((entropy / math.log(t + 1)).mean())
        sums["t1_std"] += float(terms.t1[b, :, t, : t + 1].std(-1).mean() * scale)
        sums["t3_std"] += float(terms.t3[b, :, t, : t + 1].std(-1).mean() * scale)
        sums["target_mass"] += float(p[:, j + 1].max())
        sums["uniform_mass"] += 1.0 / (t + 1)
        sums["attention_to_embedding"] += float(outputs[0][b, t].norm() / embedded[b, t].norm())
        count += 1
    return {k: v / max(count, 1) for k, v in sums.items()}
