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
    out = capsys.readouterr().out
    assert "held-out accuracy" in out and "held-out rows of the induction task {'vocab_size': " in out  # names the task
    assert "best induction score: layer 1 " in out and "layer 0" not in out  # counted from 1, as psattn export does
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
    assert other["task_config"]["tokenizer"] == "byte"  # a byte run's own tokenizer is the byte tokenizer


def _bpe_run(tmp_path):
    (tmp_path / "a.txt").write_text("def f(x):\n    return x + 1\n\n" * 200)
    (tmp_path / "b.txt").write_text("The quick brown fox jumps over the lazy dog.\n\n" * 150)
    config = RunConfig.from_dict({"task": {"name": "text", "corpus": str(tmp_path / "a.txt"), "seq_len": 32,
                                           "tokenizer": "bpe", "vocab_size": 300}, "model": {"vocab_size": 300}})
    config = apply_overrides(config, ["model.d_model=32", "model.n_heads=2", "train.steps=4", "train.batch_size=4",
                                      "train.eval_every=4", "train.eval_size=8", "train.threads=1"])
    return train(config, tmp_path / "run"), tmp_path / "run"


def test_eval_scores_a_text_run_with_its_own_tokenizer_however_the_corpus_is_given(tmp_path, capsys, fresh_token_cache):
    """--set task.corpus=X is --corpus X: the run's BPE tokenizer, never one trained anew on X; and the
    header says the data are not the run's."""
    pytest.importorskip("tokenizers")
    result, run = _bpe_run(tmp_path)
    main(["eval", "--run-dir", str(run), "--json"])
    own = json.loads(capsys.readouterr().out)
    assert own["bits_per_byte"] == pytest.approx(result.history[-1]["bits_per_byte"])
    main(["eval", "--run-dir", str(run), "--corpus", str(tmp_path / "b.txt"), "--json"])
    by_corpus = json.loads(capsys.readouterr().out)
    main(["eval", "--run-dir", str(run), "--set", f"task.corpus={tmp_path / 'b.txt'}", "--json"])
    by_set = json.loads(capsys.readouterr().out)
    assert by_set["bits_per_byte"] == by_corpus["bits_per_byte"] and by_set["task_config"] == by_corpus["task_config"]
    assert by_set["task_config"]["tokenizer"] == str((run / "tokenizer.json").resolve())
    assert own["data_changed"] == [] and by_set["data_changed"] == ["corpus", "eval"]
    assert main(["eval", "--run-dir", str(run), "--corpus", str(tmp_path / "b.txt")]) == 0
    assert "not the data the run trained on: the corpus and the held-out text differ" in capsys.readouterr().out
    for change in ("task.tokenizer=byte", "task.vocab_size=512"):
        with pytest.raises(SystemExit):
            main(["eval", "--run-dir", str(run), "--set", change])
        assert "its own tokenizer" in capsys.readouterr().err, change


def test_eval_after_the_corpus_changed_says_so_and_caps_rows_at_the_held_out_windows(tmp_path, capsys, monkeypatch,
                                                                                      fresh_token_cache):
    pytest.importorskip("tokenizers")
    from psattn.textdata import tokens as token_cache

    _, run = _bpe_run(tmp_path)
    (tmp_path / "a.txt").write_text("def g(y):\n    return y * 2\n\n" * 200)
    token_cache._open.cache_clear()
    main(["eval", "--run-dir", str(run), "--rows", "100000"])
    out = capsys.readouterr().out
    assert "not the data the run trained on: the corpus and the held-out text differ" in out, out
    assert "100,000 rows asked; the held-out text holds" in out and "windows, so each is scored once" in out, out
    import torch

    from psattn.training import evaluation

    scored = []
    real = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda model, batch: scored.append(batch) or real(model, batch))
    main(["eval", "--run-dir", str(run), "--rows", "100000", "--json"])
    scores = json.loads(capsys.readouterr().out)
    assert scores["rows"] == scores["rows_capped"]["held_out_windows"] < 100000
    inputs = scored[0].inputs  # (rows, T): the windows at starts 0, 1, 2, ...: every held-out window, each once
    assert len(inputs) == scores["rows"] and torch.equal(inputs[1:, :-1], inputs[:-1, 1:])


def test_eval_on_another_held_out_split_of_the_same_corpus_says_so(tmp_path, capsys, fresh_token_cache):
    """The run's own corpus with a larger held-out fraction: its first line names the held-out text and the split,
    not "another corpus, or its corpus changed since" (it read "the eval differ")."""
    pytest.importorskip("tokenizers")
    _, run = _bpe_run(tmp_path)
    assert main(["eval", "--run-dir", str(run), "--set", "task.eval_fraction=0.2"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line == ("  not the data the run trained on: the held-out text differs from its data.json's (another held-out "
                    "split, which may hold text the run trained on)"), line


def test_eval_past_the_trained_length_says_it_measures_length_generalisation(tmp_path, capsys):
    """--set task.seq_len past the length the run trained on scored as if nothing had changed: no line said the
    numbers measure length generalisation, not the trained task."""
    train(tiny_config(4), tmp_path / "run")
    trained = RunConfig.from_file(tmp_path / "run" / "config.json").task.seq_len
    main(["eval", "--run-dir", str(tmp_path / "run"), "--set", f"task.seq_len={2 * trained}", "--rows", "4"])
    assert (f"sequences of {2 * trained} tokens, longer than the {trained} the run trained on: this measures length "
            "generalisation") in capsys.readouterr().out
    main(["eval", "--run-dir", str(tmp_path / "run"), "--set", f"task.seq_len={2 * trained}", "--rows", "4", "--json"])
    assert json.loads(capsys.readouterr().out)["longer_than_trained"] == {"trained": trained, "scored": 2 * trained}
    main(["eval", "--run-dir", str(tmp_path / "run"), "--set", f"task.seq_len={trained // 2}", "--rows", "4", "--json"])
    assert "longer_than_trained" not in json.loads(capsys.readouterr().out)


def test_eval_of_many_rows_says_what_it_scores_before_it_starts(tmp_path, capsys):
    """eval --rows 100000 of a text run scored every held-out window for minutes on a CPU without a word."""
    from psattn.training.evaluation import NOTED_ROWS

    train(tiny_config(4), tmp_path / "run")
    main(["eval", "--run-dir", str(tmp_path / "run"), "--rows", str(NOTED_ROWS + 1)])
    assert f"scoring {NOTED_ROWS + 1:,} held-out rows of " in capsys.readouterr().err
    main(["eval", "--run-dir", str(tmp_path / "run")])  # the run's own eval_size: no line
    assert "scoring" not in capsys.readouterr().err


def test_evaluate_run_names_rows_and_overrides_when_they_are_bad(tmp_path):
    """rows 0 was refused as "train.eval_size must be a positive integer", naming a field the caller never gave;
    a string of overrides was listed character by character."""
    from psattn.training.evaluation import evaluate_run

    train(tiny_config(2), tmp_path / "run")
    for rows, error in ((0, ValueError), (-1, ValueError), (2.5, TypeError)):  # 2.5: a ValueError before
        with pytest.raises(error, match=r"rows must be a positive integer or None \(the run's eval_size\), got"):
            evaluate_run(tmp_path / "run", rows=rows)
    with pytest.raises(TypeError, match="overrides must be a list of 'section.field=value' strings, got 'task.seq_len=32'"):
        evaluate_run(tmp_path / "run", "task.seq_len=32")
    assert evaluate_run(tmp_path / "run", ["task.seq_len=32"], rows=4)["rows"] == 4
