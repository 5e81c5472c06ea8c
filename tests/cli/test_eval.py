"""psattn eval: the run's own held-out scores equal its last evaluation; other tasks and corpora score too."""

import json

import pytest

from helpers import tiny_config
from psattn.cli import main
from psattn.training.config import RunConfig, apply_overrides
from psattn.training.trainer import train


def test_eval_of_an_induction_run_equals_its_last_evaluation(tmp_path, capsys):
    result = train(tiny_config(10), tmp_path / "run")
    assert main(["eval", "--run-dir", str(tmp_path / "run"), "--json", str(tmp_path / "scores.json")]) == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    last = result.history[-1]
    assert scores["accuracy"] == last["eval_accuracy"] and scores["loss"] == pytest.approx(last["eval_loss"])
    assert scores["induction_score"] == last["induction_score"]
    assert "held-out accuracy" in capsys.readouterr().out
    main(["eval", "--run-dir", str(tmp_path / "run"), "--set", "task.seq_len=32", "--rows", "16", "--json"])
    other = json.loads(capsys.readouterr().out)
    assert other["rows"] == 16 and other["task_config"]["seq_len"] == 32
    with pytest.raises(SystemExit):
        main(["eval", "--run-dir", str(tmp_path / "run"), "--set", "train.steps=3"])
    assert "changes the task only" in capsys.readouterr().err


def test_eval_of_a_text_run_on_its_corpus_and_on_another(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a.txt").write_text("def f(x):\n    return x + 1\n\n" * 200)
    (tmp_path / "b.txt").write_text("class Point:\n    x: int\n    y: int\n\n" * 200)
    config = RunConfig.from_dict({"task": {"name": "text", "corpus": str(tmp_path / "a.txt"), "seq_len": 32},
                                  "model": {"vocab_size": 256}})
    config = apply_overrides(config, ["model.d_model=32", "model.n_heads=2", "train.steps=4", "train.batch_size=4",
                                      "train.eval_every=4", "train.eval_size=8", "train.threads=1"])
    result = train(config, tmp_path / "run")
    main(["eval", "--run-dir", str(tmp_path / "run"), "--json"])
    own = json.loads(capsys.readouterr().out)
    assert own["bits_per_byte"] == pytest.approx(result.history[-1]["bits_per_byte"])
    main(["eval", "--run-dir", str(tmp_path / "run"), "--corpus", str(tmp_path / "b.txt"), "--json"])
    other = json.loads(capsys.readouterr().out)
    assert other["task_config"]["corpus"] == str(tmp_path / "b.txt") and other["bits_per_byte"] != own["bits_per_byte"]
    assert other["task_config"]["tokenizer"].endswith("tokenizer.json")
