"""Prose against code: does one key-sheared layer copy where two plain layers do not
(``psattn sweep text_corpora``)?

The real-text experiment's question (arXiv 2609.32319: the key-side shear hands every key its predecessor,
the half of an induction circuit one plain layer lacks) asked on the two corpora psattn ships or finds on
every machine: Jane Austen's six novels (``austen``) and the running interpreter's standard library
(``python-stdlib``). One layer with the key-only shear (gamma = 1) and two plain layers, BPE 2048, context
256, d_model 128, 4 heads, 32 rows a step, lr 3e-3, evaluated every 250 steps; on prose the one-layer model
trains 6,250 steps (51M tokens) and the two-layer one 4,500 (37M), on code both 3,000 (25M).

What each evaluation measures on real text is the copy gain (a held-out passage shown twice: the loss on
its first copy minus the loss on its second, in nats), the ICL score of Olsson et al. (2022) and every
head's induction and prefix-matching scores; ``corpora_table`` sets them side by side at a few steps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from psattn.experiments.configs import run_name
from psattn.experiments.markdown import table
from psattn.experiments.phase_change import best_head
from psattn.experiments.studies.text import TextPlan, model_key, model_label, text_config
from psattn.experiments.study import Results, Study, check_mode
from psattn.models import ModelConfig
from psattn.models.presets import preset_parameter_count
from psattn.training.config import RunConfig

#: the two models compared: (layers, variant, gamma)
ONE_KEY_ONLY, TWO_PLAIN = (1, "key_only", 1.0), (2, "baseline", 0.0)
#: corpus -> training steps of each model (the prose runs are longer: nothing copies there by 3,000 steps)
STEPS = {"python-stdlib": {ONE_KEY_ONLY: 3000, TWO_PLAIN: 3000},
         "austen": {ONE_KEY_ONLY: 6250, TWO_PLAIN: 4500}}
#: the evaluations the curve table shows, besides each run's last
TABLE_STEPS = (250, 500, 1000)
#: the seeds of each plan: the quick plan is seed 0 on the CPU, the full one three seeds on the best device
SEEDS = {"quick": (0,), "full": (0, 1, 2)}


def corpus_plan(corpus: str, mode: str) -> TextPlan:
    """The plan of ``corpus`` (steps are set per model by ``corpora_config``)."""
    return TextPlan(corpus=corpus, models=(ONE_KEY_ONLY, TWO_PLAIN), tokenizer="bpe", vocab_size=2048, seq_len=256,
                    d_model=128, n_heads=4, steps=0, batch_size=32, seeds=SEEDS[mode], eval_every=250, eval_size=64,
                    device="cpu" if mode == "quick" else "auto")


def corpora_config(corpus: str, model: tuple[int, str, float], seed: int, mode: str) -> RunConfig:
    """One run: ``model`` on ``corpus``, checkpointed at every evaluation (a run is an hour on one core)."""
    plan = replace(corpus_plan(corpus, mode), steps=STEPS[corpus][model])
    layers, variant, gamma = model
    config = text_config(plan, layers, variant, gamma, seed)
    name = run_name(f"text_corpora-{corpus}-bpe{plan.vocab_size}-c{plan.seq_len}", variant, gamma, "post_rope",
                    f"L{layers}d{plan.d_model}h{plan.n_heads}", seed)
    return replace(config, name=name, train=replace(config.train, checkpoint_every=plan.eval_every))


def text_corpora(mode: str = "quick") -> list[RunConfig]:
    """Every run of the study (code first: its runs are the shorter ones)."""
    seeds = SEEDS[check_mode(mode)]
    return [corpora_config(corpus, model, seed, mode) for corpus in STEPS for model in STEPS[corpus] for seed in seeds]


def copy_gain(row: dict[str, Any]) -> float:
    """Nats by which the second copy of the held-out passage is easier than the first."""
    return row["passage_first_loss"] - row["passage_second_loss"]


def _evaluation(result: dict[str, Any], step: int) -> dict[str, Any] | None:
    return next((row for row in result["history"] if row["step"] == step), None)


def _runs(results: Results, corpus: str, seed: int = 0) -> dict[tuple[int, str, float], dict[str, Any]]:
    """The finished runs of ``corpus`` and ``seed``, keyed by model, one key-only layer first."""
    runs = {model_key(r): r for r in results.values()
            if r["config"]["task"]["corpus"] == corpus and r["config"]["train"]["seed"] == seed}
    return {model: runs[model] for model in STEPS[corpus] if model in runs}


def _cell(row: dict[str, Any] | None) -> list[str]:
    if row is None:
        return ["—", "—"]
    return [f"{copy_gain(row):.2f}",
            f"{best_head(row, 'induction_score'):.3f} / {best_head(row, 'prefix_matching_score'):.3f}"]


def curve_table(results: Results, corpus: str) -> list[str]:
    """Seed 0 of each model on ``corpus`` at ``TABLE_STEPS`` and at each run's last step: copy gain (nats) and
    the best head's induction / prefix-matching score."""
    runs = _runs(results, corpus)
    steps = sorted({*TABLE_STEPS, *(r["history"][-1]["step"] for r in runs.values())})
    header = ["step", "tokens"]
    for model in runs:
        header += [f"{model_label(*model)}: copy gain", "induction / prefix-matching score"]
    rows = []
    for step in steps:
        evaluations = [_evaluation(r, step) for r in runs.values()]
        tokens = next((e["tokens"] for e in evaluations if e is not None), None)
        rows.append([f"{step:,}", "—" if tokens is None else f"{tokens / 1e6:.1f}M",
                     *(cell for e in evaluations for cell in _cell(e))])
    return table(header, rows)


