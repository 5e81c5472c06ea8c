"""The paper sweep's configs, the JSON runner and the plots that read its output."""

import dataclasses
import json

import pytest

from psattn.meanfield.config import SimulationConfig
from psattn.meanfield.experiments import (
    PAPER_KERNELS,
    ExperimentsFailed,
    paper_configs,
    paper_kernel,
    run_experiments,
    run_name,
)
from psattn.meanfield.plots import plot_diagnostics, plot_final_states


def test_paper_configs_cover_the_grid():
    configs = paper_configs()
    assert len(configs) == 3 * len(PAPER_KERNELS)
    assert {c.n for c in configs} == {64, 128, 256}
    assert {c.kernel.name for c in configs} == set(PAPER_KERNELS)
    assert all(c.tau == 20.0 and c.d == 3 for c in configs)
    assert len({run_name(c) for c in configs}) == len(configs)


def test_unknown_paper_kernel_rejected():
    with pytest.raises(ValueError, match="unknown paper kernel"):
        paper_kernel("alibi", 8)


def test_a_paper_kernel_for_no_particles_and_a_runner_on_no_threads_are_refused(tmp_path):
    with pytest.raises(ValueError, match="n must be an integer ≥ 2"):  # ZeroDivisionError
        paper_kernel("rope", 0)
    with pytest.raises(ValueError, match="threads must be an integer ≥ 1 or None"):  # torch's words, no name
        run_experiments(paper_configs(ns=(8,), kernels=("usa",), tau=0.1), tmp_path, threads=0)


def test_runner_writes_summary_and_plots_read_it(tmp_path):
    configs = paper_configs(ns=(8,), tau=1.0, batch=2)
    summary = run_experiments(configs, tmp_path)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    assert [SimulationConfig(**r["config"]) for r in saved["runs"]] == configs  # configs reload from JSON
    assert [r["name"] for r in saved["runs"]] == [f"{k}_n8" for k in PAPER_KERNELS]
    run = saved["runs"][0]
    assert len(run["final_state"]) == 8 and len(run["final"]["marginal_spread"]) == 2
    assert len(run["record_times"]) == len(run["diagnostics"]["mean_cosine"]) == len(run["energy"])
    assert all(r["energy_monotone"] for r in saved["runs"])

    spheres = plot_final_states(tmp_path, tmp_path / "final.png")
    curves = plot_diagnostics(tmp_path / "summary.json", tmp_path / "diagnostics.png")
    assert spheres.stat().st_size > 0 and curves.stat().st_size > 0


def test_a_failed_config_keeps_the_others_runs_and_is_named(tmp_path):
    """Config 2 of 3 overflowed and nothing was written: the finished run was lost with the failure."""
    configs = paper_configs(ns=(8,), kernels=("usa", "rope", "prefix"), tau=0.1)
    configs[1] = dataclasses.replace(configs[1], beta=30.0, beta_aware_step=False, dt=1e300, tau=1e300)  # h·v ~ 1e330
    with pytest.raises(ExperimentsFailed, match=r"^run 2 of 3 \(rope_n8\) failed: the simulation overflowed float64 ")\
            as error:
        run_experiments(configs, tmp_path)
    assert "\n" not in str(error.value) and str(tmp_path / "summary.json") in str(error.value)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["usa_n8", "prefix_n8"]  # the third runs all the same
    (failed,) = saved["failed"]
    assert failed["index"] == 1 and failed["name"] == "rope_n8" and failed["config"]["dt"] == 1e300
    assert failed["error"].startswith("the simulation overflowed float64") and "\n" not in failed["error"]
    assert run_experiments(paper_configs(ns=(8,), kernels=("usa",), tau=0.1), tmp_path)["failed"] == []  # a rerun
    assert json.loads((tmp_path / "summary.json").read_text())["failed"] == []  # rewrites the summary


