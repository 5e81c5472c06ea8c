import dataclasses
import json

import pytest

from psattn.cli import main
from psattn.experiments import declared as exp


def test_demo_writes_a_report(tmp_path, capsys):
    assert main(["demo", "--steps", "4", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "| baseline | 0 | 4 |" in report and "| key_only | 1 | 4 |" in report
    assert "held-out induction accuracy" in capsys.readouterr().out


def test_train_with_overrides_and_resume(tmp_path):
    args = ["train", "--run-dir", str(tmp_path), "--set", "train.steps=6", "train.eval_every=3",
            "train.eval_size=32", "train.batch_size=8", "model.d_model=32", "task.seq_len=16", "task.form=full"]
    assert main(args) == 0
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 6
    assert main(args) == 0  # finished run: resumes and does nothing more
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3  # steps 0, 3 and 6


def test_train_time_limit_stops_and_the_same_command_resumes(tmp_path, capsys):
    args = ["train", "--run-dir", str(tmp_path), "--set", "train.steps=6", "train.eval_every=3",
            "train.eval_size=32", "train.batch_size=8", "model.d_model=32", "task.seq_len=16", "task.form=full"]
    assert main(args + ["--time-limit", "0"]) == 0
    assert "time limit reached at step 1 of 6" in capsys.readouterr().out
    assert not (tmp_path / "result.json").exists()
    assert main(args) == 0
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 6
    assert main(args + ["--restart", "--time-limit", "0"]) == 0
    assert "run the same command without --restart to resume" in capsys.readouterr().out


def test_bad_override_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run-dir", str(tmp_path), "--set", "model.attention.variant=sym"])
    assert exit_info.value.code == 2
    assert "unknown attention variant" in capsys.readouterr().err


def test_sweep_command_lists_results(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(exp.PLANS, "quick", dataclasses.replace(exp.PLANS["quick"], control_steps=2, control_gammas=(0.0,)))
    assert main(["sweep", "controls", "--out", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "random_offset" in out and "multihop" in out and "final acc" in out
    summary = out.split("summary")[1]
    assert "task random_offset, gamma 0.0: 0/1 succeed" in summary and "task multihop, gamma 0.0" in summary


def test_print_config_shows_the_resolved_config_and_trains_nothing(tmp_path, capsys):
    assert main(["train", "--print-config", "--set", "task.name=mqar", "model.attention.variant=key_only",
                 "model.attention.gamma=0.5"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["task"]["name"] == "mqar" and config["model"]["attention"] == {
        "variant": "key_only", "gamma": 0.5, "placement": "post_rope", "boundary": "replicate"}
    assert config["model"]["vocab_size"] == config["task"]["vocab_size"]
    with pytest.raises(SystemExit) as stop:
        main(["train", "--set", "train.steps=3"])
    assert stop.value.code == 2 and "--run-dir is required" in capsys.readouterr().err


def test_plot_draws_the_curves_of_several_runs(tmp_path, capsys):
    common = ["--set", "train.steps=4", "train.eval_every=2", "train.eval_size=16", "train.batch_size=8",
              "model.d_model=32", "task.seq_len=16", "task.form=full"]
    for name, variant in (("plain", "baseline"), ("psa", "key_only")):
        assert main(["train", "--run-dir", str(tmp_path / name), *common, f"model.attention.variant={variant}"]) == 0
    out = tmp_path / "curves.png"
    assert main(["plot", str(tmp_path / "plain"), str(tmp_path / "psa"), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and f"figure: {out}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["plot", str(tmp_path / "psa"), "--metric", "bits_per_byte", "--out", str(out)])
    assert info.value.code == 2 and "no run logged ['bits_per_byte']" in capsys.readouterr().err
