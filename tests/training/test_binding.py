"""A run's records bind each other: a checkpoint is refused beside a config, tokenizer or data record
that no longer describes its weights, by every command that loads one."""

import json
import logging

import pytest
import torch

from helpers import science, tiny_config
from psattn.cli import main
from psattn.textdata import tokens as token_cache
from psattn.training.config import RunConfig, apply_overrides
from psattn.training.run_dir import load_result
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import train


def _edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def _unbind(checkpoint):
    """Make ``checkpoint`` one written before checkpoints carried a binding."""
    state = torch.load(checkpoint, weights_only=True)
    del state["binding"]
    torch.save(state, checkpoint)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("bound") / "run"
    train(tiny_config(2), run)
    return run


def test_a_config_edited_after_training_is_refused_naming_the_field_and_both_values(trained, tmp_path, capsys):
    import shutil

    run = shutil.copytree(trained, tmp_path / "run")
    _edit_json(run / "config.json", lambda c: c["model"]["attention"].update(gamma=0.5))
    for argv in (["eval", "--run-dir", str(run)], ["footprint", str(run)],
                 ["export", "--run-dir", str(run), "--out", str(tmp_path / "m.onnx")],
                 ["train", "--config", str(run / "config.json"), "--run-dir", str(run)]):
        err = _refused(argv, capsys)
        assert "model.attention.gamma = 1.0" in err and "says 0.5" in err and "--restart" in err, (argv, err)
    assert not (tmp_path / "m.onnx").exists()
    edited = RunConfig.from_file(run / "config.json")
    assert train(edited, run, resume=False).steps == 2  # --restart trains the new config


def test_a_hand_edited_training_field_is_refused_and_where_it_runs_is_not(trained, tmp_path, capsys):
    """The learning rate shaped the weights: config.json edited to another no longer describes them, and
    resuming would silently train on under a rule the run never had. Where it runs may change."""
    import shutil

    run = shutil.copytree(trained, tmp_path / "run")
    _edit_json(run / "config.json", lambda c: c["train"].update(lr=1e-4))
    for argv in (["eval", "--run-dir", str(run)], ["train", "--run-dir", str(run), "--set", "train.steps=4"]):
        err = _refused(argv, capsys)
        assert "train.lr = 0.003" in err and "says 0.0001" in err, (argv, err)
    _edit_json(run / "config.json", lambda c: c["train"].update(lr=0.003, threads=2, device="cpu", checkpoint_every=5))
    assert main(["eval", "--run-dir", str(run)]) == 0
    assert main(["train", "--run-dir", str(run), "--set", "train.steps=4"]) == 0


def test_a_run_directory_whose_config_json_is_gone_says_so(trained, tmp_path, capsys):
    import shutil

    run = shutil.copytree(trained, tmp_path / "run")
    (run / "config.json").unlink()
    err = _refused(["train", "--run-dir", str(run), "--set", "train.threads=1"], capsys)  # the defaults: another model
    assert "the config given says" in err and "has no config.json" in err and "config.json says" not in err, err
    (tmp_path / "mine.json").write_text(json.dumps(tiny_config(2).to_dict()))
    assert main(["train", "--run-dir", str(run), "--config", str(tmp_path / "mine.json")]) == 0  # the run's own config
    assert json.loads((run / "config.json").read_text())["model"] == tiny_config(2).to_dict()["model"]


