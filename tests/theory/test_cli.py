"""The theory commands, wired the way the main CLI does it: ``register(sub)`` on its subparsers."""

import argparse
import json
import re
import time

import pytest

from helpers import random_model
from psattn.commands.theory import register
from psattn.experiments.bode_model import bode_model
from psattn.theory import report


def run_cli(argv):
    parser = argparse.ArgumentParser(prog="psattn")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_certify_prints_a_table_and_passes_within_a_minute(capsys):
    start = time.perf_counter()
    assert run_cli(["certify"]) == 0
    assert time.perf_counter() - start < 60
    out = capsys.readouterr().out
    assert "four_term_decomposition" in out and "certificates passed for operator 'psa'" in out
    assert "FAIL" not in out


def test_certify_json(capsys):
    assert run_cli(["certify", "--json", "--only", "causality", "int8_headroom"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in results] == ["causality", "int8_headroom"]
    assert all(r["passed"] and r["statement"] and r["method"] for r in results)


def test_certify_runs_a_name_given_twice_once(capsys):
    assert run_cli(["certify", "--only", "causality", "int8_headroom", "causality"]) == 0
    out = capsys.readouterr().out
    assert out.count("causality") == 1 and "2/2 certificates passed" in out, out


def test_certify_exits_non_zero_on_a_broken_operator(capsys):
    assert run_cli(["certify", "--operator", "raw_key_cache", "--only", "cache_equivalence"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_unknown_operator_is_a_value_error():
    with pytest.raises(ValueError, match="unknown operator"):
        run_cli(["certify", "--operator", "nope"])


def test_gamma_c_and_fit_exponent(tmp_path, capsys):
    assert run_cli(["theory", "gamma-c", "--d-k", "64", "4", "--context", "8.38905609893065"]) == 0
    out = capsys.readouterr().out
    assert "gamma_c=0.517638 (branch 1" in out and "gamma_c=0.675676 (branch 2" in out
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([[16, 1.0], [64, 0.25], [256, 0.0625]]))
    assert run_cli(["theory", "fit-exponent", str(sweep), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exponent"] == pytest.approx(-1.0)


def test_fit_exponent_of_two_points_says_there_is_no_standard_error(tmp_path, capsys):
    """It printed "(± nan)"."""
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([[16, 0.5], [64, 0.3]]))
    assert run_cli(["theory", "fit-exponent", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "(no standard error from two points)" in out and "nan" not in out


def test_phase_diagram_and_bode_write_figures(tmp_path, capsys):
    assert run_cli(["theory", "phase-diagram", "--out", str(tmp_path), "--samples", "8"]) == 0
    assert "above_crossover" in capsys.readouterr().out
    assert (tmp_path / "phase_diagram.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "transition.json").read_text())["n_samples"] == 8
    assert run_cli(["theory", "bode", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    r = float(re.search(r"key +measured vs closed form: Pearson r ([0-9.]+)", out).group(1))
    assert r > 0.999  # the default model is random-initialised: the closed form needs no training
    assert "for any weights, so this checks the implementation of the filter" in out
    assert (tmp_path / "bode.png").exists() and (tmp_path / "bode_measured.png").exists()


def test_bode_and_phase_diagram_default_to_folders_of_their_own():
    """Not the theory report's folder, whose bode.png and phase_diagram.png its text describes."""
    parser = argparse.ArgumentParser(prog="psattn")
    register(parser.add_subparsers(dest="command"))
    folders = {command: parser.parse_args(["theory", command]).out for command in ("report", "bode", "phase-diagram")}
    assert folders == {"report": "reports/theory", "bode": "reports/theory-bode",
                       "phase-diagram": "reports/theory-phase-diagram"}


def test_bode_and_phase_diagram_refuse_a_theory_reports_folder_and_keep_its_figures(tmp_path):
    (tmp_path / "theory.md").write_text("## Theory\n")
    for name in ("bode.png", "bode_measured.png", "phase_diagram.png"):
        (tmp_path / name).write_bytes(b"the report's figure")
    with pytest.raises(ValueError, match="holds a theory report .theory.md., whose bode.png and bode_measured.png"):
        run_cli(["theory", "bode", "--gamma", "0.3", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="whose phase_diagram.png this would replace: name another --out folder"):
        run_cli(["theory", "phase-diagram", "--samples", "8", "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bode.png", "bode_measured.png", "phase_diagram.png", "theory.md"]
    assert all((tmp_path / name).read_bytes() == b"the report's figure" for name in ("bode.png", "phase_diagram.png"))


def test_a_phase_diagram_that_fails_leaves_no_folder(tmp_path):
    with pytest.raises(ValueError, match="n_samples must be an integer >= 2, got 0"):
        run_cli(["theory", "phase-diagram", "--samples", "0", "--out", str(tmp_path / "pd")])
    assert not (tmp_path / "pd").exists()


def test_bode_and_phase_diagram_stopped_midway_leave_the_earlier_files_whole(tmp_path, monkeypatch):
    """bode and phase-diagram wrote their files in place, one after the other: a Ctrl-C while bode measured the model
    left a new bode.png beside the earlier bode.json and bode_measured.png, one while phase-diagram drew its figure a
    new transition.json beside the earlier phase_diagram.png. Now they are moved in once all are written; a staging
    folder left by a killed run is removed."""
    import subprocess

    import psattn.theory.spectral
    from psattn.theory import plots

    measure, draw = psattn.theory.spectral.measure_bode, plots.plot_phase_diagram

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    def files(folder):
        return {p.name: p.read_bytes() if p.is_file() else "a folder" for p in folder.iterdir()}

    dead = subprocess.Popen(["true"])  # a process that has ended: its staging folder is a killed run's
    dead.wait()
    for command, first, second, interrupted in (
            (["bode", "--gamma", "0.8"], (measure, draw), (stop, draw), ["bode", "--gamma", "0.3"]),
            (["phase-diagram", "--samples", "8"], (measure, draw), (measure, stop), ["phase-diagram", "--samples", "16"])):
        out = tmp_path / command[0]
        monkeypatch.setattr(psattn.theory.spectral, "measure_bode", first[0])
        monkeypatch.setattr(plots, "plot_phase_diagram", first[1])
        assert run_cli(["theory", *command, "--out", str(out)]) == 0
        before = files(out)
        (out / f".theory-files-{dead.pid}-killed").mkdir()
        monkeypatch.setattr(psattn.theory.spectral, "measure_bode", second[0])
        monkeypatch.setattr(plots, "plot_phase_diagram", second[1])
        with pytest.raises(KeyboardInterrupt):
            run_cli(["theory", *interrupted, "--out", str(out)])
        assert files(out) == before  # no file of the stopped run, and no staging folder (the killed run's removed)


def test_report_refuses_a_bad_sweep_file_before_training(tmp_path, monkeypatch):
    """--sweep is read first: it was read after the Bode model's training, the certificates and the reduced-model
    grid, so a mistyped path failed minutes in, with a training run left in --out."""
    import psattn.experiments.bode_model

    def no_training(*args, **kwargs):
        raise AssertionError("trained before reading --sweep")

    monkeypatch.setattr(psattn.experiments.bode_model, "bode_model", no_training)
    out = tmp_path / "report"
    with pytest.raises(ValueError, match="does not exist"):
        run_cli(["theory", "report", "--quick", "--out", str(out), "--sweep", str(tmp_path / "missing.json")])
    assert not out.exists()


def test_report_without_matplotlib_is_refused_before_the_bode_run_trains(tmp_path, monkeypatch):
    """Without the plot extra, theory report trained its Bode run into --out/bode_run (about 10 s) and only then
    failed on the missing matplotlib, leaving that run behind; now the missing library is told before anything runs."""
    import sys

    import psattn.experiments.bode_model
    import psattn.theory

    def no_training(*args, **kwargs):
        raise AssertionError("trained before finding matplotlib missing")

    monkeypatch.setattr(psattn.experiments.bode_model, "bode_model", no_training)
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib.") or name == "psattn.theory.plots":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(psattn.theory, "plots", raising=False)  # as a fresh process has it: plots not yet imported
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ModuleNotFoundError
    out = tmp_path / "report"
    with pytest.raises(ModuleNotFoundError, match="matplotlib"):
        run_cli(["theory", "report", "--quick", "--out", str(out)])
    assert not out.exists()


def _stub_report(monkeypatch) -> dict:
    """theory report with every part stubbed: its files say which run wrote them, ``{"run": 1, "stop": False}``
    (returned, to change); a figure drawn while "stop" raises KeyboardInterrupt."""
    from pathlib import Path

    import psattn.experiments.bode_model
    from psattn.theory import plots

    runs = {"run": 1, "stop": False}

    def bode_run(out, quick=True, run_dir=None, seed=0):
        (Path(out) / "bode_run").mkdir(parents=True, exist_ok=True)
        (Path(out) / "bode_run" / "result.json").write_text("{}")
        return random_model(), "stub"

    def draw(data, path):
        if runs["stop"]:
            raise KeyboardInterrupt
        path.write_text(f"figure of run {runs['run']}")
        return path

    monkeypatch.setattr(psattn.experiments.bode_model, "bode_model", bode_run)
    monkeypatch.setattr(report, "certificate_results", lambda: {"run": runs["run"]})
    monkeypatch.setattr(report, "transition_results", lambda n_samples, seed=0: {})
    monkeypatch.setattr(report, "scaling_results", lambda n_samples, seed=0, sweep_results=None: {})
    monkeypatch.setattr(report, "spectral_results", lambda model, label, seed=0: {"closed_form": [], "measured": []})
    monkeypatch.setattr(report, "render_markdown",
                        lambda saved, link_prefix="": f"report of run {saved['certificates']['run']}")
    for name in ("plot_phase_diagram", "plot_scaling", "plot_bode", "plot_measured_bode"):
        monkeypatch.setattr(plots, name, draw)
    return runs


def test_a_report_stopped_after_its_first_file_leaves_the_earlier_report_whole(tmp_path, monkeypatch):
    """theory report writes its files into a hidden folder inside --out and moves them in once all are written: a
    Ctrl-C after theory.json left the new theory.json beside the earlier report's figures and theory.md. The Bode
    run in --out is kept as it was trained, and a staging folder left by a killed report is removed."""
    import subprocess

    runs = _stub_report(monkeypatch)
    out = tmp_path / "theory"
    assert run_cli(["theory", "report", "--quick", "--out", str(out)]) == 0
    dead = subprocess.Popen(["true"])  # a process that has ended: its staging folder is a killed report's
    dead.wait()
    (out / f".theory-report-{dead.pid}-killed").mkdir()
    runs.update(run=2, stop=True)
    with pytest.raises(KeyboardInterrupt):
        run_cli(["theory", "report", "--quick", "--out", str(out)])
    assert json.loads((out / "theory.json").read_text())["certificates"]["run"] == 1
    assert (out / "theory.md").read_text() == "report of run 1"
    assert all((out / name).read_text() == "figure of run 1"
               for name in ("phase_diagram.png", "scaling.png", "bode.png", "bode_measured.png"))
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["bode_run"]


def test_a_sigterm_held_while_the_report_moves_in_leaves_no_staging_folder(tmp_path, monkeypatch):
    """A SIGTERM held while the report's files were moved in ended the process on leaving the held block, before the
    staging folder was removed: an empty .theory-report-PID-* stayed in --out."""
    import signal

    from helpers import Ended, default_action_raises, hidden_entries, stop_on_moving_into

    _stub_report(monkeypatch)
    out = tmp_path / "theory"
    stop_on_moving_into(monkeypatch, out)
    with default_action_raises(signal.SIGTERM, lambda: hidden_entries(out)) as seen, pytest.raises(Ended):
        run_cli(["theory", "report", "--quick", "--out", str(out)])
    assert seen == [[]] and (out / "theory.md").read_text() == "report of run 1"


def test_a_bode_run_stopped_midway_resumes_when_the_report_runs_again(tmp_path, monkeypatch):
    """The Bode run was trained with resume=False: a stop said "run the same command without --restart to resume",
    and the same command trained it again from step 0. Now it resumes, exactly, and a finished one is reused."""
    import itertools

    from helpers import science
    from psattn.experiments import bode_model as module
    from psattn.training import trainer
    from psattn.training.signals import TrainingInterrupted

    small, train = module.small_induction_config, trainer.train
    monkeypatch.setattr(module, "small_induction_config", lambda *a, **k: small(*a, **{**k, "steps": 8}))

    def stopped(config, run_dir, **kwargs):
        steps = itertools.count(1)
        return train(config, run_dir, should_stop=lambda: next(steps) >= 4, **kwargs)  # polled after each step

    monkeypatch.setattr(trainer, "train", stopped)
    with pytest.raises(TrainingInterrupted, match="at step 4: checkpoint written in .*; run the same command again"):
        bode_model(tmp_path / "stopped")
    monkeypatch.setattr(trainer, "train", train)
    bode_model(tmp_path / "stopped")
    finished = (tmp_path / "stopped" / "bode_run" / "metrics.jsonl").read_bytes()
    bode_model(tmp_path / "stopped")
    assert (tmp_path / "stopped" / "bode_run" / "metrics.jsonl").read_bytes() == finished  # reused, not trained again
    bode_model(tmp_path / "whole")
    rows = [[json.loads(line) for line in (tmp_path / name / "bode_run" / "metrics.jsonl").read_text().splitlines()]
            for name in ("stopped", "whole")]
    assert science(rows[0]) == science(rows[1])


def test_a_bode_run_says_how_to_go_on_without_a_restart_flag(tmp_path, monkeypatch):
    """theory report has no --restart, but the Bode run's lines named it: a stop in a run trained anew over one of
    another size said "run the same command without --restart to resume", and a finished run whose checkpoint is
    gone was refused with "use --restart to train it anew", then "this command has no --restart" after it."""
    import itertools

    from psattn.experiments import bode_model as module
    from psattn.training import trainer
    from psattn.training.signals import TrainingInterrupted

    small, train = module.small_induction_config, trainer.train
    monkeypatch.setattr(module, "small_induction_config", lambda *a, **k: small(*a, **{**k, "steps": k["steps"] // 25}))
    bode_model(tmp_path, quick=True)  # 4 steps

    def stopped(config, run_dir, **kwargs):
        steps = itertools.count(1)
        return train(config, run_dir, should_stop=lambda: next(steps) >= 2, **kwargs)  # polled after each step

    monkeypatch.setattr(trainer, "train", stopped)
    with pytest.raises(TrainingInterrupted, match="run the same command again to resume") as stop:
        bode_model(tmp_path, quick=False)  # 24 steps: trained anew
    assert "--restart" not in str(stop.value)
    monkeypatch.setattr(trainer, "train", train)
    bode_model(tmp_path, quick=False)  # as it said
    (tmp_path / "bode_run" / "checkpoint.pt").unlink()
    with pytest.raises(ValueError, match=f"; delete {re.escape(str(tmp_path / 'bode_run'))} and run the same command "
                                         "again to train it anew, or give it another --out$") as refused:
        bode_model(tmp_path, quick=False)
    assert "--restart" not in str(refused.value)


@pytest.fixture
def tiny_run(tmp_path):
    from psattn.experiments.configs import small_induction_config
    from psattn.training.config import apply_overrides
    from psattn.training.trainer import train

    config = small_induction_config("symmetric", 0.8, steps=2, early_stop=False)
    config = apply_overrides(config, ["train.eval_size=16", "train.eval_every=2", "model.d_model=32"])
    train(config, tmp_path / "run", resume=False)
    return tmp_path / "run"


def test_reproduce_writes_figures_json_and_markdown(tmp_path, tiny_run, monkeypatch, certificates_run_once):
    monkeypatch.setattr(report, "GRID_DK", [8, 64, 1024])
    monkeypatch.setattr(report, "GRID_T", [16, 256])
    monkeypatch.setattr(report, "SCALING_DK", [64, 1024, 4096, 16384])
    sweep = [{"d_k": 16, "gamma_critical": 1.2}, {"d_k": 32, "gamma_critical": 0.6}, {"d_k": 64, "gamma_critical": None}]
    out = tmp_path / "theory"
    model, label = bode_model(out, run_dir=tiny_run)
    result = report.theory_report(out, model, label, quick=True, sweep_results=sweep, link_prefix="theory/")
    for name in ("phase_diagram", "scaling", "bode", "bode_measured"):
        assert (out / f"{name}.png").stat().st_size > 5_000
    saved = json.loads((out / "theory.json").read_text())
    assert all(r["passed"] for r in saved["certificates"]["results"])
    assert all(m["failed"] for m in saved["certificates"]["mutants"].values())
    assert saved["scaling"]["empirical"]["fit"]["exponent"] == pytest.approx(-1.0)
    assert saved["spectral"]["measured"][0]["key_r"] > 0.999
    md = (out / "theory.md").read_text()
    assert md == result["markdown"].replace("](theory/", "](")
    assert "![scaling](theory/scaling.png)" in result["markdown"]
    for text in ("## Theory", "![phase diagram](phase_diagram.png)", "Pearson r", "reports r = 0.9966", "-1.000 ±",
                 "| 13 | int8_headroom |"):
        assert text in md


def test_a_bode_json_write_cut_short_keeps_the_earlier_one_whole(tmp_path, monkeypatch):
    """The theory commands write their JSON whole (psattn.files): a write cut short, as by a full disk, leaves the
    earlier file as it was, not a truncated one."""
    from helpers import file_size_limit
    from psattn.theory import plots

    for name in ("plot_bode", "plot_measured_bode"):  # the figures are written whole too (psattn.figures); not here
        monkeypatch.setattr(plots, name, lambda data, path: path)
    assert run_cli(["theory", "bode", "--gamma", "0.3", "--out", str(tmp_path)]) == 0
    before = (tmp_path / "bode.json").read_text()
    assert len(before) > 4096
    with file_size_limit(4096), pytest.raises(OSError):
        run_cli(["theory", "bode", "--gamma", "0.7", "--out", str(tmp_path)])
    assert (tmp_path / "bode.json").read_text() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_bode_of_a_key_lag_or_pre_rope_run_is_not_called_a_check_of_the_filter(tmp_path, capsys):
    """A key-lag run's keys are mixed before the hook points, which saw the same stream twice: bode printed error
    0.0000 and "this checks the implementation of the filter", as if it had measured a perfect match; a run that
    shears before RoPE got the same note, though its post-RoPE response is not the closed form."""
    from helpers import tiny_config
    from psattn.training.config import apply_overrides
    from psattn.training.trainer import train

    for variant, gamma, placement, note in (("smeared_keys", 0.0, "post_rope", "says nothing of that filter"),
                                            ("key_only", 1.0, "pre_rope", "not the closed form's")):
        train(apply_overrides(tiny_config(2), [f"model.attention.variant={variant}", f"model.attention.gamma={gamma}",
                                               f"model.attention.placement={placement}"]), tmp_path / variant)
        assert run_cli(["theory", "bode", "--run-dir", str(tmp_path / variant), "--out", str(tmp_path / placement)]) == 0
        out = capsys.readouterr().out
        assert "checks the implementation" not in out and note in out