@pytest.mark.parametrize("overflow_first", [False, True])
def test_an_error_that_is_no_refusal_is_raised_as_it_came_once_the_others_are_saved(tmp_path, monkeypatch,
                                                                                      overflow_first):
    """A bug or an out-of-memory error is not turned into a one-line refusal: it propagates as it is, after the
    summary of the runs that finished is written; also after an earlier refusal (only the first failure was looked
    at: a bug after an overflow was turned into "(and 1 more)" of the overflow's refusal, its traceback never shown)."""
    import psattn.meanfield.experiments as experiments

    configs = paper_configs(ns=(8,), kernels=("usa", "rope", "prefix"), tau=0.1)
    if overflow_first:
        configs[0] = dataclasses.replace(configs[0], beta=30.0, beta_aware_step=False, dt=1e300, tau=1e300)  # h·v ~ 1e330
    simulate = experiments.simulate

    def broken(config):
        if config is configs[1]:
            raise RuntimeError("a bug in the kernel")
        return simulate(config)

    monkeypatch.setattr(experiments, "simulate", broken)
    with pytest.raises(RuntimeError, match="^a bug in the kernel$"):
        run_experiments(configs, tmp_path)
    saved = json.loads((tmp_path / "summary.json").read_text())
    failed = ["usa_n8", "rope_n8"] if overflow_first else ["rope_n8"]
    assert [r["name"] for r in saved["failed"]] == failed
    assert [r["name"] for r in saved["runs"]] == [n for n in ("usa_n8", "prefix_n8") if n not in failed]


def test_the_package_docstring_lists_its_files():
    """psattn.meanfield's list of its files named a ``cli`` module it no longer has (the command line moved to
    psattn.commands.meanfield) and left out memory and staging."""
    import re
    from pathlib import Path

    import psattn.meanfield

    listed = set(re.findall(r"^- ``(\w+)``", psattn.meanfield.__doc__, flags=re.MULTILINE))
    files = {p.stem for p in Path(psattn.meanfield.__file__).parent.glob("*.py")} - {"__init__"}
    assert listed == files


def test_an_interrupt_keeps_the_finished_runs_and_names_the_interrupted_one(tmp_path, monkeypatch):
    """Ctrl-C during run 3 of 4 wrote no summary.json: the two runs that had finished (one of them failed) were
    lost. The summary holds them, names the interrupted run under "interrupted", and the interrupt goes on."""
    import psattn.meanfield.experiments as experiments

    configs = paper_configs(ns=(8,), kernels=("usa", "rope", "prefix", "distance_bias"), tau=0.1)
    configs[1] = dataclasses.replace(configs[1], beta=30.0, beta_aware_step=False, dt=1e300, tau=1e300)  # h·v ~ 1e330
    simulate = experiments.simulate

    def interrupted(config):
        if config is configs[2]:
            raise KeyboardInterrupt
        return simulate(config)

    monkeypatch.setattr(experiments, "simulate", interrupted)
    with pytest.raises(KeyboardInterrupt) as stop:
        run_experiments(configs, tmp_path)
    said = str(stop.value)
    assert said.startswith("during run 3 of 4 (prefix_n8); ") and "\n" not in said, said
    assert str(tmp_path / "summary.json") in said
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["usa_n8"] and [r["name"] for r in saved["failed"]] == ["rope_n8"]
    interrupted = saved["interrupted"]
    assert (interrupted["index"], interrupted["name"]) == (2, "prefix_n8")
    assert SimulationConfig(**interrupted["config"]) == configs[2]
    monkeypatch.undo()
    assert run_experiments(configs[:1], tmp_path)["interrupted"] is None  # a run that ends says so


def test_an_output_folder_that_cannot_be_made_is_refused_before_any_run(tmp_path, monkeypatch):
    """A file where the output folder was to be found every run done and lost: its folder was made only when the
    summary was written, after the last run."""
    import psattn.meanfield.experiments as experiments

    ran = []

    def counted(config):
        ran.append(config)
        raise ValueError("ran")

    monkeypatch.setattr(experiments, "simulate", counted)
    (tmp_path / "taken").write_text("a file")
    for out in (tmp_path / "taken", tmp_path / "taken" / "runs"):
        with pytest.raises((FileExistsError, NotADirectoryError)):
            run_experiments(paper_configs(ns=(8,), kernels=("usa",), tau=0.1), out)
    assert ran == []


