"""The induction studies of the reproduction: each a function of the plan (``quick`` or ``full``)
returning the run configs it trains. Their tables are computed from saved results by
``psattn.experiments.summaries``.

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
``Training.early_stop_evals`` evaluations. The real-text experiments are declared in ``.text``.

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
from functools import partial
from pathlib import Path
from typing import Any

from psattn.experiments import summaries
from psattn.experiments.configs import DEFAULT_INIT, small_config
from psattn.experiments.plateau import attention_at_queries_table, plateau_rows
from psattn.experiments.study import Results, Study, check_mode
from psattn.training.config import RunConfig

FORMS = ("all_positions", "single")  # the induction task's two forms: every repeat scored, or one answer a row


@dataclass(frozen=True)
class Training:
    """How the plan's one-layer induction runs train."""

    seeds: tuple[int, ...]
    extra_seeds: tuple[int, ...]  # for the secondary variants of the variant table
    steps: int  # budget on the full-sequence form
    extra_steps: int  # budget of the secondary variants
    single_steps: int  # budget of the single-answer form (one scored position a row)
    batch_size: int  # rows a step on the full-sequence form and the control tasks
    single_batch_size: int  # rows a step on the single-answer form
    lr: float  # AdamW's peak learning rate on the full-sequence form and the control tasks
    single_lr: float  # and on the single-answer form
    threshold: float  # held-out accuracy that counts as success (emergence)
    # rows whose tables report success and emergence (not a final accuracy) stop once held-out accuracy
    # has stayed at the threshold for this many evaluations in a row; 0 trains them to the full budget
    early_stop_evals: int
    device: str
    single_key_lag: bool  # whether the single-answer variant table has the learned key-lag rows
    two_layer_forms: tuple[str, ...]  # the forms whose variant table has the two-layer rows
    two_layer_batch_size: int  # their rows a step, on either form


@dataclass(frozen=True)
class GammaGrids:
    """The gamma sweep, the control tasks' grid and the size scan."""

    gammas: tuple[float, ...]  # of the symmetric shear's sweep
    control_gammas: tuple[float, ...]
    control_steps: int  # budget of the control tasks and MQAR
    sizes: tuple[dict[str, Any], ...]  # model fields of the size scan
    size_gamma: float


@dataclass(frozen=True)
class CriticalGrids:
    """The critical-gamma grids, one per design of the head dimension d_k."""

    head_counts: tuple[int, ...]  # at d_model 128: d_k = 128 / heads
    head_count_gammas: tuple[float, ...]  # the gamma grid of that design
    gammas: tuple[float, ...]  # the gamma grid of the designs over widths and head dimensions
    widths: tuple[int, ...]  # d_model at 4 heads: d_k = width / 4
    head_dims: tuple[int, ...]  # d_k at d_model 128 and 4 heads (the attention's inner width follows)
    batch_size: int  # rows a step (full form)


@dataclass(frozen=True)
class Sensitivity:
    """The table of emergence against the initialisation."""

    inits: tuple[float | str, ...]  # ModelConfig.init values
    seeds: tuple[int, ...]
    extra_seeds: tuple[int, ...]  # for its learned key-lag rows
    key_lag: bool  # whether it has the learned key-lag rows
    variants: tuple[str, ...]  # PSA variants (and the baseline)
    baseline_every_init: bool  # the plain layer at every initialisation, or at the default alone


@dataclass(frozen=True)
class Plan:
    """One plan's sizes (quick or full): training, the γ grids, the critical-γ grids, the sensitivity runs."""
    training: Training
    grids: GammaGrids
    critical: CriticalGrids
    sensitivity: Sensitivity


