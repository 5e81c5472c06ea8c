import contextlib
import dataclasses
import itertools
import json
import math
import os
import signal
import threading
import time

import pytest
import torch

from helpers import Ended, default_action_raises, file_size_limit, random_model, tiny_config
from psattn.experiments import induction_report, summaries
from psattn.experiments.configs import small_config
from psattn.experiments.declared import STUDIES
from psattn.experiments.reproduce import reproduce
from psattn.experiments.studies import induction
from psattn.experiments.studies import text as text_exp
from psattn.experiments.study import MODES
from psattn.experiments.sweep import _run_in_order, _run_in_pool, run_sweep, train_unless_finished, unique_configs
from psattn.models.heads import head_scores, repeat_scores, repeated_tokens
from psattn.ops.hooks import capture
from psattn.theory import report as theory_report
from psattn.training.run_dir import load_result
from psattn.training.signals import WorkerLost


def tiny(config, steps=4):
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, steps=steps, eval_every=2, eval_size=32, batch_size=8))


@pytest.mark.parametrize("mode", MODES)
def test_declared_experiments(mode):
    seen = {}
    for name, study in STUDIES.items():
        configs = study.plan(mode)
        assert len({c.name for c in configs}) == len(configs), name
        for c in configs:  # a run two experiments share is one run: same name, same config
            assert seen.setdefault(c.name, c) == c, c.name
    forms = {(c.task.form, c.model.init) for c in induction.init_sensitivity(mode)}
    assert {f for f, _ in forms} == {"all_positions", "single"} and {"scaled", "torch", 0.02} <= {i for _, i in forms}
    controls = induction.negative_controls(mode)
    assert {c.task.__class__.__name__ for c in controls} == {"RandomOffsetConfig", "MultiHopConfig"}
    variants = {(c.model.attention.variant, c.model.attention.placement) for c in induction.variant_table(mode)}
    expected = {("key_only", "pre_rope"), ("smeared_keys", "post_rope"), ("canon", "post_rope"), ("query_only", "post_rope")}
    assert expected <= variants
    single = {c.model.attention.variant for c in induction.variant_table(mode) if c.task.form == "single"}
    key_lag = {v for v, _ in induction.KEY_LAG_ROWS}
    assert single & key_lag == (key_lag if mode == "full" else set())  # the quick plan's single form has none
    lag = {c.name: c for c in induction.key_lag(mode)}  # ... and `psattn sweep key_lag` trains them, as the table would
    assert {(c.task.form, c.model.attention.variant) for c in lag.values()} == {(f, v) for f in induction.FORMS for v in key_lag}
    table = {c.name for c in induction.variant_table(mode)}
    assert {n for n in lag if n not in table} == {n for n, c in lag.items() if c.task.form == "single" and mode == "quick"}
    two = {(c.task.form, c.model.attention.variant, c.model.mlp) for c in induction.variant_table(mode) if c.model.n_layers == 2}
    forms = () if mode == "quick" else ("all_positions", "single")
    assert two == {(f, v, m) for f in forms for v in ("baseline", "key_only") for m in (True, False)}
    with pytest.raises(ValueError, match="unknown mode"):
        induction.gamma_sweep("medium")


def test_the_declared_experiments_of_an_unknown_mode_are_refused_naming_the_modes():
    """It raised KeyError: 'fast'."""
    with pytest.raises(ValueError, match=r"unknown mode 'fast'; expected one of \('quick', 'full'\)"):
        induction_report.declared_experiments("fast")
    assert set(induction_report.declared_experiments("quick")) == set(STUDIES)


def test_every_declared_study_has_one_protocol_plans_per_mode_and_says_when_it_has_no_table_or_verdict():
    from psattn.experiments.study import Study
    from psattn.training.config import RunConfig

    for name, study in STUDIES.items():
        assert type(study) is Study and study.name == name
        assert (study.title is None) == (study.table is None), name
        for mode in MODES:
            configs = study.plan(mode)
            assert configs and all(isinstance(c, RunConfig) for c in configs), (name, mode)
        with pytest.raises(ValueError, match=r"unknown mode 'medium'; expected one of \('quick', 'full'\)"):
            study.plan("medium")
    assert all(study.table is not None for study in STUDIES.values())  # every study tables its runs
    assert sorted(name for name, study in STUDIES.items() if study.verdict is not None) == [
        "critical_gamma", "critical_gamma_head_dim", "critical_gamma_width", "paper_scale", "text_corpora", "text_mlp",
        "text_phase", "text_scale"]
    assert sorted(name for name, study in STUDIES.items() if study.report is not None) == [
        "gamma_depth", "init_sensitivity", "text_mlp", "text_phase", "text_pilot"]


def test_a_study_tables_and_judges_its_finished_runs_alone():
    """The critical-gamma study's table and verdict from saved results, no run directory needed."""
    study = STUDIES["critical_gamma"]
    results = {}
    for heads, crit in ((4, 0.2), (2, 0.2)):
        for gamma in (0.1, 0.2):
            config = small_config("symmetric", gamma, n_heads=heads, early_stop_evals=2)
            emerged = gamma >= crit
            results[config.name] = {"config": config.to_dict(), "emergence_step": 100 if emerged else None,
                                    "final_accuracy": 0.9 if emerged else 0.1, "best_accuracy": 0.9 if emerged else 0.1}
    assert "d_k 32, gamma 0.2: 1/1 succeed, mean emergence step 100" in "\n".join(study.table(results))
    verdict = study.verdict(results)
    assert verdict[:2] == ["d_k 32: critical gamma 0.2", "d_k 64: critical gamma 0.2"]
    assert verdict[2].startswith("exponent of gamma_c against d_k: +0.00 (least squares on 2 bracketed values)")


def test_every_experiment_the_reproduction_leaves_out_is_one_psattn_sweep_runs():
    from psattn.cli import build_parser
    from psattn.experiments.induction_report import LEFT_OUT

    for mode, names in LEFT_OUT.items():
        assert set(names) <= set(STUDIES), mode
    sweep = build_parser()
    for name in LEFT_OUT["quick"]:
        assert sweep.parse_args(["sweep", name, "--quick"]).experiment == name


def test_gamma_zero_runs_are_the_baseline_and_shared():
    assert small_config("symmetric", 0.0).name == small_config("baseline", 0.0).name
    sweep_names = {c.name for c in induction.gamma_sweep("quick")}
    table_names = {c.name for c in induction.variant_table("quick")}
    assert small_config("baseline", 0.0, steps=600, seed=1).name in sweep_names & table_names


