"""The real-text section of the reproduction report: table, figures and samples from saved runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psattn.experiments import text_plots

# the comparison on a device is edge_report's; its names stay importable from here
from psattn.experiments.edge_report import EDGE_MODELS as EDGE_MODELS
from psattn.experiments.edge_report import EXECUTORCH_NOTE as EXECUTORCH_NOTE
from psattn.experiments.edge_report import EXECUTORCH_PRECISIONS as EXECUTORCH_PRECISIONS
from psattn.experiments.edge_report import PRECISIONS as PRECISIONS
from psattn.experiments.edge_report import QUANTIZED as QUANTIZED
from psattn.experiments.edge_report import edge_comparison, edge_markdown
from psattn.experiments.edge_report import edge_table as edge_table
from psattn.experiments.edge_report import edge_verdict as edge_verdict
from psattn.experiments.markdown import table
from psattn.experiments.studies.text import (
    HYPOTHESIS_MODELS,
    TEXT_PLANS,
    TextPlan,
    mean_sd,
    model_key,
    model_label,
    summarise_text,
    text_experiment,
)
from psattn.experiments.sweep import run_sweep
from psattn.models import ModelConfig
from psattn.models.generate import continue_text
from psattn.models.lm_eval import icl_window
from psattn.models.presets import preset_parameter_count
from psattn.textdata.corpus import describe_corpus
from psattn.training.run_dir import load_trained, run_tokenizer

SAMPLE_PROMPT_CHARS = 120


def samples(runs: Path, configs, seed: int = 0, max_new_tokens: int = 160) -> dict[str, dict[str, str]]:
    """A continuation of the same held-out prompt by every model of ``configs`` trained on ``seed`` (run
    directories ``runs/<name>``), within the context each was trained on (``continue_ids``)."""
    first = configs[0]
    tokenizer = run_tokenizer(runs / first.name)
    held = tokenizer.decode(np.asarray(first.task.tokens().eval[: 1 << 14]).tolist())
    starts = [i + 2 for i in range(len(held)) if held.startswith("\n\n", i) and held[i + 2 : i + 3].isalpha()]
    definitions = [i for i in starts if held.startswith(("def ", "class "), i)]  # in source code, a definition
    start = definitions[0] if definitions else starts[1]
    prompt = held[start : held.rfind(" ", start, start + SAMPLE_PROMPT_CHARS)]  # a paragraph's opening words
    result = {}
    for config in configs:
        if config.train.seed != seed:
            continue
        model = load_trained(runs / config.name)
        text = continue_text(model, run_tokenizer(runs / config.name), prompt, max_new_tokens, seed=0,
                             context=config.task.seq_len)
        result[model_label(*model_key({"config": config.to_dict()}))] = {"prompt": prompt, "continuation": text}
    return result


def copy_gain(row: dict, probe: str = "passage") -> float:
    """Nats by which the second copy of a repeated ``probe`` ("passage" or "random") is easier than the first."""
    return row[f"{probe}_first_loss"][0] - row[f"{probe}_second_loss"][0]


def verdict(rows: list[dict], tokens: int | None = None) -> str:
    """The hypothesis, clause by clause, read off the repeated-passage copy gain and the ICL score, at the
    budget of ``tokens`` training tokens (named first: the verdict speaks for that budget only)."""
    by = {(r["layers"], r["variant"], r["gamma"]): r for r in rows}
    ranking = ", ".join(f"{model_label(*key)} {copy_gain(r):.2f}" for key, r in
                        sorted(by.items(), key=lambda kv: -copy_gain(kv[1])))
    out = [] if tokens is None else [
        f"This verdict speaks for {tokens / 1e6:.1f}M training tokens, before two plain layers have formed an "
        "induction head (at context 256 none had by 24M tokens at any batch size in `psattn sweep text_pilot`); "
        "at context 64 two plain layers form one after 7.8M tokens, and `psattn sweep text_phase` compares the "
        "models past that point (docs/text.md)."]
    out.append(f"Copy gain on a repeated held-out passage (nats, first copy minus second), largest first: {ranking}.")
    one_plain, one_psa, two_plain = (by.get(key) for key in HYPOTHESIS_MODELS)
    if one_plain and one_psa:
        holds = copy_gain(one_psa) > copy_gain(one_plain) and one_psa["icl_score"][0] < one_plain["icl_score"][0]
        out.append(
            f"One key-sheared layer against one plain layer: copy gain {copy_gain(one_psa):.2f} against "
            f"{copy_gain(one_plain):.2f}, ICL score {one_psa['icl_score'][0]:+.3f} against {one_plain['icl_score'][0]:+.3f}: "
            + ("**one PSA layer copies, and learns in context, more than one plain layer**."
               if holds else "**the hypothesis's first clause does not hold at this budget**."))
    if two_plain and one_psa:
        more = copy_gain(two_plain) > copy_gain(one_psa)
        out.append(
            f"Two plain layers: copy gain {copy_gain(two_plain):.2f}, ICL score {two_plain['icl_score'][0]:+.3f}; "
            + ("they copy more than the single PSA layer." if more else
               "at this budget they copy less than the single PSA layer, though with a second layer's parameters."))
    if any(r["random_first_loss"][0] > math.log(r["vocab_size"]) for r in rows):
        out.append("Random tokens (drawn uniformly from the ids the training text uses) are unlike anything these models "
                   "saw; at this budget their loss is above the uniform guess's ln V, so their copy gain is shown but not "
                   "used above.")
    return " ".join(out)


@dataclass
class TextResults:
    """Everything the real-text section reports: the summary rows, the seed-0 histories (by model label),
    samples, the edge comparison and parameter counts."""

    plan: TextPlan
    rows: list[dict[str, Any]]
    histories: dict[str, list[dict[str, Any]]]  # model label -> seed-0 metrics rows
    samples: dict[str, dict[str, str]]
    edge: dict[str, dict] | None
    params: dict[str, int]  # model label -> parameters


def text_results(out: Path, mode: str, workers: int | None, progress: bool, executorch: bool = False) -> TextResults:
    """Train what is missing, then summarise, sample and export (``executorch``: to ExecuTorch as well)."""
    configs = text_experiment(mode)
    plan = TEXT_PLANS[mode]
    results = run_sweep(configs, out / "runs", workers=workers, progress=progress)
    first_seed = [c for c in configs if c.train.seed == plan.seeds[0]]
    labels = {c.name: model_label(*model_key(results[c.name])) for c in first_seed}
    return TextResults(
        plan=plan, rows=summarise_text(results),
        histories={labels[c.name]: results[c.name]["history"] for c in first_seed},
        samples=samples(out / "runs", configs, plan.seeds[0]),
        edge=edge_comparison(out / "runs", configs, out / "onnx", plan.seeds[0], executorch=executorch),
        params={labels[c.name]: preset_parameter_count(ModelConfig.from_dict(c.model.to_dict())) for c in first_seed},
    )


def text_figures(res: TextResults, figures: Path) -> None:
    """Draw the real-text part's figures into ``figures``."""
    final = {label: history[-1] for label, history in res.histories.items()}
    text_plots.plot_text_curves(res.histories, figures / "text_curves.png")
    text_plots.plot_position_loss({label: row["position_loss"] for label, row in final.items()},
                                  figures / "text_position_loss.png")
    text_plots.plot_head_heatmaps({label: {k: row[k] for k in ("induction_score", "prefix_matching_score")}
                                   for label, row in final.items()}, figures / "text_head_scores.png")


