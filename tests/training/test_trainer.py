import dataclasses
import importlib.util
import json
import math
import os
import signal
import types

import pytest
import torch

from helpers import science, tiny_config
from psattn.models import ModelConfig
from psattn.tasks import make_task_config
from psattn.training import loss as loss_module
from psattn.training import trainer as trainer_module
from psattn.training.config import RunConfig, TrainConfig, apply_overrides
from psattn.training.run_dir import load_result
from psattn.training.schedule import lr_factor
from psattn.training.seeds import seed_step_randomness
from psattn.training.signals import TrainingInterrupted
from psattn.training.trainer import TrainingDiverged, at_threshold_streak, train


def test_deterministic_and_run_directory(tmp_path):
    a = train(tiny_config(), tmp_path / "a")
    b = train(tiny_config())
    assert science(a.history) == science(b.history) and len(a.history) == 5  # step 0, then every 10 steps
    files = {p.name for p in (tmp_path / "a").iterdir()}
    assert {"config.json", "meta.json", "metrics.jsonl", "checkpoint.pt", "result.json"} <= files
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert meta["seed"] == 0 and "git_revision" in meta and "psattn_version" in meta
    lines = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 10, 20, 30, 40]
    assert [json.loads(line)["tokens"] for line in lines] == [0, 2560, 5120, 7680, 10240]  # 16 rows of 16 a step
    assert RunConfig.from_file(tmp_path / "a" / "config.json").to_dict() == tiny_config().to_dict()


def test_training_improves_the_loss():
    result = train(tiny_config(steps=60))
    assert result.history[-1]["eval_loss"] < result.history[0]["eval_loss"]


def test_resume_after_a_kill_matches_an_uninterrupted_run(tmp_path):
    reference = train(tiny_config())

    def die(step, loss):
        if step == 25:  # after the checkpoint at step 20, before the next one
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(tiny_config(), tmp_path, on_step=die)
    resumed = train(tiny_config(), tmp_path)
    assert science(resumed.history) == science(reference.history)
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 10, 20, 30, 40]


def test_each_step_trains_on_a_batch_of_its_own_and_a_resumed_run_on_the_same_ones(tmp_path, monkeypatch):
    """The training batch of a step is drawn from (seed, step): every step another batch, and a resumed run the
    batches the uninterrupted one drew. Only "training improves the loss" looked, so a generator that left the
    step out (one batch, every step) passed every deterministic test."""
    drawn: list[torch.Tensor] = []
    sample = trainer_module.sample_task

    def recorded(*args, **kwargs):
        batch = sample(*args, **kwargs)
        drawn.append(batch.inputs)
        return batch

    monkeypatch.setattr(trainer_module, "sample_task", recorded)
    train(tiny_config(4))
    straight = list(drawn)
    assert all(not torch.equal(straight[i], straight[j]) for i in range(4) for j in range(i))
    drawn.clear()
    train(tiny_config(4), tmp_path, time_limit_s=0.0)  # stops after step 1
    train(tiny_config(4), tmp_path)
    assert len(drawn) == 4 and all(torch.equal(a, b) for a, b in zip(drawn, straight, strict=True))


def test_a_resumed_run_cuts_metrics_jsonl_back_to_its_checkpoint(tmp_path):
    """A run killed after evaluations past its last checkpoint left their rows in metrics.jsonl; resuming takes
    the steps again, so the file must be cut back to the checkpoint's rows first, or those rows appear twice. Only
    the random SIGKILL test of test_faults looked, so a resume that kept the stale rows could pass on a lucky kill."""
    config = tiny_config(20, eval_every=5, checkpoint_every=10)
    train(config, tmp_path / "straight")

    def die(step, loss):
        if step == 17:  # checkpoint at 10, the row of step 15 written after it
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(config, tmp_path / "resumed", on_step=die)
    rows = [json.loads(x) for x in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 5, 10, 15]  # a row past the checkpoint, as a kill leaves it
    train(config, tmp_path / "resumed")

    def metrics(run):
        return science([json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()])

    assert [row["step"] for row in metrics("resumed")] == [0, 5, 10, 15, 20]
    assert metrics("resumed") == metrics("straight")


def test_a_finished_run_trained_again_is_read_not_rewritten(tmp_path):
    """Training a finished run again (``psattn demo`` or the theory report's Bode run, rerun) rewrote its
    metrics.jsonl, result.json and, with TensorBoard, a new events file: on a full disk it failed there. Now
    the run is read back, its files left as they are, and the same result returned."""
    config = tiny_config(20, tensorboard=importlib.util.find_spec("tensorboard") is not None)  # its events too
    first = train(config, tmp_path)
    written = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.name != ".lock"}
    again = train(config, tmp_path)
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.name != ".lock"} == written
    assert again == first


def test_resume_with_dropout_draws_the_same_masks(tmp_path):
    config = tiny_config()
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, dropout=0.3))
    reference = train(config)
    assert reference.history != train(tiny_config()).history  # dropout is in play
    train(config, tmp_path, time_limit_s=0.0)  # stops after step 1, mid-way between checkpoints
    assert science(train(config, tmp_path).history) == science(reference.history)


def test_each_step_draws_dropout_masks_of_its_own():
    """Dropout is seeded from (seed, step): a step draws the masks it drew before, and another step other masks.
    Only the first half was tested, so a seed that left the step out (every step the same masks) passed."""
    with torch.random.fork_rng():
        masks = []
        for step in (3, 4, 3):
            seed_step_randomness(0, step)
            masks.append(torch.nn.functional.dropout(torch.ones(256), 0.5))
    assert torch.equal(masks[0], masks[2]) and not torch.equal(masks[0], masks[1])


def test_a_runs_seconds_add_up_across_its_checkpoints(monkeypatch):
    """The seconds of the metrics rows and of the result count the whole run: each checkpoint adds the time
    since the one before. No test looked, so seconds that counted from the last checkpoint alone passed. A clock
    that ticks once a reading makes the count exact."""
    ticks = iter(range(10**6))
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    result = train(tiny_config(20, eval_every=5, checkpoint_every=5))
    seconds = [row["seconds"] for row in result.history]  # steps 0, 5, 10, 15, 20
    assert seconds[4] > 3 * seconds[1] > 0  # four spans of five steps, against one
    assert result.seconds >= seconds[4]