def test_quick_rows_that_report_success_stop_once_it_is_decided():
    primary = {v for v, _, _, is_primary in induction.VARIANT_ROWS if is_primary}
    for c in induction.variant_table("quick"):
        decided = (c.model.attention.variant not in primary or c.model.attention.placement != "post_rope"
                   or c.model.n_layers == 2)
        assert c.train.early_stop == decided and c.train.early_stop_evals == (2 if decided else 1), c.name
        assert ("-stop2-" in c.name) == decided
    assert all(c.train.early_stop for name in ("critical_gamma", "mqar") for c in STUDIES[name].plan("quick"))
    assert not any(c.train.early_stop for name in ("gamma_sweep", "controls", "sizes") for c in STUDIES[name].plan("quick"))
    table = {c.name: c for c in induction.variant_table("quick")}
    for c in induction.init_sensitivity("quick"):  # default-init rows are the variant table's own full-budget runs
        assert (c.name in table) == (c.model.init == "scaled") and c.train.early_stop == (c.model.init != "scaled")
    # the CPU plans' full-scale counterparts train to their budgets; paper_scale stops at emergence, as the
    # paper's phase-transition runs do (its cap decides the plain model)
    assert not any(c.train.early_stop for name, study in STUDIES.items() if name != "paper_scale" for c in study.plan("full"))
    assert all(c.train.early_stop for c in STUDIES["paper_scale"].plan("full"))


def test_the_quick_sensitivity_table_runs_the_plain_layer_at_the_default_init_alone():
    rows = {(c.model.attention.variant, c.model.init, c.task.form) for c in induction.init_sensitivity("quick")}
    assert {(i, f) for v, i, f in rows if v == "baseline"} == {("scaled", "all_positions"), ("scaled", "single")}
    assert {(i, f) for v, i, f in rows if v == "key_only"} == {(i, f) for i in (0.02, "scaled", "torch")
                                                               for f in ("all_positions", "single")}
    full = {(c.model.attention.variant, c.model.init) for c in induction.init_sensitivity("full")}
    assert {("baseline", 0.02), ("baseline", "torch")} <= full


def test_one_name_for_two_configs_is_refused():
    a, b = small_config("key_only", 1.0), small_config("key_only", 1.0, steps=7)
    assert unique_configs([a, a, dataclasses.replace(b, name="other")]) == [a, dataclasses.replace(b, name="other")]
    with pytest.raises(ValueError, match="two different configs are named"):
        unique_configs([a, b])


def test_sweep_runs_in_parallel_and_skips_finished(tmp_path):
    configs = [tiny(small_config("key_only", 1.0, seed=s, d_model=32, n_heads=2)) for s in (0, 1)]
    results = run_sweep(configs, tmp_path, workers=2, progress=False)
    assert set(results) == {c.name for c in configs}
    assert all(r["steps"] == 4 for r in results.values())
    stamp = (tmp_path / configs[0].name / "result.json").stat().st_mtime_ns
    again = run_sweep(configs, tmp_path, workers=2, progress=False)
    assert again == results
    assert (tmp_path / configs[0].name / "result.json").stat().st_mtime_ns == stamp  # not rerun
    assert load_result(tmp_path / "missing") is None
    with pytest.raises(ValueError, match="unique"):
        run_sweep(configs + configs[:1], tmp_path)


JUNK_VALUES = json.dumps({"final_accuracy": "x", "best_accuracy": 0.5, "emergence_step": None, "steps": 4,
                          "history": [{"step": 0}]})


@pytest.mark.parametrize("content", ["{garbage", "[1, 2]", "{}", '{"final_accuracy": 1.0}', JUNK_VALUES,
                                     JUNK_VALUES.replace('"steps": 4', '"steps": -1').replace('"x"', "0.5"),
                                     JUNK_VALUES.replace('"x"', "0.5").replace('[{"step": 0}]', '["row"]')])
def test_a_result_json_that_is_not_a_result_is_finished_again(tmp_path, content, caplog):
    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    first = run_sweep([config], tmp_path, workers=1, progress=False)
    (tmp_path / config.name / "result.json").write_text(content)
    assert load_result(tmp_path / config.name) is None and "is not a run result" in caplog.text
    again = run_sweep([config], tmp_path, workers=1, progress=False)  # resumed at its last step: no training
    assert again[config.name]["history"] == first[config.name]["history"]


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", "", "/tmp/abs"])
def test_a_sweep_writes_only_inside_its_out_dir(tmp_path, name):
    config = dataclasses.replace(tiny(small_config("key_only", 1.0, d_model=32, n_heads=2)), name=name)
    with pytest.raises(ValueError, match="not a plain folder name"):
        run_sweep([config], tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "outside").exists() and not (tmp_path / "out").exists()


def test_a_sweep_of_something_other_than_a_list_of_run_configs_is_a_type_error(tmp_path):
    """One config was "'RunConfig' object is not iterable", a config's dict "'dict' object has no attribute
    'name'"; a bad workers count was refused only after every run's result had been read."""
    from psattn.experiments.sweep import run_within

    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    for sweep in (lambda configs: run_sweep(configs, tmp_path, workers=1, progress=False),
                  lambda configs: run_within(configs, tmp_path, 10, progress=False)):
        with pytest.raises(TypeError, match=r"configs must be a list of RunConfig \(a sweep of one run is \[config\]\), "
                                            "got RunConfig"):
            sweep(config)
        with pytest.raises(TypeError, match="configs must be a list of RunConfig .*, got a list holding dict"):
            sweep([config, config.to_dict()])
    with pytest.raises(ValueError, match="workers must be a positive integer, got 0"):
        run_sweep([config], tmp_path / "out", workers=0)
    assert not list(tmp_path.iterdir())


