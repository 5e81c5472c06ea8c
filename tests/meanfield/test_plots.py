"""Figures of the theorem checks and the GIF are drawn from saved records, never from live runs."""

import dataclasses
import json

import pytest

from psattn.meanfield import theorems
from psattn.meanfield.experiments import paper_configs, save_states
from psattn.meanfield.plots import animate_states, plot_check
from psattn.meanfield.simulate import simulate

#: the checks that draw a figure, each on small inputs
CHECKS_WITH_FIGURES = [
    lambda: theorems.check_conditional_diracisation("rope", n=16, batch=1),
    lambda: theorems.check_rope_orbit_universality(n=16),
    lambda: theorems.check_prefix_gauge_universality(n_prompts=8),
    lambda: theorems.check_spectral_dichotomy(n=16, batch=1),
    lambda: theorems.check_metastability_rate(betas=(2.0, 3.0, 4.0), batch=1),
]
CHECK_NAMES = ["diracisation", "rope_orbit", "prefix_gauge", "dichotomy", "metastability"]


@pytest.mark.parametrize("make", CHECKS_WITH_FIGURES, ids=CHECK_NAMES)
def test_every_check_figure_is_drawn_from_its_json_record(make, tmp_path):
    record = json.loads(json.dumps(make().to_dict(), allow_nan=False))
    path = plot_check(record, tmp_path / "figure.png")
    assert path is not None and path.stat().st_size > 0


def test_checks_without_figures_return_none(tmp_path):
    record = theorems.check_energy_ascent(n=8, tau=0.5, batch=1).to_dict()
    assert plot_check(record, tmp_path / "none.png") is None


@pytest.mark.parametrize("d", [2, 3])
def test_animation_is_a_gif_with_one_frame_per_record(d, tmp_path):
    pil = pytest.importorskip("PIL.Image")
    cfg = dataclasses.replace(paper_configs(ns=(8,), kernels=("rope",), tau=1.0, d=d)[0], keep_states=True,
                              n_records=4)
    states = save_states(simulate(cfg), tmp_path / "states.npz")
    gif = animate_states(states, tmp_path / "run.gif")
    assert gif is not None
    with pil.open(gif) as image:
        assert image.format == "GIF" and image.n_frames == 4


def test_an_animation_of_many_records_draws_at_most_max_frames_of_them(tmp_path, monkeypatch):
    """One frame per record held every frame in memory until the GIF was written (0.4 MB each): 100,000 records, which
    the run's memory check lets keep their states in megabytes, took 40 GB after the simulation had run."""
    pil = pytest.importorskip("PIL.Image")
    from psattn.meanfield import plots

    monkeypatch.setattr(plots, "MAX_FRAMES", 5, raising=False)
    cfg = dataclasses.replace(paper_configs(ns=(8,), kernels=("rope",), tau=1.0)[0], keep_states=True, n_records=12)
    gif = animate_states(save_states(simulate(cfg), tmp_path / "states.npz"), tmp_path / "run.gif")
    assert gif is not None
    with pil.open(gif) as image:
        assert image.n_frames == 5


