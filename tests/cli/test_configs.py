"""The shipped example configs are runs of the quick reproduction, one per task, and stay so; they are
found by name."""

import json

import pytest

from psattn.cli import main
from psattn.experiments.induction_report import declared_experiments
from psattn.training.config import RunConfig, shipped_configs

CONFIGS = list(shipped_configs().values())
QUICK = {c.name: c for configs in declared_experiments("quick").values() for c in configs}


def test_there_is_an_example_for_every_task():
    tasks = {json.loads(p.read_text())["task"]["name"] for p in CONFIGS}
    assert tasks == {"induction", "mqar", "random_offset", "multihop", "text"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_each_example_is_a_quick_reproduction_run(path, capsys):
    config = RunConfig.from_file(path)
    assert config.to_dict() == QUICK[config.name].to_dict(), path.name
    assert main(["train", "--config", str(path), "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(path.read_text())


def test_configs_lists_prints_and_trains_by_name(tmp_path, capsys):
    assert main(["configs"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in shipped_configs())
    assert main(["configs", "mqar"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(shipped_configs()["mqar"].read_text())
    assert main(["train", "--config", "mqar", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["task"]["name"] == "mqar"
    (tmp_path / "mqar").write_text("{}")  # a file of that name wins over the shipped config
    assert RunConfig.from_file(tmp_path / "mqar").name == "run"
    with pytest.raises(SystemExit):
        main(["configs", "nothing"])
    assert "no shipped config 'nothing'" in capsys.readouterr().err


def test_a_folder_named_like_a_shipped_config_does_not_hide_it(tmp_path, monkeypatch, capsys):
    """`--config mqar --run-dir mqar` resumes with the same command: the run's own folder is no config
    file, so the name still means the shipped example (it was read as a folder and refused)."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--config", "mqar", "--run-dir", "mqar", "--set", "train.steps=2", "train.eval_every=1",
            "train.eval_size=8", "train.batch_size=4"]
    assert main(argv) == 0
    assert main(argv) == 0  # the same command again: the finished run, found and left as it is
    assert "run directory mqar" in capsys.readouterr().out
