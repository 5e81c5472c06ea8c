"""Real text with an MLP in every block, at the CPU setting where two plain attention-only layers go
through their phase change (``psattn sweep text_mlp``).

``text_phase`` compares attention-only models: on the synthetic induction task, two plain layers with
an MLP in every block never formed the circuit (``two_layer``: the first layer's MLP locks the second
layer's heads onto the previous token). Real small models have MLPs, and ``text_scale`` (the GPU study)
trains them. This study asks, at CPU scale and before the GPU run, whether that lock also holds on real
text: the same setting as ``text_phase`` (``python-stdlib``, BPE 1024, context 64, 8 rows a step,
d_model 128, 4 heads, 24M training tokens, 42 evaluations), the same models as its core (one and two
layers, plain and key-only gamma = 1), each with an MLP in every block; seed 0, and seeds 1 and 2 of the
two plain layers, whose phase change varies most between seeds, of the two key-only layers set against them,
and of the one key-only layer, seeded in ``text_phase`` too. The attention-only counterparts are
``text_phase``'s saved runs.

The hypothesis, stated before the first runs, is ``HYPOTHESIS``; the one stated before seeds 1 and 2 of the
key-only models, once ``HYPOTHESIS`` had proved false, is ``SEEDS_HYPOTHESIS``; the one stated before the
four-layer runs is ``DEPTH_HYPOTHESIS``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from psattn.experiments.configs import run_name
from psattn.experiments.markdown import table
from psattn.experiments.phase_change import (
    COPY_THRESHOLD,
    THRESHOLD,
    detect_copying,
    detect_phase_change,
    random_copy_gain,
)
from psattn.experiments.studies.text import TextPlan, model_key, model_label, text_config, tokens_at, tokens_per_seed
from psattn.experiments.studies.text_phase import _plan, format_phase_table, phase_figure, phase_table, phase_verdict
from psattn.experiments.study import Results, Study, check_mode
from psattn.training.config import RunConfig
from psattn.training.run_dir import load_result

HYPOTHESIS = ("as on the synthetic task, the first layer's MLP keeps two plain layers from forming an induction "
              "circuit on real text within the budget (no phase change by 24M tokens, three times where the "
              "attention-only pair has one), while the key-sheared models copy from their first evaluations, with "
              "MLPs as without.")
SEEDS_HYPOTHESIS = ("on every seed, two key-only layers with MLPs go through their phase change earlier than two plain "
                    "layers with MLPs of the same seed and end within 0.03 bits per byte of them; one key-only layer "
                    "with an MLP copies from its first evaluations on every seed.")

DEPTH_HYPOTHESIS = ("on every seed, two key-only layers with MLPs go through their phase change before four plain "
                    "layers with MLPs of the same seed, and the four plain layers end at least 0.03 bits per byte below "
                    "them: two PSA layers do not match four plain ones at the end.")

#: how close, in held-out bits per byte at the end, ``SEEDS_HYPOTHESIS`` asks the two-layer models to be
SEEDS_BPB = 0.03
#: "from its first evaluations" in ``SEEDS_HYPOTHESIS``: first copying by this evaluation (0: before training)
FIRST_EVALUATIONS = 2

#: how far below two key-only layers, in held-out bits per byte at the end, ``DEPTH_HYPOTHESIS`` expects four plain ones
DEPTH_BPB = 0.03

#: the deeper plain model that two key-only layers are set against (``depth_clause``)
DEEP_MODEL = (4, "baseline", 0.0)
#: (layers, variant, gamma) of the compared models, in the order they were added (the question first)
MLP_MODELS = ((2, "baseline", 0.0), (2, "key_only", 1.0), (1, "key_only", 1.0), (1, "baseline", 0.0), DEEP_MODEL)
#: the seed of every model, and the models also trained on the other ``SEEDS``
SEED, SEEDS = 0, (0, 1, 2)
SEEDED_MODELS = ((2, "baseline", 0.0), (2, "key_only", 1.0), (1, "key_only", 1.0), DEEP_MODEL)


def plan(mode: str) -> TextPlan:
    """``text_phase``'s plan of ``mode`` with this study's models and seeds."""
    return replace(_plan(check_mode(mode)), models=MLP_MODELS, seeds=SEEDS)


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
    return [mlp_config(p, *model, seed) for seed in p.seeds for model in p.models
            if seed == p.seeds[0] or model in SEEDED_MODELS]


def _first_seed(results: Results) -> dict[tuple[int, str, float], dict[str, Any]]:
    """This study's models among ``results`` (its own runs or ``text_phase``'s), seed ``SEED`` alone."""
    return {model_key(r): r for r in results.values()
            if model_key(r) in MLP_MODELS and r["config"]["train"]["seed"] == SEED}


def _seeds(results: Results, model: tuple[int, str, float]) -> list[list[dict[str, Any]]]:
    """The histories of ``model``'s runs among ``results``, by seed."""
    runs = sorted((r for r in results.values() if model_key(r) == model), key=lambda r: r["config"]["train"]["seed"])
    return [r["history"] for r in runs]