def test_a_sweep_refuses_a_run_it_cannot_resume_with_a_sweeps_way_on(tmp_path):
    """A sweep has no --restart, but a run of it that could not be resumed (here a checkpoint that does not read) was
    refused with psattn train's advice, "(psattn train --restart)"; in order, in a worker (whose error is pickled
    back) and within a time limit alike, it now says to delete the run's folder or write elsewhere."""
    from psattn.experiments.sweep import run_within
    from psattn.training.trainer import train

    config = dataclasses.replace(tiny_config(8), name="cut")
    train(config, tmp_path / "cut", time_limit_s=0)  # a checkpoint at step 1, no result
    (tmp_path / "cut" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    way = f"; move it away, or delete {tmp_path / 'cut'} to train it anew when the sweep runs again, or write to " \
          "another output directory"
    for sweep in (lambda: run_sweep([config], tmp_path, workers=1, progress=False),
                  lambda: _run_in_pool([config], tmp_path, 1, progress=False),
                  lambda: run_within([config], tmp_path, 60, progress=False)):
        with pytest.raises(ValueError, match="is not a readable psattn checkpoint") as refused:
            sweep()
        assert str(refused.value).endswith(way) and "--restart" not in str(refused.value), refused.value


def fake_result(variant, gamma, seed, final, emergence, task="induction"):
    return {
        "final_accuracy": final, "best_accuracy": final, "emergence_step": emergence,
        "config": {"task": {"name": task}, "train": {"threshold": 0.9, "steps": 100, "seed": seed},
                   "model": {"d_model": 8, "n_layers": 1,
                             "attention": {"variant": variant, "gamma": gamma, "placement": "post_rope"}}},
    }


def test_summaries_and_best_gamma():
    results = {
        "a": fake_result("symmetric", 1.0, 0, 0.95, 40),
        "b": fake_result("symmetric", 1.0, 1, 0.50, None),
        "c": fake_result("baseline", 0.0, 0, 0.10, None),
    }
    rows = {r["variant"]: r for r in summaries.summarise_by(results, summaries.variant_key)}
    assert rows["symmetric"]["success_rate"] == 0.5 and rows["symmetric"]["mean_emergence_step"] == 40
    assert rows["symmetric"]["mean_final_accuracy"] == pytest.approx(0.725)
    assert rows["baseline"]["mean_emergence_step"] is None
    controls = [{"gamma": 0.0, "mean_final_accuracy": 1.0, "mean_emergence_step": 200},
                {"gamma": 1.0, "mean_final_accuracy": 1.0, "mean_emergence_step": 150},
                {"gamma": 0.5, "mean_final_accuracy": 0.3, "mean_emergence_step": None}]
    assert summaries.best_gamma(controls) == 1.0
    controls[1]["mean_emergence_step"] = 200
    assert summaries.best_gamma(controls) == 0.0
    noise = [{"gamma": 0.0, "mean_final_accuracy": 0.142, "mean_emergence_step": None},
             {"gamma": 0.5, "mean_final_accuracy": 0.143, "mean_emergence_step": None}]
    assert summaries.best_gamma(noise) == 0.0  # a 0.001 difference is noise


def test_best_gamma_of_runs_that_stop_on_success_ranks_successes_then_emergence_not_the_accuracy_at_the_stop():
    def row(gamma, accuracy, step, successes=2):
        return {"gamma": gamma, "mean_final_accuracy": accuracy, "mean_emergence_step": step,
                "successes": successes, "seeds": 2, "stops_early": True}

    # gamma 2 stopped at 0.852 and gamma 1 at 0.867: the earlier emergence (gamma 2) is the better one
    assert summaries.best_gamma([row(1.0, 0.867, 100), row(2.0, 0.852, 50), row(4.0, 0.855, 50)]) == 2.0
    # one failing seed loses to two succeeding ones, however early its other seed emerged
    assert summaries.best_gamma([row(0.5, 0.6, 20, successes=1), row(1.0, 0.85, 90)]) == 1.0
    assert summaries.best_gamma([row(0.0, 0.1, None, successes=0), row(1.0, 0.1, None, successes=0)]) == 0.0


def test_critical_pairs_take_the_smallest_gamma_that_always_succeeds():
    rows = [{"d_k": 16, "gamma": 0.5, "success_rate": 0.5}, {"d_k": 16, "gamma": 1.0, "success_rate": 1.0},
            {"d_k": 16, "gamma": 2.0, "success_rate": 1.0}, {"d_k": 64, "gamma": 0.5, "success_rate": 0.0},
            {"d_k": 8, "gamma": 0.5, "success_rate": 1.0}, {"d_k": 8, "gamma": 1.0, "success_rate": 1.0}]
    assert summaries.critical_pairs(rows) == [(8, None, "<= 0.5"), (16, 1.0, "1"), (64, None, "> 0.5")]
    assert summaries.critical_brackets(rows) == [(8, 0.0, 0.5), (16, 0.5, 1.0), (64, 0.5, math.inf)]
    with_plain = rows + [{"d_k": 8, "gamma": 0.0, "success_rate": 0.0}, {"d_k": 64, "gamma": 0.0, "success_rate": 1.0}]
    assert summaries.critical_pairs(with_plain) == [(8, None, "<= 0.5"), (16, 1.0, "1"), (64, None, "none: gamma 0 succeeds")]
    assert summaries.critical_brackets(with_plain) == [(8, 0.0, 0.5), (16, 0.5, 1.0)]
    width = induction.critical_gamma_width("quick")
    assert {(c.model.n_heads, c.model.head_dim) for c in width} == {(4, 16), (4, 32), (4, 64)}
    head_dim = induction.critical_gamma_head_dim("quick")
    assert {(c.model.d_model, c.model.n_heads, c.model.head_dim) for c in head_dim} == {(128, 4, 16), (128, 4, 32), (128, 4, 64)}
    assert {c.name for c in head_dim if c.model.head_dim == 32} <= {c.name for c in width}  # the default head: shared
    shared = {c.name for c in width} & {c.name for c in induction.critical_gamma("quick")}
    assert {c.model.head_dim for c in width if c.name in shared} == {32}  # d_model 128, 4 heads: one run, both designs
    names = {c.name for c in induction.critical_gamma("quick")}
    assert {c.model.head_dim for c in induction.critical_gamma("quick")} == {16, 32, 64}
    steps = {(c.task.form, c.train.steps) for c in induction.variant_table("quick")}
    assert steps == {("all_positions", 600), ("all_positions", 400), ("single", 800), ("single", 533)}
    assert {c.train.batch_size for c in induction.variant_table("full") if c.model.n_layers == 2} == {64}
    assert len(names) == len(induction.critical_gamma("quick"))


def test_sweep_refuses_a_directory_holding_another_config(tmp_path):
    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    run_sweep([config], tmp_path, workers=1, progress=False)
    other = dataclasses.replace(config, train=dataclasses.replace(config.train, lr=1e-4))
    expected = r"different config .*differs in train.lr \(saved 0.003, now 0.0001\).*delete that directory"
    with pytest.raises(ValueError, match=expected):
        run_sweep([other], tmp_path, workers=1, progress=False)


def test_a_run_another_sweep_finished_meanwhile_under_another_config_is_refused_not_taken(tmp_path):
    """Two sweeps at once whose plans give one name two configs: the second passed its check before the first wrote
    the run, waited on its lock and took the first's result as its own (asked 20 steps, got a 200-step result)."""
    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    run_sweep([config], tmp_path, workers=1, progress=False)  # the first sweep, done while the second waited
    other = dataclasses.replace(config, train=dataclasses.replace(config.train, steps=2))
    with pytest.raises(ValueError, match=r"different config .*differs in train.steps \(saved 4, now 2\)"):
        train_unless_finished(other, tmp_path / config.name)
    with pytest.raises(ValueError, match=r"different config .*differs in train.steps \(saved 4, now 2\)"):
        _run_in_order([other], tmp_path, time.monotonic() + 60, progress=False)


def test_a_sweep_continues_its_runs_where_they_run_otherwise(tmp_path):
    config = tiny(small_config("key_only", 1.0, d_model=32, n_heads=2))
    first = run_sweep([config], tmp_path, workers=1, progress=False)
    elsewhere = dataclasses.replace(config, train=dataclasses.replace(config.train, device="cpu", checkpoint_every=7))
    again = run_sweep([elsewhere], tmp_path, workers=1, progress=False)  # begun with device "auto", say on a GPU
    assert again[config.name]["steps"] == first[config.name]["steps"]


def test_head_scores_read_the_right_positions():
    model = random_model("key_only", n_kv_heads=4).float()
    model.config.vocab_size = 37
    scores = head_scores(model, batch=3, half=5, seed=1)
    tokens = repeated_tokens(3, 5, 37, torch.Generator().manual_seed(1))
    with capture(model, "blocks.1.attn.hook_pattern") as seen:
        model(tokens)
    pattern = seen["blocks.1.attn.hook_pattern"]  # (B, H, T, T)
    for h in range(4):
        prev = sum(pattern[b, h, t, t - 1] for b in range(3) for t in range(1, 11)) / 30
        ind = sum(pattern[b, h, t, t - 4] for b in range(3) for t in range(6, 11)) / 15
        assert scores.previous_token[1, h].item() == pytest.approx(prev.item(), abs=1e-5)
        assert scores.induction[1, h].item() == pytest.approx(ind.item(), abs=1e-5)


def test_head_scores_of_a_bfloat16_model_are_not_rounded_to_bfloat16():
    """A bfloat16 mean has 8 bits: an induction score of 0.09998 read 0.1001, over the phase-change threshold."""
    from psattn import DecoderLM, ModelConfig
    from psattn.experiments.phase_change import THRESHOLD
    from psattn.ops.hooks import patch

    half = 8
    rows = repeated_tokens(4, half, 50, torch.Generator().manual_seed(1))  # (4, 17): [BOS] + R + R
    pattern = torch.zeros(17, 17)
    pattern[:, 0] = 1.0
    for i, t in enumerate(range(1 + half, 1 + 2 * half)):  # on the token after the earlier occurrence: 0.0996 or 0.1001
        pattern[t, t - half + 1] = 0.099609375 if i % 4 == 0 else 0.10009765625  # both exact in bfloat16
        pattern[t, 0] = 1 - pattern[t, t - half + 1]
    model = DecoderLM(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=2)).to(torch.bfloat16)
    with patch(model, {"blocks.0.attn.hook_pattern": lambda x: pattern.to(x).expand_as(x).clone()}):
        scores = repeat_scores(model, rows, half, offset=1)
    exact = (0.099609375 * 2 + 0.10009765625 * 6) / 8
    assert scores.induction.tolist() == [[pytest.approx(exact, abs=1e-7)] * 2] and exact < THRESHOLD
    assert scores.previous_token.dtype == scores.patterns.dtype == torch.float32