def test_a_list_holding_something_other_than_a_config_is_refused_before_any_run(tmp_path):
    """A config's dict (not a SimulationConfig) in the list failed in simulate, and recording that failure raised
    an AttributeError: the runs before it were done and lost, with no summary written."""
    configs = paper_configs(ns=(8,), kernels=("usa", "rope"), tau=0.1)
    with pytest.raises(TypeError, match=r"^run_experiments takes SimulationConfigs; config 3 of 3 is a dict "
                                        r"\(SimulationConfig\(\*\*fields\) makes one\)$"):
        run_experiments([*configs, configs[0].to_dict()], tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_configs_given_as_a_generator_are_run_and_a_failure_among_them_named(tmp_path):
    """The list's length, read to name a failed config, raised a TypeError for a generator: the runs were lost."""
    configs = paper_configs(ns=(8,), kernels=("usa", "rope"), tau=0.1)
    configs[1] = dataclasses.replace(configs[1], beta=30.0, beta_aware_step=False, dt=1e300, tau=1e300)  # h·v ~ 1e330
    with pytest.raises(ExperimentsFailed, match=r"^run 2 of 2 \(rope_n8\) failed: "):
        run_experiments((c for c in configs), tmp_path)
    assert [r["name"] for r in json.loads((tmp_path / "summary.json").read_text())["runs"]] == ["usa_n8"]


def _meanfield_exceptions() -> set[type]:
    """Every exception class a module of psattn.meanfield defines."""
    import importlib
    import inspect
    import pkgutil

    import psattn.meanfield

    found = set()
    for info in pkgutil.iter_modules(psattn.meanfield.__path__):
        module = importlib.import_module(f"psattn.meanfield.{info.name}")
        found |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                  if issubclass(c, BaseException) and c.__module__ == module.__name__}
    return found


def test_every_meanfield_exception_survives_pickling_with_its_message_and_fields():
    """ExperimentsFailed and ExperimentsInterrupted took three arguments but kept only the message in args, so
    unpickling one (a multiprocessing pool sends a worker's error back so) raised a TypeError about missing arguments."""
    import pickle
    import signal

    from psattn.meanfield.experiments import ExperimentsInterrupted
    from psattn.meanfield.metastability import NoPlateau

    record = {"index": 2, "name": "rope_n8", "config": {"n": 8}}
    examples = [ExperimentsFailed("run 3 of 4 (rope_n8) failed: overflow", [record], "out/summary.json holds the 2"),
                ExperimentsInterrupted("during run 3 of 4 (rope_n8)", record, "out/summary.json holds the 2"),
                ExperimentsInterrupted("after its last run", None, "out/summary.json holds the 4"),
                ExperimentsInterrupted("during run 1 of 4 (usa_n8)", record, "out/summary.json holds the 0", signal.SIGTERM),
                NoPlateau("no cluster count above 1 was held for 3 time units by t = 20; run longer (tau)")]
    assert {type(e) for e in examples} == _meanfield_exceptions()  # a new exception class gets an example here
    for err in examples:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_keeps_the_finished_runs_as_ctrl_c_does(tmp_path, signum):
    """SIGTERM (``timeout``'s, a scheduler's) or SIGHUP during run 3 of 4 ended the process on the spot, their
    default action: no summary.json, the two runs that had finished lost. (In a process of its own: the default
    action ends the process that gets the signal.)"""
    import subprocess
    import sys

    script = tmp_path / "batch.py"
    script.write_text(f"""
import os, signal
from psattn.meanfield import experiments

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
configs = experiments.paper_configs(ns=(8,), kernels=("usa", "rope", "prefix", "distance_bias"), tau=0.1)
simulate = experiments.simulate

def stopped(config):
    if config is configs[2]:
        os.kill(os.getpid(), signal.{signum})
    return simulate(config)

experiments.simulate = stopped
try:
    experiments.run_experiments(configs, {str(tmp_path)!r})
except experiments.ExperimentsInterrupted as err:
    print(signal.Signals(err.signum).name, signal.getsignal(signal.{signum}) is signal.SIG_DFL)
    print(err)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines() == [
        f"{signum} True",  # the default action put back
        f"{signum} during run 3 of 4 (prefix_n8); {tmp_path / 'summary.json'} holds the 2 that finished, and names "
        "this one under \"interrupted\""]
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["usa_n8", "rope_n8"]
    assert (saved["interrupted"]["index"], saved["interrupted"]["name"]) == (2, "prefix_n8")


def test_a_programs_own_sigterm_handler_is_left_in_place(tmp_path, monkeypatch):
    """run_experiments turns SIGTERM into a stop only where its default action would end the process: a handler
    of the program's own gets the signal, and the list runs on to its end."""
    import os
    import signal

    import psattn.meanfield.experiments as experiments

    configs = paper_configs(ns=(8,), kernels=("usa", "rope"), tau=0.1)
    simulate, came = experiments.simulate, []

    def signalled(config):
        if config is configs[0]:
            os.kill(os.getpid(), signal.SIGTERM)
        return simulate(config)

    def own(signum, frame):
        came.append(signum)

    monkeypatch.setattr(experiments, "simulate", signalled)
    before = signal.signal(signal.SIGTERM, own)
    try:
        summary = run_experiments(configs, tmp_path)
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, before)
    assert came == [signal.SIGTERM]
    assert [r["name"] for r in summary["runs"]] == ["usa_n8", "rope_n8"] and summary["interrupted"] is None


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_second_stop_while_the_summary_is_written_waits_until_it_is_whole(tmp_path, signum):
    """A second SIGTERM or SIGHUP (a scheduler's own deadline) while summary.json was written, the handlers restored
    by then, ended the process on the spot: no summary, the runs that had finished lost. Now it is held until the
    summary is whole, then ends the process as it would have."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "batch.py"
    script.write_text(f"""
