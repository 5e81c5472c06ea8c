"""The real-text pilot: where does two plain layers' induction-head phase change come on Python source?

Published work (arXiv 2511.16893) says the phase change depends on batch and context size far more than
on model size, and comes earlier with small batches and text whose bigrams repeat (code). The pilot
trains two plain layers on the ``python-stdlib`` corpus (BPE 1024, context 256, d_model 128, 4 heads) on
the same number of training tokens at 4, 8, 16 and 32 rows a step, and reads the phase change off each
run's head scores with ``detect_phase_change``.

The two-layer reference is attention-only: on the synthetic induction task, two plain layers with MLPs
put all four second-layer heads on the previous token within 200 steps and stay near chance, under
every recipe tried (docs/text.md), while the same two layers without MLPs form the circuit (first-layer
previous-token heads, second-layer induction heads). With MLPs, at 8 rows a step, two layers showed no
prefix-matching head by 24.6M tokens in an earlier exploration (docs/text.md).

The same paper fits the training tokens to the phase change as ``T * sqrt(B * C)`` (B rows a step, C
tokens of context, T about 10**5.7, ``law_tokens``): 16M tokens at 4 rows of 256. The law's probe
runs test it where it predicts the phase change within a few million tokens (2 and 8 rows of 64
tokens), each trained on about three times its predicted tokens.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from psattn.experiments.phase_change import THRESHOLD, best, best_head, detect_phase_change
from psattn.experiments.study import Results, Study, check_mode
from psattn.models import AttentionConfig, ModelConfig
from psattn.tasks import make_task_config
from psattn.training.config import RunConfig, TrainConfig

CONTEXT, VOCAB, EVALUATIONS = 256, 1024, 48
#: (rows a step, MLPs) of the pilot's runs: the attention-only reference at four batch sizes
PILOT_RUNS = ((4, False), (8, False), (16, False), (32, False))
#: training tokens of every pilot run, per plan: about 20 minutes a run attention-only on one core
PILOT_TOKENS = {"quick": 24_000_000, "full": 200_000_000}
#: the emergence law's constant (arXiv 2511.16893): the phase change after LAW_T * sqrt(B * C) tokens
LAW_T = 10**5.7
#: (rows a step, context) of the law's probe runs, attention-only, each trained on LAW_BUDGET times the
#: law's prediction
LAW_RUNS = ((2, 64), (8, 64))
LAW_BUDGET = 3


def law_tokens(batch_size: int, context: int) -> float:
    """Training tokens to the induction-head phase change by the law of arXiv 2511.16893."""
    return LAW_T * math.sqrt(batch_size * context)


def pilot_config(batch_size: int, mlp: bool, tokens: int, *, seed: int = 0, device: str = "cpu",
                 context: int = CONTEXT) -> RunConfig:
    """Two plain layers on Python source, ``tokens`` training tokens at ``batch_size`` rows of ``context``
    tokens a step, evaluated (and checkpointed) at step 0, every ``steps // 48`` steps and at the last step:
    49 or 50 times (50 for every run of the quick plan)."""
    steps = max(1, tokens // (batch_size * context))
    every = max(1, steps // EVALUATIONS)
    task = make_task_config("text", corpus="python-stdlib", tokenizer="bpe", vocab_size=VOCAB, seq_len=context)
    model = ModelConfig(vocab_size=VOCAB, d_model=128, n_layers=2, n_heads=4, mlp=mlp,
                        attention=AttentionConfig("baseline", 0.0))
    return RunConfig(
        name=(f"text_pilot-python-stdlib-bpe{VOCAB}{'' if context == CONTEXT else f'-c{context}'}"
              f"-L2d128h4{'' if mlp else '-attnonly'}-b{batch_size}-s{seed}"),
        model=model, task=task,
        train=TrainConfig(steps=steps, batch_size=batch_size, lr=3e-3, eval_every=every, eval_size=64,
                          checkpoint_every=every, early_stop=False, threshold=1.0, seed=seed, threads=1,
                          device=device),
    )


def text_pilot(mode: str = "quick") -> list[RunConfig]:
    """The runs of the two plain layers' phase-change pilot (psattn sweep text_pilot)."""
    device = "cpu" if check_mode(mode) == "quick" else "auto"
    runs = [pilot_config(b, mlp, PILOT_TOKENS[mode], device=device) for b, mlp in PILOT_RUNS]
    return runs + [pilot_config(b, False, int(round(LAW_BUDGET * law_tokens(b, c), -5)), device=device, context=c)
                   for b, c in LAW_RUNS]


