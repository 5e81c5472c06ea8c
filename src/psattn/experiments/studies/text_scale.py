"""Real text with MLPs, past the phase change, on a GPU (``psattn sweep text_scale --full``).

``text_phase`` found, at CPU scale, that one key-only layer's copying advantage over two plain layers
is transient; but its models are attention-only and tiny (d_model 128, context 64, 24M tokens). This
sweep trains what small real models look like: 1, 2 and 4 layers with an MLP in every block, d_model
256, 4 heads, context 256, plain, key-only gamma = 1 and symmetric gamma = 1, two seeds, bf16, 80M
training tokens each (16 rows of 256 tokens a step), evaluated 42 times (step 0, every 488 steps, the last step).
The emergence law of arXiv 2511.16893 puts two plain attention-only layers' phase change at 32M tokens at
this batch and context
(``text_pilot.law_tokens``), so the budget is 2.5 times that; more would read the corpus more than
twice (below). The pilot (``text_scale_pilot``: the plain models of every depth, seed 0, which are this
sweep's own runs) says whether every two- and four-layer plain model is well past its phase change by
the end (at a third of the budget or earlier).

The corpus is built on the machine that trains: a 160 MB sample of the ``.py`` files of the running
interpreter's installed packages (``python-installed:160MB``: standard library and site-packages, files
taken in a fixed pseudo-random order until 160 MB; a GPU image with JAX, transformers and SciPy beside
torch holds several times that, which every fresh machine would tokenize again; at 2.6 bytes a token at
BPE 1024, about 60M tokens; where less is installed, all of it), BPE 1024 as in the CPU studies, held out
by file (every 20th file, once exact copies such as vendored packages are dropped), so no held-out file
was seen in training. Each saved
run records the corpus's file count, bytes, digest and token counts (``saved_runs.corpus_record``);
``repeats`` says how often the budget reads the training tokens, which the sweep's driver checks is at
most twice before training (``check_repeats``).

The questions the page answers, each read off the seed-mean curves (``scale_verdict``): (a) how much
earlier PSA brings each depth's phase change; (b) at equal tokens, how much lower PSA's bits per byte
are at the end, and how many more tokens the plain model needs to reach them (the compute-equivalent
gain); (c) whether one PSA layer matches two plain layers at any evaluation, and two PSA layers four
plain ones (bits per byte at or below).

The quick plan is the same declaration at tiny size on the CPU (two tiny depths, psattn's own ``ops``
source as the corpus), which checks the pipeline end to end in seconds; its numbers mean nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from psattn.experiments.configs import run_name
from psattn.experiments.markdown import table
from psattn.experiments.phase_change import best, detect_copying, detect_phase_change
from psattn.experiments.studies.paper_scale import H200_STEP_S
from psattn.experiments.studies.text import (
    mean_sd,
    model_key,
    model_label,
    summarise_text,
    tokens_at,
    tokens_per_seed,
)
from psattn.experiments.studies.text_phase import mean_curve
from psattn.experiments.studies.text_pilot import law_tokens
from psattn.experiments.study import Study, check_mode
from psattn.models import AttentionConfig, ModelConfig
from psattn.models.config import Variant
from psattn.tasks import make_task_config
from psattn.training.config import RunConfig, TrainConfig

VARIANTS = (("baseline", 0.0), ("key_only", 1.0), ("symmetric", 1.0))
EVALUATIONS = 40
#: the pilot's criterion: the plain model's phase change comes by this share of the budget
WELL_PAST = 1 / 3
#: the most times a run may read its corpus's training tokens
MAX_REPEATS = 2.0


@dataclass(frozen=True)
class ScalePlan:
    """The text-at-scale study's corpus, vocabulary, context, depths, width, seeds and budget."""
    corpus: str
    corpus_label: str  # the corpus's part of the run names
    vocab_size: int
    seq_len: int
    eval_fraction: float
    depths: tuple[int, ...]
    d_model: int
    n_heads: int
    seeds: tuple[int, ...]
    tokens: int  # training tokens of every run
    batch_size: int
    eval_size: int
    lr: float
    device: str

    @property
    def steps(self) -> int:
        return self.tokens // (self.batch_size * self.seq_len)


