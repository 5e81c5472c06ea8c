"""The real-text experiment: does one PSA layer learn in context where one plain layer cannot?

Hypothesis, stated before measuring: one key-sheared layer shows a clear in-context-learning score
and copies a repeated passage (a low loss on its second copy); one plain layer does not; two plain
layers do. The models see the same text, budget and seeds: one layer plain, key-only and symmetric;
two layers plain and key-only. Both plans train on Python source (the ``python-stdlib`` corpus, which
every Python install has), where copying pays off early: identifiers and idioms repeat within a
context. On the shipped prose corpus (``austen``) no model of this size copies within a CPU budget
(docs/text.md). ``quick`` is the three models the hypothesis names, sized for a 2-core CPU;
``full`` is all five, wider, longer, on three seeds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from psattn.experiments.configs import SHEARED, run_name
from psattn.experiments.phase_change import PhaseChange, best_head
from psattn.experiments.study import Results, Study, check_mode
from psattn.models import AttentionConfig, ModelConfig
from psattn.models.config import Variant
from psattn.tasks import make_task_config
from psattn.training.config import RunConfig, TrainConfig

QUICK_STEPS, QUICK_BATCH = 200, 32
SEEDS_FOR_INTERVALS = (0, 1, 2)
#: (layers, variant, gamma) of the compared models
ALL_MODELS = ((1, "baseline", 0.0), (1, "key_only", 1.0), (1, "symmetric", 1.0), (2, "baseline", 0.0), (2, "key_only", 1.0))
HYPOTHESIS_MODELS = ((1, "baseline", 0.0), (1, "key_only", 1.0), (2, "baseline", 0.0))


@dataclass(frozen=True)
class TextPlan:
    """One plan of the real-text experiment: corpus, models, tokenizer, sizes, seeds and training length."""
    corpus: str
    models: tuple[tuple[int, str, float], ...]
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
    lr: float = 3e-3  # AdamW's peak learning rate


TEXT_PLANS = {
    "quick": TextPlan("python-stdlib", HYPOTHESIS_MODELS, "bpe", 1024, 256, 128, 4, steps=QUICK_STEPS,
                      batch_size=QUICK_BATCH, seeds=(0,), eval_every=50, eval_size=64, device="cpu"),
    "full": TextPlan("python-stdlib", ALL_MODELS, "bpe", 4096, 256, 256, 4, steps=6000, batch_size=64,
                     seeds=(0, 1, 2), eval_every=250, eval_size=256, device="auto"),
}


def text_config(plan: TextPlan, n_layers: int, variant: str, gamma: float, seed: int) -> RunConfig:
    """One run of the real-text experiment."""
    task = make_task_config("text", corpus=plan.corpus, tokenizer=plan.tokenizer, vocab_size=plan.vocab_size,
                            seq_len=plan.seq_len)
    model = ModelConfig(vocab_size=plan.vocab_size, d_model=plan.d_model, n_layers=n_layers, n_heads=plan.n_heads,
                        attention=AttentionConfig(cast(Variant, variant), gamma))  # AttentionConfig checks it
    size = f"L{n_layers}d{plan.d_model}h{plan.n_heads}"
    return RunConfig(
        name=run_name(f"text-{plan.corpus}-{plan.tokenizer}{plan.vocab_size}", variant, gamma, "post_rope", size, seed),
        model=model, task=task,
        train=TrainConfig(steps=plan.steps, batch_size=plan.batch_size, lr=plan.lr, eval_every=plan.eval_every,
                          eval_size=plan.eval_size, early_stop=False, threshold=1.0, seed=seed, threads=1,
                          device=plan.device),
    )


def text_experiment(mode: str = "quick") -> list[RunConfig]:
    """Every run of the real-text experiment's plan (psattn sweep text)."""
    plan = TEXT_PLANS[check_mode(mode)]
    return [text_config(plan, layers, variant, gamma, seed) for layers, variant, gamma in plan.models for seed in plan.seeds]