def test_a_checkpoint_from_before_bindings_still_loads_and_gains_one_on_its_next_save(trained, tmp_path, capsys):
    import shutil

    run = shutil.copytree(trained, tmp_path / "run")
    _unbind(run / "checkpoint.pt")
    assert main(["eval", "--run-dir", str(run)]) == 0
    config = apply_overrides(tiny_config(2), ["train.steps=4"])
    train(config, run)
    assert torch.load(run / "checkpoint.pt", weights_only=True)["binding"]["config"]["model"]["attention"]["gamma"] == 1.0


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_run_extended_to_more_steps_whose_meta_json_is_lost_is_refused(tmp_path, capsys, damage):
    """meta.json records the schedule of a run asked for more steps: without it the run would resume on
    another learning rate at every step to come, so the checkpoint, which trained on it, refuses."""
    run = tmp_path / "run"
    train(tiny_config(10, checkpoint_every=5), run)
    more = apply_overrides(tiny_config(10, checkpoint_every=5), ["train.steps=20"])

    def crash(step, loss):
        if step == 16:
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):  # extended at step 10, checkpointed at 15, stopped at 16
        train(more, run, on_step=crash)
    kept = (run / "checkpoint.pt").read_bytes()
    if damage == "deleted":
        (run / "meta.json").unlink()
    else:
        (run / "meta.json").write_text((run / "meta.json").read_text()[:40])
    err = _refused(["train", "--run-dir", str(run)], capsys)
    assert "extended from 10 to 20 steps at step 10" in err and "meta.json records none" in err, err
    assert (run / "checkpoint.pt").read_bytes() == kept and not (run / "result.json").exists()


def _text_config(corpus):
    config = RunConfig.from_dict({"task": {"name": "text", "corpus": str(corpus), "seq_len": 16},
                                  "model": {"vocab_size": 256}})
    return apply_overrides(config, ["model.d_model=32", "model.n_heads=2", "train.steps=4", "train.batch_size=2",
                                    "train.eval_every=2", "train.eval_size=4", "train.checkpoint_every=2",
                                    "train.threads=1", "train.device=cpu"])


@pytest.fixture
def text_run(tmp_path, fresh_token_cache):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n\n" * 150)
    run = tmp_path / "run"
    train(_text_config(corpus), run)
    return run, corpus


def test_generate_refuses_a_checkpoint_of_another_model_in_one_line(text_run, tmp_path, capsys):
    """docs/faults.md says ``generate`` refuses a checkpoint beside the config of another model, as train resuming,
    eval and export do, but no test ran it: it refuses it in one line, naming the field, with the checkpoint's
    binding, and with a checkpoint from before bindings (whose weights do not fit the config's model)."""
    import shutil

    run, corpus = text_run
    wider = apply_overrides(_text_config(corpus), ["model.d_model=64", "train.steps=2"])
    train(wider, tmp_path / "wider")
    shutil.copyfile(tmp_path / "wider" / "checkpoint.pt", run / "checkpoint.pt")
    argv = ["generate", "--run-dir", str(run), "--prompt", "def", "--max-new-tokens", "2"]
    err = _refused(argv, capsys)
    assert "model.d_model = 64" in err and "says 32" in err, err
    _unbind(run / "checkpoint.pt")
    err = _refused(argv, capsys)
    assert "does not hold the weights of the model in" in err and "size mismatch" in err, err


def test_a_swapped_tokenizer_is_refused_by_generate_eval_and_export(text_run, tmp_path, capsys):
    pytest.importorskip("tokenizers")
    from psattn.textdata.tokenizer import BPETokenizer

    run, _ = text_run
    (run / "tokenizer.json").write_text(BPETokenizer.train(["some other text " * 50], 300).to_json())
    for argv in (["generate", "--run-dir", str(run), "--prompt", "def", "--max-new-tokens", "2"],
                 ["eval", "--run-dir", str(run)], ["export", "--format", "hf", "--run-dir", str(run),
                                                    "--out", str(tmp_path / "hf")]):
        err = _refused(argv, capsys)
        assert "tokenizer.json is not the tokenizer" in err, (argv, err)
    assert not (tmp_path / "hf").exists()


def test_a_missing_data_record_is_refused_and_a_changed_corpus_never_trained_on(text_run, capsys):
    run, corpus = text_run
    (run / "data.json").unlink()
    corpus.write_text("class A:\n    pass\n\n" * 150)  # the corpus changed too
    token_cache._open.cache_clear()
    err = _refused(["train", "--config", str(run / "config.json"), "--run-dir", str(run),
                    "--set", "train.steps=6"], capsys)
    assert "no data.json" in err, err
    assert _refused(["eval", "--run-dir", str(run)], capsys)
    assert json.loads((run / "result.json").read_text())["steps"] == 4  # nothing trained, nothing rewritten


