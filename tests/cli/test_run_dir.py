"""A run directory is self-contained: used from any folder, continued by --run-dir alone, named after what
it trains, and a start that fails leaves nothing behind."""

import json

import pytest

from helpers import tiny_config
from psattn.cli import main
from psattn.training.trainer import train

SMALL = ["model.d_model=32", "model.n_heads=2", "task.seq_len=16", "train.batch_size=4", "train.eval_size=4",
         "train.threads=1"]


@pytest.mark.slow  # trains, scores and exports to ONNX: about 10 s
def test_a_text_run_trained_on_a_relative_path_is_evaluated_exported_and_resumed_from_elsewhere(
        tmp_path, monkeypatch, capsys):
    pytest.importorskip("tokenizers")
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    (tmp_path / "here" / "notes").mkdir(parents=True)
    (tmp_path / "here" / "notes" / "a.txt").write_text("def f(x):\n    return x + 1\n\n" * 200)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert main(["train", "--config", "text", "--run-dir", "runs/mine", "--set", "task.corpus=notes/*.txt",
                 "task.tokenizer=byte", "task.vocab_size=256", "train.steps=4", "train.eval_every=2", *SMALL]) == 0
    run = tmp_path / "here" / "runs" / "mine"
    saved = json.loads((run / "config.json").read_text())
    assert saved["task"]["corpus"] == str(tmp_path / "here" / "notes" / "*.txt")  # resolves from anywhere
    assert saved["name"] == "mine"  # not the shipped config's name: its corpus was overridden

    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["eval", "--run-dir", str(run)]) == 0
    assert main(["export", "--run-dir", str(run), "--out", "model.onnx"]) == 0
    assert (tmp_path / "elsewhere" / "model.onnx").exists()
    capsys.readouterr()
    assert main(["train", "--run-dir", str(run), "--set", "train.steps=6"]) == 0  # the saved config, 2 steps more
    assert "trained 6 steps" in capsys.readouterr().out
    assert json.loads((run / "result.json").read_text())["steps"] == 6


def test_train_with_only_the_run_dir_continues_the_run_from_its_saved_config(tmp_path, capsys):
    train(tiny_config(10), tmp_path / "run")
    assert main(["train", "--run-dir", str(tmp_path / "run")]) == 0  # finished: the same run, nothing to do
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--set", "train.steps=20"]) == 0
    assert json.loads((tmp_path / "run" / "result.json").read_text())["steps"] == 20
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["steps"] == 20


def test_a_new_run_from_the_defaults_and_set_is_named_after_its_directory(tmp_path, capsys):
    """Without --config every such run was named "run" (its result, its report lines, a sweep's tables); it is named
    after its folder, as a run from a config file with --set is, and continuing it keeps that name."""
    small = [s for s in SMALL if not s.startswith("task.")]  # the default task's distractors need its length
    command = ["train", "--run-dir", str(tmp_path / "austen-L1"), "--set", *small, "train.steps=4", "train.eval_every=2"]
    assert main(command) == 0
    assert json.loads((tmp_path / "austen-L1" / "config.json").read_text())["name"] == "austen-L1"
    assert main([*command[:-2], "train.steps=6", "train.eval_every=2"]) == 0  # grown: the same run, the same name
    saved = json.loads((tmp_path / "austen-L1" / "config.json").read_text())
    assert (saved["name"], saved["train"]["steps"]) == ("austen-L1", 6)
    assert main(["train", "--run-dir", str(tmp_path / "named"), "--set", *small, "train.steps=2", "name=mine"]) == 0
    assert json.loads((tmp_path / "named" / "config.json").read_text())["name"] == "mine"