def text_section(out: Path, mode: str, workers: int | None, progress: bool,
                 executorch: bool = False, figures: Path | None = None) -> tuple[list[str], dict[str, Any]]:
    """The section's markdown lines and its results.json entry; its figures go to ``figures`` (``out/figures``)."""
    res = text_results(out, mode, workers, progress, executorch)
    text_figures(res, figures or out / "figures")
    return text_markdown(res), {"rows": res.rows, "samples": res.samples, "parameters": res.params, "edge": res.edge}


def text_markdown(res: TextResults) -> list[str]:
    """The real-text part of the reproduction report, as markdown lines."""
    plan, rows, examples, edge, params = res.plan, res.rows, res.samples, res.edge, res.params
    early, late = icl_window(plan.seq_len)  # the positions the score averages (T // 16 was not one at T = 100)
    lines = [
        "## Real text",
        "",
        f"Hypothesis, stated before measuring: one key-sheared layer shows a clear in-context-learning (ICL) score and "
        f"copies a repeated passage; one plain layer does not; two plain layers do. "
        f"Corpus: {describe_corpus(plan.corpus)}, the last 5% of each document held out; "
        f"{plan.tokenizer} tokenizer (vocabulary {plan.vocab_size}), context {plan.seq_len}; d_model {plan.d_model}, "
        f"{plan.n_heads} heads, MLP; AdamW lr {plan.lr:g}, batch {plan.batch_size}, {plan.steps} steps "
        f"({plan.steps * plan.batch_size * plan.seq_len / 1e6:.1f}M training tokens), seeds {', '.join(map(str, plan.seeds))}. "
        f"ICL score: mean held-out loss at positions {late[0]}–{late[-1]} minus positions {early[0]}–{early[-1]} "
        f"(negative: later tokens are predicted better). Repeated passage: a held-out passage of {plan.seq_len // 2} tokens "
        f"shown twice; repeated random tokens: {plan.seq_len // 2} tokens drawn from the corpus's vocabulary, then the "
        "same again. Loss on the second copy below the first means the model copies in context.",
        "",
    ]
    lines += table(
        ["model", "parameters", "held-out bits/byte", "ICL score", "random tokens loss: 1st / 2nd copy",
         "passage loss: 1st / 2nd copy", "best induction score", "best prefix-matching score"],
        [[model_label(r["layers"], r["variant"], r["gamma"]),
          f"{params[model_label(r['layers'], r['variant'], r['gamma'])]:,}",
          mean_sd(r["bits_per_byte"]), mean_sd(r["icl_score"]),
          f"{r['random_first_loss'][0]:.2f} / {r['random_second_loss'][0]:.2f}",
          f"{r['passage_first_loss'][0]:.2f} / {r['passage_second_loss'][0]:.2f}",
          mean_sd(r["best_induction_score"]), mean_sd(r["best_prefix_matching_score"])] for r in rows],
    )
    lines += ["", verdict(rows, plan.steps * plan.batch_size * plan.seq_len), "",
              "![held-out loss, ICL score and passage copy gain against step](figures/text_curves.png)", "",
              "![loss against position](figures/text_position_loss.png)", "",
              "![induction and prefix-matching score of every head](figures/text_head_scores.png)", "",
              "Samples (temperature 0.8, seed 0) continuing the same held-out prompt:", ""]
    prompt = next(iter(examples.values()))["prompt"]
    lines += ["Prompt: `" + prompt.replace("\n", " ").replace("`", "'") + "`", ""]
    for label, sample in examples.items():
        lines += [f"- **{label}**: `" + sample["continuation"].replace("\n", " ").replace("`", "'") + "`"]
    lines.append("")
    return lines + edge_markdown(edge)