def test_ctrl_c_checkpoints_at_the_step_boundary_and_resumes(tmp_path):
    reference = train(tiny_config())

    def interrupt(step, loss):
        if step == 13:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt, match="step 13"):
        train(tiny_config(), tmp_path, on_step=interrupt)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 13
    assert science(train(tiny_config(), tmp_path).history) == science(reference.history)


def test_time_limit_checkpoints_an_unfinished_run_that_resumes_exactly(tmp_path):
    reference = train(tiny_config())
    first = train(tiny_config(), tmp_path, time_limit_s=0.0)  # stops after the first step
    assert first.timed_out and first.steps == 1 and first.stopped_early
    assert not (tmp_path / "result.json").exists()  # unfinished: a sweep must not skip it
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 1
    rest = train(tiny_config(), tmp_path, time_limit_s=3600.0)
    assert not rest.timed_out and science(rest.history) == science(reference.history)
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 40


def test_restart_clears_the_earlier_run_files(tmp_path):
    train(tiny_config(steps=20), tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"git_revision": "OLDREV", "started": "2000-01-01"}))
    restarted = train(tiny_config(steps=20), tmp_path, resume=False, time_limit_s=0.0)
    assert restarted.steps == 1 and not (tmp_path / "result.json").exists()
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0]
    assert json.loads((tmp_path / "meta.json").read_text())["started"] != "2000-01-01"  # this run's provenance
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 1
    done = train(tiny_config(steps=20), tmp_path, resume=False)
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 10, 20]
    assert science(done.history) == science(train(tiny_config(steps=20)).history)


@pytest.mark.parametrize("limit", [-1.0, float("nan")])
def test_bad_time_limit_is_refused(limit):
    with pytest.raises(ValueError, match="time_limit_s"):
        train(tiny_config(), time_limit_s=limit)


