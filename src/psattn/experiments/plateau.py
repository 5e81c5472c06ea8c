"""What the attention does at the scored positions of induction rows, read from the hook points:
how far its pattern is from uniform, how large the score terms are, and how much of it lands on the
target (the position after the query token's previous occurrence, where an induction head looks).

Used to explain plateaus: a layer whose attention is uniform and whose score terms are tiny cannot
tell the target from the other positions; one whose attention is already sharp on the wrong places
has to unlearn that first. ``plateau_rows`` reads them for the initialisation study's key-only runs,
before and after training.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from psattn.experiments.markdown import fmt, table
from psattn.ops.hooks import capture
from psattn.tasks.batch import TaskBatch
from psattn.training.run_dir import build_model, eval_batch, load_trained


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


def plateau_rows(runs: Path, configs, results: dict) -> list[dict]:
    """Attention statistics of the seed-0 single-answer key-only runs of the sensitivity table: freshly
    initialised, and, for those trained (in ``results``), at their last checkpoint in ``runs``."""
    rows = []
    for c in configs:
        a = c.model.attention
        if c.train.seed != 0 or c.task.form != "single" or a.variant != "key_only":
            continue
        held = eval_batch(c)
        rows.append({"init": c.model.init, "when": "initialisation", **attention_at_queries(build_model(c), held)})
        if c.name in results:
            rows.append({"init": c.model.init, "when": f"step {results[c.name]['steps']}",
                         **attention_at_queries(load_trained(runs / c.name), held),
                         "accuracy": results[c.name]["final_accuracy"]})
    return rows


def attention_at_queries_table(rows: list[dict]) -> list[str]:
    """The markdown table of ``plateau_rows``."""
    return table(["init", "when", "entropy / max", "T1 spread", "T3 spread", "attention on target",
                  "attention / embedding", "held-out acc"],
                 [[str(r["init"]), r["when"], r["entropy_ratio"], r["t1_std"], r["t3_std"], r["target_mass"],
                   r["attention_to_embedding"], fmt(r.get("accuracy"))] for r in rows])
