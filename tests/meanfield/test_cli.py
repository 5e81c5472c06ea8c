"""``register`` wires ``meanfield run`` / ``meanfield reproduce`` into any argparse parser."""

import argparse
import json
import os

import pytest

from psattn.commands.meanfield import register, resolve_run_config
from psattn.meanfield.experiments import paper_configs
from psattn.meanfield.reproduce import meanfield_report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="psattn")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    return parser


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


def test_meanfield_run_writes_figures_summary_and_animation(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["meanfield", "run", "--kernel", "rope", "--n", "8", "--tau", "1", "--records", "5", "--out", str(out)]
    assert _main(argv) == 0
    written = {p.name for p in out.iterdir()}
    assert {"config.json", "summary.json", "final_state.png", "diagnostics.png", "states.npz"} <= written
    summary = json.loads((out / "summary.json").read_text())
    run = summary["runs"][0]
    assert run["name"] == "rope_n8" and run["config"]["tau"] == 1.0 and run["energy_monotone"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["psattn_version"] and meta["seed"] == 0 and meta["config"]["kernel"]["name"] == "rope"
    assert "rope_n8" in capsys.readouterr().out
    if "animation.gif" in written:
        assert (out / "animation.gif").read_bytes()[:6] in (b"GIF87a", b"GIF89a")


def test_run_config_resolution_defaults_file_then_flags(tmp_path):
    parser = _parser()
    args = parser.parse_args(["meanfield", "run", "--kernel", "prefix", "--n", "12", "--n-prompts", "3"])
    cfg = resolve_run_config(args)
    assert cfg.n == 12 and cfg.kernel.name == "prefix" and cfg.kernel.n_prompts == 3 and cfg.keep_states
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"config": cfg.to_dict()}))  # a previous run's config.json
    again = resolve_run_config(parser.parse_args(["meanfield", "run", "--config", str(path), "--tau", "2",
                                                  "--no-animation"]))
    assert again.kernel == cfg.kernel and again.n == 12 and again.tau == 2.0 and not again.keep_states


def test_a_config_that_keeps_no_states_is_honoured(tmp_path, capsys):
    """--config with "keep_states": false was run with keep_states true (and wrote states.npz and the GIF): the
    command set it from --no-animation alone, over the config's explicit false."""
    path = tmp_path / "mf.json"
    path.write_text(json.dumps({"n": 4, "tau": 0.1, "keep_states": False}))
    parser = _parser()
    assert not resolve_run_config(parser.parse_args(["meanfield", "run", "--config", str(path)])).keep_states
    path.write_text(json.dumps({"n": 4, "tau": 0.1, "keep_states": True}))
    assert resolve_run_config(parser.parse_args(["meanfield", "run", "--config", str(path)])).keep_states
    assert not resolve_run_config(parser.parse_args(["meanfield", "run", "--config", str(path), "--no-animation"])).keep_states
    path.write_text(json.dumps({"n": 4, "tau": 0.1, "keep_states": False}))
    out = tmp_path / "run"
    assert _main(["meanfield", "run", "--config", str(path), "--records", "3", "--out", str(out)]) == 0
    assert not (out / "states.npz").exists() and not (out / "animation.gif").exists()
    assert f"{path} sets keep_states false: no states.npz or animation" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["config"]["keep_states"] is False