@pytest.mark.parametrize("config", [lambda: tiny_config().to_dict(), lambda: "induction"])
def test_a_config_that_is_not_a_run_config_is_a_type_error(config, tmp_path):
    with pytest.raises(TypeError, match=r"train takes a RunConfig \(RunConfig.from_dict\(data\)\), got (dict|str)"):
        train(config(), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("hook", ["on_step", "should_stop", "report", "metrics"])
def test_a_hook_that_is_not_a_function_is_refused_before_anything_is_written(hook, tmp_path):
    with pytest.raises(TypeError, match=f"{hook} must be a function or None, got int"):
        train(tiny_config(), tmp_path / "run", **{hook: 3})
    assert not (tmp_path / "run").exists()


def poison_the_loss(monkeypatch, step: int, value: float = float("nan"), only: bool = False) -> dict[str, int]:
    """Make the loss of ``step`` (0-based; unless ``only``, of every later step too) ``value``; the returned dict
    counts the loss's calls, one a step."""
    real_loss = loss_module.shard_loss
    calls = {"n": 0}

    def poisoned(logits, targets, scored, ctx):
        calls["n"] += 1
        loss = real_loss(logits, targets, scored, ctx)
        hit = calls["n"] == step + 1 if only else calls["n"] > step
        return loss * value if hit else loss

    monkeypatch.setattr(loss_module, "shard_loss", poisoned)
    return calls


def test_non_finite_loss_stops_with_a_clear_message_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    real_loss = loss_module.shard_loss
    poison_the_loss(monkeypatch, 15)
    with pytest.raises(TrainingDiverged, match="nan at step 15.*checkpoint.pt is kept"):
        train(tiny_config(), tmp_path)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["step"] == 10
    assert all(torch.isfinite(p).all() for p in state["model"].values())
    result = load_result(tmp_path)  # the outcome, for a sweep to count the run as ended and say where
    assert result["diverged_at"] == 15 and result["steps"] == 15 and result["emergence_step"] is None
    monkeypatch.setattr(loss_module, "shard_loss", real_loss)  # trained again from step 10, as after a fix
    assert train(tiny_config(), tmp_path, time_limit_s=0).timed_out
    assert load_result(tmp_path) is None  # unfinished again: no stale record of a divergence past the checkpoint


@pytest.mark.parametrize("poisoned_from, kept", [(3, None), (13, 10)])
def test_a_non_finite_loss_is_looked_for_before_each_checkpoint_so_none_holds_a_diverged_model(
        tmp_path, monkeypatch, poisoned_from, kept):
    """A step's loss is read back at the next evaluation or checkpoint (a step waits for nothing): found at the
    checkpoint of step 5 or 15, between evaluations, the divergence is still named at its own step. Diverged before
    its first checkpoint, the run is no finished run to keep: the same call trains it again."""
    poison_the_loss(monkeypatch, poisoned_from)
    with pytest.raises(TrainingDiverged, match=f"nan at step {poisoned_from}"):
        train(tiny_config(checkpoint_every=5), tmp_path)
    if kept is None:
        assert not (tmp_path / "checkpoint.pt").exists()
    else:
        state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
        assert state["step"] == kept and all(torch.isfinite(p).all() for p in state["model"].values())
    result = load_result(tmp_path)
    assert result["diverged_at"] == poisoned_from == result["steps"]
    assert [row["step"] for row in result["history"]] == [0, 10][: 1 + poisoned_from // 10]
    if kept is None:  # diverged before its first checkpoint: not a finished run to keep, trained again from step 0
        monkeypatch.undo()
        assert train(tiny_config(checkpoint_every=5), tmp_path).steps == tiny_config().train.steps


def test_without_an_evaluation_or_checkpoint_the_losses_are_looked_at_every_max_unchecked_steps(monkeypatch):
    """The losses held unread stay few: with MAX_UNCHECKED 3, a non-finite loss at step 4 stops the run after
    step 5's forward, not at the end of the 20 steps."""
    from psattn.training import trainer as trainer_module

    calls = poison_the_loss(monkeypatch, 4, only=True)
    monkeypatch.setattr(trainer_module, "MAX_UNCHECKED", 3)
    with pytest.raises(TrainingDiverged, match="nan at step 4"):
        train(tiny_config(steps=20, eval_every=100, checkpoint_every=100))
    assert calls["n"] == 6


def test_on_step_sees_only_finite_losses(monkeypatch):
    poison_the_loss(monkeypatch, 6, float("inf"))
    seen = []
    with pytest.raises(TrainingDiverged, match="inf at step 6"):
        train(tiny_config(), on_step=lambda step, loss: seen.append((step, loss)))
    assert [step for step, _ in seen] == [1, 2, 3, 4, 5, 6] and all(math.isfinite(loss) for _, loss in seen)


def test_a_call_that_started_over_says_to_resume_with_resume_true(tmp_path):
    """Called again as it was, a call with resume=False starts over. From Python the stop said "run the same command
    without --restart", a flag of the command line; it now names the call (``psattn train --restart`` names its flag:
    tests/cli/test_cli.py)."""
    train(tiny_config(steps=4), tmp_path)
    with pytest.raises(TrainingInterrupted, match=r"run train\(\.\.\., resume=True\) to resume"):
        train(tiny_config(steps=20), tmp_path, resume=False, should_stop=lambda: True)


def test_early_stop_and_emergence_step():
    result = train(tiny_config(steps=40, threshold=0.01, early_stop=True))
    assert result.emergence_step == 10 and result.steps == 10 and result.stopped_early


def test_early_stop_can_wait_for_the_accuracy_to_stay_at_the_threshold():
    result = train(tiny_config(steps=60, threshold=0.01, early_stop=True, early_stop_evals=3))
    assert result.emergence_step == 10 and result.steps == 30 and result.stopped_early
    assert [row["step"] for row in result.history] == [0, 10, 20, 30]


def test_the_streak_counts_only_the_latest_evaluations_in_a_row():
    history = [{"step": 10 * i, "eval_accuracy": a} for i, a in enumerate((0.9, 0.9, 0.2, 0.85, 0.95))]
    assert at_threshold_streak(history, 0.8) == 2
    assert at_threshold_streak(history, 0.9) == 1
    assert at_threshold_streak(history[:3], 0.8) == 0
    assert at_threshold_streak(history[:2], 0.8) == 1  # the step-0 row, before training, never counts
    assert at_threshold_streak([], 0.8) == 0


def test_a_run_interrupted_inside_its_streak_resumes_to_the_same_stop(tmp_path):
    config = tiny_config(steps=60, threshold=0.01, early_stop=True, early_stop_evals=3)
    steps = []
    with pytest.raises(TrainingInterrupted):
        train(config, tmp_path, on_step=lambda step, _: steps.append(step), should_stop=lambda: steps[-1] >= 20)
    resumed = train(config, tmp_path)
    whole = train(config)
    assert resumed.steps == whole.steps == 30 and resumed.emergence_step == whole.emergence_step == 10
    assert [r["eval_accuracy"] for r in resumed.history] == [r["eval_accuracy"] for r in whole.history]


def test_existing_run_directory_with_another_config_is_refused_naming_the_fields(tmp_path):
    train(tiny_config(steps=10), tmp_path)
    for other in (tiny_config(steps=10, lr=1e-3), tiny_config(steps=5)):
        with pytest.raises(ValueError, match=r"different config: train\.(lr|steps) \(saved"):
            train(other, tmp_path)
    assert train(tiny_config(steps=10, lr=1e-3), tmp_path, resume=False).steps == 10  # --restart starts it over
    assert json.loads((tmp_path / "config.json").read_text())["train"]["lr"] == 1e-3


def test_a_finished_run_asked_for_more_steps_continues_from_its_checkpoint(tmp_path):
    first = train(tiny_config(steps=10), tmp_path)
    longer = train(tiny_config(steps=20), tmp_path)
    assert longer.steps == 20 and longer.history[: len(first.history)] == first.history
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["extensions"] == [{"at_step": 10, "steps_before": 10, "steps_after": 20, "lr_factor_at": pytest.approx(0.1)}]
    assert json.loads((tmp_path / "config.json").read_text())["train"]["steps"] == 20
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 20
    lrs = [row["lr"] for row in longer.history if row["step"] > 10]
    assert all(lr == pytest.approx(3e-4) for lr in lrs)  # a finished run goes on at its final learning rate


def test_a_finished_run_without_its_checkpoint_asked_for_more_steps_says_why_not(tmp_path):
    """It said "Only train.steps may grow" while refusing exactly that."""
    train(tiny_config(steps=10), tmp_path)
    (tmp_path / "checkpoint.pt").unlink()
    with pytest.raises(ValueError, match="has no checkpoint.pt to continue from") as refused:
        train(tiny_config(steps=20), tmp_path)
    assert "Only train.steps may grow" not in str(refused.value) and "--restart" in str(refused.value)


def test_a_finished_run_without_its_checkpoint_is_not_trained_again_over_its_results(tmp_path):
    """It trained from step 0 and replaced metrics.jsonl and result.json, unasked; --restart still does."""
    train(tiny_config(steps=10), tmp_path)
    (tmp_path / "checkpoint.pt").unlink()
    kept = {name: (tmp_path / name).read_bytes() for name in ("metrics.jsonl", "result.json", "meta.json")}
    for config in (tiny_config(steps=10), apply_overrides(tiny_config(steps=10), ["train.checkpoint_every=5"])):  # or elsewhere
        with pytest.raises(ValueError, match="holds a finished run .10 steps, its result.json. but no checkpoint.pt"):
            train(config, tmp_path)
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept
    assert train(tiny_config(steps=10), tmp_path, resume=False).steps == 10


def test_an_interrupted_run_extended_decays_from_where_it_was_and_resumes_exactly(tmp_path):
    train(tiny_config(steps=20), tmp_path / "a", time_limit_s=0)  # each call stops after one step
    partial = train(tiny_config(steps=20), tmp_path / "a", time_limit_s=0)
    at = partial.steps
    extended = train(tiny_config(steps=40), tmp_path / "a")
    factor = lr_factor
    extensions = json.loads((tmp_path / "a" / "meta.json").read_text())["extensions"]
    schedule = factor(tiny_config(steps=40).train, extensions)
    old = factor(tiny_config(steps=20).train)
    assert extensions[0]["at_step"] == at and schedule(at - 1) == old(at - 1) and schedule(at) == pytest.approx(old(at))
    assert schedule(39) == pytest.approx(0.1, abs=0.01) and extended.steps == 40
    # the same extension, interrupted and resumed, ends exactly where the uninterrupted one did
    train(tiny_config(steps=20), tmp_path / "b", time_limit_s=0)
    train(tiny_config(steps=20), tmp_path / "b", time_limit_s=0)
    train(tiny_config(steps=40), tmp_path / "b", time_limit_s=0)
    again = train(tiny_config(steps=40), tmp_path / "b")
    assert science(again.history) == science(extended.history)


def test_a_run_that_stopped_early_trains_on_only_without_early_stopping_and_then_exactly(tmp_path):
    """More steps on a run that stopped early trained nothing, and the hint the run printed
    (train.early_stop=false) was refused as another config."""
    stopping = dict(early_stop=True, threshold=1e-9)  # every trained evaluation reaches it: stops at step 10
    assert train(tiny_config(steps=30, **stopping), tmp_path / "a").steps == 10
    with pytest.raises(ValueError, match="reached its early-stopping rule at step 10.*more steps train nothing. "
                                         "Add train.early_stop=false"):
        train(tiny_config(steps=40, **stopping), tmp_path / "a")
    (tmp_path / "a" / "metrics.jsonl").unlink()  # the checkpoint holds the history: a lost metrics file stops nothing
    on = train(tiny_config(steps=30, early_stop=False, threshold=1e-9), tmp_path / "a")
    assert on.steps == 30 and json.loads((tmp_path / "a" / "config.json").read_text())["train"]["early_stop"] is False
    whole = train(tiny_config(steps=30, early_stop=False, threshold=1e-9), tmp_path / "b")
    assert science(on.history) == science(whole.history)  # early stopping changed no step before it
    # a rule under which the run would have stopped before where it is describes another run: refused
    with pytest.raises(ValueError, match=r"trained to step 30, but stopping early as asked \(after 1 evaluation\(s\) "
                                         r"at 1e-09\) it would have stopped at step 10"):
        train(tiny_config(steps=30, **stopping), tmp_path / "b")
    assert json.loads((tmp_path / "b" / "config.json").read_text())["train"]["early_stop"] is False  # nothing written


@pytest.mark.parametrize("killed_at", ["meta.json", "config.json"])
def test_an_extension_killed_between_its_file_writes_resumes_on_the_extended_schedule(tmp_path, monkeypatch, killed_at):
    """Growing a run rewrites result.json, meta.json and config.json; a kill between two of them left a
    config of 20 steps with no extension recorded, and the rerun trained a fresh 20-step schedule."""
    from psattn.training import run_dir

    train(tiny_config(steps=10), tmp_path / "clean")
    clean = train(tiny_config(steps=20), tmp_path / "clean")
    train(tiny_config(steps=10), tmp_path / "cut")

    class Killed(BaseException):
        pass

    write = run_dir.write_json

    def killed(path, data):
        if os.path.basename(path) == killed_at:
            raise Killed
        write(path, data)

    monkeypatch.setattr(run_dir, "write_json", killed)
    with pytest.raises(Killed):
        train(tiny_config(steps=20), tmp_path / "cut")
    monkeypatch.setattr(run_dir, "write_json", write)
    again = train(tiny_config(steps=20), tmp_path / "cut")
    assert science(again.history) == science(clean.history)
    assert (json.loads((tmp_path / "cut" / "meta.json").read_text())["extensions"]
            == json.loads((tmp_path / "clean" / "meta.json").read_text())["extensions"])


def test_an_extension_cut_off_without_its_checkpoint_is_refused_not_finished(tmp_path, monkeypatch):
    from psattn.training import run_dir

    train(tiny_config(steps=10), tmp_path)
    write = run_dir.write_json
    monkeypatch.setattr(run_dir, "write_json", lambda path, data: (
        (_ for _ in ()).throw(KeyboardInterrupt) if os.path.basename(path) == "config.json" else write(path, data)))
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(steps=20), tmp_path)  # meta.json records the extension; config.json still says 10
    monkeypatch.setattr(run_dir, "write_json", write)
    (tmp_path / "checkpoint.pt").unlink()
    with pytest.raises(ValueError, match="has no checkpoint.pt to continue from"):
        train(tiny_config(steps=20), tmp_path)


@pytest.mark.parametrize("fields,message", [
    ({"betas": [0.9]}, "betas must be two numbers"),
    ({"betas": [0.9, 1.5]}, "betas must be two numbers"),
    ({"weight_decay": -1}, "weight_decay"),
    ({"lr": float("inf")}, "lr must be a positive number up to 10"),
    ({"lr": "1e-3"}, "lr must be a positive number up to 10"),
    ({"lr": 1e300}, "lr must be a positive number up to 10"),  # finite, but it overflows float32
    ({"weight_decay": 1e300}, "weight_decay must be a number in"),
    ({"seed": 2**32}, r"seed must be below 2\*\*32"),
    ({"warmup_steps": 2.5}, "warmup_steps must be a non-negative integer"),
    ({"early_stop": "no"}, "early_stop must be true or false"),
    ({"threads": 0}, "threads"),
    ({"threads": 100_000_000}, "threads must be an integer from 1 to 1024"),  # the process died with no message
    ({"device": "cuda:x"}, "device must be cpu, cuda, cuda:N or auto"),  # a traceback from torch
    ({"device": 5}, "device must be cpu, cuda, cuda:N or auto, got 5"),
    ({"grad_clip": float("inf")}, "grad_clip must be a positive finite number"),
    ({"early_stop_evals": 0}, "early_stop_evals must be a positive integer"),
    ({"threshold": "high"}, "threshold"),
    ({"compile": "fast"}, r"compile must be true, false or one of torch.compile's modes \['default', 'reduce-overhead'"),
    ({"compile": 1}, "compile must be true, false or one of"),
])
def test_malformed_train_configs_are_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({"train": fields})


@pytest.mark.parametrize("section", ["model", "train", "task"])
def test_a_section_that_is_not_an_object_is_refused(section):
    with pytest.raises(ValueError, match=f"{section} section must be a JSON object"):
        RunConfig.from_dict({section: [1]})


def test_a_run_name_that_is_not_a_string_is_a_type_error_in_python_and_a_value_error_from_a_file():
    """RunConfig(name=3) built in Python was accepted (and written as a number into config.json), while a file's was
    refused."""
    with pytest.raises(TypeError, match="RunConfig's name must be a string, got 3"):
        RunConfig(name=3)
    with pytest.raises(ValueError, match="the run name must be a string, got 3"):
        RunConfig.from_dict({"name": 3})


@pytest.mark.parametrize("fields,message", [
    ({"model": "x"}, "RunConfig's model must be a ModelConfig or a dict of its fields, got 'x'"),
    ({"train": 3}, "RunConfig's train must be a TrainConfig or a dict of its fields, got 3"),
    ({"task": [1]}, r"RunConfig's task must be a registered task's config \(make_task_config\) or a dict with a 'name', "
                    r"got \[1\]"),
    ({"task": TrainConfig()}, "RunConfig's task must be a registered task's config"),  # 'not a registered task config'
])
def test_a_section_of_the_wrong_type_is_a_type_error_in_python_and_a_value_error_from_a_file(fields, message):
    """RunConfig(model="x") and a task that is no task config were ValueErrors ("the model section must be a JSON
    object"), as a value out of range is; built in Python they are TypeErrors now, and a run config read from a
    file still refuses a section that is no object with a ValueError."""
    with pytest.raises(TypeError, match=message):
        RunConfig(**fields)
    if not dataclasses.is_dataclass(fields.get("task")):
        section = next(iter(fields))
        with pytest.raises(ValueError, match=f"the {section} section must be a JSON object"):
            RunConfig.from_dict(fields)


@pytest.mark.parametrize("fields,message", [
    ({"steps": 2.5}, "train.steps must be a positive integer, got 2.5"),
    ({"seed": "1"}, "train.seed must be a non-negative integer, got '1'"),
    ({"threads": 2.0}, "train.threads must be an integer from 1 to"),
    ({"lr": "1e-3"}, "train.lr must be a positive number up to 10"),
    ({"early_stop": "yes"}, "train.early_stop must be true or false, got 'yes'"),
    ({"compile": 1}, "train.compile must be true, false or one of torch.compile's modes"),
    ({"device": 0}, "train.device must be cpu, cuda, cuda:N or auto, got 0"),
    ({"precision": None}, r"train precision must be one of \['fp32', 'bf16'\], got None"),
    ({"betas": "ab"}, r"train.betas must be two numbers in \[0, 1\), got 'ab'"),
    ({"betas": 0.9}, r"train.betas must be two numbers in \[0, 1\), got 0.9"),
    ({"betas": [0.9, "0.99"]}, r"train.betas must be two numbers in \[0, 1\), got \[0.9, '0.99'\]"),
])
def test_a_train_config_of_the_wrong_type_is_a_type_error_in_python_and_a_value_error_from_a_file(fields, message):
    """TrainConfig(steps=2.5) and the other type mistakes were ValueErrors, as a value out of range is; built in
    Python they are TypeErrors now, and a run config read from a file still refuses them with a ValueError."""
    with pytest.raises(TypeError, match=message):
        TrainConfig(**fields)
    with pytest.raises(ValueError, match=f"malformed train section: {message}"):
        RunConfig.from_dict({"train": fields})
    with pytest.raises(ValueError, match="train.steps must be a positive integer, got 0"):
        TrainConfig(steps=0)


def test_overrides_and_bad_configs(tmp_path):
    config = apply_overrides(tiny_config(), ["model.attention.gamma=0.5", "train.steps=7", "task.seq_len=12"])
    assert config.model.attention.gamma == 0.5 and config.train.steps == 7 and config.task.seq_len == 12
    with pytest.raises(ValueError, match="unknown field"):
        apply_overrides(config, ["train.stepz=3"])
    with pytest.raises(ValueError, match="unknown task"):
        RunConfig(task={"name": "sorting"})
    with pytest.raises(ValueError, match="unknown attention variant"):
        apply_overrides(config, ["model.attention.variant=sym"])
    with pytest.raises(ValueError, match="threshold"):
        TrainConfig(threshold=1.5)
    with pytest.raises(ValueError, match="exceeds the model's vocab_size"):
        RunConfig(model=ModelConfig(vocab_size=8), task=make_task_config("induction", vocab_size=16))
    with pytest.raises(ValueError, match="vocab"):
        make_task_config("induction", vocab_size=5, seq_len=64)
    assert apply_overrides(config, ["name=7"]).name == "7"  # a run's name is the text typed
    for empty in ("name=", "name=  "):
        with pytest.raises(ValueError, match="empty run name"):
            apply_overrides(config, [empty])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        RunConfig.from_file(bad)


def test_overrides_that_are_not_a_list_of_strings_and_a_config_that_is_not_a_run_config_are_type_errors():
    """One string was read character by character: "override 't' must look like section.field=value"."""
    for overrides in ("train.steps=5", ["train.steps=5", 5]):
        with pytest.raises(TypeError, match="overrides must be a list of 'section.field=value' strings, got"):
            apply_overrides(tiny_config(), overrides)
    with pytest.raises(TypeError, match="apply_overrides takes a RunConfig, got dict"):
        apply_overrides(tiny_config().to_dict(), ["train.steps=5"])
    assert apply_overrides(tiny_config(), ("train.steps=5",)).train.steps == 5


def test_an_override_sets_d_head_which_the_saved_config_leaves_out_at_its_default():
    """``--set model.d_head=16`` was refused as an unknown field (overrides looked fields up in ``to_dict()``,
    which leaves d_head out while it is d_model / n_heads), and the known fields it listed left d_head out."""
    config = apply_overrides(tiny_config(), ["model.d_head=8"])  # d_model 32, 2 heads: 16 by default
    assert config.model.d_head == 8 and config.model.head_dim == 8
    assert "d_head" not in apply_overrides(tiny_config(), ["train.steps=3"]).to_dict()["model"]  # saved as before


@pytest.mark.slow  # inductor's compilation of the step and the evaluation: about 40 s on a cold cache, as in CI
# (on a CPU, "reduce-overhead" compiles these same graphs, CUDA graphs being CUDA's alone: the test below checks
# that the mode reaches torch.compile, and gpu_check's compile section trains under CUDA graphs on a GPU)
@pytest.mark.parametrize("fields", [{"precision": "bf16"}, {"compile": True}])
def test_bf16_autocast_and_compile_train_like_fp32(fields):
    reference = train(tiny_config(steps=20))
    config = tiny_config(steps=20)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, **fields))
    result = train(config)
    for a, b in zip(result.history, reference.history, strict=True):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-2)
    if "precision" in fields:  # autocast really ran in bf16: the trajectory differs a little
        assert result.history[-1]["train_loss"] != reference.history[-1]["train_loss"]