def comparison_table(mlp: Results, attention_only: Results) -> list[str]:
    """Each model with MLPs beside its attention-only counterpart (``text_phase``'s run of the same seed):
    when it starts copying and goes through its phase change (training tokens; — : not within the budget),
    and its held-out bits per byte, ICL score and random-token copy gain at the end; markdown lines."""
    with_mlp, without = _first_seed(mlp), _first_seed(attention_only)
    rows = []
    for model in (m for m in MLP_MODELS if m in with_mlp and m in without):
        a, b = with_mlp[model]["history"], without[model]["history"]
        rows.append([model_label(*model),
                     *(f"{x} / {y}" for x, y in (
                         (tokens_at(detect_phase_change(a)), tokens_at(detect_phase_change(b))),
                         (tokens_at(detect_copying(a)), tokens_at(detect_copying(b))),
                         (f"{a[-1]['bits_per_byte']:.3f}", f"{b[-1]['bits_per_byte']:.3f}"),
                         (f"{a[-1]['icl_score']:+.3f}", f"{b[-1]['icl_score']:+.3f}"),
                         (f"{random_copy_gain(a[-1]):.2f}", f"{random_copy_gain(b[-1]):.2f}")))])
    return table(["model", "phase change: MLPs / attention-only", "first copying", "bits per byte", "ICL score",
                  "random copy gain"], rows)


def comparison_verdict(mlp: Results, attention_only: Results) -> list[str]:
    """The hypothesis's first clause, read off the two plain layers with and without MLPs (every seed), and
    what the MLPs change for the key-only layer (seed 0)."""
    with_mlp, without = _first_seed(mlp), _first_seed(attention_only)
    out = []
    plain2, psa1 = (2, "baseline", 0.0), (1, "key_only", 1.0)
    if plain2 in with_mlp and plain2 in without:
        changes = [detect_phase_change(h) for h in _seeds(mlp, plain2)]
        tokens = with_mlp[plain2]["history"][-1]["tokens"]
        alone = tokens_per_seed([detect_phase_change(h) for h in _seeds(attention_only, plain2)])
        found = tokens_per_seed(changes)
        out.append("**Does the first layer's MLP keep two plain layers from the circuit on real text?** "
                   + (f"No: with an MLP in every block they go through their phase change at {found} training "
                      f"tokens (by seed; attention-only: {alone}), so the synthetic task's lock does not carry over to "
                      "text." if all(c is not None for c in changes) else
                      f"Yes: with an MLP in every block they show no phase change within {tokens / 1e6:.1f}M training "
                      f"tokens (attention-only: {alone})." if not any(changes) else
                      f"Not on every seed: with an MLP in every block their phase change comes at {found} training "
                      f"tokens (by seed; — : not within {tokens / 1e6:.1f}M; attention-only: {alone})."))
    if psa1 in with_mlp and psa1 in without:
        out.append(f"**One key-only layer** starts copying at {tokens_at(detect_copying(with_mlp[psa1]['history']))} "
                   f"with an MLP and at {tokens_at(detect_copying(without[psa1]['history']))} without.")
    return out


def comparison_figure(mlp: Results, attention_only: Results, path: str | Path) -> Path:
    """``plot_copying`` of each model with MLPs (solid) and attention-only (dashed, the same colour), seed 0."""
    from psattn.experiments.text_plots import plot_copying

    with_mlp, without = _first_seed(mlp), _first_seed(attention_only)
    histories, styles = {}, {}
    for i, model in enumerate(m for m in MLP_MODELS if m in with_mlp and m in without):
        for kind, runs, linestyle in (("MLPs", with_mlp, "-"), ("attention-only", without, "--")):
            label = f"{model_label(*model)}, {kind}"
            histories[label] = runs[model]["history"]
            styles[label] = dict(color=f"C{i}", linestyle=linestyle)
    context = next(iter(with_mlp.values()))["config"]["task"]["seq_len"]
    return plot_copying(histories, path, context=context, threshold=THRESHOLD, copy_threshold=COPY_THRESHOLD,
                        changes={k: detect_phase_change(h) for k, h in histories.items()},
                        copying={k: detect_copying(h) for k, h in histories.items()}, styles=styles)