def test_a_text_run_whose_corpus_moved_resumes_with_the_corpus_named_where_it_lies(tmp_path, fresh_token_cache, capsys):
    """A run is bound to its data by content, not by path: resumed with task.corpus naming the corpus's new place, it
    continues and ends as the uninterrupted run, its config.json naming the new place (it was refused as a run with
    a different config); other text at the new place is refused."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n\n" * 150)
    reference = train(_text_config(corpus), tmp_path / "reference")
    run, moved, other = tmp_path / "run", tmp_path / "moved" / "corpus.txt", tmp_path / "other" / "corpus.txt"
    assert train(_text_config(corpus), run, time_limit_s=0).timed_out  # a checkpoint at step 1 of 4
    moved.parent.mkdir()
    corpus.rename(moved)
    other.parent.mkdir()
    other.write_text("class A:\n    pass\n\n" * 150)
    token_cache._open.cache_clear()
    assert "started on other data" in _refused(["train", "--run-dir", str(run), "--set", f"task.corpus={other}"], capsys)
    assert main(["train", "--run-dir", str(run), "--set", f"task.corpus={moved}", "-q"]) == 0
    assert RunConfig.from_file(run / "config.json").task.corpus == str(moved)
    assert science(load_result(run)["history"]) == science(reference.history)
    resumed, uninterrupted = (torch.load(r / "checkpoint.pt", weights_only=True)["model"] for r in (run, tmp_path / "reference"))
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


def test_a_sweep_whose_corpus_moved_finishes_its_runs_with_the_corpus_where_it_lies(tmp_path, fresh_token_cache):
    """A sweep's folder whose text runs' corpus moved (the plan of another checkout names it there) keeps its finished
    run and finishes the other as the uninterrupted sweep (it was refused as a folder holding another config)."""
    import dataclasses

    from psattn.experiments.sweep import run_sweep

    def plan(corpus):
        return [dataclasses.replace(_text_config(corpus), name=name) for name in ("finished", "half")]

    corpus, moved = tmp_path / "a" / "corpus.txt", tmp_path / "b" / "corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text("def f(x):\n    return x + 1\n\n" * 150)
    reference = run_sweep(plan(corpus), tmp_path / "reference", workers=1, progress=False)
    finished, half = plan(corpus)
    train(finished, tmp_path / "out" / "finished")
    assert train(half, tmp_path / "out" / "half", time_limit_s=0).timed_out
    moved.parent.mkdir()
    corpus.rename(moved)
    token_cache._open.cache_clear()
    results = run_sweep(plan(moved), tmp_path / "out", workers=1, progress=False)
    assert {k: science(r["history"]) for k, r in results.items()} == {k: science(r["history"]) for k, r in reference.items()}


def test_a_run_from_before_data_records_gets_its_data_json_once_with_a_note(text_run, caplog):
    run, corpus = text_run
    recorded = json.loads((run / "data.json").read_text())
    (run / "data.json").unlink()
    _unbind(run / "checkpoint.pt")
    config = apply_overrides(_text_config(corpus), ["train.steps=6"])
    with caplog.at_level(logging.WARNING):
        assert train(config, run).steps == 6
    assert "predates data records" in caplog.text
    assert json.loads((run / "data.json").read_text()) == recorded
    assert torch.load(run / "checkpoint.pt", weights_only=True)["binding"]["data"] == recorded


def test_a_data_record_rewritten_for_other_data_is_refused(text_run, capsys):
    run, _ = text_run
    _edit_json(run / "data.json", lambda d: d.update(train_sha256="0" * 64))
    err = _refused(["eval", "--run-dir", str(run)], capsys)
    assert "data.json records train_sha256 = 000000000000…, but" in err, err


def test_a_config_field_added_since_the_checkpoint_is_no_mismatch(trained, tmp_path):
    """A later psattn with a new model field (at its default) still loads the checkpoints of this one."""
    import shutil

    from psattn.training.run_dir import load_trained

    run = shutil.copytree(trained, tmp_path / "run")
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    del state["binding"]["config"]["model"]["init"]  # as if recorded before the field existed
    state["binding"]["config_sha256"] = "0" * 64
    torch.save(state, run / "checkpoint.pt")
    assert load_trained(run).config.d_model == 32


def test_a_run_saved_with_the_old_form_spelling_loads_resumes_and_reads_as_today(trained, tmp_path, capsys):
    """A run written when the induction form was spelled "full" is the same run as an "all_positions" one:
    its checkpoint loads, the same config resumes it (no "different config"), and its result reads as today's."""
    import shutil

    from psattn.training.run_dir import load_result, load_trained

    run = shutil.copytree(trained, tmp_path / "run")
    _edit_json(run / "config.json", lambda c: c["task"].update(form="full"))
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    state["binding"]["config"]["task"]["form"] = "full"  # as a checkpoint of that psattn recorded it
    state["binding"]["config_sha256"] = "0" * 64
    torch.save(state, run / "checkpoint.pt")
    assert RunConfig.from_file(run / "config.json").task.form == "all_positions"
    assert load_result(run)["config"]["task"]["form"] == "all_positions"
    assert load_trained(run).config.d_model == 32
    assert main(["eval", "--run-dir", str(run)]) == 0
    assert train(apply_overrides(tiny_config(2), ["train.steps=4"]), run).steps == 4  # resumed, not refused