PLANS = {
    "quick": Plan(
        Training(seeds=(0, 1), extra_seeds=(0,), steps=600, extra_steps=400, single_steps=800, batch_size=32,
                 single_batch_size=64, lr=3e-3, single_lr=1e-3, threshold=0.8, early_stop_evals=2, device="cpu",
                 single_key_lag=False, two_layer_forms=(), two_layer_batch_size=64),
        GammaGrids(gammas=(0.0, 0.5, 1.0, 2.0), control_gammas=(0.0, 0.5, 1.0), control_steps=400,
                   sizes=({"d_model": 64, "n_heads": 2}, {"d_model": 128, "n_heads": 4}), size_gamma=1.0),
        CriticalGrids(head_counts=(8, 4, 2), head_count_gammas=(0.1, 0.2), gammas=(0.1, 0.2, 0.3, 0.5),
                      widths=(64, 128, 256), head_dims=(16, 32, 64), batch_size=64),
        Sensitivity(inits=(0.02, "scaled", "torch"), seeds=(0,), extra_seeds=(), key_lag=False,
                    variants=("baseline", "key_only"), baseline_every_init=False),
    ),
    "full": Plan(
        Training(seeds=(0, 1, 2), extra_seeds=(0, 1, 2), steps=5000, extra_steps=5000, single_steps=5000,
                 batch_size=64, single_batch_size=64, lr=3e-3, single_lr=1e-3, threshold=0.9, early_stop_evals=0,
                 device="auto", single_key_lag=True, two_layer_forms=FORMS, two_layer_batch_size=64),
        GammaGrids(gammas=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0), control_gammas=(0.0, 0.2, 0.4, 0.8, 1.2),
                   control_steps=3000,
                   sizes=({"model_preset": "psa-4m"}, {"model_preset": "psa-20m"}, {"model_preset": "psa-92m"}),
                   size_gamma=0.8),
        CriticalGrids(head_counts=(16, 8, 4, 2), head_count_gammas=(0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0),
                      gammas=(0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0), widths=(64, 128, 256, 512),
                      head_dims=(16, 32, 64, 128), batch_size=64),
        Sensitivity(inits=(0.02, "scaled", "torch"), seeds=(0, 1, 2), extra_seeds=(0, 1, 2), key_lag=True,
                    variants=("baseline", "key_only", "symmetric"), baseline_every_init=True),
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
#: (variant, gamma, MLPs) of the variant table's two-layer rows: the second layer's side of "one PSA
#: layer does what otherwise costs a second layer", with and without MLPs (``psattn sweep two_layer``
#: has more seeds and a third recipe)
TWO_LAYER_ROWS = (("baseline", 0.0, True), ("baseline", 0.0, False), ("key_only", 1.0, True), ("key_only", 1.0, False))
CONTROL_TASKS = ("random_offset", "multihop")
KEY_LAG_ROWS = tuple((v, g) for v, g, p, primary in VARIANT_ROWS if v in ("smeared_keys", "kv_shift", "primer_dconv", "canon"))


def _plan(mode: str) -> Plan:
    return PLANS[check_mode(mode)]


def _batch_size(t: Training, form: str = "all_positions") -> int:
    return t.single_batch_size if form == "single" else t.batch_size


def _lr(t: Training, form: str = "all_positions") -> float:
    return t.single_lr if form == "single" else t.lr


def _run(plan: Plan, variant: str, gamma: float, steps: int | None = None, stops_early: bool = False,
         **kwargs) -> RunConfig:
    """A run of ``plan``; ``stops_early``: its table reports success and emergence, so it may stop once
    they are decided (``Training.early_stop_evals``). The batch and the learning rate follow the form unless given."""
    t = plan.training
    kwargs.setdefault("batch_size", _batch_size(t, kwargs.get("form", "all_positions")))
    kwargs.setdefault("lr", _lr(t, kwargs.get("form", "all_positions")))
    return small_config(variant, gamma, steps=steps or t.steps, device=t.device, threshold=t.threshold,
                        early_stop=False, early_stop_evals=t.early_stop_evals if stops_early else 0, **kwargs)


def _one_layer_rows(mode: str, form: str, rows) -> list[RunConfig]:
    """The variant table's one-layer ``rows`` (of ``VARIANT_ROWS``) on ``form``: primary rows on every seed
    at the form's budget, the others on the secondary seeds at the secondary budget (on the single-answer
    form scaled as its budget is)."""
    p, t = _plan(mode), _plan(mode).training
    model = {"d_model": 768, "n_heads": 12} if mode == "full" else {}  # one layer at any scale
    runs = []
    for variant, gamma, placement, primary in rows:
        budget = t.steps if primary else t.extra_steps
        if form == "single":  # the single-answer budget, secondary rows scaled alike
            budget = round(budget * t.single_steps / t.steps)
        runs += [_run(p, variant, gamma, budget, stops_early=not primary, placement=placement, seed=seed,
                      form=form, **model) for seed in (t.seeds if primary else t.extra_seeds)]
    return runs


def _is_key_lag(row: tuple) -> bool:
    return (row[0], row[1]) in KEY_LAG_ROWS


def variant_table(mode: str = "quick") -> list[RunConfig]:
    """Every variant on the full-sequence form (primary rows on every seed), and the same on the
    single-answer form with its own budget (secondary rows there at the secondary budget scaled alike;
    the learned key-lag rows there only where ``Training.single_key_lag``: in the quick plan they cost
    two training-minutes, and ``psattn sweep key_lag --quick`` trains them).
    Primary rows train to the full budget (the table compares their final accuracy with the paper's);
    secondary rows may stop once their success is decided. Then two plain and two key-only layers, with
    and without MLPs (``TWO_LAYER_ROWS``), on ``Training.two_layer_forms`` at that form's primary budget,
    the secondary seeds and ``Training.two_layer_batch_size`` rows a step. The quick plan has none:
    within its 600 steps two attention-only plain layers do not form the circuit on the full form (0.125
    on 2026-12-03; with the cosine schedule's horizon at 1,500 steps they do by step 500, ``psattn sweep
    two_layer``), two plain layers are not decided on the single-answer form within 3,000 steps, and the
    four full-form rows alone cost about two minutes of the main job; ``psattn sweep two_layer`` is
    where they live at CPU scale."""
    p, t = _plan(mode), _plan(mode).training
    model = {"d_model": 768, "n_heads": 12} if mode == "full" else {}  # one layer at any scale
    runs = _one_layer_rows(mode, "all_positions", VARIANT_ROWS)
    runs += _one_layer_rows(mode, "single", [r for r in VARIANT_ROWS if t.single_key_lag or not _is_key_lag(r)])
    for form in t.two_layer_forms:
        budget = t.single_steps if form == "single" else t.steps
        runs += [_run(p, variant, gamma, budget, stops_early=True, n_layers=2, mlp=mlp, seed=seed, form=form,
                      batch_size=t.two_layer_batch_size, **model)
                 for variant, gamma, mlp in TWO_LAYER_ROWS for seed in t.extra_seeds]
    return runs


def key_lag(mode: str = "quick") -> list[RunConfig]:
    """The variant table's learned key-lag rows on both forms (its own runs, at its budgets and seeds),
    whichever of them the plan's variant table leaves out included."""
    return [c for form in FORMS for c in _one_layer_rows(mode, form, [r for r in VARIANT_ROWS if _is_key_lag(r)])]


def init_sensitivity(mode: str = "quick") -> list[RunConfig]:
    """Emergence against the initialisation scale on both forms, for the baseline and the shears (and,
    in the full plan, the learned key-lag baselines). The question is one of CPU scale, so both plans
    train the quick plan's model, batches and budgets; ``full`` has more scales, seeds and rows. In the quick
    plan the runs at the default initialisation are the variant table's own, and the plain layer, which
    fails at every initialisation of the full plan's three seeds, runs at the default alone; in the full
    plan, whose other experiments train longer, their names say the initialisation."""
    sens, p, q = _plan(mode).sensitivity, _plan(mode).training, PLANS["quick"].training
    rows = [(v, 0.0 if v == "baseline" else 1.0, sens.seeds) for v in sens.variants]
    if sens.key_lag:
        rows += [(v, g, sens.extra_seeds) for v, g in KEY_LAG_ROWS]
    budget = {"all_positions": q.steps, "single": q.single_steps}
    shared = mode == "quick"  # the default-initialisation runs are the variant table's, at the full budget
    return [small_config(v, g, steps=budget[form], device=q.device, threshold=q.threshold, early_stop=False,
                         early_stop_evals=0 if shared and init == DEFAULT_INIT else p.early_stop_evals,
                         form=form, init=init, seed=s, tag_init=not shared, batch_size=_batch_size(q, form),
                         lr=_lr(q, form))
            for init in sens.inits for form in FORMS for v, g, seeds in rows for s in seeds
            if v != "baseline" or sens.baseline_every_init or init == DEFAULT_INIT]


def gamma_sweep(mode: str = "quick") -> list[RunConfig]:
    """The symmetric shear over the γ grid, every seed (psattn sweep gamma_sweep)."""
    p = _plan(mode)
    model: dict[str, Any] = {"model_preset": "psa-92m"} if mode == "full" else {}
    return [_run(p, "symmetric", g, seed=s, **model) for g in p.grids.gammas for s in p.training.seeds]


def negative_controls(mode: str = "quick") -> list[RunConfig]:
    """The symmetric shear on the tasks a lag cannot help (random offset, multi-hop negation)."""
    p = _plan(mode)
    return [_run(p, "symmetric", g, p.grids.control_steps, task=task, seed=0)
            for task in CONTROL_TASKS for g in p.grids.control_gammas]


#: (variant, gamma) rows of the MQAR comparison
MQAR_ROWS = (("baseline", 0.0), ("symmetric", 1.0), ("key_only", 1.0), ("query_only", 1.0))


def associative_recall(mode: str = "quick") -> list[RunConfig]:
    """MQAR (Zoology) on one layer: recalling the value after a queried key is an induction pattern,
    so the key-side shear should help there as it does on induction (a positive control)."""
    p = _plan(mode)
    return [_run(p, v, g, p.grids.control_steps, stops_early=True, task="mqar", seed=s)
            for v, g in MQAR_ROWS for s in p.training.extra_seeds]


def size_scan(mode: str = "quick") -> list[RunConfig]:
    """The baseline and the symmetric shear at each model size of the plan."""
    p = _plan(mode)
    return [_run(p, v, g, seed=0, **size)
            for size in p.grids.sizes for v, g in (("baseline", 0.0), ("symmetric", p.grids.size_gamma))]


def critical_gamma(mode: str = "quick") -> list[RunConfig]:
    """The gamma grid per head dimension at fixed width (d_model 128): d_k and head count change together.
    Its critical gamma is 0.2 at every head count of the quick plan (also on a grid to 0.3), so that
    plan's grid stops at 0.2: a head count where 0.2 fails would read as "above 0.2"."""
    p = _plan(mode)
    c = p.critical
    return [_run(p, "symmetric", g, stops_early=True, seed=0, n_heads=h, batch_size=c.batch_size)
            for h in c.head_counts for g in c.head_count_gammas]


def critical_gamma_width(mode: str = "quick") -> list[RunConfig]:
    """The gamma grid per head dimension at a fixed head count (4): d_k and width change together.
    Gamma 0 runs too: a width at which one plain layer already succeeds has no critical gamma."""
    p = _plan(mode)
    c = p.critical
    return [_run(p, "symmetric", g, stops_early=True, seed=0, d_model=w, n_heads=4, batch_size=c.batch_size)
            for w in c.widths for g in (0.0, *c.gammas)]


def critical_gamma_head_dim(mode: str = "quick") -> list[RunConfig]:
    """The gamma grid per head dimension at a fixed width (d_model 128) *and* head count (4): only
    d_k (and with it the attention's inner width) changes. Gamma 0 runs too."""
    p = _plan(mode)
    c = p.critical
    return [_run(p, "symmetric", g, stops_early=True, seed=0, n_heads=4, d_head=k, batch_size=c.batch_size)
            for k in c.head_dims for g in (0.0, *c.gammas)]


#: the paper's exponent of the critical gamma, measured on trained models
PAPER_CRITICAL_EXPONENT = "gamma_c ∝ d_k^-1.13"


def format_critical(rows: list[dict]) -> list[str]:
    """One critical-gamma design's summary rows (``summaries.head_dim_key``) as printable lines: the
    critical gamma per head dimension and the exponent fit with the interval its grid allows."""
    pairs = summaries.critical_pairs(rows)
    return ([f"d_k {d_k}: critical gamma {label}" for d_k, _, label in pairs]
            + [f"exponent of gamma_c against d_k: {summaries.exponent_fit(pairs, summaries.critical_brackets(rows))['text']} "
               f"(paper, trained models: {PAPER_CRITICAL_EXPONENT})"])


def critical_verdict(results: Results) -> list[str]:
    """A critical-gamma design's conclusion: the critical gamma per head dimension and the exponent."""
    return format_critical(summaries.summarise_by(results, summaries.head_dim_key))


def attention_report(results: Results, runs: Path, mode: str) -> list[str]:
    """What the initialisation study's key-only layers attend to at the single-answer query, before and after
    training (``plateau_rows``)."""
    return ["the key-only layer's attention at the single-answer query (seed 0), at initialisation and at its "
            "last checkpoint: entropy over its maximum, spreads of the score terms T1 and T3 over the keys, the best "
            "head's attention on the target, the attention output's norm over the token embedding's",
            *attention_at_queries_table(plateau_rows(runs, init_sensitivity(mode), results))]


SUMMARY_TITLE = "summary (seeds averaged; success: held-out accuracy reached the run's threshold)"


def _study(name: str, plan, key, **kwargs) -> Study:
    """An induction study whose table is its runs grouped by ``key``, seeds averaged."""
    return Study(name, plan, SUMMARY_TITLE, partial(summaries.format_summary, key=key), **kwargs)


STUDIES = (
    _study("variants", variant_table, summaries.form_variant_key, verdict=None),
    _study("key_lag", key_lag, summaries.form_variant_key, verdict=None),
    _study("gamma_sweep", gamma_sweep, summaries.gamma_key, verdict=None),
    _study("controls", negative_controls, summaries.control_key, verdict=None),
    _study("mqar", associative_recall, summaries.variant_key, verdict=None),
    _study("sizes", size_scan, summaries.size_key, verdict=None),
    _study("critical_gamma", critical_gamma, summaries.head_dim_key, verdict=critical_verdict),
    _study("critical_gamma_width", critical_gamma_width, summaries.head_dim_key, verdict=critical_verdict),
    _study("critical_gamma_head_dim", critical_gamma_head_dim, summaries.head_dim_key, verdict=critical_verdict),
    _study("init_sensitivity", init_sensitivity, summaries.init_key, verdict=None, report=attention_report),
)