@pytest.mark.slow
def test_reproduce_end_to_end_on_a_tiny_plan(tmp_path, monkeypatch, certificates_run_once):
    quick = induction.PLANS["quick"]
    tiny_plan = dataclasses.replace(
        quick, training=dataclasses.replace(quick.training, steps=4, extra_steps=4, seeds=(0,), single_steps=4),
        grids=dataclasses.replace(quick.grids, control_steps=4, sizes=({"d_model": 32, "n_heads": 2},), gammas=(0.0, 1.0)),
        critical=dataclasses.replace(quick.critical, head_counts=(4, 2), head_count_gammas=(1.0,), gammas=(1.0,),
                                     widths=(32, 64), head_dims=(8, 16)))
    monkeypatch.setitem(induction.PLANS, "quick", tiny_plan)
    monkeypatch.setitem(text_exp.TEXT_PLANS, "quick", dataclasses.replace(
        text_exp.TEXT_PLANS["quick"], steps=4, eval_every=2, seq_len=32, d_model=32, eval_size=8, vocab_size=512))
    monkeypatch.setattr("psattn.experiments.configs.EVAL_SIZE", 64)  # held-out rows of each run: 4 steps learn nothing
    timed = induction_report.trainer_vs_bare_loop  # 2 steps once, not 30 twice: the report needs a ratio, not its accuracy
    monkeypatch.setattr(induction_report, "trainer_vs_bare_loop", lambda config, **_: timed(config, steps=2, repeats=1))
    # the theory's grids as its own report test has them (tests/theory/test_cli.py): the section, not its figures
    monkeypatch.setattr(theory_report, "GRID_DK", [8, 64, 1024])
    monkeypatch.setattr(theory_report, "GRID_T", [16, 256])
    monkeypatch.setattr(theory_report, "SCALING_DK", [64, 1024, 4096, 16384])
    report = reproduce(tmp_path, "quick", workers=2, progress=False)
    text = report.read_text()
    lines = text.splitlines()
    assert not [line for before, line in itertools.pairwise(lines) if line.startswith("#") and before.strip()]
    for needle in ("This invocation trained", "Critical gamma against the head dimension", "fixed width",
                   "fixed head count", "wider or narrower heads", "`psattn sweep critical_gamma --quick`",
                   "no critical-γ grid was given to the report", "(MQAR)", "Variant table",
                   "Gamma sweep", "random_offset", "multihop", "Size scan", "Trainer speed", "Mean-field", "## Theory",
                   "## Real text", "ICL score",
                   "Copy gain on a repeated held-out passage", "standard library", "Samples", "On a device",
                   "ms per token", "INT8 dynamic", "INT8 static", "faithful to fp32", "No two-layer rows in this plan",
                   "Single-answer form",
                   "Full-sequence form",
                   "Sensitivity to the initialisation", "torch",
                   "0.949", "717", "| part | wall minutes |", "| training |", "longest:",
                   "stops once held-out accuracy has stayed at the threshold for 2 evaluations in a row"):
        assert needle in text, needle
    for figure in ("gamma_sweep", "curves", "curves_single", "head_scores", "attention_patterns", "text_curves",
                   "text_position_loss", "text_head_scores"):
        assert (tmp_path / "figures" / f"{figure}.png").stat().st_size > 1000
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["induction"]["trainer_speed"]["ratio"] > 0
    timings = data["timings"]
    beside = (os.cpu_count() or 1) > 1  # the mean-field part runs in its own process, beside the theory
    assert set(timings["seconds"]) >= {"training", "theory and certificates",
                                       "mean field (beside the theory)" if beside else "mean field"}
    assert timings["runs"]["trained_now"] == len(timings["runs"]["seconds"]) and timings["runs"]["reused"] == 0
    assert data["meanfield"]["passed"] is True
    assert {r["form"] for r in data["induction"]["variants"]} == {"all_positions", "single"}
    assert data["induction"]["init_sensitivity"] == [] and "`psattn sweep init_sensitivity --quick` trains" in text
    assert "No learned key-lag rows on this form in this plan" in text
    plateau = {(str(r["init"]), r["when"]) for r in data["induction"]["attention_at_queries"]}
    assert plateau == {("0.02", "initialisation"), ("torch", "initialisation"), ("scaled", "initialisation"),
                       ("scaled", "step 4")}  # the default's run is the variant table's, trained here
    assert len(data["text"]["rows"]) == 3 and all(r["bits_per_byte"][0] > 0 for r in data["text"]["rows"])