def test_bad_run_input_raises_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="d ≥ 2"):
        _main(["meanfield", "run", "--d", "1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse rejects an unknown kernel
        _parser().parse_args(["meanfield", "run", "--kernel", "alibi"])


@pytest.mark.parametrize("held", [{"checkpoint.pt": b"weights"},
                                  {"config.json": b'{"model": {}, "task": {}, "train": {}}'}])
def test_an_out_folder_holding_a_training_run_is_refused_untouched(tmp_path, held):
    for name, data in held.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match="holds a training run"):
        _main(["meanfield", "run", "--n", "4", "--tau", "0.1", "--out", str(tmp_path)])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == held


def test_a_run_that_fails_writes_nothing(tmp_path, monkeypatch):
    """An earlier run's folder keeps its config.json beside its summary when the next simulation fails."""
    import importlib

    (tmp_path / "config.json").write_text("earlier")

    def fails(*args, **kwargs):
        raise ValueError("the simulation failed")

    monkeypatch.setattr(importlib.import_module("psattn.meanfield.simulate"), "simulate", fails)  # as `meanfield run` imports it
    with pytest.raises(ValueError, match="failed"):
        _main(["meanfield", "run", "--n", "4", "--tau", "0.1", "--out", str(tmp_path)])
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
    assert (tmp_path / "config.json").read_text() == "earlier"
    with pytest.raises(ValueError, match="kernel omega must be finite"):
        _main(["meanfield", "run", "--kernel", "cosine_toeplitz", "--omega", "nan", "--out", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("where", ["taken", "taken/run"])
def test_an_out_folder_a_file_stands_in_is_refused_before_the_simulation(tmp_path, monkeypatch, where):
    """--out naming a file (or a folder beneath one) was found only once the simulation had run, when its files
    were to be written: the run, minutes long, was lost."""
    import importlib

    ran = []
    module = importlib.import_module("psattn.meanfield.simulate")
    simulate = module.simulate
    monkeypatch.setattr(module, "simulate", lambda *args, **kwargs: (ran.append(1), simulate(*args, **kwargs))[1])
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'taken'} is a file, where a folder is needed: name a folder for --out "
                                         r"\(or move the file away\)$"):
        _main(["meanfield", "run", "--n", "4", "--tau", "0.1", "--out", str(tmp_path / where)])
    assert ran == [] and (tmp_path / "taken").read_text() == "a file"


@pytest.mark.parametrize(("args", "said"), [
    (["--dt", "1e39", "--tau", "1e39"], "dt = 1e+39 makes a step of 5e+38, beyond the largest float32 (3.4e+38); "
                                        "lower dt or use dtype float64"),  # refused with the config
    (["--beta", "60", "--dt", "1e20", "--tau", "1e20", "--config", "{fixed_step}"],
     "overflowed float32"),  # a step that fits, h·v ~ 1e20 · e^60 that does not
], ids=["step", "h_v"])
def test_a_run_that_overflows_is_one_line_naming_dt_and_keeps_the_earlier_run(tmp_path, capsys, args, said):
    """A step too large for the dtype ended in 'states must be finite, got NaN or infinite entries'."""
    from psattn.cli import main

    out = tmp_path / "run"
    assert _main(["meanfield", "run", "--n", "4", "--tau", "0.1", "--no-animation", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        fixed_step = tmp_path / "fixed_step.json"
        fixed_step.write_text('{"beta_aware_step": false}')
        main(["meanfield", "run", "--n", "4", "--dtype", "float32", *(a.format(fixed_step=fixed_step) for a in args),
              "--out", str(out)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert said in err and "dt = 1e+" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_run_summary_records_the_seed_of_its_config(tmp_path):
    """summary.json had "seed": null at the top level while config.json recorded the run's seed."""
    out = tmp_path / "run"
    assert _main(["meanfield", "run", "--n", "4", "--tau", "0.1", "--seed", "7", "--no-animation", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == json.loads((out / "config.json").read_text())["seed"] == 7


def test_a_run_without_animation_removes_the_earlier_runs_animation(tmp_path, capsys):
    """A folder describes one run: the states and GIF of an earlier run do not stay beside the next one's summary."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    argv = ["meanfield", "run", "--n", "4", "--tau", "0.1", "--records", "3", "--out", str(out)]
    assert _main(argv) == 0 and (out / "states.npz").exists()
    (out / "notes.txt").write_text("mine")
    assert _main(argv[:-2] + ["--seed", "5", "--no-animation", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "diagnostics.png", "final_state.png", "notes.txt",
                                                     "summary.json"]
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 5
    assert "removed the earlier run's states.npz" in capsys.readouterr().out
    assert _main(argv[:-2] + ["--d", "4", "--out", str(out)]) == 0  # no picture of a final state in d = 4
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "diagnostics.png", "notes.txt", "states.npz",
                                                     "summary.json"]
    assert "removed the earlier run's final_state.png" in capsys.readouterr().out


def test_meanfield_reproduce_quick(tmp_path, capsys):
    """Every check docs/meanfield.md names runs and passes (conditional Dirac-isation, the energy's rate and RK4's
    order were named on the page but not looked for here), and the paper experiment runs the kernels it names."""
    assert _main(["meanfield", "reproduce", "--quick", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "**Overall: PASS**" in report
    checks = json.loads((tmp_path / "checks.json").read_text())
    names = {c["name"] for c in checks}
    assert {"paper experiment: collapse without labels, none with RoPE / prefix tokens",
            *(f"conditional Dirac-isation ({kernel})" for kernel in ("rope", "generalised_rope", "prefix")),
            "orbit-wise universality (RoPE)", "gauge-level universality (prefix tokens)", "spectral dichotomy",
            "metastability (SA on the circle)", "metastability: plateau lifetime against beta", "energy ascent",
            "integrator order (rk4)"} <= names
    paper = json.loads((tmp_path / "paper" / "summary.json").read_text())
    assert {"usa", "rope", "generalised_rope", "prefix"} <= {run["config"]["kernel"]["name"] for run in paper["runs"]}
    assert all(c["passed"] for c in checks)
    for c in checks:
        if c["figure"]:
            assert (tmp_path / c["figure"]).stat().st_size > 0 and c["figure"] in report
    assert (tmp_path / "final_states_n64.png").exists() and (tmp_path / "paper" / "summary.json").exists()
    assert "PASS" in capsys.readouterr().out


def test_reproduce_function_reports_failures(tmp_path, monkeypatch):
    from psattn.meanfield import reproduce as module
    from psattn.meanfield.theorems import TheoremCheck

    failing = [("always_fails", lambda: TheoremCheck("always fails", False, "by construction"))]
    monkeypatch.setattr(module, "_check_plan", lambda quick: failing)
    monkeypatch.setattr(module, "_plots_available", lambda: False)
    result = meanfield_report(tmp_path, quick=True)
    assert not result["passed"] and "FAIL" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("change,error,message", [
    ({"out_dir": 3}, TypeError, "out_dir must be a folder's path"),
    ({"out_dir": "file"}, ValueError, "is a file"),
    ({"quick": "no"}, TypeError, "quick must be True or False"),
    ({"progress": 1}, TypeError, "progress must be True or False"),
    ({"threads": 0}, ValueError, "threads must be an integer ≥ 1 or None"),
    ({"threads": "2"}, TypeError, "threads must be an integer ≥ 1 or None"),
    ({"moving": 3}, TypeError, "moving must be a function"),
], ids=lambda v: str(v)[:30] if isinstance(v, dict) else None)
def test_meanfield_report_refuses_bad_arguments_in_one_line_before_any_work(tmp_path, monkeypatch, change, error,
                                                                             message):
    """Called from Python, meanfield_report made its folder before looking at its arguments: threads=0 was refused
    with the folder left behind, a quick="no" ran the full set (minutes), and out_dir naming a file was a
    FileExistsError. Now each is refused in one line before any work, and nothing is made."""
    from psattn.meanfield import reproduce as module

    monkeypatch.setattr(module, "_write_report", lambda *args: pytest.fail("the work began"))
    (tmp_path / "file").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    arguments = {"out_dir": tmp_path / "out", "quick": True, "progress": False, "threads": 1, **change}
    with pytest.raises(error) as refused:
        meanfield_report(**arguments)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"] and (tmp_path / "file").read_text() == "mine\n"


def test_a_meanfield_report_that_fails_midway_leaves_no_folder_of_its_own(tmp_path, monkeypatch):
    """A failure after the work began left the report's folder, made for it, empty behind: now the folders it made
    go with its staging folder."""
    from psattn.meanfield import reproduce as module

    def fails(*args):
        raise RuntimeError("failed midway")

    monkeypatch.setattr(module, "_write_report", fails)
    with pytest.raises(RuntimeError, match="failed midway"):
        meanfield_report(tmp_path / "new" / "meanfield")
    assert list(tmp_path.iterdir()) == []


def test_a_run_interrupted_while_writing_leaves_the_earlier_run_whole(tmp_path, monkeypatch, capsys):
    """The files are moved into --out only once all are written: Ctrl-C during the animation (the last and slowest
    file) left this run's config.json and summary.json beside the earlier run's states.npz and GIF."""
    pytest.importorskip("matplotlib")
    from psattn.meanfield import plots

    out = tmp_path / "run"
    argv = ["meanfield", "run", "--n", "4", "--tau", "0.1", "--records", "3", "--out", str(out)]
    assert _main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "animate_states", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _main(argv[:-2] + ["--seed", "5", "--out", str(out)])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder left either
    monkeypatch.undo()
    (out / ".meanfield-run-999999999-x").mkdir()  # left by a run that was killed: its process is gone
    assert _main(argv[:-2] + ["--seed", "5", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 5


def test_a_report_rerun_removes_the_earlier_reports_figures_it_does_not_rewrite(tmp_path, monkeypatch):
    """A --quick rerun over a --full report left final_states_n128.png, diagnostics_n256.png ... beside a report and
    a paper/summary.json of n = 64 only; files the report does not write stay."""
    from psattn.meanfield import reproduce as module

    for name in ("report.md", "final_states_n256.png", "diagnostics_n128.png", "check_cluster_count.png",
                 "animation_rope_n256.gif", "notes.png"):
        (tmp_path / name).write_text("earlier")
    monkeypatch.setattr(module, "_check_plan", lambda quick: [])
    monkeypatch.setattr(module, "_plots_available", lambda: False)
    monkeypatch.setattr(module, "paper_configs", lambda ns: paper_configs(ns=(4,), kernels=("usa",), tau=0.1))
    meanfield_report(tmp_path, quick=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checks.json", "notes.png", "paper", "report.md"]


def test_a_failed_paper_run_is_one_line_naming_it_and_keeps_the_earlier_report(tmp_path, monkeypatch, capsys):
    """A paper config that raised ended reproduce with its error alone (an overflow's line named no kernel or n)."""
    import dataclasses

    from psattn.cli import main
    from psattn.meanfield import reproduce as module

    configs = paper_configs(ns=(4,), kernels=("usa", "rope", "prefix"), tau=0.1)
    configs[1] = dataclasses.replace(configs[1], beta=30.0, beta_aware_step=False, dt=1e300, tau=1e300)  # h·v ~ 1e330
    (tmp_path / "report.md").write_text("earlier")
    monkeypatch.setattr(module, "paper_configs", lambda ns: configs)
    with pytest.raises(SystemExit) as stop:
        main(["meanfield", "reproduce", "--quick", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("psattn: error: the paper experiment's run 2 of 3 (rope_n4) failed: the simulation overflowed"), err
    assert err.endswith("no report written (an earlier one is left whole)"), err
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"] and (tmp_path / "report.md").read_text() == "earlier"


def test_a_paper_run_interrupted_says_no_report_was_written_and_keeps_the_earlier_report(tmp_path, monkeypatch, capsys):
    """Ctrl-C during a paper run: the runs that finished are in the staging folder's paper/summary.json, which goes
    with the unwritten report, so the line says that no report was written, not where a summary lies."""
    from psattn.cli import main
    from psattn.meanfield import experiments
    from psattn.meanfield import reproduce as module

    configs = paper_configs(ns=(4,), kernels=("usa", "rope", "prefix"), tau=0.1)
    simulate = experiments.simulate

    def interrupted(config):
        if config is configs[1]:
            raise KeyboardInterrupt
        return simulate(config)

    (tmp_path / "report.md").write_text("earlier")
    monkeypatch.setattr(module, "paper_configs", lambda ns: configs)
    monkeypatch.setattr(experiments, "simulate", interrupted)
    assert main(["meanfield", "reproduce", "--quick", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == ("psattn: interrupted in the paper experiment, during run 2 of 3 (rope_n4); no report written "
                   "(an earlier one is left whole)"), err
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"] and (tmp_path / "report.md").read_text() == "earlier"


@pytest.mark.parametrize("during", ["paper run", "theorem check"])
def test_a_sigterm_stops_meanfield_reproduce_as_ctrl_c_does(tmp_path, monkeypatch, capsys, during):
    """SIGTERM (``timeout``'s, a scheduler's) during a paper run or a theorem check ended the process on the spot:
    no word, exit code 143 from the shell, and the staging folder left in --out. Now it stops as Ctrl-C does, with
    the exit code of a process SIGTERM ended, as ``psattn train`` gives."""
    import signal

    from psattn.cli import main
    from psattn.meanfield import experiments
    from psattn.meanfield import reproduce as module

    def sigterm():  # the default action would end pytest: refused here instead
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            pytest.fail(f"SIGTERM during a {during} would end the process (no handler)")
        os.kill(os.getpid(), signal.SIGTERM)

    configs = paper_configs(ns=(4,), kernels=("usa", "rope", "prefix"), tau=0.1)
    simulate = experiments.simulate

    def stopped(config):
        if config is configs[1] and during == "paper run":
            sigterm()
        return simulate(config)

    (tmp_path / "report.md").write_text("earlier")
    monkeypatch.setattr(module, "paper_configs", lambda ns: configs)
    monkeypatch.setattr(module, "_plots_available", lambda: False)
    monkeypatch.setattr(module, "_check_plan", lambda quick: [("stopped", sigterm)])
    monkeypatch.setattr(experiments, "simulate", stopped)
    assert main(["meanfield", "reproduce", "--quick", "--out", str(tmp_path)]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err.strip()
    said = {"paper run": "psattn: stopped by SIGTERM in the paper experiment, during run 2 of 3 (rope_n4); no report "
                         "written (an earlier one is left whole)",
            "theorem check": "psattn: stopped by SIGTERM"}[during]
    assert err.splitlines()[-1] == said, err
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"] and (tmp_path / "report.md").read_text() == "earlier"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.parametrize("call", ["command", "function"])
def test_a_report_interrupted_midway_leaves_the_earlier_report_whole(tmp_path, monkeypatch, call):
    """reproduce wrote into --out as it went: Ctrl-C (or a kill) before report.md left this run's paper/summary.json
    and checks.json beside the earlier report; the command staged its report first, a call of meanfield_report
    (as psattn reproduce makes) did not."""
    from psattn.meanfield import reproduce as module

    monkeypatch.setattr(module, "_check_plan", lambda quick: [])
    monkeypatch.setattr(module, "_plots_available", lambda: False)
    monkeypatch.setattr(module, "paper_configs", lambda ns: paper_configs(ns=(4,), kernels=("usa",), tau=0.1))
    argv = ["meanfield", "reproduce", "--quick", "--out", str(tmp_path)]
    run = (lambda: _main(argv)) if call == "command" else (lambda: meanfield_report(tmp_path, quick=True))
    run()  # the paper's claims fail on so small a run (exit 1); the report is written all the same
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "paper_configs", lambda ns: paper_configs(ns=(4,), kernels=("usa",), tau=0.2))
    monkeypatch.setattr(module, "_report", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run()
    assert {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checks.json", "paper", "report.md"]  # no staging folder


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_a_sigterm_held_while_the_files_move_in_leaves_no_staging_folder(tmp_path, monkeypatch, command):
    """A SIGTERM held while the files were moved in ended the process on leaving the held block, before the staging
    folder was removed: an empty .meanfield-run-PID-* stayed in --out (the report's with its empty paper/)."""
    import signal

    from helpers import Ended, default_action_raises, hidden_entries, stop_on_moving_into
    from psattn.meanfield import reproduce as module

    monkeypatch.setattr(module, "_check_plan", lambda quick: [])
    monkeypatch.setattr(module, "_plots_available", lambda: False)
    monkeypatch.setattr(module, "paper_configs", lambda ns: paper_configs(ns=(4,), kernels=("usa",), tau=0.1))
    out = tmp_path / "out"
    argv = {"run": ["meanfield", "run", "--n", "4", "--tau", "0.1", "--records", "3", "--no-animation", "--out", str(out)],
            "reproduce": ["meanfield", "reproduce", "--quick", "--out", str(out)]}[command]
    stop_on_moving_into(monkeypatch, out)
    with default_action_raises(signal.SIGTERM, lambda: hidden_entries(out)) as seen, pytest.raises(Ended):
        _main(argv)
    assert seen == [[]] and (out / {"run": "summary.json", "reproduce": "report.md"}[command]).is_file()


@pytest.mark.parametrize("argv,match", [
    (["--kernel", "cosine_toeplitz", "--frequencies", "0.5"], "--frequencies sets a parameter of the rope and "
                                                               "generalised_rope kernels, not of 'cosine_toeplitz'"),
    (["--kernel", "rope", "--omega", "2"], "--omega sets a parameter of the cosine_toeplitz kernel, not of 'rope'"),
    (["--n-prompts", "3"], "--n-prompts sets a parameter of the prefix kernel, not of 'usa'"),
])
def test_a_kernel_flag_the_kernel_does_not_read_is_refused(argv, match):
    """--frequencies with cosine Toeplitz (whose frequency is --omega) ran at the default ω = 2π/n, with the unread
    frequencies recorded in config.json."""
    with pytest.raises(ValueError, match=match):
        resolve_run_config(_parser().parse_args(["meanfield", "run", *argv]))
    cfg = resolve_run_config(_parser().parse_args(["meanfield", "run", "--kernel", "prefix", "--gauge-seed", "3"]))
    assert cfg.kernel.gauge_seed == 3


def test_a_batch_runs_line_says_whose_numbers_it_gives(tmp_path, capsys):
    """With --batch 3 the line gave batch element 0's spread, aligned pairs and clusters as the run's, without a word
    (summary.json holds each element's)."""
    argv = ["meanfield", "run", "--kernel", "prefix", "--n", "8", "--tau", "0.5", "--no-animation", "--batch", "3",
            "--out", str(tmp_path / "run")]
    assert _main(argv) == 0
    assert "; batch element 0 of 3: marginal spread " in capsys.readouterr().out
    assert _main(argv[:-4] + ["--out", str(tmp_path / "one")]) == 0
    assert "batch element" not in capsys.readouterr().out


@pytest.mark.parametrize("during", ["simulation", "figures", "move"])
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_to_meanfield_run_says_what_it_left_as_the_batch_does(tmp_path, monkeypatch, capsys, request, signum,
                                                                             during):
    """SIGTERM or SIGHUP during ``psattn meanfield run`` ended the process on the spot, without a word (and during its
    figures, left its staging folder in --out). Now it stops as Ctrl-C does, in the line and with the exit code the
    batch gives, the earlier run left whole; one held while the files move in lands once they are in place."""
    import importlib
    import signal

    from helpers import hidden_entries, stop_on_moving_into
    from psattn.cli import main
    from psattn.meanfield import experiments

    number = getattr(signal, signum)
    previous = signal.signal(number, signal.SIG_DFL)  # as in a terminal: under nohup SIGHUP starts ignored
    request.addfinalizer(lambda: signal.signal(number, previous))
    simulation = importlib.import_module("psattn.meanfield.simulate")  # the package's name is the function's

    def stop():  # the default action would end pytest: refused here instead
        if signal.getsignal(number) == signal.SIG_DFL:
            pytest.fail(f"{signum} during the {during} would end the process (no handler)")
        os.kill(os.getpid(), number)

    out = tmp_path / "run"
    argv = ["meanfield", "run", "--n", "4", "--tau", "0.1", "--records", "3", "--no-animation", "--out", str(out)]
    assert main([*argv, "--seed", "1"]) == 0
    earlier = {p.name: p.read_bytes() for p in out.iterdir()}
    simulate, write_summary = simulation.simulate, experiments.write_summary
    if during == "simulation":
        monkeypatch.setattr(simulation, "simulate", lambda *a, **k: (stop(), simulate(*a, **k))[1])
    elif during == "figures":
        monkeypatch.setattr(experiments, "write_summary", lambda *a, **k: (stop(), write_summary(*a, **k))[1])
    else:  # held while the files move in, then handled: the default action would end pytest, refused here instead
        from psattn import processes

        monkeypatch.setattr(processes, "_end_by", lambda s: pytest.fail(f"{signum} held would end the process"))
        stop_on_moving_into(monkeypatch, out, number)
    capsys.readouterr()
    assert main(argv) == 128 + number
    said = capsys.readouterr().err.strip().splitlines()[-1]
    if during == "move":
        assert said == f"psattn: stopped by {signum} as its files were moved in; {out} holds this run's files, whole"
        assert json.loads((out / "config.json").read_text())["config"]["seed"] == 0
    else:
        assert said == (f"psattn: stopped by {signum} during the run (usa_n4); nothing written to {out} (an earlier run "
                        "there is left whole)")
        assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")} == earlier
    assert hidden_entries(out) == [] and signal.getsignal(number) == signal.SIG_DFL