@pytest.mark.parametrize("value,mode", [(True, "default"), ("reduce-overhead", "reduce-overhead"), (False, None)])
def test_train_compile_hands_its_mode_to_torch_compile(monkeypatch, value, mode):
    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: modes.append(kwargs["mode"]) or model)
    config = apply_overrides(tiny_config(steps=2), [f"train.compile={json.dumps(value) if isinstance(value, bool) else value}"])
    assert config.train.compile == value  # an override's text that is no JSON stays a string
    train(config)
    assert modes == ([] if mode is None else [mode])


def test_a_compiled_step_computes_the_scored_positions_alone_and_compiles_their_counts_once(monkeypatch):
    """A compiled step computed the logits of every position (B T of them where the eager step computes the N
    scored), and the last block at every position: on the CPU the default induction run's compiled step took
    1.8 times the eager step's time, and 0.95 times an eager step over every position. Traced by dynamo (no
    inductor: its compilation takes a minute), every step passes the scored positions, and the first 8 batches'
    changing counts reuse one graph (the 9th has a row that scores more than half its tokens, which takes the
    marked queries' other path: a second graph)."""
    from torch._dynamo.testing import CompileCounter

    real_compile, counter, scored = torch.compile, CompileCounter(), []

    def traced(model, mode):
        compiled = real_compile(model, backend=counter)
        return lambda ids, **kwargs: scored.append(kwargs.get("scored")) or compiled(ids, **kwargs)

    monkeypatch.setattr(torch, "compile", traced)
    torch._dynamo.reset()
    config = tiny_config(steps=8, compile=True)
    result = train(config)
    assert len(scored) == 8 and all(s is not None for s in scored)
    assert len({s.count for s in scored}) > 2 and counter.frame_count == 1
    reference = train(tiny_config(steps=8))
    assert [r["eval_loss"] for r in result.history] == pytest.approx([r["eval_loss"] for r in reference.history], rel=1e-5)