def test_a_refusal_names_what_differs_and_not_the_old_form_spelling(tmp_path, capsys):
    from psattn.training.config import config_differences

    saved = tiny_config(2).to_dict()
    saved["task"]["form"], saved["model"]["attention"]["gamma"] = "full", 0.5
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert config_differences(tmp_path / "config.json", tiny_config(2)) == "model.attention.gamma (saved 0.5, now 1.0)"
    assert main(["train", "--print-config", "--set", "task.form=full"]) == 0
    assert json.loads(capsys.readouterr().out)["task"]["form"] == "all_positions"


def test_a_restart_as_another_task_keeps_nothing_of_the_text_run(text_run, capsys):
    """Its tokenizer.json and data.json stayed, and psattn generate then crashed on the induction model."""
    run, _ = text_run
    train(tiny_config(2), run, resume=False)
    assert not (run / "tokenizer.json").exists() and not (run / "data.json").exists()
    assert main(["eval", "--run-dir", str(run)]) == 0
    with pytest.raises(SystemExit):
        main(["generate", "--run-dir", str(run), "--prompt", "def "])
    assert "only runs of the text task can generate text" in capsys.readouterr().err


def test_a_first_run_in_a_folder_keeps_files_of_those_names_that_are_not_a_runs(tmp_path):
    (tmp_path / "data.json").write_text('{"mine": 1}')
    (tmp_path / "tokenizer.json").write_text("{}")
    train(tiny_config(2), tmp_path)
    assert (tmp_path / "data.json").read_text() == '{"mine": 1}' and (tmp_path / "tokenizer.json").exists()


@pytest.mark.parametrize("steps", [3, 8])
def test_a_budget_edited_in_config_json_is_refused_and_more_steps_asked_for_are_not(tmp_path, capsys, steps):
    """The cosine decay ends at train.steps: a run whose config.json's budget was edited by hand would resume on
    another learning rate at every step to come (it did, without a word); asked for with --set, more steps
    record an extension that keeps the schedule of the steps taken."""
    run = tmp_path / "run"
    calls = []
    with pytest.raises(TrainingInterrupted, match="SIGTERM at step 2"):
        train(tiny_config(4, checkpoint_every=2), run, should_stop=lambda: calls.append(1) or len(calls) == 2,
              handle_signals=False)
    kept = (run / "checkpoint.pt").read_bytes()
    _edit_json(run / "config.json", lambda c: c["train"].update(steps=steps))
    err = _refused(["train", "--run-dir", str(run)], capsys)
    assert f"train.steps = 4, but {run / 'config.json'} says {steps}" in err, err
    assert (run / "checkpoint.pt").read_bytes() == kept
    _edit_json(run / "config.json", lambda c: c["train"].update(steps=4))
    assert main(["train", "--run-dir", str(run), "--set", "train.steps=6"]) == 0  # an extension, from step 2
    assert json.loads((run / "meta.json").read_text())["extensions"][0]["at_step"] == 2