import os, signal
from psattn.meanfield import experiments

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
configs = experiments.paper_configs(ns=(8,), kernels=("usa", "rope", "prefix"), tau=0.1)
simulate, provenance = experiments.simulate, experiments.provenance

def stopped(config):
    if config is configs[2]:
        os.kill(os.getpid(), signal.{signum})
    return simulate(config)

def stopped_again(seed):
    os.kill(os.getpid(), signal.{signum})
    return provenance(seed)

experiments.simulate, experiments.provenance = stopped, stopped_again
experiments.run_experiments(configs, {str(tmp_path)!r})
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -getattr(signal, signum), (done.returncode, done.stderr[-2000:])  # ended by it
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["usa_n8", "rope_n8"] and saved["interrupted"]["name"] == "prefix_n8"


def test_a_second_stop_before_the_summary_is_written_waits_until_it_is_whole(tmp_path):
    """A second SIGTERM after the first one had stopped the list, before the summary's write had begun, found the
    default handler back in place and ended the process on the spot: no summary, the runs that had finished lost."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "batch.py"
    script.write_text(f"""
import os, signal
from psattn.meanfield import experiments

signal.signal(signal.SIGTERM, signal.SIG_DFL)
configs = experiments.paper_configs(ns=(8,), kernels=("usa", "rope", "prefix"), tau=0.1)
simulate, interrupted_run = experiments.simulate, experiments.interrupted_run

def stopped(config):
    if config is configs[2]:
        os.kill(os.getpid(), signal.SIGTERM)
    return simulate(config)

def stopped_again(*args):  # as the stopped run is named for the summary
    os.kill(os.getpid(), signal.SIGTERM)
    return interrupted_run(*args)

experiments.simulate, experiments.interrupted_run = stopped, stopped_again
experiments.run_experiments(configs, {str(tmp_path)!r})
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr[-2000:])  # ended by it, once written
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["usa_n8", "rope_n8"] and saved["interrupted"]["name"] == "prefix_n8"


def test_a_finished_or_failed_runs_tensors_are_freed_before_the_next_config_runs(tmp_path, monkeypatch):
    """The last trajectory (its states (R, B, n, d) with keep_states) stayed referenced while the next config ran, and
    each failed config's error kept, through its traceback, the frame of the run that raised and every tensor in it
    until the list ended: a batch held twice a run's memory, plus that of every failed run."""
    import weakref

    import torch

    import psattn.meanfield.experiments as experiments

    configs = paper_configs(ns=(8,), kernels=("usa", "rope", "prefix"), tau=0.1)
    simulate, alive = experiments.simulate, []

    def watched(config):
        assert [ref() for ref in alive] == [None] * len(alive), "an earlier run's tensors are still held"
        if config is configs[0]:
            states = torch.zeros(4)  # a tensor of the run that raises
            alive.append(weakref.ref(states))
            raise ValueError("the simulation overflowed")
        traj = simulate(config)
        alive.append(weakref.ref(traj.x))
        return traj

    monkeypatch.setattr(experiments, "simulate", watched)
    with pytest.raises(ExperimentsFailed, match=r"^run 1 of 3 \(usa_n8\) failed: the simulation overflowed; "):
        run_experiments(configs, tmp_path)
    assert len(alive) == 3