@pytest.mark.parametrize("value,device,every", [(True, "cuda", True), ("reduce-overhead", "cuda", True),
                                                ("max-autotune", "cuda", True), ("reduce-overhead", "cpu", False),
                                                (True, "cpu", False), (False, "cuda", False)])
def test_only_a_compiled_step_on_a_gpu_computes_every_logit(value, device, every):
    """CUDA graphs replay the shapes they recorded, and the count of scored positions changes from batch to batch;
    the default mode keeps its fixed shapes on a GPU too, where its timings were measured."""
    assert loss_module.computes_every_logit(TrainConfig(compile=value), torch.device(device)) is every


def test_a_compiled_step_on_a_gpu_can_be_told_to_compute_the_scored_positions_alone(monkeypatch):
    """The switch ``benchmarks/gpu_check.py`` times both ways with; a step built after it is set follows it."""
    monkeypatch.setattr(loss_module, "EVERY_LOGIT_WHEN_COMPILED_ON_GPU", False)
    assert not loss_module.computes_every_logit(TrainConfig(compile=True), torch.device("cuda"))


def test_a_saved_config_matches_its_run_however_it_was_spelled(tmp_path):
    from psattn.training.config import holds_same_run

    config = tiny_config()
    path = tmp_path / "config.json"
    data = config.to_dict()
    data["model"].update(n_kv_heads=config.model.n_heads, d_mlp=4 * config.model.d_model)  # resolved spelling
    path.write_text(json.dumps(data))
    assert holds_same_run(path, config)
    del data["model"]["init"]  # written before init existed: trained at N(0, 0.02), not today's default
    path.write_text(json.dumps(data))
    assert not holds_same_run(path, config)
    assert holds_same_run(path, dataclasses.replace(config, model=dataclasses.replace(config.model, init=0.02)))
    path.write_text("{not json")
    assert not holds_same_run(path, config)


