"""Real text past the phase change: does one PSA layer still match two plain layers once the two plain
layers have formed their induction heads? (``psattn sweep text_phase``)

The hypothesis, stated before the run, is ``HYPOTHESIS``.

The setting is where `psattn sweep text_pilot` saw the phase change within a CPU budget: two plain
attention-only layers on Python source (``python-stdlib``, BPE 1024) at 8 rows of 64 tokens a step
formed a prefix-matching head after 7.8M training tokens (docs/text.md). Every model here trains on 24M
tokens, three times that, evaluated 42 times (step 0, every 1,171 steps, the last step): one layer
plain, key-only gamma = 1, symmetric gamma = 1, smeared keys (Olsson et al.'s one-layer fix) and Canon
(the better of the KV-shift and Canon rows of the synthetic tables); two layers plain and key-only.
Every model is attention-only: the two-layer reference with an MLP in every block does not form the
circuit (docs/text.md), and the comparison keeps one recipe for all. The one-layer key-only and the two
plain layers train on three seeds, the rest on one.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from psattn.experiments.configs import run_name
from psattn.experiments.markdown import table
from psattn.experiments.phase_change import (
    COPY_THRESHOLD,
    THRESHOLD,
    detect_copying,
    detect_phase_change,
    random_copy_gain,
)
from psattn.experiments.studies.text import (
    TextPlan,
    mean_sd,
    model_key,
    model_label,
    summarise_text,
    text_config,
    tokens_per_seed,
)
from psattn.experiments.study import Results, Study, check_mode
from psattn.files import write_text
from psattn.models import AttentionConfig, DecoderLM, ModelConfig
from psattn.models.config import Variant
from psattn.processes import staged_folder
from psattn.training.config import RunConfig
from psattn.training.run_dir import CHECKPOINT, TOKENIZER
from psattn.training.signals import stop_signals_held

HYPOTHESIS = ("one key-sheared layer copies from the first evaluations on, long before two plain layers go through "
              "their phase change; once they have, two plain layers copy as much or more and reach a lower ICL score "
              "and lower bits per byte, so the one-layer advantage is transient; the learned key lag (smeared keys) "
              "copies like the key-sheared layer.")

#: (layers, variant, gamma) of the compared models
PHASE_MODELS = ((1, "baseline", 0.0), (1, "key_only", 1.0), (1, "symmetric", 1.0), (1, "smeared_keys", 0.0),
                (1, "canon", 0.0), (2, "baseline", 0.0), (2, "key_only", 1.0))
#: the models trained on three seeds (the rest on the first)
SEEDED_MODELS = ((1, "key_only", 1.0), (2, "baseline", 0.0))
SEEDS = (0, 1, 2)
#: the hidden folder inside the runs' folder that ``phase_report`` writes its figure and report into (then a process id)
STAGING_PREFIX = ".text-phase-report-"
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
    """The runs of the past-the-phase-change study (psattn sweep text_phase)."""
    plan = _plan(check_mode(mode))
    return [phase_config(plan, *model, seed) for seed in plan.seeds for model in plan.models
            if seed == plan.seeds[0] or model in SEEDED_MODELS or mode == "full"]


def phase_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model: ``summarise_text``'s final metrics (mean, sd over
    seeds), the parameters, and per seed the training tokens to first copying and to the phase change
    (``phase_change``; None where a run shows none)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for result in sorted(results.values(), key=lambda r: r["config"]["train"]["seed"]):
        groups.setdefault(model_key(result), []).append(result)
    order = {model: i for i, model in enumerate(PHASE_MODELS)}
    rows = []
    for row in summarise_text(results):
        runs = groups[(row["layers"], row["variant"], row["gamma"])]
        rows.append({**row, "parameters": DecoderLM(ModelConfig.from_dict(runs[0]["config"]["model"])).num_parameters(),
                     "tokens": runs[0]["history"][-1]["tokens"],
                     "first_copying": [detect_copying(r["history"]) for r in runs],
                     "phase_change": [detect_phase_change(r["history"]) for r in runs]})
    return sorted(rows, key=lambda r: order.get((r["layers"], r["variant"], r["gamma"]), len(order)))


def format_phase_table(rows: list[dict[str, Any]]) -> list[str]:
    """The end-of-training table as markdown lines (mean ± sd over seeds; tokens per seed)."""
    return table(
        ["model", "seeds", "parameters", "held-out bits/byte", "ICL score", "passage copy gain", "random copy gain",
         "best induction score", "best prefix-matching score", "first copying (tokens)", "phase change (tokens)"],
        [[model_label(r["layers"], r["variant"], r["gamma"]), str(r["seeds"]), f"{r['parameters']:,}",
          mean_sd(r["bits_per_byte"]), mean_sd(r["icl_score"], sign="+"), mean_sd(r["passage_copy_gain"], 2),
          mean_sd(r["random_copy_gain"], 2), mean_sd(r["best_induction_score"], 2),
          mean_sd(r["best_prefix_matching_score"], 2), tokens_per_seed(r["first_copying"]), tokens_per_seed(r["phase_change"])]
         for r in rows])


def mean_curve(results: dict[str, dict[str, Any]], model: tuple, score) -> list[tuple[int, float]]:
    """(tokens, mean of ``score(row)`` over the model's seeds) at every evaluation all its runs share."""
    runs = [r["history"] for r in results.values() if model_key(r) == model]
    shared = set.intersection(*({h["tokens"] for h in history} for history in runs)) if runs else set()
    by_run = [{h["tokens"]: score(h) for h in history} for history in runs]
    return [(t, statistics.fmean(b[t] for b in by_run)) for t in sorted(shared) if t > 0]


def phase_verdict(results: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    """The hypothesis, clause by clause, read off the table and the seed-mean curves."""
    by = {(r["layers"], r["variant"], r["gamma"]): r for r in rows}
    psa, plain1, plain2 = (1, "key_only", 1.0), (1, "baseline", 0.0), (2, "baseline", 0.0)
    out = []
    starts = "; ".join(f"{model_label(*m)}: {tokens_per_seed(by[m]['first_copying'])}" for m in PHASE_MODELS if m in by)
    out.append(f"**When each model starts copying** (first copying, tokens per seed; — : not within "
               f"{max(r['tokens'] for r in rows) / 1e6:.1f}M): {starts}.")
    if plain2 in by:
        out.append(f"Two plain layers' phase change (a prefix-matching head): {tokens_per_seed(by[plain2]['phase_change'])}.")
    if psa in by and plain2 in by:
        a, b = by[psa], by[plain2]
        icl, gains = a["icl_score"][0] - b["icl_score"][0], [a[k][0] - b[k][0] for k in ("passage_copy_gain", "random_copy_gain")]
        matches = icl <= 0 and min(gains) >= 0
        out.append(
            f"**At the end, one key-only layer against two plain layers**: ICL score {a['icl_score'][0]:+.3f} against "
            f"{b['icl_score'][0]:+.3f}, passage copy gain {a['passage_copy_gain'][0]:.2f} against "
            f"{b['passage_copy_gain'][0]:.2f}, "
            f"random copy gain {a['random_copy_gain'][0]:.2f} against {b['random_copy_gain'][0]:.2f} (seed means): "
            + ("**one PSA layer matches two plain layers** on in-context learning and copying."
               if matches else "**one PSA layer does not match two plain layers** on "
               + " and ".join(n for n, worse in (("the ICL score", icl > 0), ("passage copying", gains[0] < 0),
                                                   ("random-token copying", gains[1] < 0)) if worse) + "."))
        cost = a["bits_per_byte"][0] - b["bits_per_byte"][0]
        out.append(f"**Its cost in bits per byte**: {a['bits_per_byte'][0]:.3f} against {b['bits_per_byte'][0]:.3f} "
                   f"({cost:+.3f}; {a['parameters']:,} parameters against {b['parameters']:,})"
                   + (f"; one plain layer: {by[plain1]['bits_per_byte'][0]:.3f}." if plain1 in by else "."))
        out.append(_lasting(results))
    for lag in ((1, "smeared_keys", 0.0), (1, "canon", 0.0)):
        if lag in by and psa in by:
            out.append(f"**The learned key lag, {lag[1]}**: " + "; ".join(
                f"{name} ICL score {r['icl_score'][0]:+.3f}, random copy gain {r['random_copy_gain'][0]:.2f}, "
                f"bits per byte {r['bits_per_byte'][0]:.3f}, first copying at {tokens_per_seed(r['first_copying'])}"
                for name, r in ((lag[1], by[lag]), ("the fixed key-only shear", by[psa]),
                                ("two plain layers", by.get(plain2))) if r is not None) + ".")
    return out


def _lasting(results: dict[str, dict[str, Any]]) -> str:
    """Whether two plain layers overtake one key-only layer on random-token copying, and when."""
    gain = random_copy_gain
    psa = dict(mean_curve(results, (1, "key_only", 1.0), gain))
    plain = dict(mean_curve(results, (2, "baseline", 0.0), gain))
    shared = sorted(set(psa) & set(plain))
    if not shared:
        return ""
    ahead = [t for t in shared if plain[t] > psa[t]]
    overtakes = next((t for t in shared if all(u in ahead for u in shared if u >= t)), None)
    if overtakes == shared[0]:
        return (f"**Transient or lasting**: two plain layers copy repeated random tokens better than the key-only layer "
                f"at every evaluation ({plain[shared[-1]]:.2f} against {psa[shared[-1]]:.2f} nats at the end, seed "
                "means): there is no one-layer advantage to last.")
    if not ahead:
        return (f"**Transient or lasting**: the key-only layer's random-token copy gain (seed mean) stays at or above "
                f"two plain layers' at every evaluation to the end ({psa[shared[-1]]:.2f} against "
                f"{plain[shared[-1]]:.2f}): the one-layer advantage lasts this budget.")
    if overtakes is None:  # the curves cross, and the key-only layer is ahead again at the end
        return (f"**Transient or lasting**: the curves cross: two plain layers copy repeated random tokens better than "
                f"the key-only layer {_spans(shared, ahead)} (seed means), the key-only layer at or above them at the "
                f"other evaluations and at the end ({psa[shared[-1]]:.2f} against {plain[shared[-1]]:.2f} nats): the "
                "one-layer advantage holds at the end of this budget, not at every evaluation.")
    return (f"**Transient or lasting**: two plain layers copy repeated random tokens better than the key-only layer "
            f"from {overtakes / 1e6:.1f}M tokens on, to the end ({plain[shared[-1]]:.2f} against {psa[shared[-1]]:.2f} "
            "nats, seed means): the one-layer advantage is transient.")


def _spans(times: list[int], chosen: list[int]) -> str:
    """The runs of consecutive ``times`` that are in ``chosen``, in words: "at 1.0M and from 3.0M to 4.0M tokens"."""
    runs: list[list[int]] = []
    for i, t in enumerate(times):
        if t in chosen:
            if runs and times.index(runs[-1][-1]) == i - 1:
                runs[-1].append(t)
            else:
                runs.append([t])
    words = [f"at {r[0] / 1e6:.1f}M" if len(r) == 1 else f"from {r[0] / 1e6:.1f}M to {r[-1] / 1e6:.1f}M" for r in runs]
    return (", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]) + " tokens"


def phase_figure(results: dict[str, dict[str, Any]], path) -> Any:
    """``plot_copying`` of every model's first seed."""
    from psattn.experiments.text_plots import plot_copying

    first: dict[tuple[int, str, float], dict[str, Any]] = {}
    for result in sorted(results.values(), key=lambda r: r["config"]["train"]["seed"]):
        first.setdefault(model_key(result), result)
    ordered = sorted(first.items(), key=lambda kv: PHASE_MODELS.index(kv[0]) if kv[0] in PHASE_MODELS else 99)
    histories = {model_label(*m): r["history"] for m, r in ordered}
    context = next(iter(first.values()))["config"]["task"]["seq_len"]
    return plot_copying(histories, path, context=context, threshold=THRESHOLD, copy_threshold=COPY_THRESHOLD,
                        changes={k: detect_phase_change(h) for k, h in histories.items()},
                        copying={k: detect_copying(h) for k, h in histories.items()})


def phase_report(results: dict[str, dict[str, Any]], runs: Path, mode: str = "quick") -> Path:
    """Write what ``psattn sweep text_phase`` reports to ``runs/text_phase.md`` (returned): the hypothesis,
    the table, the verdict, the figure (``runs/text_phase.png``), samples from every first-seed model and, with the
    export extra, the ONNX comparison of every first-seed model. The figure and the report are written into a
    staging folder inside ``runs`` and moved in together, with the stop signals held: a stop or a failure midway
    (the ONNX part takes minutes) leaves the earlier figure and report whole."""
    with staged_folder(runs, STAGING_PREFIX, stop_signals_held) as staging:
        _write_phase_report(results, runs, mode, staging)
    return runs / "text_phase.md"


def _write_phase_report(results: dict[str, dict[str, Any]], runs: Path, mode: str, folder: Path) -> None:
    """``phase_report``'s figure and report, written into ``folder``; the runs are those in ``runs``."""
    from psattn.experiments.edge_report import edge_comparison, edge_table
    from psattn.experiments.text_report import samples

    configs = [c for c in text_phase(mode) if c.name in results]
    rows = phase_table(results)
    figure = phase_figure(results, folder / "text_phase.png")
    lines = ["# Real text past the phase change (`psattn sweep text_phase`)", "",
             "Hypothesis, stated before the run: " + HYPOTHESIS, "", *format_phase_table(rows), "",
             *[part for clause in phase_verdict(results, rows) for part in (clause, "")], f"![curves]({figure.name})", "",
             "Samples (temperature 0.8, seed 0) continuing the same held-out prompt:", ""]
    # runs restored from saved summaries (docs/results/text_phase, ``saved_runs.restore``) keep no checkpoint or
    # tokenizer: their samples and device rows cannot be drawn, which the report says instead of failing
    models = [runs / c.name for c in configs if c.train.seed == SEEDS[0]]
    missing = [d.name for d in models if not ((d / CHECKPOINT).exists() and (d / TOKENIZER).exists())]
    if missing:
        lines += [f"(Not drawn: {len(missing)} seed-{SEEDS[0]} run{'s' * (len(missing) > 1)} hold no checkpoint or "
                  f"tokenizer, as runs restored from saved summaries do ({', '.join(missing)}); the samples and the "
                  "device rows need the trained runs.)"]
    else:
        examples = samples(runs, configs, SEEDS[0])
        lines += ["Prompt: `" + next(iter(examples.values()))["prompt"].replace("\n", "⏎").replace("`", "'") + "`", ""]
        lines += [f"- **{name}**: `" + s["continuation"].replace("\n", "⏎").replace("`", "'") + "`"
                  for name, s in examples.items()]
    cached = tuple(m for m in PHASE_MODELS if not AttentionConfig(cast(Variant, m[1]), m[2]).is_key_lag)
    edge = None if missing else edge_comparison(runs, configs, runs / "onnx", SEEDS[0], models=cached)
    lines += ["", "On a device (ONNX Runtime, one thread; the learned key-lag layers have no cached decoding, so no "
              "decode-step graph, and are left out):", ""]
    lines += (["(Not measured: the trained runs' checkpoints are needed, see above.)"] if missing else
              ["(Not measured: install the export extra, `pip install 'phase-space-attention[export]'`.)"] if edge is None
              else edge_table(edge))
    write_text(folder / "text_phase.md", "\n".join(lines) + "\n")


def _report(results: Results, runs: Path, mode: str) -> list[str]:
    return [f"report (figure, samples, ONNX sizes and speeds): {phase_report(results, runs, mode)}"]


STUDIES = (Study("text_phase", text_phase,
                 "real text past the phase change, at the end of training (mean ± sd over seeds; tokens per seed)",
                 lambda results: format_phase_table(phase_table(results)),
                 verdict=lambda results: phase_verdict(results, phase_table(results)), report=_report),)