def test_a_list_whose_kept_summary_records_do_not_fit_is_refused_before_any_run(tmp_path, monkeypatch):
    """run_experiments keeps every run's summary record (its diagnostics as Python numbers, four times their float64)
    until it writes summary.json; each run's memory check counted neither its own record nor those of the runs
    before it, so a list whose every run passed could run out of memory late, its runs lost. (40 MiB free stands in
    for a small machine: a run of these needs about 15 MiB alone, its record 11 MiB of it.)"""
    import psattn.meanfield.experiments as experiments

    ran = []

    def counted(config):
        ran.append(config)
        raise ValueError("ran")

    monkeypatch.setattr(experiments, "simulate", counted)
    monkeypatch.setattr(experiments, "host_available_bytes", lambda: 40 * 2**20, raising=False)
    configs = [SimulationConfig(n=4, batch=1000, tau=2.0, seed=seed) for seed in range(5)]
    steps = configs[0].step_size()[1]
    assert configs[0].memory_bytes(steps) < 0.8 * 40 * 2**20  # each run fits alone
    with pytest.raises(ValueError, match=r"^the runs do not fit in memory together: the summary keeps every run's "
                                         r"record .* 0\.0 GiB is available; run the configs in shorter lists"):
        run_experiments(configs, tmp_path / "out")
    assert ran == [] and not (tmp_path / "out").exists()  # refused before the first run
    with pytest.raises(ExperimentsFailed, match="the 2 that failed"):  # two fit, and run
        run_experiments(configs[:2], tmp_path / "out")
    assert len(ran) == 2


def test_the_list_check_uses_the_available_memory_the_configs_were_made_with(tmp_path, monkeypatch):
    """The list's check read what the host had free even where the caller gave ``available_memory``: a list whose
    records overflow the caller's budget ran (the host had more), and one the caller said fits was refused."""
    import psattn.meanfield.experiments as experiments

    ran = []

    def counted(config):
        ran.append(config)
        raise ValueError("ran")

    monkeypatch.setattr(experiments, "simulate", counted)
    alone = SimulationConfig(n=4, batch=1000, tau=2.0, available_memory=2**40)
    alone = alone.memory_bytes(alone.step_size()[1])  # about 15 MiB, its record 11 MiB of it
    budget = int(alone / 0.8) + 1  # one run fits, two do not
    monkeypatch.setattr(experiments, "host_available_bytes", lambda: 2**40, raising=False)
    configs = [SimulationConfig(n=4, batch=1000, tau=2.0, seed=seed, available_memory=budget) for seed in range(3)]
    with pytest.raises(ValueError, match=r"^the runs do not fit in memory together: "):
        run_experiments(configs, tmp_path / "out")
    assert ran == []
    monkeypatch.setattr(experiments, "host_available_bytes", lambda: budget, raising=False)
    configs = [SimulationConfig(n=4, batch=1000, tau=2.0, seed=seed, available_memory=2**40) for seed in range(3)]
    with pytest.raises(ExperimentsFailed, match="the 3 that failed"):  # they fit in what the caller gave, and run
        run_experiments(configs, tmp_path / "out")
    assert len(ran) == 3


def test_a_runs_summary_record_is_counted_and_summary_json_is_not_held_whole(tmp_path):
    """The memory estimate left out the run's summary record, made while its tensors are held (its numbers cost
    33 bytes each as Python floats, 8 in a float64 tensor), and write_summary held the text of summary.json whole,
    three times the records again (json.dumps with an indent)."""
    import tracemalloc

    from psattn.meanfield.experiments import summarise, write_summary
    from psattn.meanfield.simulate import simulate

    config = SimulationConfig(n=4, batch=300, tau=2.0)
    traj = simulate(config)
    tracemalloc.start()
    try:
        record = summarise(traj)
        made = tracemalloc.get_traced_memory()[0]
        del traj
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
        write_summary([record, record], tmp_path)
        writing = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    steps = config.step_size()[1]
    assert config.memory_bytes(steps) > made  # (it was 1.2 MB)
    assert made <= config.record_bytes(steps) < 1.5 * made
    assert writing < made / 4  # streamed: (it was about 6 times the record)
    assert json.loads((tmp_path / "summary.json").read_text())["runs"] == json.loads(json.dumps([record, record]))