def end_row(result: dict[str, Any]) -> dict[str, Any]:
    """What a run ends at, and the most it copied on the way."""
    history = [row for row in result["history"] if row["step"] > 0]
    last = history[-1]
    lowest = min(history, key=lambda row: row["eval_loss"])
    copying = max(history, key=copy_gain)
    parameters = preset_parameter_count(ModelConfig.from_dict(result["config"]["model"]))
    return {"parameters": parameters, "steps": last["step"], "tokens": last["tokens"],
            "bits_per_byte": last["bits_per_byte"], "icl_score": last["icl_score"],
            "largest_copy_gain": copy_gain(copying), "largest_copy_gain_step": copying["step"],
            "largest_induction_score": max(best_head(row, "induction_score") for row in history),
            "lowest_loss_step": lowest["step"], "minutes": last["seconds"] / 60}


def end_table(results: Results) -> list[str]:
    """One row per run: its size, what it ends at and the most it copied on the way."""
    rows = []
    for r in sorted(results.values(), key=lambda r: (r["config"]["task"]["corpus"], model_key(r),
                                                     r["config"]["train"]["seed"])):
        e = end_row(r)
        rows.append([r["config"]["task"]["corpus"], model_label(*model_key(r)), str(r["config"]["train"]["seed"]),
                     f"{e['parameters']:,}", f"{e['steps']:,} ({e['tokens'] / 1e6:.0f}M)", f"{e['bits_per_byte']:.3f}",
                     f"{e['icl_score']:+.2f}", f"{e['largest_copy_gain']:.2f} ({e['largest_copy_gain_step']:,})",
                     f"{e['largest_induction_score']:.3f}", f"{e['lowest_loss_step']:,}", f"{e['minutes']:.0f}"])
    return table(["corpus", "model", "seed", "parameters", "steps (tokens)", "bits per byte", "ICL score",
                  "largest copy gain (at step)", "largest induction score", "lowest held-out loss at step", "minutes"], rows)


def corpora_table(results: Results) -> list[str]:
    """The end table, then each corpus's curve table (seed 0)."""
    lines = end_table(results)
    for corpus in STEPS:
        if _runs(results, corpus):
            lines += ["", f"{corpus}, seed 0:", *curve_table(results, corpus)]
    return lines


def corpora_verdict(results: Results) -> list[str]:
    """Per corpus (seed 0): how much each model copies at most and where it ends, one clause a line."""
    lines = []
    for corpus in STEPS:
        runs = _runs(results, corpus)
        if set(runs) != {ONE_KEY_ONLY, TWO_PLAIN}:
            continue
        one, two = end_row(runs[ONE_KEY_ONLY]), end_row(runs[TWO_PLAIN])
        lines.append(f"{corpus}: largest copy gain {one['largest_copy_gain']:.2f} nats for one key-only layer, "
                     f"{two['largest_copy_gain']:.2f} for two plain layers; held-out bits per byte at the end "
                     f"{one['bits_per_byte']:.3f} against {two['bits_per_byte']:.3f}")
    return lines


STUDIES = (Study("text_corpora", text_corpora,
                 "one key-only layer against two plain layers on prose and on code (copy gain in nats)",
                 corpora_table, verdict=corpora_verdict),)
