"""Real text with an MLP in every block, at the CPU setting where two plain attention-only layers go
through their phase change (``psattn sweep text_mlp``).

``text_phase`` compares attention-only models: on the synthetic induction task, two plain layers with
an MLP in every block never formed the circuit (``two_layer``: the first layer's MLP locks the second
layer's heads onto the previous token). Real small models have MLPs, and ``text_scale`` (the GPU study)
trains them. This study asks, at CPU scale and before the GPU run, whether that lock also holds on real
text: the same setting as ``text_phase`` (``python-stdlib``, BPE 1024, context 64, 8 rows a step,
d_model 128, 4 heads, 24M training tokens, 40 evaluations), the same models as its core (one and two
layers, plain and key-only gamma = 1), each with an MLP in every block; seed 0. The attention-only
counterparts are ``text_phase``'s saved runs.

The hypothesis, stated before the run, is ``HYPOTHESIS``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from psattn.experiments.configs import run_name
from psattn.experiments.studies.text import TextPlan, text_config
from psattn.experiments.studies.text_phase import _plan, format_phase_table, phase_figure, phase_table, phase_verdict
from psattn.experiments.study import Results, Study, check_mode
from psattn.training.config import RunConfig

HYPOTHESIS = ("as on the synthetic task, the first layer's MLP keeps two plain layers from forming an induction "
              "circuit on real text within the budget (no phase change by 24M tokens, three times where the "
              "attention-only pair has one), while the key-sheared models copy from their first evaluations, with "
              "MLPs as without.")

#: (layers, variant, gamma) of the compared models, in the order they train (the question first)
MLP_MODELS = ((2, "baseline", 0.0), (2, "key_only", 1.0), (1, "key_only", 1.0), (1, "baseline", 0.0))
SEED = 0


def plan(mode: str) -> TextPlan:
    """``text_phase``'s plan of ``mode`` with this study's models and seed."""
    return replace(_plan(check_mode(mode)), models=MLP_MODELS, seeds=(SEED,))


def mlp_config(p: TextPlan, n_layers: int, variant: str, gamma: float, seed: int) -> RunConfig:
    """One model of the plan with an MLP in every block, checkpointed at every evaluation."""
    config = text_config(p, n_layers, variant, gamma, seed)
    name = run_name(f"text_mlp-{p.corpus}-{p.tokenizer}{p.vocab_size}-c{p.seq_len}", variant, gamma, "post_rope",
                    f"L{n_layers}d{p.d_model}h{p.n_heads}-mlp", seed)
    return replace(config, name=name, model=replace(config.model, mlp=True),
                   train=replace(config.train, checkpoint_every=p.eval_every))


def text_mlp(mode: str = "quick") -> list[RunConfig]:
    """The runs of the MLP study (psattn sweep text_mlp)."""
    p = plan(mode)
    return [mlp_config(p, *model, seed) for seed in p.seeds for model in p.models]


def _report(results: Results, runs: Path, mode: str) -> list[str]:
    return [f"figure: {phase_figure(results, runs / 'text_mlp.png')}"]


STUDIES = (Study("text_mlp", text_mlp,
                 "real text with an MLP in every block, at the end of training (seed 0)",
                 lambda results: format_phase_table(phase_table(results)),
                 verdict=lambda results: phase_verdict(results, phase_table(results)), report=_report),)