def test_the_attention_at_queries_note_counts_layers_from_one():
    res = induction_report.InductionResults("quick", {"init_sensitivity": [], "attention_at_queries": []}, {}, {}, {})
    assert "at the single-answer query (layer 1, 64 held-out rows" in " ".join(induction_report._sensitivity_lines(res))


def test_the_paper_column_quotes_the_papers_single_answer_accuracies_in_that_forms_table_alone():
    row = {"layers": 1, "mlp": "yes", "variant": "key_only", "gamma": 1.0, "placement": "post_rope", "steps_budget": 100,
           "seeds": 1, "successes": 1, "mean_final_accuracy": 0.9, "mean_best_accuracy": 0.9, "mean_emergence_step": 50}
    tables = {"variants": [{**row, "form": "all_positions"}, {**row, "form": "single"}]}
    facts = {"early_stop_evals": 2, "two_layer_forms": (), "single_key_lag": True}
    lines = induction_report._variant_lines(induction_report.InductionResults("quick", tables, facts, {}, {}))
    full, single = [line for line in lines if line.startswith("| 1 | key_only |")]
    assert full.endswith("| — |") and single.endswith("| 0.949 |")
    assert "the paper's accuracies are for the single-answer form" in " ".join(lines)


def test_attention_at_queries_on_a_layer_that_cannot_yet_tell_keys_apart():
    from psattn.experiments.plateau import attention_at_queries, previous_occurrence
    from psattn.training.run_dir import build_model, eval_batch

    config = small_config("key_only", 1.0, form="single", d_model=32, n_heads=2)
    model = build_model(config)
    batch = eval_batch(config)
    with torch.no_grad():
        model.blocks[0].attn.q_proj.weight.zero_()  # every score is 0: uniform attention
    stats = attention_at_queries(model, batch, rows=8)
    assert stats["entropy_ratio"] == pytest.approx(1.0) and stats["t1_std"] == 0.0 and stats["t3_std"] == 0.0
    assert stats["target_mass"] == pytest.approx(stats["uniform_mass"]) == pytest.approx(1 / 64)
    inputs = torch.tensor([[0, 5, 7, 5, 9]])
    assert previous_occurrence(inputs, 0, 3) == 1 and previous_occurrence(inputs, 0, 4) is None


def test_the_report_tables_a_trained_critical_gamma_design_and_names_the_sweeps_of_the_others():
    from types import SimpleNamespace

    from psattn.experiments.induction_report import CRITICAL_DESIGNS, _critical_lines

    rows = [{"d_k": d_k, "gamma": g, "success_rate": float(g >= crit), "mean_final_accuracy": 0.9 if g >= crit else 0.1,
             "stops_early": True, "steps_budget": 600} for d_k, crit in ((16, 0.2), (32, 0.2)) for g in (0.1, 0.2)]
    designs = dict.fromkeys(CRITICAL_DESIGNS, [])
    first = next(iter(designs))
    facts = {"critical_batch": 64, "batch": 32, "early_stop_evals": 2}
    fit = summaries.exponent_fit(summaries.critical_pairs(rows), summaries.critical_brackets(rows))
    res = SimpleNamespace(tables={"critical_designs": dict(designs, **{first: rows}), "critical_exponents": {first: fit}},
                          facts=facts, mode="full")
    text = "\n".join(_critical_lines(res))
    assert f"**{first}**" in text and "| 16 | 0.100 | 0.900 | 0.2 |" in text and "Exponent: +0.00" in text
    assert "`psattn sweep critical_gamma_width --quick` trains it" in text
    none = SimpleNamespace(tables={"critical_designs": designs, "critical_exponents": {}}, facts=facts, mode="quick")
    text = "\n".join(_critical_lines(none))
    assert all(f"`psattn sweep {e} --quick`" in text for e in CRITICAL_DESIGNS.values()) and "Exponent" not in text


def test_a_reproduction_with_a_diverged_run_says_so_rather_than_tabling_it_as_not_emerged(tmp_path, monkeypatch):
    from psattn.experiments import reproduce as reproduce_module
    from psattn.training.signals import TrainingDiverged

    def sweep(configs, out, **kwargs):
        return {c.name: {"seconds": 1.0, "diverged_at": 7 if i == 0 else None} for i, c in enumerate(configs)}

    monkeypatch.setattr(reproduce_module, "run_sweep", sweep)
    with pytest.raises(TrainingDiverged, match=r"1 run diverged \(.* \(at step 7\)\), as their result.json records"):
        reproduce_module.train_all(tmp_path, "quick", ("induction",), 1, False)