def test_overriding_the_width_carries_the_derived_sizes_along():
    from psattn.training.config import RunConfig, apply_overrides

    config = apply_overrides(RunConfig(), ["model.d_model=32", "model.n_heads=2"])
    assert config.model.d_mlp == 128 and config.model.n_kv_heads == 2
    assert apply_overrides(RunConfig(), ["model.n_kv_heads=2"]).model.n_kv_heads == 2


def test_learning_rate_warms_up_then_follows_the_cosine(tmp_path):
    import math

    config = tiny_config(40, eval_every=1, warmup_steps=5)
    t = config.train
    lrs = {row["step"]: row["lr"] for row in train(config, tmp_path).history}

    def expected(step):  # after `step` optimiser steps
        if step < t.warmup_steps:
            return t.lr * (step + 1) / t.warmup_steps
        progress = min(1.0, (step - t.warmup_steps) / (t.steps - t.warmup_steps))
        return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    for step in (1, 4, 5, 20, 40):
        assert lrs[step] == pytest.approx(expected(step), rel=1e-9)
    assert lrs[5] == pytest.approx(t.lr) and lrs[40] == pytest.approx(t.lr * t.min_lr_ratio)


def test_tensorboard_gets_every_metrics_row_once_across_a_resume(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    config = tiny_config(tensorboard=True)
    train(config, tmp_path, time_limit_s=0.0)  # stops after step 1: the step-0 row is written
    train(config, tmp_path)
    events = accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"eval_accuracy", "eval_loss", "train_loss", "lr", "seconds", "tokens"} <= set(events.Tags()["scalars"])
    assert [e.step for e in events.Scalars("eval_accuracy")] == [0, 10, 20, 30, 40]
    assert [e.step for e in events.Scalars("train_loss")] == [10, 20, 30, 40]  # step 0 has none
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("eval_accuracy")] == pytest.approx([r["eval_accuracy"] for r in rows])


