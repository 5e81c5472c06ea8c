"""The long studies (text_pilot, paper_form, gamma_depth, two_layer): their declarations, the phase-change
rule, and every table rebuilt from small saved results."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from psattn.experiments.declared import STUDIES
from psattn.experiments.induction_report import LEFT_OUT
from psattn.experiments.phase_change import detect_phase_change
from psattn.experiments.studies.gamma_depth import (
    GAMMAS,
    PREDECESSOR,
    allowed_exponents,
    bracket,
    depth_table,
    fit_depth_law,
    format_depth_table,
    near_best,
)
from psattn.experiments.studies.paper_form import PAPER_FORM_ROWS, format_paper_form_table, paper_form_table
from psattn.experiments.studies.text_phase import PHASE_MODELS, SEEDED_MODELS
from psattn.experiments.studies.text_pilot import LAW_BUDGET, LAW_RUNS, PILOT_RUNS, format_pilot_table, law_tokens, pilot_table
from psattn.experiments.studies.two_layer import format_two_layer_table, two_layer_table

ROOT = Path(__file__).resolve().parents[2]


def row(step, prefix, icl=0.0, previous=0.3):
    """A text run's metrics row with one 2-layer model's per-head scores."""
    return {"step": step, "tokens": step * 1000, "seconds": step / 10, "icl_score": icl, "bits_per_byte": 2.0,
            "prefix_matching_score": [[0.0, 0.001], [prefix, 0.002]], "previous_token_score": [[previous, 0.1], [0.1, 0.1]]}


def test_the_phase_change_is_the_first_of_two_evaluations_at_the_threshold():
    rows = [row(0, 0.5), row(10, 0.004), row(20, 0.12), row(30, 0.05), row(40, 0.11, icl=-0.2), row(50, 0.3, icl=-0.4)]
    change = detect_phase_change(rows)  # step 0 never counts; 20 is not confirmed at 30
    assert (change.step, change.tokens, change.score, change.icl_before, change.icl_at) == (40, 40000, 0.11, 0.0, -0.2)
    assert detect_phase_change(rows, confirm=1).step == 20
    assert detect_phase_change(rows, threshold=0.5) is None
    assert detect_phase_change(rows[:5]) is None  # the last one alone is not confirmed
    with pytest.raises(ValueError, match="confirm"):
        detect_phase_change(rows, confirm=0)


def test_the_detector_finds_the_synthetic_positive_control_and_not_the_failure():
    """Head scores as the attention-only and the MLP two-layer models logged them on full-sequence induction
    (induction_score: best second-layer head; rounded from the runs recorded in docs/text.md)."""
    def runs(scores):
        return [{"step": 100 * i, "induction_score": [[0.03] * 4, [s, 0.0, 0.0, 0.0]]} for i, s in enumerate(scores)]
    attention_only = runs([0.03, 0.0, 0.0, 0.0, 0.03, 0.62, 0.71, 0.73])
    with_mlps = runs([0.03] + [0.0] * 14)
    assert detect_phase_change(attention_only, "induction_score").step == 500
    assert detect_phase_change(with_mlps, "induction_score") is None


def test_on_the_saved_text_runs_the_passage_score_marks_the_phase_change_and_the_random_tokens_score_lags():
    """The text rule reads the prefix-matching score on a repeated passage, not Olsson et al.'s on repeated
    random tokens (``induction_score``); phase_change.py's docstring did not say why. Its numbers, rebuilt
    from every saved context-64 text run at the rule's threshold and confirm."""
    import psattn.experiments.phase_change as pc
    from psattn.training.run_dir import load_result

    def millions(tokens):
        return round(tokens / 1e6, 1)

    runs = {d.name: load_result(d)["history"] for d in sorted(ROOT.glob("docs/results/text_*/*-c64-*"))}
    found = {}
    for name, rows in runs.items():
        assert all("induction_score" in r and "prefix_matching_score" in r for r in rows), name
        found[name] = (pc.detect_phase_change(rows), pc.detect_phase_change(rows, "induction_score"),
                       pc.detect_copying(rows))
    passage = {n for n, (p, _, _) in found.items() if p is not None}
    random = {n for n, (_, r, _) in found.items() if r is not None}
    copies = {n for n, (_, _, c) in found.items() if c is not None}
    assert (len(runs), len(passage), len(random), len(copies)) == (26, 24, 17, 23)
    assert copies < passage and random < passage
    lead = [found[n][2].tokens - found[n][0].tokens for n in copies]  # first copying less the passage rule's
    assert min(lead) >= 0 and millions(max(lead)) == 2.4
    lag = [found[n][1].tokens - found[n][0].tokens for n in random]  # the random-token rule's less the passage's
    assert min(lag) >= 0 and millions(max(lag)) == 5.4
    assert millions(max(found[n][1].tokens - found[n][2].tokens for n in random & copies)) == 3.0
    missed = sorted(copies - random)
    assert len(missed) == 6 and sum("L1d128h4" in n and "key_only" in n for n in missed) == 4
    assert sum("L1d128h4" in n and "symmetric" in n for n in missed) == 1
    assert [n for n in missed if "L2d128h4" in n] == ["text_mlp-python-stdlib-bpe1024-c64-L2d128h4-mlp-key_only-g1-s1"]
    [late] = passage - copies
    assert late.endswith("L2d128h4-attnonly-baseline-s2") and millions(found[late][0].tokens) == 19.2
    assert round(pc.random_copy_gain(runs[late][-1]), 2) == 0.21
    assert max(map(pc.random_copy_gain, runs[late])) < pc.COPY_THRESHOLD
    smeared = runs[next(n for n in runs if "smeared_keys" in n)][-1]
    assert (round(pc.best_head(smeared, "prefix_matching_score"), 2), round(pc.best_head(smeared, "induction_score"), 2)) \
        == (0.38, 0.48)
    doc = " ".join(pc.__doc__.split())
    for claim in ("On the 26 saved context-64 text runs", "finds a phase change in 24: in each of the 23 that start copying, "
                  "0 to 2.4M tokens before first copying",
                  "seed 2 at 19.2M (whose copy gain stays below the copying threshold, 0.21 at the end",
                  "finds 17, never before the passage score (up to 5.4M tokens after it, up to 3.0M after first copying), "
                  "and none in 6 runs that copy", "smeared keys ends at 0.38 on passages, 0.48 on random tokens"):
        assert claim in doc, claim
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    assert "comes 0 to 5.4M tokens later on the saved context-64 runs, and not at all in 6 that copy" in page