def two_layer_clause(results: Results) -> list[str]:
    """Two key-only layers against two plain layers, both with MLPs (seed 0): how much earlier the shear brings
    the phase change and first copying, and what is left of it at the end."""
    runs = _first_seed(results)
    psa, plain = runs.get((2, "key_only", 1.0)), runs.get((2, "baseline", 0.0))
    if psa is None or plain is None:
        return []
    a, b = psa["history"], plain["history"]
    change_a, change_b = detect_phase_change(a), detect_phase_change(b)
    earlier = (f" ({change_b.tokens / change_a.tokens:.1f}× earlier)"
               if change_a is not None and change_b is not None else "")
    return [f"**Two key-only layers against two plain layers, both with MLPs** (seed {SEED}): phase change at "
            f"{tokens_at(change_a)} against {tokens_at(change_b)} training tokens{earlier}, first copying at "
            f"{tokens_at(detect_copying(a))} against {tokens_at(detect_copying(b))}; at the end, bits per byte "
            f"{a[-1]['bits_per_byte']:.3f} against {b[-1]['bits_per_byte']:.3f} "
            f"({a[-1]['bits_per_byte'] - b[-1]['bits_per_byte']:+.3f}), ICL score {a[-1]['icl_score']:+.3f} against "
            f"{b[-1]['icl_score']:+.3f}, random copy gain {random_copy_gain(a[-1]):.2f} against "
            f"{random_copy_gain(b[-1]):.2f} nats."]


def _by_seed(results: Results, model: tuple[int, str, float]) -> dict[int, list[dict[str, Any]]]:
    """The histories of ``model``'s runs among ``results``, keyed by seed."""
    return {r["config"]["train"]["seed"]: r["history"] for r in results.values() if model_key(r) == model}


def seeds_clause(results: Results) -> list[str]:
    """Two key-only layers against two plain layers, both with MLPs, seed by seed (where both ran on more than
    one seed), and ``SEEDS_HYPOTHESIS`` read off them and off the one key-only layer's seeds."""
    psa, plain = _by_seed(results, (2, "key_only", 1.0)), _by_seed(results, (2, "baseline", 0.0))
    seeds = sorted(set(psa) & set(plain))
    if len(seeds) < 2:
        return []
    changes = {s: (detect_phase_change(psa[s]), detect_phase_change(plain[s])) for s in seeds}
    earlier = [s for s, (a, b) in changes.items() if a is not None and (b is None or a.tokens < b.tokens)]
    gaps = {s: psa[s][-1]["bits_per_byte"] - plain[s][-1]["bits_per_byte"] for s in seeds}
    found = "; ".join(f"seed {s}: {tokens_at(a)} against {tokens_at(b)}" for s, (a, b) in changes.items())
    ratios = [b.tokens / a.tokens for a, b in changes.values() if a is not None and b is not None]
    spread = f" ({min(ratios):.1f} to {max(ratios):.1f}× earlier)" if ratios and len(earlier) == len(seeds) else ""
    lines = [f"**Two key-only layers against two plain layers, both with MLPs, seed by seed**: phase change {found} "
             f"training tokens, earlier on {len(earlier)} of {len(seeds)} seeds{spread}; bits per byte at the end "
             + ", ".join(f"{gaps[s]:+.3f}" for s in seeds) + " (key-only less plain, by seed)."]
    one = _by_seed(results, (1, "key_only", 1.0))
    copies = {s: detect_copying(h) for s, h in sorted(one.items())}
    early = [c is not None and c.step <= one[s][FIRST_EVALUATIONS]["step"] for s, c in copies.items()]
    holds = len(earlier) == len(seeds) and all(abs(g) <= SEEDS_BPB for g in gaps.values()) and bool(early) and all(early)
    lines.append(f"**The hypothesis stated before seeds 1 and 2** ({SEEDS_HYPOTHESIS.rstrip('.')}) "
                 + ("holds" if holds else "does not hold")
                 + f": earlier on {len(earlier)} of {len(seeds)} seeds, end within {SEEDS_BPB} bits per byte on "
                 f"{sum(abs(g) <= SEEDS_BPB for g in gaps.values())} of {len(seeds)}; one key-only layer first copies at "
                 + tokens_per_seed(list(copies.values()))
                 + f" (by seed), by evaluation {FIRST_EVALUATIONS} (the first evaluations) on {sum(early)} of {len(early)}.")
    return lines


