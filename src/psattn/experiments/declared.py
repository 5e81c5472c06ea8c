"""The declared experiments: each a function of the plan (``quick`` or ``full``) returning the run
configs it trains. Their tables are computed from saved results by :mod:`.summaries`.

1. Variant table: PSA variants, placements and key-lag baselines on one layer, several seeds.
2. Gamma sweep: the symmetric shear (the paper's PSA) over a gamma grid times seeds.
3. Negative controls: the best gamma on random-offset retrieval and on multi-hop negation; and a
   positive one, multi-query associative recall (MQAR), an induction pattern in another format.
4. Size scan: the same comparison as the model grows.
5. Critical gamma: the gamma grid at several head dimensions d_k, in three designs (same width with
   more or fewer heads; same head count with a wider or narrower model; same width and head count
   with a wider or narrower head); the smallest gamma that succeeds, against d_k, gives the
   empirical exponent of gamma_c.

``quick`` settings run on a 2-core CPU; ``full`` settings are the paper-scale GPU presets. Rows whose
tables compare final accuracies train to their full budget; in the quick plan, rows whose tables
report success and emergence stop once held-out accuracy has stayed at the threshold for
``Plan.early_stop_evals`` evaluations. The real-text experiments are declared in :mod:`.text`.

A batch is sized by the positions it scores: a full-sequence row scores about 23, so the quick plan
takes 32 rows a step on that form (and on the control tasks, which score several positions a row),
and 64 on the single-answer form, which scores one. The critical-gamma grids keep 64 rows on the
full form: near gamma_c the symmetric shear learns more slowly with 32 (at d_k = 32, gamma = 0.2
emerges at step 550 of 600 instead of 350), so the grid would measure the budget, not gamma_c. The
quick setting counts emergence at held-out accuracy 0.8: a one-layer model at this size saturates
between 0.90 and 0.94 on full-sequence induction, so 0.9 would sit on the ceiling and turn seed
noise into success or failure.

The single-answer form trains at a peak learning rate of 1e-3, the full form and the controls at
3e-3. At 3e-3 the key-only layer learns the single-answer form on some seeds only, and when it
does depends on float rounding (0.086 or 0.281 for seed 1 on two machines of one kind; 2 of 3
seeds within 5,000 steps in ``psattn sweep paper_form``); at 1e-3 it learns it on every seed
within 450 steps (docs/paper_form.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psattn.experiments.configs import DEFAULT_INIT, small_config
from psattn.experiments.gamma_depth import gamma_depth
from psattn.experiments.paper_form import paper_form
from psattn.experiments.text import text_experiment, text_seeds
from psattn.experiments.text_phase import text_phase
from psattn.experiments.text_pilot import text_pilot
from psattn.experiments.two_layer import two_layer
from psattn.training.config import RunConfig

MODES = ("quick", "full")


@dataclass(frozen=True)
class Plan:
    seeds: tuple[int, ...]
    extra_seeds: tuple[int, ...]  # for the secondary variants of the variant table
    steps: int
    extra_steps: int  # budget of the secondary variants
    gammas: tuple[float, ...]
    control_gammas: tuple[float, ...]
    control_steps: int
    sizes: tuple[dict[str, Any], ...]
    size_gamma: float
    device: str
    threshold: float
    head_counts: tuple[int, ...]  # at d_model 128: d_k = 128 / heads
    head_count_gammas: tuple[float, ...]  # the gamma grid of that design
    critical_gammas: tuple[float, ...]  # the gamma grid of the designs over widths and head dimensions
    widths: tuple[int, ...]  # d_model at 4 heads: d_k = width / 4
    head_dims: tuple[int, ...]  # d_k at d_model 128 and 4 heads (the attention's inner width follows)
    single_steps: int  # budget of the single-answer form (one scored position a row)
    inits: tuple[float | str, ...]  # initialisations of the sensitivity table (ModelConfig.init)
    sensitivity_seeds: tuple[int, ...]
    sensitivity_extra_seeds: tuple[int, ...]  # for its learned key-lag rows
    sensitivity_key_lag: bool  # whether the sensitivity table has the learned key-lag rows
    sensitivity_variants: tuple[str, ...]  # PSA variants of the sensitivity table
    sensitivity_baseline_every_init: bool  # the plain layer at every initialisation, or at the default alone
    # rows whose tables report success and emergence (not a final accuracy) stop once held-out accuracy
    # has stayed at the threshold for this many evaluations in a row; 0 trains them to the full budget
    early_stop_evals: int
    batch_size: int  # rows a step on the full-sequence form and the control tasks
    single_batch_size: int  # rows a step on the single-answer form (one scored position a row)
    critical_batch_size: int  # rows a step of the critical-gamma grids (full form)
    lr: float  # AdamW's peak learning rate on the full-sequence form and the control tasks
    single_lr: float  # and on the single-answer form


PLANS = {
    "quick": Plan(
        seeds=(0, 1), extra_seeds=(0,), steps=600, extra_steps=400, gammas=(0.0, 0.5, 1.0, 2.0),
        control_gammas=(0.0, 0.5, 1.0), control_steps=400,
        sizes=({"d_model": 64, "n_heads": 2}, {"d_model": 128, "n_heads": 4}), size_gamma=1.0, device="cpu",
        threshold=0.8, head_counts=(8, 4, 2), head_count_gammas=(0.1, 0.2), critical_gammas=(0.1, 0.2, 0.3, 0.5),
        widths=(64, 128, 256), head_dims=(16, 32, 64),
        single_steps=800, inits=(0.02, "scaled", "torch"), sensitivity_seeds=(0,), sensitivity_extra_seeds=(),
        sensitivity_key_lag=False, sensitivity_variants=("baseline", "key_only"), sensitivity_baseline_every_init=False,
        early_stop_evals=2, batch_size=32, single_batch_size=64, critical_batch_size=64, lr=3e-3, single_lr=1e-3,
    ),
    "full": Plan(
        seeds=(0, 1, 2), extra_seeds=(0, 1, 2), steps=5000, extra_steps=5000, gammas=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0),
        control_gammas=(0.0, 0.2, 0.4, 0.8, 1.2), control_steps=3000,
        sizes=({"model_preset": "psa-4m"}, {"model_preset": "psa-20m"}, {"model_preset": "psa-92m"}),
        size_gamma=0.8, device="auto", threshold=0.9,
        head_counts=(16, 8, 4, 2), head_count_gammas=(0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0),
        critical_gammas=(0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0),
        widths=(64, 128, 256, 512), head_dims=(16, 32, 64, 128), single_steps=5000,
        inits=(0.02, "scaled", "torch"), sensitivity_seeds=(0, 1, 2), sensitivity_extra_seeds=(0, 1, 2),
        sensitivity_key_lag=True, sensitivity_variants=("baseline", "key_only", "symmetric"),
        sensitivity_baseline_every_init=True, early_stop_evals=0, batch_size=64, single_batch_size=64, critical_batch_size=64,
        lr=3e-3, single_lr=1e-3,
    ),
}

# (variant, gamma, placement, primary): primary rows run every seed
VARIANT_ROWS = (
    ("baseline", 0.0, "post_rope", True),
    ("symmetric", 1.0, "post_rope", True),
    ("key_only", 1.0, "post_rope", True),
    ("query_only", 1.0, "post_rope", False),
    ("symmetric", 1.0, "pre_rope", False),
    ("key_only", 1.0, "pre_rope", False),
    ("smeared_keys", 0.0, "post_rope", False),
    ("kv_shift", 0.0, "post_rope", False),
    ("primer_dconv", 0.0, "post_rope", False),
    ("canon", 0.0, "post_rope", False),
)
CONTROL_TASKS = ("random_offset", "multihop")
FORMS = ("full", "single")  # the induction task's two forms: every repeat scored, or one answer a row
KEY_LAG_ROWS = tuple((v, g) for v, g, p, primary in VARIANT_ROWS if v in ("smeared_keys", "kv_shift", "primer_dconv", "canon"))


def _plan(mode: str) -> Plan:
    if mode not in PLANS:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    return PLANS[mode]


def _batch_size(plan: Plan, form: str = "full") -> int:
    return plan.single_batch_size if form == "single" else plan.batch_size


def _lr(plan: Plan, form: str = "full") -> float:
    return plan.single_lr if form == "single" else plan.lr


def _run(plan: Plan, variant: str, gamma: float, steps: int | None = None, stops_early: bool = False,
         **kwargs) -> RunConfig:
    """A run of ``plan``; ``stops_early``: its table reports success and emergence, so it may stop once
    they are decided (``plan.early_stop_evals``). The batch and the learning rate follow the form unless given."""
    kwargs.setdefault("batch_size", _batch_size(plan, kwargs.get("form", "full")))
    kwargs.setdefault("lr", _lr(plan, kwargs.get("form", "full")))
    return small_config(variant, gamma, steps=steps or plan.steps, device=plan.device, threshold=plan.threshold,
                        early_stop=False, early_stop_evals=plan.early_stop_evals if stops_early else 0, **kwargs)


def variant_table(mode: str = "quick") -> list[RunConfig]:
    """Every variant on the full-sequence form (primary rows on every seed), and the same on the
    single-answer form with its own budget (secondary rows there at the secondary budget scaled alike).
    Primary rows train to the full budget (the table compares their final accuracy with the paper's);
    secondary rows may stop once their success is decided."""
    p = _plan(mode)
    model = {"d_model": 768, "n_heads": 12} if mode == "full" else {}  # one layer at any scale
    scale = p.single_steps / p.steps
    return [
        _run(p, variant, gamma, budget, stops_early=not primary, placement=placement, seed=seed, form=form, **model)
        for form, budget_of in (("full", lambda primary: p.steps if primary else p.extra_steps),
                                ("single", lambda primary: round((p.steps if primary else p.extra_steps) * scale)))
        for variant, gamma, placement, primary in VARIANT_ROWS
        for budget in (budget_of(primary),)
        for seed in (p.seeds if primary else p.extra_seeds)
    ]


def init_sensitivity(mode: str = "quick") -> list[RunConfig]:
    """Emergence against the initialisation scale on both forms, for the baseline and the shears (and,
    in the full plan, the learned key-lag baselines). The question is one of CPU scale, so both plans
    train the quick plan's model, batches and budgets; ``full`` has more scales, seeds and rows. In the quick
    plan the runs at the default initialisation are the variant table's own, and the plain layer, which
    fails at every initialisation of the full plan's three seeds, runs at the default alone; in the full
    plan, whose other experiments train longer, their names say the initialisation."""
    p, q = _plan(mode), PLANS["quick"]
    rows = [(v, 0.0 if v == "baseline" else 1.0, p.sensitivity_seeds) for v in p.sensitivity_variants]
    if p.sensitivity_key_lag:
        rows += [(v, g, p.sensitivity_extra_seeds) for v, g in KEY_LAG_ROWS]
    budget = {"full": q.steps, "single": q.single_steps}
    shared = mode == "quick"  # the default-initialisation runs are the variant table's, at the full budget
    return [small_config(v, g, steps=budget[form], device=q.device, threshold=q.threshold, early_stop=False,
                         early_stop_evals=0 if shared and init == DEFAULT_INIT else p.early_stop_evals,
                         form=form, init=init, seed=s, tag_init=not shared, batch_size=_batch_size(q, form),
                         lr=_lr(q, form))
            for init in p.inits for form in FORMS for v, g, seeds in rows for s in seeds
            if v != "baseline" or p.sensitivity_baseline_every_init or init == DEFAULT_INIT]


def gamma_sweep(mode: str = "quick") -> list[RunConfig]:
    p = _plan(mode)
    model = {"model_preset": "psa-92m"} if mode == "full" else {}
    return [_run(p, "symmetric", g, seed=s, **model) for g in p.gammas for s in p.seeds]


def negative_controls(mode: str = "quick") -> list[RunConfig]:
    p = _plan(mode)
    return [_run(p, "symmetric", g, p.control_steps, task=task, seed=0)
            for task in CONTROL_TASKS for g in p.control_gammas]


#: (variant, gamma) rows of the MQAR comparison
MQAR_ROWS = (("baseline", 0.0), ("symmetric", 1.0), ("key_only", 1.0), ("query_only", 1.0))


def associative_recall(mode: str = "quick") -> list[RunConfig]:
    """MQAR (Zoology) on one layer: recalling the value after a queried key is an induction pattern,
    so the key-side shear should help there as it does on induction (a positive control)."""
    p = _plan(mode)
    return [_run(p, v, g, p.control_steps, stops_early=True, task="mqar", seed=s) for v, g in MQAR_ROWS for s in p.extra_seeds]


def size_scan(mode: str = "quick") -> list[RunConfig]:
    p = _plan(mode)
    return [_run(p, v, g, seed=0, **size)
            for size in p.sizes for v, g in (("baseline", 0.0), ("symmetric", p.size_gamma))]


def critical_gamma(mode: str = "quick") -> list[RunConfig]:
    """The gamma grid per head dimension at fixed width (d_model 128): d_k and head count change together.
    Its critical gamma is 0.2 at every head count of the quick plan (also on a grid to 0.3), so that
    plan's grid stops at 0.2: a head count where 0.2 fails would read as "above 0.2"."""
    p = _plan(mode)
    return [_run(p, "symmetric", g, stops_early=True, seed=0, n_heads=h, batch_size=p.critical_batch_size)
            for h in p.head_counts for g in p.head_count_gammas]


def critical_gamma_width(mode: str = "quick") -> list[RunConfig]:
    """The gamma grid per head dimension at a fixed head count (4): d_k and width change together.
    Gamma 0 runs too: a width at which one plain layer already succeeds has no critical gamma."""
    p = _plan(mode)
    return [_run(p, "symmetric", g, stops_early=True, seed=0, d_model=w, n_heads=4, batch_size=p.critical_batch_size)
            for w in p.widths for g in (0.0, *p.critical_gammas)]


def critical_gamma_head_dim(mode: str = "quick") -> list[RunConfig]:
    """The gamma grid per head dimension at a fixed width (d_model 128) *and* head count (4): only
    d_k (and with it the attention's inner width) changes. Gamma 0 runs too."""
    p = _plan(mode)
    return [_run(p, "symmetric", g, stops_early=True, seed=0, n_heads=4, d_head=k, batch_size=p.critical_batch_size)
            for k in p.head_dims for g in (0.0, *p.critical_gammas)]


EXPERIMENTS = {
    "variants": variant_table,
    "gamma_sweep": gamma_sweep,
    "controls": negative_controls,
    "mqar": associative_recall,
    "sizes": size_scan,
    "critical_gamma": critical_gamma,
    "critical_gamma_width": critical_gamma_width,
    "critical_gamma_head_dim": critical_gamma_head_dim,
    "init_sensitivity": init_sensitivity,
    "text": text_experiment,
    "text_seeds": text_seeds,
    "text_pilot": text_pilot,
    "text_phase": text_phase,
    "paper_form": paper_form,
    "gamma_depth": gamma_depth,
    "two_layer": two_layer,
}