@pytest.mark.parametrize("cut", ["results.json", "report.md"])
def test_a_report_write_cut_short_keeps_the_earlier_report_whole(tmp_path, monkeypatch, cut):
    """report.md cut short was kept whole, but after results.json had been replaced: the two were of two runs."""
    from psattn.experiments import reproduce as reproduce_module

    monkeypatch.setattr(reproduce_module, "train_all", lambda *a, **k: {
        "trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}})
    monkeypatch.setattr(reproduce_module, "induction_section", lambda *a, **k: (["first " * 500], {"first": 1}))
    reproduce(tmp_path, sections=("induction",), progress=False)
    before = {name: (tmp_path / name).read_text() for name in ("report.md", "results.json")}
    second = (["second " * 500], {"second": [0] * 999}) if cut == "results.json" else (["second " * 999], {"second": 2})
    monkeypatch.setattr(reproduce_module, "induction_section", lambda *a, **k: second)
    with file_size_limit(2000), pytest.raises(OSError, match=f"{cut} failed .*already there .* is intact"):
        reproduce(tmp_path, sections=("induction",), progress=False)  # it cut report.md to 2,000 bytes of the second
    assert {name: (tmp_path / name).read_text() for name in ("report.md", "results.json")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "results.json"]  # no temporary file left


def test_a_stop_between_the_reports_two_files_leaves_them_of_one_run(tmp_path, monkeypatch):
    """report.md and results.json were two writes: a SIGTERM once results.json was in place left it beside the
    earlier run's report.md."""
    from psattn import files
    from psattn.experiments import reproduce as reproduce_module

    monkeypatch.setattr(reproduce_module, "train_all", lambda *a, **k: {
        "trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}})
    monkeypatch.setattr(reproduce_module, "induction_section", lambda *a, **k: (["first run"], {"run": 1}))
    reproduce(tmp_path, sections=("induction",), progress=False)
    monkeypatch.setattr(reproduce_module, "induction_section", lambda *a, **k: (["second run"], {"run": 2}))
    replace = os.replace

    def replace_then_stop(src, dst):
        replace(src, dst)
        if os.path.basename(dst) == "results.json":
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(files.os, "replace", replace_then_stop)
    with default_action_raises(signal.SIGTERM), pytest.raises(Ended):
        reproduce(tmp_path, sections=("induction",), progress=False)
    assert json.loads((tmp_path / "results.json").read_text())["induction"] == {"run": 2}
    assert "second run" in (tmp_path / "report.md").read_text()


def test_a_sigterm_held_while_the_report_moves_in_leaves_no_staging_folder(tmp_path, monkeypatch):
    """A SIGTERM held while the figures and the report pair were moved in ended the process on leaving the held
    block, before the staging folder was removed: a .reproduce-figures-PID-* with its empty figures/ stayed in --out."""
    from types import SimpleNamespace

    from helpers import hidden_entries, stop_on_moving_into
    from psattn.experiments import induction_report
    from psattn.experiments import reproduce as reproduce_module

    def figures(res, folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "curves.png").write_text("figure")

    monkeypatch.setattr(reproduce_module, "train_all", lambda *a, **k: {
        "trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}})
    monkeypatch.setattr(induction_report, "induction_results", lambda *a, **k: SimpleNamespace(
        tables={}, rows=[], samples=[], params={}, edge=None))
    monkeypatch.setattr(induction_report, "induction_markdown", lambda res: ["the report"])
    monkeypatch.setattr(induction_report, "induction_figures", figures)
    stop_on_moving_into(monkeypatch, tmp_path)
    with default_action_raises(signal.SIGTERM, lambda: hidden_entries(tmp_path)) as seen, pytest.raises(Ended):
        reproduce(tmp_path, sections=("induction",), progress=False)
    assert seen == [[]] and (tmp_path / "figures" / "curves.png").read_text() == "figure"


_REPORT_CHILD = """
import functools, os, signal, sys, time
from pathlib import Path
from psattn import cli
from psattn.experiments import reproduce as rep

def slow_meanfield(out, mode, progress, files):  # the part beside, in a worker process: minutes
    time.sleep(120)

if __name__ == "__main__":
    out, when, signum = Path(sys.argv[1]), sys.argv[2], getattr(signal, sys.argv[3])
    signal.signal(signum, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
    sections = ("theory", "meanfield") if when == "theory" else ("induction",)
    rep.reproduce = functools.partial(rep.reproduce, sections=sections)
    rep.train_all = lambda *a, **k: {"trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}}

    unlink = os.unlink

    def unlink_then_stop(path, *args, **kwargs):  # a second stop as the first's cleanup removes the staging folder
        unlink(path, *args, **kwargs)
        os.unlink = unlink
        os.kill(os.getpid(), signum)

    def section(out_, mode, workers, progress, figures):
        figures.mkdir(parents=True, exist_ok=True)
        (figures / "curves.png").write_text(when)
        (figures / "heads.png").write_text(when)
        if when == "twice":
            os.unlink = unlink_then_stop
        if when in ("sections", "twice", "stopped again"):
            os.kill(os.getpid(), signum)
        return [f"report {when}"], {"run": when}

    def theory(*args):
        os.kill(os.getpid(), signum)

    replace = os.replace

    def replace_then_stop(src, dst):
        replace(src, dst)
        if Path(dst).name == "report.md":
            os.kill(os.getpid(), signum)

    if when == "moving":
        os.replace = replace_then_stop
    stopped = rep._stopped

    def stopped_again(*args):  # a second stop as the first one's line is made, before the staging folder goes
        os.kill(os.getpid(), signum)
        return stopped(*args)

    if when == "stopped again":
        rep._stopped = stopped_again
    rep.induction_section, rep.theory_section, rep.meanfield_section = section, theory, slow_meanfield
    os.cpu_count = lambda: 2  # the mean-field part runs beside the theory part
    sys.exit(cli.main(["reproduce", "--quick", "--out", str(out)]))
"""


def _run_report_child(tmp_path, out, when, signum):
    """Run ``_REPORT_CHILD`` on ``out``, told ``when`` to send itself ``signum``; the finished process."""
    import subprocess
    import sys

    script = tmp_path / "reproduce_child.py"
    script.write_text(_REPORT_CHILD)
    return subprocess.run([sys.executable, str(script), str(out), when, signum], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("when", ["sections", "moving", "theory"])
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_after_training_says_what_was_kept_in_one_line(tmp_path, signum, when):
    """SIGTERM or SIGHUP after the training, as the report's sections ran, ended ``psattn reproduce`` on the spot,
    without a word: its staging folder of figures stayed in --out. Now it stops as Ctrl-C: no staging folder, the
    earlier report whole, a line saying what was kept and how to resume, exit 128 + the signal's number; a stop while
    the theory part runs does not wait for the mean-field part beside it (minutes), and one held while the report
    moves in lands once it is whole."""
    from helpers import hidden_entries

    out = tmp_path / "out"

    def run(when):
        return _run_report_child(tmp_path, out, when, signum)

    assert run("first").returncode == 0
    started = time.monotonic()
    done = run(when)
    assert done.returncode == 128 + getattr(signal, signum), done.stderr[-2000:]
    assert time.monotonic() - started < 50  # the part beside was not waited for
    if when == "moving":
        said = f"as the report was moved in: {out / 'report.md'} is written, whole"
    else:
        said = (f"before the report was written: the finished runs under {out / 'runs'} are kept, and an earlier "
                "report is left whole; run the same command again: it skips the finished runs")
    assert done.stderr.splitlines()[-1] == f"psattn: stopped by {signum} {said}"
    assert hidden_entries(out) == []
    kept = "moving" if when == "moving" else "first"
    assert (out / "report.md").read_text().splitlines()[-1] == f"report {kept}"
    assert (out / "figures" / "curves.png").read_text() == kept


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_second_stop_signal_while_the_staging_folder_is_removed_waits_until_it_is_gone(tmp_path, signum):
    """A second SIGTERM or SIGHUP (a scheduler's own deadline) while ``psattn reproduce`` removed its staging folder
    after the first ended the process at once, leaving half the folder in --out. Now it is held until the folder is
    gone, and then ends the process, as a second stop while run_experiments writes its summary does."""
    from helpers import hidden_entries

    out = tmp_path / "out"

    def run(when):
        return _run_report_child(tmp_path, out, when, signum)

    assert run("first").returncode == 0
    done = run("twice")
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the second, once it was gone
    assert hidden_entries(out) == []
    assert (out / "report.md").read_text().splitlines()[-1] == "report first"


def test_a_second_stop_signal_before_the_staging_folder_is_removed_waits_until_it_is_gone(tmp_path):
    """A second SIGTERM after the first one's exception left the report's work, before the staging folder's removal
    had begun, found the default handler back in place and ended ``psattn reproduce`` on the spot, leaving the
    staging folder in --out. Now the handlers stay until it is gone, and the second ends the process then."""
    from helpers import hidden_entries

    out = tmp_path / "out"
    assert _run_report_child(tmp_path, out, "first", "SIGTERM").returncode == 0
    done = _run_report_child(tmp_path, out, "stopped again", "SIGTERM")
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]  # ended by the second, once it was gone
    assert hidden_entries(out) == []
    assert (out / "report.md").read_text().splitlines()[-1] == "report first"


@pytest.mark.parametrize("section", ["induction", "text"])
def test_a_stop_after_the_first_figure_leaves_the_earlier_report_with_its_own_figures(tmp_path, monkeypatch, section):
    """The sections drew their figures into figures/ as they ran: a Ctrl-C after the first left it, new, beside the
    earlier run's report.md, results.json and other figures. Now they move in with the report pair."""
    from types import SimpleNamespace

    from psattn.experiments import induction_report, text_report
    from psattn.experiments import reproduce as reproduce_module

    module = {"induction": induction_report, "text": text_report}[section]
    run = {"n": 1}

    def figures(res, folder):
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("first.png", "second.png"):
            (folder / name).write_text(f"run {res.n}")
            if res.n == 2:
                raise KeyboardInterrupt  # Ctrl-C once the first figure is drawn

    monkeypatch.setattr(reproduce_module, "train_all", lambda *a, **k: {
        "trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}})
    monkeypatch.setattr(module, f"{section}_results", lambda *a, **k: SimpleNamespace(
        n=run["n"], tables={}, rows=[], samples=[], params={}, edge=None))
    monkeypatch.setattr(module, f"{section}_markdown", lambda res: [f"run {res.n}"])
    monkeypatch.setattr(module, f"{section}_figures", figures)

    def files():
        return {str(p.relative_to(tmp_path)): p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    reproduce(tmp_path, sections=(section,), progress=False)
    before = files()
    run["n"] = 2
    with pytest.raises(KeyboardInterrupt):
        reproduce(tmp_path, sections=(section,), progress=False)
    assert files() == before and sorted(p.name for p in tmp_path.iterdir()) == ["figures", "report.md", "results.json"]
    run["n"] = 3
    reproduce(tmp_path, sections=(section,), progress=False)
    after = files()
    assert [after[f"figures/{name}"] for name in ("first.png", "second.png")] == ["run 3"] * 2
    assert "run 3" in after["report.md"] and sorted(p.name for p in tmp_path.iterdir()) == ["figures", "report.md",
                                                                                           "results.json"]


def test_a_stop_after_the_first_theory_file_leaves_the_earlier_report_with_its_own_theory_files(tmp_path, monkeypatch):
    """The theory part wrote theory.json, its figures and theory.md into theory/ as it ran: a Ctrl-C after the first
    left a new theory.json beside the earlier run's report and theory files. Now they move in with the report pair;
    the Bode run in theory/ is trained in place."""
    from pathlib import Path

    from psattn.experiments import reproduce as reproduce_module
    from psattn.theory import plots
    from psattn.theory import report as theory

    run = {"n": 1}

    def bode_model(folder, *a, **k):
        (folder / "bode_run").mkdir(parents=True, exist_ok=True)
        (folder / "bode_run" / "result.json").write_text("{}")
        return random_model(), "stub"

    def plot(data, path):
        if run["n"] == 2:
            raise KeyboardInterrupt  # Ctrl-C once theory.json is written
        Path(path).write_text(f"run {run['n']}")
        return Path(path)

    monkeypatch.setattr(reproduce_module, "train_all", lambda *a, **k: {
        "trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}})
    monkeypatch.setattr(reproduce_module, "bode_model", bode_model)
    for name in ("certificate", "transition", "scaling"):
        monkeypatch.setattr(theory, f"{name}_results", lambda *a, **k: {"run": run["n"]})
    monkeypatch.setattr(theory, "spectral_results", lambda *a, **k: {"closed_form": [], "measured": []})
    monkeypatch.setattr(theory, "render_markdown", lambda saved, link_prefix="": f"run {saved['certificates']['run']}")
    for name in ("plot_phase_diagram", "plot_scaling", "plot_bode", "plot_measured_bode"):
        monkeypatch.setattr(plots, name, plot)

    def files():
        return {str(p.relative_to(tmp_path)): p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    reproduce(tmp_path, sections=("theory",), progress=False)
    before = files()
    assert json.loads(before["results.json"])["theory"]["figures"]["bode"] == str(tmp_path / "theory" / "bode.png")
    run["n"] = 2
    with pytest.raises(KeyboardInterrupt):
        reproduce(tmp_path, sections=("theory",), progress=False)
    assert files() == before and sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "results.json", "theory"]
    run["n"] = 3
    reproduce(tmp_path, sections=("theory",), progress=False)
    after = files()
    assert json.loads(after["theory/theory.json"])["certificates"] == {"run": 3}
    assert [after[f"theory/{name}"] for name in ("bode.png", "theory.md")] == ["run 3"] * 2
    assert "run 3" in after["report.md"] and "theory/bode_run/result.json" in after


def test_a_stop_after_the_mean_field_part_leaves_the_earlier_report_with_its_own_mean_field_files(tmp_path, monkeypatch):
    """On two cores the mean-field part runs beside the theory part and moved its files into meanfield/ when it ended:
    a Ctrl-C while the theory part still ran left the new mean-field report beside the earlier report.md. Now they move
    in with the report pair, and an earlier mean-field report's figures that the new one did not draw are removed."""
    from concurrent.futures import Future

    from psattn.experiments import reproduce as reproduce_module
    from psattn.meanfield import reproduce as meanfield

    run = {"n": 1}

    def write_report(out, quick, progress, threads):
        (out / "paper").mkdir(parents=True, exist_ok=True)
        (out / "paper" / "summary.json").write_text(f"run {run['n']}")
        figures = ["final_states_n64.png", "final_states_n128.png"][:2 if run["n"] == 1 else 1]  # --full, then --quick
        for name in figures:
            (out / name).write_text(f"run {run['n']}")
        (out / "report.md").write_text(f"run {run['n']}")
        return {"passed": True, "checks": [], "skipped": [], "files": ["paper/summary.json", *figures, "report.md"]}

    def theory_section(*args, **kwargs):
        if run["n"] == 2:
            raise KeyboardInterrupt  # Ctrl-C while the theory part runs, the mean-field part done beside it
        return [f"run {run['n']}"], {"run": run["n"]}

    class AtOnce:  # the worker beside, done before the theory part
        def submit(self, fn, *args):
            done = Future()
            done.set_result(fn(*args))
            return done

    monkeypatch.setattr(reproduce_module, "train_all", lambda *a, **k: {
        "trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}})
    monkeypatch.setattr(reproduce_module, "theory_section", theory_section)
    monkeypatch.setattr(reproduce_module, "_beside", lambda wanted: contextlib.nullcontext(AtOnce()))
    monkeypatch.setattr(meanfield, "_write_report", write_report)

    def files():
        return {str(p.relative_to(tmp_path)): p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    reproduce(tmp_path, sections=("theory", "meanfield"), progress=False)
    before = files()
    assert before["meanfield/report.md"] == "run 1" and "meanfield/final_states_n128.png" in before
    run["n"] = 2
    with pytest.raises(KeyboardInterrupt):
        reproduce(tmp_path, sections=("theory", "meanfield"), progress=False)
    assert files() == before and sorted(p.name for p in tmp_path.iterdir()) == ["meanfield", "report.md", "results.json"]
    run["n"] = 3
    reproduce(tmp_path, sections=("theory", "meanfield"), progress=False)
    after = files()
    assert sorted(name for name in after if name.startswith("meanfield/")) == [
        "meanfield/final_states_n64.png", "meanfield/paper/summary.json", "meanfield/report.md"]
    assert {after[name] for name in after if name.startswith("meanfield/")} == {"run 3"}
    assert "run 3" in after["report.md"]


def test_a_sweep_worker_killed_with_sigkill_is_one_error_naming_its_run_and_the_sweep_resumes(tmp_path):
    """The out-of-memory killer's SIGKILL to one worker: the pool's BrokenProcessPool came out raw (and a worker killed
    while it checked the stop event's lock left it held, and the sweep hung)."""
    config = dataclasses.replace(tiny_config(400, checkpoint_every=1), name="big")

    def kill_big():
        while not (tmp_path / "big" / "checkpoint.pt").exists():
            time.sleep(0.01)
        os.kill(int((tmp_path / "big" / ".lock").read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_big, daemon=True)
    killer.start()
    with pytest.raises(WorkerLost, match=r"worker process training big was ended by SIGKILL.*run the same command again"):
        _run_in_pool([config], tmp_path, 1, progress=False)  # the pool of run_sweep(workers=2), with one worker
    killer.join()
    assert load_result(tmp_path / "big") is None and (tmp_path / "big" / "checkpoint.pt").exists()


def test_the_reports_git_revision_is_the_one_it_started_at(tmp_path, monkeypatch):
    """The header read the revision once the report was written: a checkout that moved on during an hour's run
    (an editable install) named the commit of the end, not the code that trained."""
    from psattn.experiments import reproduce as reproduce_module

    checkout = {"head": "1111111aaaa"}

    def train_all(*args, **kwargs):
        checkout["head"] = "2222222bbbb"  # a commit lands while the runs train
        return {"trained_now": 0, "reused": 0, "reused_git_revisions": [], "seconds": {}}

    monkeypatch.setattr(reproduce_module, "git_revision", lambda: checkout["head"])
    monkeypatch.setattr(reproduce_module, "train_all", train_all)
    monkeypatch.setattr(reproduce_module, "induction_section", lambda *a, **k: (["tables"], {}))
    report = reproduce(tmp_path, sections=("induction",), progress=False).read_text()
    assert "git 1111111aaaa" in report and "2222222" not in report
