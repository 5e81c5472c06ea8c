"""Real text past the phase change: does one PSA layer still match two plain layers once the two plain
layers have formed their induction heads? (``psattn sweep text_phase``)

Hypothesis, stated before the run: one key-sheared layer copies from the first evaluations on, long
before two plain layers go through their phase change; once they have, two plain layers copy as much
or more and reach a lower ICL score and lower bits per byte, so the one-layer advantage is transient,
and the learned key-lag layer (smeared keys) copies like the key-sheared one.

The setting is where `psattn sweep text_pilot` saw the phase change within a CPU budget: two plain
attention-only layers on Python source (``python-stdlib``, BPE 1024) at 8 rows of 64 tokens a step
formed a prefix-matching head after 7.8M training tokens (docs/text.md). Every model here trains on
24M tokens, three times that, evaluated 40 times: one layer plain, key-only gamma = 1, symmetric
gamma = 1, smeared keys (Olsson et al.'s one-layer fix) and Canon (the better of the KV-shift and Canon
rows of the synthetic tables); two layers plain and key-only. Every model is attention-only: the
two-layer reference with an MLP in every block does not form the circuit (docs/text.md), and the
comparison keeps one recipe for all. The one-layer key-only and the two plain layers train on three
seeds, the rest on one.
"""

from __future__ import annotations

from dataclasses import replace

from psattn.experiments.configs import run_name
from psattn.experiments.text import TextPlan, text_config
from psattn.training.config import RunConfig

#: (layers, variant, gamma) of the compared models
PHASE_MODELS = ((1, "baseline", 0.0), (1, "key_only", 1.0), (1, "symmetric", 1.0), (1, "smeared_keys", 0.0),
                (1, "canon", 0.0), (2, "baseline", 0.0), (2, "key_only", 1.0))
#: the models trained on three seeds (the rest on the first)
SEEDED_MODELS = ((1, "key_only", 1.0), (2, "baseline", 0.0))
SEEDS = (0, 1, 2)
EVALUATIONS = 40
#: training tokens of every run, per plan
PHASE_TOKENS = {"quick": 24_000_000, "full": 200_000_000}


def _plan(mode: str) -> TextPlan:
    context, batch = (64, 8) if mode == "quick" else (256, 16)
    steps = PHASE_TOKENS[mode] // (context * batch)
    return TextPlan("python-stdlib", PHASE_MODELS, "bpe", 1024, context, 128, 4, steps=steps, batch_size=batch,
                    seeds=SEEDS, eval_every=steps // EVALUATIONS, eval_size=64,
                    device="cpu" if mode == "quick" else "auto")


def phase_config(plan: TextPlan, n_layers: int, variant: str, gamma: float, seed: int) -> RunConfig:
    """One attention-only model of the plan, checkpointed at every evaluation."""
    config = text_config(plan, n_layers, variant, gamma, seed)
    name = run_name(f"text_phase-{plan.corpus}-{plan.tokenizer}{plan.vocab_size}-c{plan.seq_len}", variant, gamma,
                    "post_rope", f"L{n_layers}d{plan.d_model}h{plan.n_heads}-attnonly", seed)
    return replace(config, name=name, model=replace(config.model, mlp=False),
                   train=replace(config.train, checkpoint_every=plan.eval_every))


def text_phase(mode: str = "quick") -> list[RunConfig]:
    if mode not in PHASE_TOKENS:
        raise ValueError(f"unknown mode {mode!r}; expected one of {tuple(PHASE_TOKENS)}")
    plan = _plan(mode)
    # every model's first seed before any second: a sweep stopped early has every row
    return [phase_config(plan, *model, seed) for seed in plan.seeds for model in plan.models
            if seed == plan.seeds[0] or model in SEEDED_MODELS or mode == "full"]