def pilot_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pilot run: batch, MLPs, tokens and minutes trained, and the phase change (None if not seen)."""
    rows = []
    for result in results.values():
        config, history = result["config"], result["history"]
        last = history[-1]
        change = detect_phase_change(history)
        rows.append({
            "batch_size": config["train"]["batch_size"], "mlp": config["model"]["mlp"],
            "context": config["task"]["seq_len"],
            "law_tokens": law_tokens(config["train"]["batch_size"], config["task"]["seq_len"]),
            "tokens": last["tokens"], "minutes": last["seconds"] / 60,
            "phase_change": change,
            "best_prefix_matching_score": best_head(last, "prefix_matching_score"),
            "previous_token_by_layer": [best(layer) for layer in last["previous_token_score"]],
            "icl_score": last["icl_score"], "bits_per_byte": last["bits_per_byte"],
        })
    return sorted(rows, key=lambda r: (r["mlp"], -r["context"], r["batch_size"]))


def run_label(result: dict[str, Any]) -> str:
    """A pilot run's label: rows a step, context, and whether it has MLPs."""
    config = result["config"]
    return (f"{config['train']['batch_size']} rows of {config['task']['seq_len']}"
            f"{'' if config['model']['mlp'] else ', attention-only'}")


def pilot_figure(results: dict[str, dict[str, Any]], path) -> Any:
    """The pilot's curves against training tokens, the law's prediction marked (see
    ``plot_phase_change``); ICL scores of different contexts use different
    windows (``icl_window``)."""
    from psattn.experiments.plots import plot_phase_change

    ordered = sorted(results.values(), key=lambda r: (r["config"]["model"]["mlp"], -r["config"]["task"]["seq_len"],
                                                      r["config"]["train"]["batch_size"]))
    histories = {run_label(r): r["history"] for r in ordered}
    changes = {run_label(r): detect_phase_change(r["history"]) for r in ordered}
    predicted = {run_label(r): law_tokens(r["config"]["train"]["batch_size"], r["config"]["task"]["seq_len"])
                 for r in ordered}
    contexts = [r["config"]["task"]["seq_len"] for r in ordered]
    return plot_phase_change(histories, path, context=contexts, threshold=THRESHOLD, changes=changes,
                             predicted=predicted)


def format_pilot_table(rows: list[dict[str, Any]]) -> list[str]:
    """The pilot table as markdown lines."""
    lines = ["| rows a step | context | MLPs | the law's phase change | phase change: tokens (minutes) | "
             "best prefix-matching score, at the end | "
             "best previous-token score at the end, layer 1 / 2 | ICL score | bits per byte | trained: tokens (minutes) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        change = r["phase_change"]
        when = (f"none within {r['tokens'] / 1e6:.1f}M" if change is None
                else f"{change.tokens / 1e6:.2f}M ({change.seconds / 60:.1f})")
        lines.append(f"| {r['batch_size']} | {r['context']} | {'yes' if r['mlp'] else 'no'} | "
                     f"{r['law_tokens'] / 1e6:.1f}M | {when} | "
                     f"{r['best_prefix_matching_score']:.3f} | {' / '.join(f'{x:.2f}' for x in r['previous_token_by_layer'])} | "
                     f"{r['icl_score']:+.3f} | {r['bits_per_byte']:.3f} | "
                     f"{r['tokens'] / 1e6:.1f}M ({r['minutes']:.1f}) |")
    return lines


def _figure(results: Results, runs: Path, mode: str) -> list[str]:
    return [f"figure: {pilot_figure(results, runs / 'text_pilot.png')}"]


STUDIES = (Study("text_pilot", text_pilot,
                 "phase change of two plain layers (first evaluation with a head's prefix-matching score >= 0.1, twice)",
                 lambda results: format_pilot_table(pilot_table(results)), verdict=None, report=_figure),)