@pytest.mark.parametrize("there", ["nothing", "an empty folder", "a run without its config.json"])
def test_train_with_only_a_run_dir_that_holds_no_run_is_refused_and_starts_none(tmp_path, capsys, there):
    """--run-dir alone continues a run: a mistyped name of one, a folder without a config.json, is refused in one
    line saying how to start a run (it started a new 1,000-step run of the defaults there)."""
    run = tmp_path / "run"
    if there == "an empty folder":
        run.mkdir()
    elif there == "a run without its config.json":
        train(tiny_config(2), run)
        (run / "config.json").unlink()
    kept = sorted(p.name for p in run.iterdir()) if run.exists() else None
    for extra in ([], ["--restart"], ["--print-config"]):
        with pytest.raises(SystemExit) as stop:
            main(["train", "--run-dir", str(run), *extra])
        out, err = capsys.readouterr()
        assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and not out, err
        if there == "a run without its config.json":
            assert f"{run} has no config.json to continue its run from" in err and "--config FILE" in err, err
        else:
            assert f"there is no run in {run} ({'no such folder' if there == 'nothing' else 'no config.json'})" in err
            assert "start one with --config FILE (psattn configs lists the shipped ones) or --set KEY=VALUE" in err, err
        assert (sorted(p.name for p in run.iterdir()) if run.exists() else None) == kept  # nothing written
    if there == "nothing":  # --set starts a run of the defaults with them
        assert main(["train", "--run-dir", str(run), "--set", "train.steps=2", "train.eval_every=2",
                     "task.form=all_positions", *SMALL]) == 0
        assert json.loads((run / "result.json").read_text())["steps"] == 2


def test_the_command_that_started_a_run_continues_it_with_more_steps_or_another_early_stopping_rule(tmp_path, capsys):
    (tmp_path / "mine.json").write_text(json.dumps({**tiny_config(10).to_dict(), "name": "mine"}))
    start = ["train", "--config", str(tmp_path / "mine.json"), "--run-dir", str(tmp_path / "run")]
    assert main(start) == 0  # named by its file
    for more in (["train.steps=20"], ["train.steps=20", "train.early_stop=true"]):  # --set: the run keeps its name
        assert main([*start, "--set", *more]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "result.json").read_text())["steps"] == 20
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["name"], saved["train"]["steps"], saved["train"]["early_stop"]) == ("mine", 20, True)


def test_a_failed_start_leaves_no_lock_and_no_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["train", "--config", "text", "--run-dir", "runs/x", "--set", "task.corpus=missing/*.txt"])
    assert not (tmp_path / "runs" / "x").exists()
    (tmp_path / "runs" / "y").mkdir()  # a folder the user made stays, empty
    with pytest.raises(SystemExit):
        main(["train", "--config", "text", "--run-dir", "runs/y", "--set", "task.corpus=missing/*.txt"])
    assert list((tmp_path / "runs" / "y").iterdir()) == []


def test_plot_draws_into_the_run_directory_unless_told_and_says_where(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    train(tiny_config(10), tmp_path / "run")
    train(tiny_config(10, seed=1), tmp_path / "other")
    assert main(["plot", "run"]) == 0
    assert capsys.readouterr().out.strip() == f"figure: {tmp_path / 'run' / 'curves.png'}".replace(str(tmp_path) + "/", "")
    assert (tmp_path / "run" / "curves.png").exists() and not list(tmp_path.glob("*.png"))
    assert main(["plot", "run", "other", "--out", "both.png"]) == 0
    assert capsys.readouterr().out.strip() == "figure: both.png"
    with pytest.raises(SystemExit):
        main(["plot", "run", "other"])
    assert "--out PATH is required with several run directories" in capsys.readouterr().err
    assert main(["plot", "run", "--out", "curvesfile"]) == 0  # said "curvesfile"; matplotlib wrote curvesfile.png
    assert capsys.readouterr().out.strip() == "figure: curvesfile.png" and (tmp_path / "curvesfile.png").exists()
    with pytest.raises(SystemExit):
        main(["plot", "run", "--out", "run"])  # a folder: it wrote run.png beside it
    assert "run is a folder; name the figure's file" in capsys.readouterr().err and not (tmp_path / "run.png").exists()


@pytest.mark.parametrize("foreign", ['{"model_type": "llama", "hidden_size": 64}', '{"model": '])
def test_a_folder_whose_config_json_is_another_programs_is_refused_and_kept(tmp_path, foreign, capsys):
    """A Hugging Face model's folder (its config.json, no checkpoint.pt): --config FILE trained into it and
    replaced its config.json, --restart too."""
    (tmp_path / "config.json").write_text(json.dumps(tiny_config(2).to_dict()))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(foreign)
    for restart in ([], ["--restart"]):
        with pytest.raises(SystemExit) as stop:
            main(["train", "--config", str(tmp_path / "config.json"), "--run-dir", str(tmp_path / "model"), *restart])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "holds a config.json that is not a psattn run's" in err, err
        assert (tmp_path / "model" / "config.json").read_text() == foreign
        assert [p.name for p in (tmp_path / "model").iterdir()] == ["config.json"]  # no lock file left behind