def test_tensorboard_keeps_the_row_of_the_step_a_run_resumes_from(tmp_path):
    """A checkpoint at an evaluated step keeps that step's row; only the events after it go."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    config = tiny_config(tensorboard=True)  # evaluated and checkpointed every 10 steps

    def fail(step, loss):
        if step == 25:
            raise RuntimeError("stopped between checkpoints")

    with pytest.raises(RuntimeError, match="between checkpoints"):
        train(config, tmp_path, on_step=fail)
    train(config, tmp_path)  # resumes at step 20, whose row the checkpoint's history holds
    events = accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval_accuracy")] == [0, 10, 20, 30, 40]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("eval_loss")] == pytest.approx([r["eval_loss"] for r in rows])


def test_the_model_vocabulary_follows_an_overridden_task_vocabulary():
    config = apply_overrides(RunConfig(), ["task.name=text", "task.tokenizer=bpe", "task.vocab_size=1024"])
    assert config.task.vocab_size == config.model.vocab_size == 1024
    given = apply_overrides(RunConfig(), ["task.name=text", "task.tokenizer=bpe", "task.vocab_size=300",
                                         "model.vocab_size=512"])
    assert (given.task.vocab_size, given.model.vocab_size) == (300, 512)


def test_tensorboard_missing_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    with pytest.raises(ImportError, match=r"phase-space-attention\[tensorboard\]"):
        train(tiny_config(2, tensorboard=True), tmp_path / "run")
    assert not (tmp_path / "run" / "config.json").exists()


def test_the_evaluation_rows_take_their_extra_columns_from_the_metrics_callback():
    """By default an induction run's rows carry its head scores (psattn.training.task_metrics); the caller's
    callback replaces them, and None leaves the rows with the trainer's own columns."""
    default = train(tiny_config(10)).history[-1]
    seen = []

    def mine(model, task, held_out):
        seen.append(len(held_out))
        return {"rows_scored": len(held_out)}

    own = train(tiny_config(10), metrics=mine).history
    bare = train(tiny_config(10), metrics=None).history[-1]
    assert "induction_score" in default and "previous_token_score" in default
    assert [row["rows_scored"] for row in own] == seen == [64, 64] and "induction_score" not in own[-1]
    assert set(bare) == {"step", "train_loss", "eval_loss", "eval_accuracy", "lr", "seconds", "tokens"}
    assert bare["eval_accuracy"] == default["eval_accuracy"]


def test_a_run_continues_under_other_runtime_settings_from_where_it_stopped(tmp_path):
    # where and how a run executes (device, threads, checkpoint cadence, TensorBoard) is no new run
    config = tiny_config(steps=30, early_stop=False, checkpoint_every=10)
    steps = []
    with pytest.raises(TrainingInterrupted):
        train(config, tmp_path, on_step=lambda step, _: steps.append(step), should_stop=lambda: steps[-1] >= 15)
    elsewhere = tiny_config(steps=30, early_stop=False, checkpoint_every=5, threads=1, device="cpu")
    resumed = train(elsewhere, tmp_path)
    def rows(result):  # all but the wall clock
        return [{k: v for k, v in row.items() if k != "seconds"} for row in result.history]
    assert rows(resumed) == rows(train(config))  # from step 10, bit for bit on the same arithmetic
    saved = json.loads((tmp_path / "config.json").read_text())["train"]
    assert (saved["threads"], saved["device"], saved["checkpoint_every"]) == (1, "cpu", 5)
    assert (tmp_path / "result.json").exists()
    again = train(tiny_config(steps=30, early_stop=False, checkpoint_every=10), tmp_path)
    assert again.steps == 30 and rows(again) == rows(resumed)  # a finished run stays finished
    with pytest.raises(ValueError, match=r"train\.device, train\.compile"):  # the refusal lists what may change
        train(tiny_config(steps=30, early_stop=False, lr=1e-3), tmp_path)


def test_a_held_out_batch_that_scores_no_position_is_refused_before_anything_is_written(tmp_path):
    """Full-sequence induction scores repeats only; 4 rows of 8 tokens of 256 held none, and every evaluation
    logged a loss of 0.0 (a perfect one) and accuracy 0.0 over no position at all."""
    task = make_task_config("induction", vocab_size=256, seq_len=8, form="all_positions")
    config = tiny_config(4, eval_size=4)
    config = dataclasses.replace(config, task=task, model=dataclasses.replace(config.model, vocab_size=256))
    with pytest.raises(ValueError, match=r"held-out batch \(4 rows of the induction task\) scores no position"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_evaluate_refuses_a_batch_that_scores_no_position():
    """It returned (0.0, 0.0): accuracy 0 and a perfect loss over no position at all."""
    from psattn.tasks import IGNORE_INDEX, TaskBatch
    from psattn.training.evaluation import evaluate
    from psattn.training.run_dir import build_model

    model = build_model(tiny_config())
    inputs = torch.tensor([[0, 3, 5, 7]])
    with pytest.raises(ValueError, match=r"the batch \(1 row\) has no scored positions"):
        evaluate(model, TaskBatch(inputs, torch.full_like(inputs, IGNORE_INDEX)))
    accuracy, loss = evaluate(model, TaskBatch(inputs, torch.tensor([[IGNORE_INDEX, 1, IGNORE_INDEX, 2]])))
    with torch.no_grad():
        logits = model.eval()(inputs)[0, [1, 3]]  # (2, V): the scored positions
    assert accuracy == float((logits.argmax(-1) == torch.tensor([1, 2])).float().mean())
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, torch.tensor([1, 2]))), rel=1e-5)


