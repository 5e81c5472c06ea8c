"""The real-text experiment: does one PSA layer learn in context where one plain layer cannot?

Hypothesis, stated before measuring: one key-sheared layer shows a clear in-context-learning score
and a low loss on the second copy of repeated random tokens; one plain layer does not; two plain
layers do. Five models see the same text, budget and seeds: one layer plain, key-only and symmetric;
two layers plain and key-only. ``quick`` is byte-level on a 2-core CPU; ``full`` uses a BPE
vocabulary, a wider model, a longer context, more steps and three seeds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from psattn.experiments.configs import run_name
from psattn.models import AttentionConfig, ModelConfig
from psattn.tasks import make_task_config
from psattn.training.config import RunConfig, TrainConfig


@dataclass(frozen=True)
class TextPlan:
    tokenizer: str
    vocab_size: int
    seq_len: int
    d_model: int
    n_heads: int
    steps: int
    batch_size: int
    seeds: tuple[int, ...]
    eval_every: int
    eval_size: int
    device: str


TEXT_PLANS = {
    "quick": TextPlan("byte", 256, 128, 128, 4, steps=600, batch_size=32, seeds=(0,), eval_every=100,
                      eval_size=64, device="cpu"),
    "full": TextPlan("bpe", 4096, 256, 256, 4, steps=6000, batch_size=64, seeds=(0, 1, 2), eval_every=250,
                     eval_size=256, device="auto"),
}
#: (layers, variant, gamma) of the compared models
TEXT_ROWS = ((1, "baseline", 0.0), (1, "key_only", 1.0), (1, "symmetric", 1.0), (2, "baseline", 0.0), (2, "key_only", 1.0))


def text_config(plan: TextPlan, n_layers: int, variant: str, gamma: float, seed: int) -> RunConfig:
    task = make_task_config("text", tokenizer=plan.tokenizer, vocab_size=plan.vocab_size, seq_len=plan.seq_len)
    model = ModelConfig(vocab_size=plan.vocab_size, d_model=plan.d_model, n_layers=n_layers, n_heads=plan.n_heads,
                        attention=AttentionConfig(variant, gamma))
    size = f"L{n_layers}d{plan.d_model}h{plan.n_heads}"
    return RunConfig(
        name=run_name(f"text-{plan.tokenizer}", variant, gamma, "post_rope", size, seed),
        model=model, task=task,
        train=TrainConfig(steps=plan.steps, batch_size=plan.batch_size, lr=3e-3, eval_every=plan.eval_every,
                          eval_size=plan.eval_size, early_stop=False, threshold=1.0, seed=seed, threads=1,
                          device=plan.device),
    )


def text_experiment(mode: str = "quick") -> list[RunConfig]:
    if mode not in TEXT_PLANS:
        raise ValueError(f"unknown mode {mode!r}; expected one of {tuple(TEXT_PLANS)}")
    plan = TEXT_PLANS[mode]
    return [text_config(plan, layers, variant, gamma, seed) for layers, variant, gamma in TEXT_ROWS for seed in plan.seeds]


def _last(result: dict[str, Any], key: str):
    return result["history"][-1][key]


def model_key(result: dict[str, Any]) -> tuple[int, str, float]:
    m = result["config"]["model"]
    a = m["attention"][0] if isinstance(m["attention"], list) else m["attention"]
    return m["n_layers"], a["variant"], a["gamma"]


def summarise_text(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model (layers, variant, gamma): final held-out metrics, mean and spread over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for result in results.values():
        groups.setdefault(model_key(result), []).append(result)
    rows = []
    for (layers, variant, gamma), runs in groups.items():
        def stat(fn):
            values = [fn(r) for r in runs]  # noqa: B023 (used in this iteration)
            return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)
        rows.append({
            "layers": layers, "variant": variant, "gamma": gamma, "seeds": len(runs),
            "bits_per_byte": stat(lambda r: _last(r, "bits_per_byte")),
            "icl_score": stat(lambda r: _last(r, "icl_score")),
            "random_first_loss": stat(lambda r: _last(r, "random_first_loss")),
            "random_second_loss": stat(lambda r: _last(r, "random_second_loss")),
            "passage_first_loss": stat(lambda r: _last(r, "passage_first_loss")),
            "passage_second_loss": stat(lambda r: _last(r, "passage_second_loss")),
            "best_induction_score": stat(lambda r: max(max(layer) for layer in _last(r, "induction_score"))),
        })
    return sorted(rows, key=lambda r: (r["layers"], r["variant"] != "baseline", r["variant"]))