def saved(config, history, **extra):
    last = history[-1]
    return {"config": config.to_dict(), "history": history, "final_accuracy": last.get("eval_accuracy", 0.0),
            "best_accuracy": max(r.get("eval_accuracy", 0.0) for r in history),
            "emergence_step": extra.get("emergence"), "steps": last["step"]}


def test_the_pilot_table_and_figure_from_saved_runs(tmp_path):
    configs = {(c.train.batch_size, c.task.seq_len): c for c in STUDIES["text_pilot"].plan("quick")}
    assert set(configs) == {(b, 256) for b, _ in PILOT_RUNS} | set(LAW_RUNS)
    assert all(c.model.n_layers == 2 and c.model.mlp is False for c in configs.values())
    rows_seen = [configs[(b, 256)].train.steps * b for b, _ in PILOT_RUNS]
    assert max(rows_seen) - min(rows_seen) < 32  # the same tokens for every batch, to within one step
    for b, context in LAW_RUNS:  # the law's probes train on LAW_BUDGET times the law's tokens
        tokens = configs[(b, context)].train.steps * b * context
        assert tokens == pytest.approx(LAW_BUDGET * law_tokens(b, context), rel=0.02)
    assert law_tokens(4, 256) == pytest.approx(10**5.7 * 32)
    results = {
        "a": saved(configs[(4, 256)], [row(0, 0.0), row(100, 0.2, icl=-0.1), row(200, 0.3, icl=-0.5)]),
        "b": saved(configs[(32, 256)], [row(0, 0.0), row(100, 0.01), row(200, 0.02)]),
        "c": saved(configs[(2, 64)], [row(0, 0.0), row(100, 0.01), row(200, 0.02)]),
    }
    rows = pilot_table(results)
    assert [(r["batch_size"], r["context"]) for r in rows] == [(4, 256), (32, 256), (2, 64)]
    assert rows[0]["phase_change"].step == 100 and rows[1]["phase_change"] is None
    lines = format_pilot_table(rows)
    assert lines[2].startswith("| 4 | 256 | no | 16.0M | 0.10M (0.2) | 0.300 | 0.30 / 0.10 |")
    assert lines[3].startswith("| 32 | 256 | no | 45.4M | none within 0.2M")
    assert lines[4].startswith("| 2 | 64 | no | 5.7M | none within")
    pytest.importorskip("matplotlib")
    from psattn.experiments.studies.text_pilot import pilot_figure

    path = pilot_figure(results, tmp_path / "pilot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_phase_declares_every_model_attention_only_on_the_pilots_setting():
    configs = STUDIES["text_phase"].plan("quick")
    keys = [(c.model.n_layers, c.model.attention.variant, c.model.attention.gamma, c.train.seed) for c in configs]
    assert len(set(keys)) == len(keys) == len(PHASE_MODELS) + 2 * len(SEEDED_MODELS)
    assert {k[:3] for k in keys} == set(PHASE_MODELS) and all(k[:3] in SEEDED_MODELS for k in keys if k[3])
    for c in configs:  # 8 rows of 64 tokens, about 24M tokens (three times the pilot's phase change), 40 evaluations
        assert (c.task.seq_len, c.train.batch_size, c.model.mlp, c.task.corpus) == (64, 8, False, "python-stdlib")
        assert c.train.steps * 8 * 64 == pytest.approx(24e6, rel=1e-3) and c.train.steps // c.train.eval_every == 40
        assert c.train.checkpoint_every == c.train.eval_every and c.name.startswith("text_phase-python-stdlib-bpe1024-c64-")
    assert "text_phase" in LEFT_OUT["quick"] and "text_phase" in LEFT_OUT["full"]


def test_the_text_studies_say_how_many_times_their_runs_are_evaluated():
    """They said 40 times; the trainer evaluates at step 0, every ``eval_every`` steps and at the last step: 42."""
    import importlib

    def evaluations(t):
        return 1 + t.steps // t.eval_every + (t.steps % t.eval_every != 0)

    for study, mode, said in (("text_scale", "full", "evaluated {} times"), ("text_phase", "quick", "evaluated {} times"),
                              ("text_mlp", "quick", "{} evaluations")):
        counts = {evaluations(c.train) for c in STUDIES[study].plan(mode)}
        doc = importlib.import_module(f"psattn.experiments.studies.{study}").__doc__
        assert len(counts) == 1 and said.format(*counts) in " ".join(doc.split()), (study, counts)
    docs = " ".join((ROOT / "docs" / "text.md").read_text().split() + (ROOT / "docs" / "at_scale.md").read_text().split())
    assert "40 evaluations" not in docs and "evaluated 40 times" not in docs


def test_the_pilot_page_says_how_many_evaluations_and_training_minutes_its_saved_runs_took():
    """text.md said 48 evaluations a run and 137 training-minutes; the trainer evaluates at step 0, every
    steps // 48 steps and at the last step (50 times), and the 137 left out the 2-rows run added later (75 minutes)."""
    from psattn.training.run_dir import load_result

    def evaluations(t):
        return 1 + t.steps // t.eval_every + (t.steps % t.eval_every != 0)

    assert {evaluations(c.train) for c in STUDIES["text_pilot"].plan("quick")} == {50}
    saved = [load_result(d) for d in sorted((ROOT / "docs" / "results" / "text_pilot").iterdir())]
    assert len(saved) == 6 and {len(r["history"]) for r in saved} == {50}
    minutes = round(sum(r["seconds"] for r in saved) / 60)
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    assert minutes == 212 and f"the runs below took {minutes} training-minutes" in page
    assert "50 evaluations each (step 0, every 1/48 of the steps, the last step)" in page and "48 evaluations" not in page


def test_a_nan_head_score_counts_the_same_wherever_it_sits(monkeypatch):
    """Python's max kept a NaN only in first place: [nan, 0.3] had no phase change and [0.3, nan] had one."""
    from psattn.experiments import text_plots
    from psattn.experiments.phase_change import best_head
    from psattn.experiments.saved_runs import compact_history
    from psattn.training.evaluation import format_evaluation

    def rows(heads):
        key = "prefix_matching_score"
        return [{"step": 0, key: [[0.0, 0.0]]}, *({"step": s, key: [heads]} for s in (1, 2))]

    first, last = rows([math.nan, 0.3]), rows([0.3, math.nan])
    assert math.isnan(best_head(first[1], "prefix_matching_score")) and math.isnan(best_head(last[1], "prefix_matching_score"))
    assert detect_phase_change(first) is None and detect_phase_change(last) is None
    compacted = [{"step": 0, "prefix_matching_score": [[0.0]]}, {"step": 1, "prefix_matching_score": [[math.nan]]}]
    assert str(compact_history(first)[:-1]) == str(compact_history(last)[:-1]) == str(compacted)  # the last: every head
    result = {"run_dir": "r", "rows": 1, "task_config": "t", "accuracy": 0.5, "loss": 1.0}
    assert (format_evaluation(result | {"prefix_matching_score": first[1]["prefix_matching_score"]})
            == format_evaluation(result | {"prefix_matching_score": last[1]["prefix_matching_score"]}))
    figures = []
    monkeypatch.setattr(text_plots, "save_figure", lambda fig, path: figures.append(fig) or path)
    for grid in ([[math.nan, 0.5]], [[0.5, math.nan]]):  # the colour scale: the largest finite score
        text_plots.plot_head_heatmaps({"m": {"induction_score": grid, "prefix_matching_score": [[0.1, 0.2]]}}, "x.png")
    assert [fig.axes[0].images[0].get_clim()[1] for fig in figures] == [0.5, 0.5]


def fake(variant, gamma, seed, *, success, step=None, placement="post_rope", form="all_positions", layers=1, mlp=True,
         task="induction", best=None):
    config = {"task": {"name": task, "form": form}, "train": {"threshold": 0.8, "steps": 1000, "seed": seed,
                                                              "early_stop": True},
              "model": {"d_model": 128, "n_layers": layers, "mlp": mlp,
                        "attention": {"variant": variant, "gamma": gamma, "placement": placement}}}
    accuracy = best if best is not None else (0.85 if success else 0.05)
    return {"config": config, "final_accuracy": accuracy, "best_accuracy": accuracy,
            "emergence_step": step if success else None}


def test_paper_form_declares_every_row_on_three_seeds_and_tables_them():
    configs = STUDIES["paper_form"].plan("quick")
    assert len(configs) == len({c.name for c in configs}) == len(PAPER_FORM_ROWS) * 3 * 2
    assert all(c.task.form == "single" and c.train.steps == 5000 and c.train.early_stop_evals == 2 for c in configs)
    assert sorted({c.train.lr for c in configs}) == [1e-3, 3e-3]
    configs = [c for c in configs if c.train.lr == 3e-3]
    assert all(c.name.startswith("paper_form-induction") for c in configs)  # the names the first runs were saved under
    results = {f"{v}{p}{s}": fake(v, g, s, success=v == "key_only" or (v == "symmetric" and s < 2), step=1000 + s * 100,
                                  placement=p, form="single")
               for v, g, p in PAPER_FORM_ROWS for s in (0, 1, 2)}
    rows = paper_form_table(results)
    assert [(r["variant"], r["placement"]) for r in rows] == [(v, p) for v, _, p in PAPER_FORM_ROWS]
    by = {(r["variant"], r["placement"]): r for r in rows}
    assert by[("key_only", "post_rope")]["successes"] == 3 and by[("key_only", "post_rope")]["mean_emergence_step"] == 1100
    assert by[("symmetric", "pre_rope")]["successes"] == 2 and by[("baseline", "post_rope")]["successes"] == 0
    lines = format_paper_form_table(rows)
    assert "| 0.003 | key_only | post-rope | 3/3 | 1100 | 0.850 | 0.949 |" in lines
    assert "| 0.003 | symmetric | post-rope | 2/3 | 1050 | 0.583 | 0.811 |" in lines


def test_gamma_depth_tables_best_and_critical_gamma_per_depth_and_fits_the_law():
    configs = STUDIES["gamma_depth"].plan("quick")
    names = [c.name for c in configs]
    assert len(names) == len(set(names)) == 2 * 4 * (1 + 2 * (len(GAMMAS) - 1)) * 2  # gamma 0 shared by both variants
    # depth N learns fastest at gamma 4 / N (critical gamma 0.5 at every depth); gamma 0 fails
    results = {}
    for n in (1, 2, 3, 4):
        for variant in ("symmetric", "key_only"):
            for g in GAMMAS:
                for s in (0, 1):
                    v = "baseline" if g == 0 else variant
                    success = g >= 0.5
                    step = 100 + 50 * abs(math.log2(g / (4 / n))) if success else None
                    results[f"{n}{v}{g}{s}"] = fake(v, g, s, success=success, step=step, layers=n, task="mqar")
    rows = depth_table(results)
    assert len(rows) == 8 and all(r["critical_gamma"] == "0.5" for r in rows)
    best = {(r["variant"], r["depth"]): r["best_gamma"] for r in rows}
    assert best[("symmetric", 1)] == 4.0 and best[("symmetric", 2)] == 2.0 and best[("key_only", 4)] == 1.0
    near = {(r["variant"], r["depth"]): near_best(r["grid"]) for r in rows}
    assert near[("symmetric", 1)] == [4.0] and near[("symmetric", 3)] == [1.0, 2.0]  # 121 and 129 steps: one evaluation
    assert bracket([4.0]) == (pytest.approx(4 / math.sqrt(2)), math.inf) and bracket([0.25, 0.5])[0] == 0.0
    fit = fit_depth_law([r for r in rows if r["variant"] == "symmetric"])
    depths = [1, 2, 3, 4]
    slope, intercept = np.polyfit(np.log(depths), np.log([best[("symmetric", n)] for n in depths]), 1)
    assert fit["b"] == pytest.approx(slope) and fit["a"] == pytest.approx(math.exp(intercept))
    low, high = fit["b_allowed"]
    assert low < -1 < high and high < 0  # the true exponent is allowed, a flat law is not
    assert fit["predecessor_b_inside"] == (low <= PREDECESSOR[1] <= high)
    lines = format_depth_table(rows)
    assert f"| {PREDECESSOR[0] * 2 ** PREDECESSOR[1]:.2f} |" in lines[3]  # symmetric mqar at depth 2
    assert any(line.startswith("\nmqar, symmetric: least squares γ* = ") for line in lines)
    assert lines[2] == "| mqar | symmetric | 1 | 4 | 4 | 0.5 | 0/2 | 0/2 | 2/2 @250 | 2/2 @200 | 2/2 @150 | 2/2 @100 | 4.17 |"
    assert all(c.train.eval_every == 10 and c.name.endswith(("-e10-s0", "-e10-s1")) for c in configs)


def test_the_exponents_the_brackets_allow():
    # the same bracket at depth 1 and 4: a factor of 2 each way allows |b| <= log 4 / log 4
    assert allowed_exponents({1: (0.5, 2.0), 4: (0.5, 2.0)}) == pytest.approx((-1.0, 1.0))
    assert allowed_exponents({1: (1 / math.sqrt(2), math.sqrt(2)), 2: (1 / math.sqrt(2), math.sqrt(2)),
                              4: (1 / math.sqrt(2), math.sqrt(2))}) == pytest.approx((-0.5, 0.5))
    assert allowed_exponents({1: (4.0, 8.0), 2: (4.0, 8.0), 4: (0.5, 1.0)}) is None  # no power law through them
    assert allowed_exponents({1: (1.0, math.inf), 2: (0.0, 1.0)}) == (-math.inf, 0.0)  # it can only fall
    assert allowed_exponents({1: (1.0, math.inf), 2: (1.0, math.inf)}) == (-math.inf, math.inf)


def test_the_depth_law_fit_of_a_constant_best_gamma_is_exponent_zero():
    def grid(best):
        return [{"gamma": g, "seeds": 2, "successes": 2 if g > 0 else 0,
                 "mean_emergence_step": (100 + 30 * abs(math.log2(g / best))) if g > 0 else None} for g in GAMMAS]
    rows = [{"depth": n, "best_gamma": 1.0, "grid": grid(1.0)} for n in (1, 2, 3, 4)]
    fit = fit_depth_law(rows)
    assert fit["b"] == 0.0 and fit["a"] == pytest.approx(1.0)
    assert fit["b_allowed"] == pytest.approx((-0.5, 0.5)) and not fit["predecessor_b_inside"]
    assert fit_depth_law(rows[:2]) is None  # two depths do not make a fit


def test_the_depth_law_table_and_figure_in_the_docs_are_what_its_saved_runs_give(tmp_path):
    from pathlib import Path

    from psattn.experiments.studies.gamma_depth import depth_figure
    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    results = {d.name: load_result(d) for d in sorted((root / "docs" / "results" / "gamma_depth").iterdir())}
    assert {r["config"]["name"] for r in results.values() if r} == {c.name for c in STUDIES["gamma_depth"].plan("quick")}
    table = STUDIES["gamma_depth"].table(results)  # the study's own table, as `psattn sweep` prints it
    docs = (root / "docs" / "depth_law.md").read_text()
    assert all(line.strip() in docs for line in table), "\n".join(table)
    pytest.importorskip("matplotlib")
    assert depth_figure(results, tmp_path / "depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_depth_law_prose_says_what_its_saved_runs_give():
    """depth_law.md said every coupling from 0.25 up solves MQAR, and related-work.md that key-only's best γ is 2 at
    every depth: the symmetric shear's γ = 4 solves MQAR at depth 4 on one seed of two only (none of two in the runs of
    git 3e4d6de), and key-only's best on MQAR at depth 4 is 1."""
    from psattn.training.run_dir import load_result

    results = {d.name: load_result(d) for d in sorted((ROOT / "docs" / "results" / "gamma_depth").iterdir())}
    mqar = [r for r in results.values()
            if r["config"]["task"]["name"] == "mqar" and r["config"]["model"]["attention"]["gamma"] > 0]
    failed = {(r["config"]["model"]["attention"]["variant"], r["config"]["model"]["n_layers"],
               r["config"]["model"]["attention"]["gamma"]) for r in mqar if r["emergence_step"] is None}
    assert failed == {("symmetric", 4, 4.0)}
    cell = sorted((r["emergence_step"] is None, r["emergence_step"] or round(r["best_accuracy"], 3)) for r in mqar
                  if (r["config"]["model"]["attention"]["variant"], r["config"]["model"]["n_layers"],
                      r["config"]["model"]["attention"]["gamma"]) == ("symmetric", 4, 4.0))
    assert cell == [(False, 370), (True, 0.495)]  # one seed of two, at step 370; the other peaks at 0.495
    others = [r for r in mqar if r["config"]["model"]["n_layers"] != 4 or r["config"]["model"]["attention"]["gamma"] != 4.0
              or r["config"]["model"]["attention"]["variant"] != "symmetric"]
    assert max(r["emergence_step"] for r in others) <= 200
    depth_law = " ".join((ROOT / "docs" / "depth_law.md").read_text().split())
    assert ("coupling from 0.25 up solves MQAR on both seeds within 200 steps but one (the symmetric shear's γ = 4 at "
            "depth 4, which solves it on one seed of two, at step 370)") in depth_law
    assert "(step 370; the other peaks at 0.495)" in depth_law
    best = {(r["task"], r["variant"], r["depth"]): r["best_gamma"] for r in depth_table(results)}
    assert {k for k, g in best.items() if k[1] == "symmetric" and g != 1.0} == set()
    assert {k for k, g in best.items() if k[1] == "key_only" and g != 2.0} == {("mqar", "key_only", 4)}
    assert best[("mqar", "key_only", 4)] == 1.0
    assert ("(symmetric 1 at every depth; key-only 2 at every depth but MQAR's 4, where γ = 1, 2 and 4 tie and the\n"
            "  smallest is taken)") in (ROOT / "docs" / "related-work.md").read_text()


def test_two_layer_declares_both_forms_with_and_without_mlps_and_tables_them():
    configs = STUDIES["two_layer"].plan("quick")
    assert {(c.task.form, str(c.model.mlp), c.model.attention.variant) for c in configs} == {
        (f, m, v) for f in ("all_positions", "single") for m in ("True", "False") for v in ("baseline", "key_only")} | {
        (f, "[False, True]", "baseline") for f in ("all_positions", "single")}
    assert len({c.name for c in configs}) == len(configs) == 20
    results = {f"{mlp}{s}": fake("baseline", 0.0, s, success=mlp is not True, step=500, layers=2, mlp=mlp)
               for mlp in ([False, True], True, False) for s in (0, 1)}
    rows = two_layer_table(results)
    assert [(r["mlp"], r["successes"]) for r in rows] == [("yes", 0), ("no", 2), ("layer 2 only", 2)]
    assert format_two_layer_table(rows)[3] == "| all_positions | 2 | no | baseline | 2/2 | 500 | 0.850 | 1000 |"
    assert format_two_layer_table(rows)[4].startswith("| all_positions | 2 | layer 2 only | baseline | 2/2 |")


def test_the_studies_stay_out_of_both_reproductions():
    for study in ("text_corpora", "text_pilot", "paper_form", "gamma_depth", "two_layer"):
        assert study in LEFT_OUT["quick"] and study in LEFT_OUT["full"]


def test_the_paper_form_table_in_the_docs_is_what_its_saved_runs_give():
    from pathlib import Path

    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    results = {d.name: load_result(d) for d in sorted((root / "docs" / "results" / "paper_form").iterdir())}
    assert {r["config"]["name"] for r in results.values() if r} == {c.name for c in STUDIES["paper_form"].plan("quick")}
    table = STUDIES["paper_form"].table(results)
    docs = (root / "docs" / "paper_form.md").read_text()
    assert all(line in docs for line in table), "\n".join(table)


def test_the_paper_form_prose_says_what_its_saved_runs_give():
    """The page's per-seed figures are read off the saved runs (rerun at git 5c39ac8, whose rounding moved which seeds
    learn the form at lr 3e-3: the prose of the 84d65d0 runs gave seeds 0 and 2 at steps 3,750 and 1,500)."""
    from psattn.training.run_dir import load_result

    def runs(prefix, variant):
        found = {}
        pattern = f"{prefix}-induction-single-L1d128h4-{variant}-stop2-s*"
        for d in sorted((ROOT / "docs" / "results" / "paper_form").glob(pattern)):
            result = load_result(d)
            found[int(d.name.rsplit("-s", 1)[1])] = (result["emergence_step"], round(result["best_accuracy"], 3))
        assert len(found) == 3, (prefix, variant)
        return found

    assert runs("paper_form", "key_only-g1") == {0: (None, 0.789), 1: (1650, 0.814), 2: (1450, 0.812)}
    pre = sorted(step for step, _ in runs("paper_form", "key_only-g1-pre_rope").values())
    symmetric = [step for v in ("symmetric-g1", "symmetric-g1-pre_rope") for step, _ in runs("paper_form_lr1e-3", v).values()]
    assert (pre[0], pre[-1]) == (800, 3100) and (min(symmetric), max(symmetric)) == (1000, 2150)
    with (ROOT / "docs" / "results" / "paper_form" / "paper_form-induction-single-L1d128h4-key_only-g1-stop2-s0"
          / "metrics.jsonl").open() as lines:
        curve = [row for row in map(json.loads, lines) if "eval_accuracy" in row]
    assert min(row["step"] for row in curve if row["eval_accuracy"] > 0.6) > 4000 and curve[-1]["step"] == 5000
    text = " ".join((ROOT / "docs" / "paper_form.md").read_text().split())
    for claim in ("seeds 1 and 2 at steps 1,650 and 1,450; seed 0 climbs slowly and ends at 0.789 at step 5,000",
                  "before it on all three (steps 800–3,100)", "symmetric from step 1,000–2,150",
                  "takes more than 4,000 steps to pass 0.6"):
        assert claim in text, claim


def test_the_pilot_table_in_the_docs_is_what_its_saved_runs_give():
    from pathlib import Path

    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    saved_runs = sorted((root / "docs" / "results" / "text_pilot").iterdir())
    results = {d.name: load_result(d) for d in saved_runs}
    assert len(results) >= len(PILOT_RUNS) and all(r is not None for r in results.values())
    table = STUDIES["text_pilot"].table(results)
    docs = (root / "docs" / "text.md").read_text()
    assert all(line in docs for line in table), "\n".join(table)


def test_the_pilots_best_prefix_matching_score_at_context_256_rises_early_then_sinks_as_the_pages_say():
    """The pilot table gives the best head at the end; along the run it was higher, which the pages say too."""
    from pathlib import Path

    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    peaks, ends, when = [], [], []
    for d in sorted((root / "docs" / "results" / "text_pilot").iterdir()):
        result = load_result(d)
        if result["config"]["task"]["seq_len"] != 256:
            continue
        scores = [(max(max(layer) for layer in row["prefix_matching_score"]), row["tokens"]) for row in result["history"]
                  if row.get("prefix_matching_score") is not None]
        peak, at = max(scores)
        peaks.append(round(peak, 3))
        when.append(at)
        ends.append(round(scores[-1][0], 3))
    assert len(peaks) == 4 and (min(peaks), max(peaks)) == (0.009, 0.011) and max(ends) == 0.004
    assert 1.95e6 <= min(when) and max(when) <= 2.55e6  # 2.0M and 2.5M tokens, rounded
    text = (root / "docs" / "text.md").read_text()
    assert "to 0.009–0.011 by 2.0–2.5M tokens, sinks below it, to\n0.004 at the end" in text
    for page in ("README.md", "docs/reproduction.md"):
        assert "best prefix-matching score 0.004 at the end, 0.011 at most" in (root / page).read_text(), page


def test_the_pages_say_how_far_the_emergence_law_overshoots_the_context_64_pilots_as_their_saved_runs_give():
    """The pages said the law's constant is "30% high"; the phase change comes at 0.687 of the law's tokens at both
    batch sizes, so the law's constant is 1/0.687 = 1.46 times what fits: 46% high."""
    from pathlib import Path

    from psattn.experiments.phase_change import detect_phase_change
    from psattn.experiments.studies.text_pilot import law_tokens
    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    fractions = []
    for run_dir in sorted((root / "docs" / "results" / "text_pilot").glob("*-c64-*")):
        result = load_result(run_dir)
        batch, context = result["config"]["train"]["batch_size"], result["config"]["task"]["seq_len"]
        fractions.append(detect_phase_change(result["history"]).tokens / law_tokens(batch, context))
    assert len(fractions) == 2 and {round(f, 2) for f in fractions} == {0.69}
    assert {round(100 * (1 / f - 1)) for f in fractions} == {46}
    for page in ("README.md", "docs/reproduction.md"):
        assert "its constant is 46% high: the phase change comes at 0.69 of its prediction" in (root / page).read_text()
    text = " ".join((root / "docs" / "text.md").read_text().split())
    assert "as at 8 rows (0.69 at both)" in text and "its constant is 46% high" in text


def test_the_two_layer_table_in_the_docs_is_what_its_saved_runs_give():
    from pathlib import Path

    from psattn.training.run_dir import load_result

    root = Path(__file__).resolve().parents[2]
    results = {d.name: load_result(d) for d in sorted((root / "docs" / "results" / "two_layer").iterdir())}
    assert len(results) == len(STUDIES["two_layer"].plan("quick")) and all(r is not None for r in results.values())
    table = STUDIES["two_layer"].table(results)
    assert all(line in (root / "docs" / "text.md").read_text() for line in table), "\n".join(table)


def test_the_two_layer_page_gives_the_training_minutes_of_its_saved_runs():
    """text.md said the sweep took 90 training-minutes; that was before the four runs with an MLP in the second
    layer alone (12 more): the saved runs took 101."""
    from psattn.training.run_dir import load_result

    seconds = {d.name: load_result(d)["seconds"] for d in sorted((ROOT / "docs" / "results" / "two_layer").iterdir())}
    later = [s for name, s in seconds.items() if "-mlp2-" in name]
    first = [s for name, s in seconds.items() if "-mlp2-" not in name]
    assert (len(first), len(later)) == (16, 4)
    minutes = [round(sum(s) / 60) for s in (list(seconds.values()), first, later)]
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    assert minutes == [101, 90, 12] and ("(101 training-minutes: 90 for the 16 runs first declared, about 45 minutes on "
                                         "2 cores, and 12 for the four with an MLP in the second layer alone") in page


def test_the_parameter_counts_the_readme_gives_for_one_and_two_layers():
    from psattn.experiments.configs import small_config
    from psattn.training.run_dir import build_model

    def count(**kw):
        return build_model(small_config("baseline", 0.0, **kw)).num_parameters()
    assert (count(), count(n_layers=2), count(n_layers=2, mlp=[False, True]), count(n_layers=2, mlp=False)) == (
        206_208, 403_968, 272_000, 140_032)


@pytest.mark.parametrize("page", ["paper_form.md", "text.md"])
def test_the_plot_commands_the_docs_quote_redraw_their_figures_from_the_saved_runs(page, tmp_path):
    import glob
    import re
    import shlex
    from pathlib import Path

    from psattn.cli import main

    docs = Path(__file__).resolve().parents[2] / "docs"
    commands = re.findall(r"\(`(psattn plot [^`]*)`", (docs / page).read_text())
    assert commands
    for command in commands:  # text.md's had no --out, which several run directories need: it exited 2
        argv = shlex.split(command.replace("\n", " "))[1:]
        assert "--out" in argv, f"{command}: psattn plot needs --out with several run directories"
        out = argv.index("--out")
        figure, argv[out + 1] = docs.parent / argv[out + 1], str(tmp_path / Path(argv[out + 1]).name)
        argv = [p for a in argv for p in (sorted(glob.glob(str(docs.parent / a))) if "docs/results" in a else [a])]
        assert main(argv) == 0, command
        assert (tmp_path / figure.name).read_bytes()[16:24] == figure.read_bytes()[16:24]  # the PNG's width and height


def test_random_tokens_loss_sits_above_ln_v_on_every_saved_text_run_as_the_metrics_section_says():
    """The Metrics section said "the report" reads its verdict off the passage, for random tokens' loss sits above ln V;
    that is the reproduce report: text_phase and text_mlp read first copying off the random tokens' copy gain."""
    from psattn.training.run_dir import load_result

    runs = sorted(ROOT.glob("docs/results/text_*/*"))
    assert len(runs) == 43  # text_corpora, text_mlp, text_phase, text_pilot and text_seeds
    for run_dir in runs:
        result = load_result(run_dir)
        ln_v = math.log(result["config"]["model"]["vocab_size"])
        assert all(row["random_first_loss"] > ln_v for row in result["history"][1:]), run_dir.name
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    assert ("the `psattn reproduce` report shows their copy gain but reads its verdict off the passage, while "
            "`text_phase` and `text_mlp` read first copying off their copy gain") in page


def test_the_two_layer_head_scores_the_page_quotes_are_what_its_saved_runs_give():
    """docs/text.md's account of the heads of two plain layers with and without MLPs (seed 0 for the MLPs, whose
    figure it shows; both seeds at step 500 without), read off the saved runs."""
    from psattn.training.run_dir import load_result

    def steps(name):
        return {r["step"]: r for r in load_result(ROOT / "docs" / "results" / "two_layer" / name)["history"]}

    def heads(row, key, layer):
        return [round(x, 2) for x in row[key][layer]]

    mlps = steps("two_layer-induction-L2d128h4-baseline-stop2-s0")
    assert (min(heads(mlps[100], "previous_token_score", 1)), max(heads(mlps[100], "previous_token_score", 1))) == (0.81, 0.89)
    assert sorted(set(heads(mlps[300], "previous_token_score", 1))) == [0.96, 0.97]
    assert set(heads(mlps[1500], "previous_token_score", 1)) == {1.0} and round(mlps[1500]["eval_accuracy"], 2) == 0.10
    assert max(max(heads(r, "previous_token_score", 0)) for r in mlps.values()) == 0.08
    plain = [steps(f"two_layer-induction-L2d128h4-attnonly-baseline-stop2-s{seed}") for seed in (0, 1)]
    assert heads(plain[0][100], "previous_token_score", 1) == [0.89, 0.26, 0.72, 0.66]
    assert [max(heads(p[500], "previous_token_score", 0)) for p in plain] == [0.32, 0.57]
    assert [max(heads(p[500], "induction_score", 1)) for p in plain] == [0.71, 0.73]
    assert [round(p[400]["eval_accuracy"], 2) for p in plain] == [0.10, 0.10]
    assert [round(p[500]["eval_accuracy"], 2) for p in plain] == [0.84, 0.92]
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    for claim in ("all four second-layer heads become previous-token heads (0.81–0.89; 0.96–0.97 by step 300, 1.00 at "
                  "step 1500) while the first layer's stay uniform (0.08)", "(0.89, 0.26, 0.72, 0.66 at step 100)",
                  "(0.32 and 0.57 in the two seeds)", "induction heads (0.71, 0.73), and accuracy jumps from 0.10 to 0.84 "
                  "and 0.92"):
        assert claim in page, claim


def test_the_context_64_pilots_prose_is_what_their_saved_runs_give():
    """docs/text.md's account of how the circuit forms at context 64 (8 and 2 rows a step), read off the saved runs."""
    from psattn.experiments.phase_change import best_head, random_copy_gain
    from psattn.training.run_dir import load_result

    def rows(batch):
        run = ROOT / "docs" / "results" / "text_pilot" / f"text_pilot-python-stdlib-bpe1024-c64-L2d128h4-attnonly-b{batch}-s0"
        return {round(r["tokens"] / 1e6, 1): r for r in load_result(run)["history"]}

    def prefix(r):
        return round(best_head(r, "prefix_matching_score"), 2)

    def previous(r, layer):
        return round(max(r["previous_token_score"][layer]), 2)

    eight = rows(8)
    assert prefix(eight[0.0]) == 0.02 and {prefix(r) for t, r in eight.items() if 0 < t <= 5.0} == {0.03, 0.04}
    assert (prefix(eight[7.8]), prefix(eight[10.6])) == (0.11, 0.25)
    assert min(prefix(r) for t, r in eight.items() if t >= 12) >= 0.27
    assert (previous(eight[7.8], 0), previous(eight[12.0], 0)) == (0.16, 0.43)
    before = [random_copy_gain(r) for t, r in eight.items() if 0 < t < 7.8]
    assert (round(min(before), 2), round(max(before), 2)) == (0.03, 0.13)
    assert (round(random_copy_gain(eight[7.8]), 2), round(random_copy_gain(eight[10.6]), 2)) == (0.19, 0.71)
    assert round(eight[7.8]["seconds"] / 60) == 5
    two = rows(2)
    assert max(prefix(r) for t, r in two.items() if t < 2.6) <= 0.04 < 0.06 < best_head(two[3.2], "prefix_matching_score")
    assert prefix(two[6.0]) == 0.35
    assert (previous(two[3.2], 0), previous(two[7.8], 0)) == (0.22, 0.77)
    assert round(two[3.9]["seconds"] / 60) == 17
    page = " ".join((ROOT / "docs" / "text.md").read_text().split())
    for claim in ("at the uniform level (0.02) before training, stays between 0.03 and 0.04 until about 5M tokens",
                  "crosses 0.1 at 7.8M and reaches 0.25 by 10.6M and about 0.3 from 12M on",
                  "rises from 0.16 (7.8M) to 0.43 (12M)", "goes from 0.03–0.13 before to 0.19 at 7.8M and 0.71 at 10.6M",
                  "leaves the uniform level at about 3M tokens and reaches 0.35 by 6M",
                  "the first layer's previous-token score rises from about 0.22 to 0.77",
                  "(17 training-minutes to the phase change against 5)"):
        assert claim in page, claim