def _quick_corpus() -> str:
    """psattn's own ``ops`` sources: a corpus of a few files every install has."""
    return str(Path(__file__).resolve().parents[2] / "ops" / "*.py")


def scale_plan(mode: str) -> ScalePlan:
    """The text-at-scale plan of ``mode`` (quick: a CPU check; full: the GPU study)."""
    if check_mode(mode) == "full":
        return ScalePlan("python-installed:160MB", "python-installed", 1024, 256, 0.05, depths=(1, 2, 4), d_model=256,
                         n_heads=4, seeds=(0, 1), tokens=80_000_000, batch_size=16, eval_size=256, lr=3e-3,
                         device="cuda")
    return ScalePlan(_quick_corpus(), "psattn-ops", 300, 32, 0.25, depths=(1, 2), d_model=16, n_heads=2, seeds=(0,),
                     tokens=6 * 4 * 32, batch_size=4, eval_size=8, lr=3e-3, device="cpu")


def scale_config(p: ScalePlan, n_layers: int, variant: str, gamma: float, seed: int) -> RunConfig:
    """One run of the text-at-scale study."""
    task = make_task_config("text", corpus=p.corpus, tokenizer="bpe", vocab_size=p.vocab_size, seq_len=p.seq_len,
                            eval_fraction=p.eval_fraction, split="file")
    model = ModelConfig(vocab_size=p.vocab_size, d_model=p.d_model, n_layers=n_layers, n_heads=p.n_heads, mlp=True,
                        attention=AttentionConfig(cast(Variant, variant), gamma))
    every = max(1, p.steps // EVALUATIONS)
    return RunConfig(
        name=run_name(f"text_scale-{p.corpus_label}-bpe{p.vocab_size}-c{p.seq_len}", variant, gamma, "post_rope",
                      f"L{n_layers}d{p.d_model}h{p.n_heads}", seed),
        model=model, task=task,
        train=TrainConfig(steps=p.steps, batch_size=p.batch_size, lr=p.lr, eval_every=every, eval_size=p.eval_size,
                          checkpoint_every=every, early_stop=False, threshold=1.0, seed=seed, device=p.device,
                          precision="bf16", threads=1 if p.device == "cpu" else None))


def text_scale(mode: str = "quick") -> list[RunConfig]:
    """Every run: the pilot's (plain, seed 0, every depth) first, then the rest seed by seed."""
    p = scale_plan(mode)
    runs = [scale_config(p, depth, variant, gamma, seed) for seed in p.seeds for depth in p.depths
            for variant, gamma in VARIANTS]
    pilot = {c.name for c in text_scale_pilot(mode)}
    return [c for c in runs if c.name in pilot] + [c for c in runs if c.name not in pilot]


def text_scale_pilot(mode: str = "quick") -> list[RunConfig]:
    """The plain model at every depth, first seed: where the phase change comes, before the rest runs."""
    p = scale_plan(mode)
    return [scale_config(p, depth, "baseline", 0.0, p.seeds[0]) for depth in p.depths]


def repeats(result: dict[str, Any]) -> float | None:
    """How many times the run's training tokens read its corpus's training text (None: no corpus record)."""
    corpus = result.get("corpus")
    return None if not corpus else result["history"][-1]["tokens"] / corpus["train_tokens"]


def best_by_layer(row: dict[str, Any], key: str) -> list[float]:
    """Each layer's best head's score in an evaluation row (full or compacted lists; NaN as ``phase_change.best``
    says)."""
    return [best(layer) for layer in row[key]]


def trained_through(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs that did not diverge: the tables, gains and figures read these alone (a diverged run's
    last numbers are not those of the end of training); ``scale_verdict`` names the others."""
    return {name: r for name, r in results.items() if r.get("diverged_at") is None}


def scale_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model: ``summarise_text``'s final metrics (mean, sd over seeds), per seed the tokens to
    the phase change and to first copying, each layer's best previous-token and prefix-matching head at the
    end (seed means) and the corpus repeats; of the runs that did not diverge."""
    results = trained_through(results)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for result in sorted(results.values(), key=lambda r: r["config"]["train"]["seed"]):
        groups.setdefault(model_key(result), []).append(result)
    rows = []
    for row in summarise_text(results):
        runs = groups[(row["layers"], row["variant"], row["gamma"])]
        last = [r["history"][-1] for r in runs]
        by_layer = {key: [statistics.fmean(v) for v in zip(*(best_by_layer(h, key) for h in last), strict=True)]
                    for key in ("previous_token_score", "prefix_matching_score")}
        rows.append({**row, "tokens": last[0]["tokens"], "phase_change": [detect_phase_change(r["history"]) for r in runs],
                     "first_copying": [detect_copying(r["history"]) for r in runs],
                     "previous_token_by_layer": by_layer["previous_token_score"],
                     "prefix_matching_by_layer": by_layer["prefix_matching_score"],
                     "repeats": repeats(runs[0])})
    order = {v: i for i, (v, _) in enumerate(VARIANTS)}
    return sorted(rows, key=lambda r: (r["layers"], order.get(r["variant"], 9)))


when = tokens_per_seed  # ``text.tokens_per_seed`` under its public name here


def _plain_change(changes) -> str:
    """The plain model's phase change per seed, as a clause."""
    missing = sum(c is None for c in changes)
    if missing == len(changes):
        return "the plain model shows no phase change on any seed"
    return f"the plain model's phase change at {tokens_per_seed(changes)}" + (
        f" (none on {missing} of {len(changes)} seeds)" if missing else "")


def format_scale_table(rows: list[dict[str, Any]]) -> list[str]:
    """The end-of-training table as markdown lines (mean ± sd over seeds; tokens per seed)."""
    return table(
        ["model", "seeds", "held-out bits/byte", "ICL score", "passage copy gain", "random copy gain",
         "best previous-token head, by layer", "best prefix-matching head, by layer", "phase change (tokens)",
         "first copying (tokens)"],
        [[model_label(r["layers"], r["variant"], r["gamma"]), str(r["seeds"]), mean_sd(r["bits_per_byte"]),
          mean_sd(r["icl_score"], sign="+"), mean_sd(r["passage_copy_gain"], 2), mean_sd(r["random_copy_gain"], 2),
          " / ".join(f"{x:.2f}" for x in r["previous_token_by_layer"]),
          " / ".join(f"{x:.2f}" for x in r["prefix_matching_by_layer"]), tokens_per_seed(r["phase_change"]),
          tokens_per_seed(r["first_copying"])] for r in rows])


def pilot_table(results: dict[str, dict[str, Any]]) -> list[str]:
    """The pilot's lines: per depth, the plain model's phase change (its first seed) against the budget;
    "diverged at step N" where that run diverged."""
    lines = table(["depth", "phase change (tokens)", "the law's, attention-only", "budget", "well past it"], [])
    first: dict[int, dict[str, Any]] = {}
    for r in sorted(results.values(), key=lambda r: (model_key(r)[0], r["config"]["train"]["seed"])):
        if model_key(r)[1] == "baseline":
            first.setdefault(model_key(r)[0], r)
    for r in first.values():
        change, history = detect_phase_change(r["history"]), r["history"]
        budget = r["config"]["train"]["steps"] * r["config"]["train"]["batch_size"] * r["config"]["task"]["seq_len"]
        law = law_tokens(r["config"]["train"]["batch_size"], r["config"]["task"]["seq_len"])
        past = "—" if change is None else "yes" if change.tokens <= WELL_PAST * budget else "no"
        when = f"none within {history[-1]['tokens'] / 1e6:.1f}M" if change is None else tokens_at(change)
        if r.get("diverged_at") is not None:
            when, past = f"diverged at step {r['diverged_at']:,}", "—"
        lines.append(f"| {model_key(r)[0]} | {when} | {law / 1e6:.1f}M | {budget / 1e6:.0f}M | {past} |")
    return lines


def _bpb(row: dict[str, Any]) -> float:
    return row["bits_per_byte"]


def scale_verdict(results: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    """The answers to (a), (b) and (c), one clause per depth and shear, from the runs that did not diverge
    (``rows``: their ``scale_table``); then the runs that diverged, by name."""
    diverged = [f"{name} at step {r['diverged_at']:,}" for name, r in sorted(results.items())
                if r.get("diverged_at") is not None]
    results = trained_through(results)
    by = {(r["layers"], r["variant"], r["gamma"]): r for r in rows}
    depths = sorted({r["layers"] for r in rows})
    shears = [(v, g) for v, g in VARIANTS if v != "baseline"]
    out = []
    for depth in depths:
        plain = by.get((depth, "baseline", 0.0))
        if plain is None:
            continue
        parts = []
        for v, g in shears:
            psa = by.get((depth, v, g))
            if psa is None:
                continue
            parts.append(f"{v}: {_earlier(plain, psa)}; {_gain(results, (depth, 'baseline', 0.0), (depth, v, g))}")
        out.append(f"**{depth} layer{'s' * (depth > 1)}**: {_plain_change(plain['phase_change'])}"
                   + "".join(f"; {part}" for part in parts) + ".")
    for small, large in ((1, 2), (2, 4)):
        for v, g in shears:
            if (small, v, g) in by and (large, "baseline", 0.0) in by:
                out.append(_matches(results, (small, v, g), (large, "baseline", 0.0)))
    if diverged:
        out.append(f"Left out, diverged (the loss stopped being finite): {'; '.join(diverged)}.")
    return out


def _mean_tokens(changes) -> float | None:
    seen = [c.tokens for c in changes if c is not None]
    return statistics.fmean(seen) if seen and len(seen) == len(changes) else None


def _earlier(plain: dict[str, Any], psa: dict[str, Any]) -> str:
    """(a) the phase change's tokens, PSA against plain (seed means, where every seed has one)."""
    a, b = _mean_tokens(plain["phase_change"]), _mean_tokens(psa["phase_change"])
    if b is None:
        return f"(a) phase change at {tokens_per_seed(psa['phase_change'])}"
    if a is None:
        return f"(a) phase change at {tokens_per_seed(psa['phase_change'])}, where the plain model has none on every seed"
    return f"(a) phase change at {b / 1e6:.1f}M tokens against {a / 1e6:.1f}M, {a / b:.1f}× earlier"


def _gain(results: dict[str, dict[str, Any]], plain: tuple, psa: tuple) -> str:
    """(b) final bits per byte, and the tokens the plain model needs to reach PSA's final value."""
    a, b = mean_curve(results, plain, _bpb), mean_curve(results, psa, _bpb)
    if not a or not b:
        return "(b) no shared evaluations"
    end, target = b[-1][0], b[-1][1]
    reached = next((t for t, value in a if value <= target), None)
    gain = (f"the plain model reaches it at {reached / 1e6:.1f}M tokens, {reached / end:.2f}× PSA's" if reached is not None
            else f"the plain model does not reach it within {a[-1][0] / 1e6:.0f}M tokens (a gain above "
                 f"{a[-1][0] / end:.2f}×)")
    return f"(b) {target:.3f} bits per byte at the end against {a[-1][1]:.3f} ({a[-1][1] - target:+.3f}); {gain}"


def _matches(results: dict[str, dict[str, Any]], psa: tuple, plain: tuple) -> str:
    """(c) the evaluations at which the smaller PSA model's bits per byte are at or below the larger plain model's."""
    a, b = dict(mean_curve(results, psa, _bpb)), dict(mean_curve(results, plain, _bpb))
    shared = sorted(set(a) & set(b))
    at = [t for t in shared if a[t] <= b[t]]
    head = f"(c) {model_label(*psa)} against {model_label(*plain)}"
    if not at:
        return (f"{head}: higher bits per byte at every one of {len(shared)} evaluations "
                f"({a[shared[-1]]:.3f} against {b[shared[-1]]:.3f} at the end)." if shared else f"{head}: no shared evaluations.")
    return (f"{head}: at or below at {len(at)} of {len(shared)} evaluations, from {at[0] / 1e6:.1f}M to "
            f"{at[-1] / 1e6:.1f}M tokens ({a[shared[-1]]:.3f} against {b[shared[-1]]:.3f} at the end).")


def expected_minutes(p: ScalePlan | None = None) -> tuple[float, float]:
    """(low, high) minutes of training steps for the full plan, extrapolated from psa-92m's H200 step time
    per layer (its 12 layers at 50-90 ms, evaluations included: small models on a GPU may be bound by kernel
    launches, which grow with depth). Not measured on these models: a planning figure only."""
    p = p or scale_plan("full")
    layer_runs = len(p.seeds) * len(VARIANTS) * sum(p.depths)
    return layer_runs * p.steps * H200_STEP_S[0] / 12 / 60, layer_runs * p.steps * H200_STEP_S[1] / 12 / 60


def check_repeats(train_tokens: int, config: RunConfig) -> float:
    """How often ``config``'s budget reads a corpus of ``train_tokens`` training tokens; ValueError above
    ``MAX_REPEATS``."""
    budget = config.train.steps * config.train.batch_size * getattr(config.task, "seq_len", 0)
    times = budget / max(train_tokens, 1)
    if times > MAX_REPEATS:
        raise ValueError(f"the corpus holds {train_tokens:,} training tokens, and {config.name}'s budget of {budget:,} "
                         f"would read them {times:.1f} times (at most {MAX_REPEATS:g}): this machine's installed packages "
                         "are too few; give the sweep a larger corpus or a smaller budget")
    return times


def scale_figure(results: dict[str, dict[str, Any]], path) -> Any:
    """``text_plots.plot_copying`` of every model's first seed against training tokens (best prefix-matching
    head, ICL score, random-token copy gain, bits per byte), each phase change and first copying marked."""
    from psattn.experiments.phase_change import COPY_THRESHOLD, THRESHOLD
    from psattn.experiments.text_plots import plot_copying

    first: dict[tuple[int, str, float], dict[str, Any]] = {}
    for result in sorted(trained_through(results).values(), key=lambda r: r["config"]["train"]["seed"]):
        first.setdefault(model_key(result), result)
    if not first:  # every saved run diverged: nothing to draw
        return None
    order = {v: i for i, (v, _) in enumerate(VARIANTS)}
    ordered = sorted(first.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9)))
    histories = {model_label(*m): r["history"] for m, r in ordered}
    context = next(iter(first.values()))["config"]["task"]["seq_len"]
    return plot_copying(histories, path, context=context, threshold=THRESHOLD, copy_threshold=COPY_THRESHOLD,
                        changes={k: detect_phase_change(h) for k, h in histories.items()},
                        copying={k: detect_copying(h) for k, h in histories.items()})


STUDIES = (Study("text_scale_pilot", text_scale_pilot,
                 "the pilot: each depth's plain model, its phase change against the budget", pilot_table, verdict=None,
                 shows_divergence=True),
           Study("text_scale", text_scale,
                 "real text with MLPs at the end of training (mean ± sd over seeds; tokens per seed)",
                 lambda results: format_scale_table(scale_table(results)),
                 verdict=lambda results: scale_verdict(results, scale_table(results)), shows_divergence=True))
