"""A run directory keeps one copy of the history: metrics.jsonl. result.json is the summary, and
``load_result`` gives the history from metrics.jsonl, or from an older result.json that holds it."""

import json

import pytest
import torch

from helpers import tiny_config
from psattn.training.run_dir import load_result, run_tokenizer
from psattn.training.trainer import train


def test_result_json_is_the_summary_and_load_result_reads_the_rows_from_metrics_jsonl(tmp_path):
    result = train(tiny_config(20), tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved == result.summary() and "history" not in saved
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == result.history
    loaded = load_result(tmp_path)
    assert loaded["history"] == result.history and loaded["config"]["name"] == tiny_config(20).name
    assert {k: v for k, v in loaded.items() if k != "config"} == result.to_dict()


def test_an_older_result_json_with_its_history_still_loads(tmp_path):
    result = train(tiny_config(20), tmp_path)
    (tmp_path / "result.json").write_text(json.dumps(result.to_dict()))  # what runs wrote before
    (tmp_path / "metrics.jsonl").write_text("")  # not read: the result holds its rows
    assert load_result(tmp_path)["history"] == result.history


def test_a_finished_run_whose_metrics_are_lost_is_finished_again(tmp_path):
    result = train(tiny_config(20), tmp_path)
    (tmp_path / "metrics.jsonl").unlink()
    assert load_result(tmp_path) is None and not (tmp_path / "result.json").exists()
    again = train(tiny_config(20), tmp_path)  # resumes at its last step: the checkpoint's rows come back
    assert again.steps == 20 and load_result(tmp_path)["history"] == result.history


def test_run_result_of_still_takes_diverged_with_a_deprecation_warning():
    import pytest

    from psattn.training.run_dir import RunResult
    from psattn.training.state import TrainState

    state = TrainState(None, None, None, step=7)  # type: ignore[arg-type]  # what a result reads: the step
    with pytest.warns(DeprecationWarning, match="now diverged_at"):
        assert RunResult.of(state, 10, diverged=True).diverged_at == 7 == RunResult.of(state, 10, diverged_at=7).steps


def test_run_tokenizer_of_a_folder_that_is_not_a_run_directory_says_so(tmp_path):
    """A missing or mistyped folder was answered "has no tokenizer.json: only runs of the text task can generate
    text", as if it were a run of another task."""
    for folder in (tmp_path / "missing", tmp_path):
        with pytest.raises(ValueError, match=r"is not a run directory \(no config.json\)"):
            run_tokenizer(folder)
    train(tiny_config(2), tmp_path / "run")
    with pytest.raises(ValueError, match="has no tokenizer.json: only runs of the text task can generate text"):
        run_tokenizer(tmp_path / "run")


@pytest.mark.parametrize("device,error", [("tpu", ValueError), ("gpu", ValueError), (3, TypeError)])
def test_load_trained_names_a_device_it_does_not_know(device, error, tmp_path):
    """"tpu" raised torch's RuntimeError listing twenty device types, 3 "Cannot access accelerator device", then a
    ValueError; a number is a type mistake, a TypeError."""
    from psattn.training.run_dir import load_trained

    train(tiny_config(2), tmp_path / "run")
    with pytest.raises(error, match=f"--device must be cpu, cuda, cuda:N or auto, got {device!r}"):
        load_trained(tmp_path / "run", device)
    assert not load_trained(tmp_path / "run", torch.device("cpu")).training


def test_load_trained_of_the_folder_alone_gives_the_model_in_eval_mode_on_the_cpu(tmp_path):
    """docs/python.md's `load_trained(work / "run")  # eval mode, on the CPU` had no test of the call without a
    device: every test passed one."""
    from psattn.training.run_dir import load_trained

    train(tiny_config(2), tmp_path / "run")
    model = load_trained(tmp_path / "run")
    assert not model.training and {p.device.type for p in model.parameters()} == {"cpu"}