def text_seeds(mode: str = "quick") -> list[RunConfig]:
    """The plan's models on three seeds (the quick plan trains seed 0 alone, to fit the main job's time):
    the runs behind the seed intervals of the real-text claims."""
    plan = replace(TEXT_PLANS[check_mode(mode)], seeds=SEEDS_FOR_INTERVALS)
    return [text_config(plan, layers, variant, gamma, seed) for layers, variant, gamma in plan.models for seed in plan.seeds]


def format_text_summary(rows: list[dict[str, Any]]) -> list[str]:
    """The summary of ``summarise_text`` as printable lines (mean ± sd over seeds)."""
    lines = []
    for r in rows:
        gains = r["passage_copy_gain"]
        lines.append(f"{r['layers']} layer{'s' * (r['layers'] > 1)} {r['variant']}"
                     + (f" γ={r['gamma']:g}" if r["variant"] != "baseline" else "")
                     + f" ({r['seeds']} seeds): bits/byte {mean_sd(r['bits_per_byte'])}, "
                     f"ICL score {mean_sd(r['icl_score'], sign='+')}, passage copy gain {mean_sd(gains, 2)}, "
                     f"best prefix-matching score {mean_sd(r['best_prefix_matching_score'])}")
    return lines


def mean_sd(pair: tuple[float, float | None], digits: int = 3, sign: str = "") -> str:
    """"0.812 ± 0.004": a (mean, sd) pair of ``summarise_text``, the mean alone where one seed gives no sd
    (``sign="+"`` writes the mean's sign)."""
    mean, sd = pair
    return f"{mean:{sign}.{digits}f}" + ("" if sd is None else f" ± {sd:.{digits}f}")


def tokens_at(change: PhaseChange | None) -> str:
    """"7.8M": the training tokens of a phase change or of first copying, "—" where there is none."""
    return "—" if change is None else f"{change.tokens / 1e6:.1f}M"


def tokens_per_seed(changes: Sequence[PhaseChange | None]) -> str:
    """``tokens_at`` of each seed's run, comma-separated."""
    return ", ".join(tokens_at(c) for c in changes)


def _last(result: dict[str, Any], key: str):
    return result["history"][-1][key]


def model_label(layers: int, variant: str, gamma: float) -> str:
    """"1 layer, key_only γ=1", "2 layers, baseline": a model of the real-text tables."""
    return f"{layers} layer{'s' * (layers > 1)}, {variant}" + (f" γ={gamma:g}" if variant in SHEARED else "")


def model_key(result: dict[str, Any]) -> tuple[int, str, float]:
    """A run's model as (layers, variant, γ)."""
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
            "vocab_size": runs[0]["config"]["model"]["vocab_size"],
            "bits_per_byte": stat(lambda r: _last(r, "bits_per_byte")),
            "icl_score": stat(lambda r: _last(r, "icl_score")),
            "random_first_loss": stat(lambda r: _last(r, "random_first_loss")),
            "random_second_loss": stat(lambda r: _last(r, "random_second_loss")),
            "passage_first_loss": stat(lambda r: _last(r, "passage_first_loss")),
            "passage_second_loss": stat(lambda r: _last(r, "passage_second_loss")),
            "passage_copy_gain": stat(lambda r: _last(r, "passage_first_loss") - _last(r, "passage_second_loss")),
            "random_copy_gain": stat(lambda r: _last(r, "random_first_loss") - _last(r, "random_second_loss")),
            "best_induction_score": stat(lambda r: best_head(r["history"][-1], "induction_score")),
            "best_prefix_matching_score": stat(lambda r: best_head(r["history"][-1], "prefix_matching_score")),
        })
    return sorted(rows, key=lambda r: (r["layers"], r["variant"] != "baseline", r["variant"]))


def text_table(results: Results) -> list[str]:
    """``summarise_text``'s rows as printable lines."""
    return format_text_summary(summarise_text(results))


SUMMARY_TITLE = "summary (final evaluation, mean ± sd over seeds)"
STUDIES = (Study("text", text_experiment, SUMMARY_TITLE, text_table, verdict=None),
           Study("text_seeds", text_seeds, SUMMARY_TITLE, text_table, verdict=None))
