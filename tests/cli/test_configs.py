"""The example configs under configs/ are runs of the quick reproduction, one per task, and stay so."""

import json
from pathlib import Path

import pytest

from psattn.cli import main
from psattn.experiments.induction_report import declared_experiments
from psattn.training.config import RunConfig

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.json"))
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