def test_an_animation_cut_short_keeps_the_gif_already_there(tmp_path, monkeypatch):
    """The GIF was written in place: a write cut short (a full disk) left half a file where the earlier one had been."""
    pil = pytest.importorskip("PIL.Image")
    cfg = dataclasses.replace(paper_configs(ns=(8,), kernels=("rope",), tau=1.0)[0], keep_states=True, n_records=3)
    states = save_states(simulate(cfg), tmp_path / "states.npz")
    gif = animate_states(states, tmp_path / "run.gif")
    earlier = gif.read_bytes()

    def full_disk(image, fp, *args, **kwargs):
        with open(fp, "wb") as f:
            f.write(b"GIF89a half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pil.Image, "save", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        animate_states(states, gif)
    assert gif.read_bytes() == earlier and sorted(p.name for p in tmp_path.iterdir()) == ["run.gif", "states.npz"]


def test_save_states_needs_kept_states(tmp_path):
    cfg = paper_configs(ns=(8,), kernels=("usa",), tau=0.5)[0]
    with pytest.raises(ValueError, match="keep_states"):
        save_states(simulate(cfg), tmp_path / "states.npz")


def test_save_states_cut_short_keeps_the_states_already_there(tmp_path, monkeypatch):
    """states.npz was opened for writing in place: a write cut short (a full disk) left half a file where the
    earlier run's states had been."""
    import numpy as np

    cfg = dataclasses.replace(paper_configs(ns=(8,), kernels=("usa",), tau=0.5)[0], keep_states=True, n_records=3)
    traj = simulate(cfg)
    path = save_states(traj, tmp_path / "states.npz")
    earlier = path.read_bytes()

    def full_disk(file, **arrays):
        file.write(b"PK half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        save_states(traj, path)
    assert path.read_bytes() == earlier and [p.name for p in tmp_path.iterdir()] == ["states.npz"]


def _summary(names=("usa_n8", "prefix_n8")):
    times = [0.0, 1.0, 2.0]
    series = {k: [[v] for v in (0.8, 0.4, 0.1)] for k in
              ("marginal_spread", "fraction_aligned", "comoving_spread", "mean_cosine")}
    runs = [{"name": name, "record_times": times, "diagnostics": series, "energy": [[0.5], [0.7], [0.8]],
             "config": {"d": 3, "n": 8}, "labels": list(range(8)) if i == 0 else [0, 1] * 4,
             "final_state": [[0.0, 0.0, 1.0]] * 8} for i, name in enumerate(names)]
    return {"runs": runs}


def _captured(monkeypatch):
    from psattn.meanfield import plots

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi=120: figures.append(fig) or path)
    return plots, figures


def test_diagnostics_figure_reads_without_the_source(monkeypatch):
    plots, figures = _captured(monkeypatch)
    plots.plot_diagnostics(_summary(), "x.png")
    fig = figures[0]
    panels = fig.axes
    assert len(panels) == 5 and fig.get_suptitle()
    for ax in panels:
        assert ax.get_xlabel() == "time t" and ax.get_ylabel() and "_" not in ax.get_title()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["usa_n8", "prefix_n8"]  # one legend for all
    width, height = fig.get_size_inches()
    assert width / height < 3  # a grid, not one long strip



def test_aligned_pairs_panel_names_the_runs_threshold(monkeypatch):
    """A config may count pairs above another cosine than 0.999 (its threshold): the panel said 0.999 whatever
    the fraction drawn counted."""
    plots, figures = _captured(monkeypatch)
    summary = _summary()
    for run in summary["runs"]:
        run["config"]["threshold"] = 0.5
    plots.plot_diagnostics(summary, "x.png")
    aligned = next(ax for ax in figures[0].axes if ax.get_title() == "pairs aligned")
    assert aligned.get_ylabel() == "fraction of pairs with cos > 0.5"
    summary["runs"][1]["config"]["threshold"] = 0.9
    plots.plot_diagnostics(summary, "x.png")
    aligned = next(ax for ax in figures[1].axes if ax.get_title() == "pairs aligned")
    assert aligned.get_ylabel() == "fraction of pairs with cos > each run's threshold"

def test_final_states_have_a_colour_bar_per_panel(monkeypatch):
    plots, figures = _captured(monkeypatch)
    plots.plot_final_states(_summary(), "x.png")
    bars = [ax for ax in figures[0].axes if ax.get_ylabel() == "token label"]
    assert len(bars) == 2


@pytest.mark.parametrize("make", CHECKS_WITH_FIGURES, ids=CHECK_NAMES)
def test_every_check_figure_labels_its_axes_and_series(make, monkeypatch):
    plots, figures = _captured(monkeypatch)
    plots.plot_check(json.loads(json.dumps(make().to_dict(), allow_nan=False)), "x.png")
    for ax in figures[0].axes:
        if ax.name == "3d" or not ax.get_lines() and not ax.collections:
            continue  # sphere panels and colour bars
        if ax.get_lines() or ax.collections:
            assert ax.get_xlabel() and ax.get_ylabel(), (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())
        labelled = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        if len(ax.get_lines()) > 1:
            assert ax.get_legend() is not None and labelled, ax.get_title()


@pytest.mark.parametrize("labels", [[-float(i) for i in range(8)], [0.5 * i for i in range(8)]], ids=["negative", "half"])
def test_final_state_colours_span_the_labels(labels, monkeypatch):
    """Labels are free real positions (Theorem 2 places tokens at s = −θ/ω ≤ 0): the colour scale spans them,
    so each position gets its own colour (a 0..max(1, int(max)) scale drew negative positions in one colour)."""
    plots, figures = _captured(monkeypatch)
    summary = _summary(names=("rope_n8",))
    summary["runs"][0]["labels"] = labels
    plots.plot_final_states(summary, "x.png")
    points = [c for ax in figures[0].axes for c in ax.collections if c.get_array() is not None][-1]
    assert points.get_clim() == (min(labels), max(labels))
    assert len({tuple(c) for c in points.to_rgba(labels)}) == len(labels)


def test_final_state_colours_of_one_label(monkeypatch):
    plots, figures = _captured(monkeypatch)
    summary = _summary(names=("usa_n8",))
    summary["runs"][0]["labels"] = [0.0] * 8
    plots.plot_final_states(summary, "x.png")
    points = [c for ax in figures[0].axes for c in ax.collections if c.get_array() is not None][-1]
    assert points.get_clim() == (0.0, 1.0)


def test_the_run_commands_help_names_max_frames(capsys):
    """``psattn meanfield run -h`` answers without importing the plots (and matplotlib), so it states the number."""
    from psattn.cli import main
    from psattn.meanfield import plots

    with pytest.raises(SystemExit):
        main(["meanfield", "run", "-h"])
    assert f"the animation draws at most {plots.MAX_FRAMES})" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_while_an_animation_is_drawn_leaves_no_temporary_folder(tmp_path, signum):
    """SIGTERM or SIGHUP while ``animate_states`` drew its frames (seconds) ended the process on the spot and left the
    hidden ``.NAME.*.tmp`` folder it writes the GIF in beside the GIF, for good."""
    import signal
    import subprocess
    import sys

    pytest.importorskip("PIL.Image")
    cfg = dataclasses.replace(paper_configs(ns=(8,), kernels=("rope",), tau=1.0)[0], keep_states=True, n_records=3)
    states = save_states(simulate(cfg), tmp_path / "states.npz")
    script = tmp_path / "animate.py"
    script.write_text(f"""
import os, signal, sys
from matplotlib.animation import PillowWriter
from psattn.meanfield.plots import animate_states

signal.signal(signal.{signum}, signal.SIG_DFL)  # as in a terminal: under nohup the process starts with SIGHUP ignored
PillowWriter.grab_frame = lambda self, **kwargs: os.kill(os.getpid(), signal.{signum})
animate_states(sys.argv[1], sys.argv[2])
""")
    done = subprocess.run([sys.executable, str(script), str(states), str(tmp_path / "run.gif")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -getattr(signal, signum), done.stderr[-2000:]  # ended by the signal, as before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["animate.py", "states.npz"]