@pytest.mark.parametrize("chunk,error", [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError)])
def test_evaluate_refuses_a_chunk_that_is_not_a_positive_integer_and_a_batch_that_is_not_a_task_batch(chunk, error):
    """chunk 0 raised range()'s "arg 3 must not be zero", -1 a ZeroDivisionError; a tuple an AttributeError; 2.5 and
    True, type mistakes, were ValueErrors and are TypeErrors."""
    from psattn.tasks import TaskBatch
    from psattn.training.evaluation import evaluate
    from psattn.training.run_dir import build_model

    model = build_model(tiny_config())
    inputs = torch.tensor([[0, 3, 5, 3]])
    with pytest.raises(error, match=r"chunk must be a positive integer \(rows scored at once\), got"):
        evaluate(model, TaskBatch(inputs, inputs), chunk=chunk)
    with pytest.raises(TypeError, match=r"evaluate scores a TaskBatch \(TaskBatch\(inputs, targets\)\), got tuple"):
        evaluate(model, (inputs, inputs))


def test_evaluate_scores_a_bfloat16_model_in_float32_and_restores_its_mode_when_the_forward_fails():
    """A bf16 model's held-out loss was summed in bf16 (off in its third digit), and a forward that raised left a
    training model in eval mode."""
    from psattn.tasks import TaskBatch
    from psattn.training.evaluation import evaluate
    from psattn.training.run_dir import build_model

    model = build_model(tiny_config()).to(torch.bfloat16)
    inputs = torch.randint(0, 16, (32, 16), generator=torch.Generator().manual_seed(0))
    _, loss = evaluate(model, TaskBatch(inputs, inputs.roll(-1, dims=1)))
    with torch.no_grad():
        logits = model.eval()(inputs).float()  # (B, T, V): bf16 logits, their loss in float32
    exact = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), inputs.roll(-1, dims=1).flatten()))
    assert loss == pytest.approx(exact, rel=1e-6)
    model.train()
    with pytest.raises(ValueError, match="vocab"):  # a token id past the vocabulary: the forward raises
        evaluate(model, TaskBatch(inputs + 1000, inputs))
    assert model.training


def test_a_training_batch_that_scores_no_position_logs_no_training_loss():
    """Full-sequence induction rows of 16 tokens of 256 often hold no repeat: a one-row batch then scores nothing,
    and its loss of 0.0 (a perfect one, over no position) was logged as the training loss."""
    from psattn.tasks import sample_task
    from psattn.training.seeds import step_generator

    task = make_task_config("induction", vocab_size=256, seq_len=16, form="all_positions")
    config = tiny_config(8, batch_size=1, eval_every=1)
    config = dataclasses.replace(config, task=task, model=dataclasses.replace(config.model, vocab_size=256))
    rows = train(config, metrics=None).history[1:]
    scored = [int(sample_task(task, 1, step_generator(config.train.seed, row["step"] - 1)).scored.sum()) for row in rows]
    assert 0 in scored and any(scored)  # both kinds of batch occur
    assert [row["train_loss"] is None for row in rows] == [n == 0 for n in scored]
    assert all(row["train_loss"] > 1.0 for row, n in zip(rows, scored, strict=True) if n)


def test_on_step_gets_no_loss_for_a_training_batch_that_scores_no_position():
    """The callback was handed such a batch's loss of 0.0 (over no position), which the history no longer logs;
    the bare loop that benchmarks time the trainer against handed it NaN."""
    from psattn.tasks import sample_task
    from psattn.training.seeds import step_generator
    from psattn.training.speed import bare_loop

    task = make_task_config("induction", vocab_size=256, seq_len=16, form="all_positions")
    config = tiny_config(8, batch_size=1, eval_every=4)
    config = dataclasses.replace(config, task=task, model=dataclasses.replace(config.model, vocab_size=256))
    seen: list[tuple[int, float | None]] = []
    train(config, metrics=None, on_step=lambda step, loss: seen.append((step, loss)))
    scored = [int(sample_task(task, 1, step_generator(config.train.seed, step - 1)).scored.sum()) for step, _ in seen]
    assert [step for step, _ in seen] == list(range(1, 9)) and 0 in scored and any(scored)
    assert [loss is None for _, loss in seen] == [n == 0 for n in scored]
    assert all(loss > 1.0 for _, loss in seen if loss is not None)
    bare: list[tuple[int, float | None]] = []
    bare_loop(config, 8, on_step=lambda step, loss: bare.append((step, loss)))
    assert bare == seen  # the same recipe: the same losses, and None where the trainer gives None


def test_an_early_stopping_rule_written_into_config_json_is_checked_as_one_given_with_set(tmp_path):
    """A rule under which the run would have stopped before its checkpoint is refused also when it is edited into
    config.json (which psattn train --run-dir reads): the run 'stopped early' at once at step 20, where a run of
    that config.json stops at step 10."""
    run = tmp_path / "run"
    train(tiny_config(20, threshold=0.05), run)
    config = json.loads((run / "config.json").read_text())
    config["train"]["early_stop"] = True
    (run / "config.json").write_text(json.dumps(config))
    kept = (run / "result.json").read_text()
    with pytest.raises(ValueError, match="trained to step 20, but stopping early as asked .* would have stopped at step 10"):
        train(RunConfig.from_file(run / "config.json"), run)
    assert (run / "result.json").read_text() == kept


def test_train_without_a_run_directory_writes_nothing(tmp_path, monkeypatch):
    """docs/getting-started.md says "`train` without a run directory writes nothing", and no test checked it: a
    run, a checkpoint or a cache left in the working folder or the cache folder would go unseen."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    result = train(tiny_config(steps=4, eval_every=2))
    assert result.steps == 4 and len(result.history) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["work"] and not any((tmp_path / "work").iterdir())