def depth_clause(results: Results) -> list[str]:
    """Two key-only layers against four plain layers, both with MLPs, seed by seed: their phase changes, the
    evaluations at which the two key-only layers' held-out bits per byte are at or below the four plain ones',
    the gap at the end, and ``DEPTH_HYPOTHESIS`` read off them."""
    psa, deep = _by_seed(results, (2, "key_only", 1.0)), _by_seed(results, DEEP_MODEL)
    seeds = sorted(set(psa) & set(deep))
    if not seeds:
        return []
    changes = {s: (detect_phase_change(psa[s]), detect_phase_change(deep[s])) for s in seeds}
    earlier = [s for s, (a, b) in changes.items() if a is not None and (b is None or a.tokens < b.tokens)]
    gaps = {s: psa[s][-1]["bits_per_byte"] - deep[s][-1]["bits_per_byte"] for s in seeds}
    matched = {}  # seed -> training tokens of the evaluations (after step 0) where two key-only layers are at or below
    for s in seeds:
        if [e["step"] for e in psa[s]] != [e["step"] for e in deep[s]]:
            raise ValueError(f"seed {s}: the two models were not evaluated at the same steps")
        matched[s] = [a["tokens"] for a, b in zip(psa[s], deep[s], strict=True)
                      if a["step"] > 0 and a["bits_per_byte"] <= b["bits_per_byte"]]
    evaluations = len(psa[seeds[0]]) - 1

    def where(tokens: list[int]) -> str:
        if not tokens:
            return "none"
        span = f"{tokens[0] / 1e6:.1f}M" + (f" to {tokens[-1] / 1e6:.1f}M" if len(tokens) > 1 else "")
        return f"{len(tokens)} ({span})"

    found = "; ".join(f"seed {s}: {tokens_at(a)} against {tokens_at(b)}" for s, (a, b) in changes.items())
    below = [s for s in seeds if gaps[s] >= DEPTH_BPB]
    holds = len(earlier) == len(seeds) and len(below) == len(seeds)
    # the hypothesis speaks of every seed: it holds once all have run and agree, and fails on the first that does not
    missing = ", ".join(str(s) for s in SEEDS if s not in seeds)
    read = ("holds" if holds and not missing else f"is not read yet, until seed {missing} has run for both models"
            if holds else "does not hold" + (f", whatever seed {missing} gives" if missing else ""))
    return [f"**Two key-only layers against four plain layers, both with MLPs, seed by seed**: phase change {found} "
            f"training tokens, earlier on {len(earlier)} of {len(seeds)} seeds; evaluations (of {evaluations}) at which "
            "the two key-only layers are at or below the four plain ones in bits per byte: "
            + "; ".join(f"seed {s}: {where(matched[s])}" for s in seeds)
            + "; at the end " + ", ".join(f"{gaps[s]:+.3f}" for s in seeds) + " (two key-only less four plain, by seed).",
            f"**The hypothesis stated before the four-layer runs** ({DEPTH_HYPOTHESIS.rstrip('.')}) {read}: "
            f"earlier on {len(earlier)} of {len(seeds)} seeds; the four plain layers end at least {DEPTH_BPB} bits "
            f"per byte below on {len(below)} of {len(seeds)}."]


def mlp_verdict(results: Results) -> list[str]:
    """``text_phase``'s clauses on these runs, and the two-layer and depth comparisons."""
    return [*phase_verdict(results, phase_table(results)), *two_layer_clause(results), *seeds_clause(results),
            *depth_clause(results)]


def _report(results: Results, runs: Path, mode: str) -> list[str]:
    lines = [f"figure: {phase_figure(results, runs / 'text_mlp.png')}"]
    # text_phase's runs, where `psattn sweep text_phase` trains them: in the same folder (the default --out), or
    # in a text_phase folder beside this one (--out runs/text_phase and runs/text_mlp)
    folders = (runs, runs.parent / "text_phase")
    attention_only = {d.name: r for folder in folders for d in sorted(folder.glob("text_phase-*"))
                      if (r := load_result(d)) is not None}
    if not _first_seed(attention_only):
        return [*lines, f"(to set each model beside its attention-only counterpart, train them beside these runs: "
                        f"psattn sweep text_phase --out {runs})"]
    figure = comparison_figure(results, attention_only, runs / "text_mlp_beside_attention_only.png")
    return [*lines, "", "beside the attention-only models (seed 0):", *comparison_table(results, attention_only), "",
            *comparison_verdict(results, attention_only), f"figure: {figure}"]


STUDIES = (Study("text_mlp", text_mlp,
                 "real text with an MLP in every block, at the end of training (mean ± sd over seeds; tokens per seed)",
                 lambda results: format_phase_table(phase_table(results)),
                 verdict=mlp_verdict, report=_report),)
