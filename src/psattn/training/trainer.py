"""The training loop: AdamW (``.schedule``), clipping, held-out evaluation, the emergence step, early
stopping, atomic checkpoints (``.state``) and exact resumption, into a run directory (``.run_dir``).

Determinism: parameters are initialised from ``train.seed``; the training batch of step s is drawn
from a generator seeded by (seed, s) alone, and the held-out set from (seed, "eval") (``.seeds``), so a
resumed run sees exactly the batches an uninterrupted run would. Under ``torchrun`` the same code
trains data-parallel (see ``.distributed``); only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from psattn.files import write_json
from psattn.progress import progress_bar
from psattn.tasks.batch import IGNORE_INDEX
from psattn.tasks.registry import sample_task
from psattn.training.binding import (
    binding,
    check_binding,
    check_budget,
    check_extensions,
    check_vocabulary,
    read_binding,
)
from psattn.training.checkpoint import RunRefused
from psattn.training.config import RunConfig, holds_same_run
from psattn.training.distributed import (
    Distributed,
    agree_on_stop,
    barrier,
    mean_over_ranks,
    resolve_device,
    setup_distributed,
    shard,
)
from psattn.training.evaluation import evaluate
from psattn.training.lock import run_lock
from psattn.training.loss import computes_every_logit, forward_fn
from psattn.training.memory import check_fits, placed
from psattn.training.reporting import board_scalars, evaluation_line, summary_writer_class, tensorboard_writer
from psattn.training.run_dir import (
    CHECKPOINT,
    CONFIG,
    RESULT,
    TENSORBOARD,
    RunResult,
    append_metrics_row,
    build_model,
    check_run_dir,
    clear_run_files,
    eval_batch,
    load_result,
    undo_failed_start,
    write_history,
    write_result,
    write_run_files,
)
from psattn.training.schedule import build_optimizer
from psattn.training.seeds import seed_step_randomness, step_generator
from psattn.training.signals import StopFlag, TrainingDiverged, TrainingInterrupted
from psattn.training.state import TrainState, at_threshold_streak
from psattn.training.task_metrics import RowMetrics, task_metrics
from psattn.training.transfer import to_device

log = logging.getLogger(__name__)

#: the most step losses held unread on the device between two looks (``_Run.raise_if_diverged``)
MAX_UNCHECKED = 1024


class _Run:
    """One run's moving parts (model, optimiser, schedule, held-out batch) and the state a checkpoint
    keeps (a ``TrainState``), with the four things the loop does to them:
    start or resume, take a step, evaluate and log, checkpoint."""

    def __init__(self, config: RunConfig, run_dir: Path | None, ddp: Distributed, device: torch.device,
                 extensions: Sequence[dict[str, Any]] = (), metrics: RowMetrics | None = None):
        self.config, self.t, self.ddp, self.run_dir, self.device = config, config.train, ddp, run_dir, device
        self.ckpt_path = None if run_dir is None else run_dir / CHECKPOINT
        self.writes = run_dir is not None and ddp.is_main
        self.model = placed(build_model(config), device)
        self.parameters = list(self.model.parameters())  # clipped every step: the module tree is walked once
        self.optimizer, self.schedule = build_optimizer(self.model, self.t, extensions)
        self.forward = forward_fn(self.model, config, ddp, device)
        self.every_logit = computes_every_logit(self.t, device)  # the step's batch then needs no scored indices
        self.held_out = eval_batch(config).to(device)
        self.unchecked: list[tuple[int, torch.Tensor]] = []  # (step, loss) not yet read back (raise_if_diverged)
        self.scored_last = 0  # positions the last step's (global) batch scored: none, and its loss of 0 means nothing
        self.metrics = metrics
        self.tokens_per_step = self.t.batch_size * getattr(config.task, "seq_len", 0)
        self.state = TrainState(self.model, self.optimizer, self.schedule)  # what a checkpoint holds
        tokens = getattr(config.task, "tokens", None)
        self.binding = binding(config, None if tokens is None else tokens().fingerprint, extensions)  # what it is bound to
        self.board = None  # a TensorBoard writer, opened by start_or_resume when train.tensorboard is set

    @property
    def directory(self) -> Path:
        """The run directory, where there is one (``writes``, a checkpoint path)."""
        assert self.run_dir is not None
        return self.run_dir

    def start_or_resume(self, resume: bool) -> None:
        """Load the checkpoint when resuming from one (metrics.jsonl is cut back to it, and a finished run,
        with no step left, is left unwritten); otherwise clear what an earlier run left in the directory and
        log the untrained model as the step-0 row."""
        if resume and self.ckpt_path is not None and self.ckpt_path.exists():
            self.state.load(self.ckpt_path, self.directory / CONFIG)
            if self.writes:
                write_history(self.directory, self.state.history)  # drop lines written after the checkpoint
                if (load_result(self.directory) or {}).get("diverged_at") is not None:
                    (self.directory / RESULT).unlink()  # trained again from before the divergence: unfinished
            log.info("resumed %s at step %d", self.run_dir, self.state.step)
        elif self.writes:  # a fresh start: nothing of an earlier run in this directory may survive
            clear_run_files(self.directory)
        if self.t.tensorboard and self.writes and not self.finished():  # a finished run logs nothing more
            after = self.state.step + 1 if self.state.step else None  # the checkpoint's own row, in its history, stays
            self.board = tensorboard_writer(self.directory / TENSORBOARD, purge_step=after)
        if not self.state.history:
            self.evaluate_and_log(None, self.state.seconds)

    def train_step(self) -> torch.Tensor:
        """One optimiser step on the batch of (seed, step); returns this rank's loss, unread.

        Nothing of the step is read back from the device: whether its loss was finite is looked at in
        ``raise_if_diverged``, at the next evaluation, checkpoint or ``on_step``, or after ``MAX_UNCHECKED`` steps."""
        t = self.t
        batch = sample_task(self.config.task, t.batch_size, step_generator(t.seed, self.state.step))  # on the host
        if self.config.model.dropout > 0:  # the only randomness of a step after its batch
            seed_step_randomness(t.seed, self.state.step)
        scored = self.scored_last = int((batch.targets != IGNORE_INDEX).sum())
        loss = self.forward(to_device(shard(batch, self.ddp), self.device, indexed=not self.every_logit), scored)
        self.unchecked.append((self.state.step, mean_over_ranks(loss, self.ddp).detach()))
        if len(self.unchecked) >= MAX_UNCHECKED:  # one wait in that many steps: the held losses stay few
            self.raise_if_diverged()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, t.grad_clip)
        self.optimizer.step()
        self.schedule.step()
        self.state.step += 1
        return loss

    def raise_if_diverged(self) -> None:
        """TrainingDiverged naming the first step since the last look whose loss (over all ranks) was not
        finite; its result.json records the divergence at that step. One wait for the device, which
        an evaluation or a checkpoint makes anyway."""
        if not self.unchecked:
            return
        losses = torch.stack([loss for _, loss in self.unchecked])  # (k,)
        finite = torch.isfinite(losses).tolist()
        steps, self.unchecked = [step for step, _ in self.unchecked], []
        if all(finite):
            return
        bad = finite.index(False)
        at = steps[bad]
        kept = "no checkpoint yet" if self.ckpt_path is None or not self.ckpt_path.exists() else f"{self.ckpt_path} is kept"
        if self.writes:  # the run's outcome: a sweep counts it as ended, and its tables say where it diverged
            write_json(self.directory / RESULT, RunResult.of(self.state, self.t.steps, diverged_at=at).summary())
            kept += f"; {self.directory / RESULT} records the divergence"
        run = f"run {self.config.name}: " if self.config.name else ""
        raise TrainingDiverged(f"{run}loss became {losses[bad].item()} at step {at}; stopping ({kept})")

    def evaluate_and_log(self, train_loss: float | None, elapsed: float) -> dict[str, Any]:
        """One metrics row (held-out accuracy and loss, the task's own metrics, wall seconds, tokens
        seen), appended to the history and to metrics.jsonl; records the emergence step."""
        acc, eval_loss = evaluate(self.model, self.held_out)
        row = {"step": self.state.step, "train_loss": train_loss, "eval_loss": eval_loss, "eval_accuracy": acc,
               "lr": self.schedule.get_last_lr()[0], "seconds": round(elapsed, 3),
               "tokens": self.state.step * self.tokens_per_step}
        if self.metrics is not None:
            row.update(self.metrics(self.model, self.config.task, self.held_out))
        self.state.history.append(row)
        if self.writes:
            append_metrics_row(self.directory, row)
        if self.board is not None:
            board_scalars(self.board, row)
        if self.state.emergence_step is None and self.state.step > 0 and acc >= self.t.threshold:
            self.state.emergence_step = self.state.step
        return row

    def finished(self) -> bool:
        """No step is left to take: the budget is spent, or early stopping has stopped the run."""
        return self.state.step >= self.t.steps or self.stops_early()

    def stops_early(self) -> bool:
        """With early stopping: held-out accuracy has stayed at the threshold long enough."""
        return self.t.early_stop and at_threshold_streak(self.state.history, self.t.threshold) >= self.t.early_stop_evals

    def checkpoint(self) -> None:
        if self.writes:
            assert self.ckpt_path is not None  # there is a run directory
            self.state.save(self.ckpt_path, self.binding)
        barrier(self.ddp)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None


@contextlib.contextmanager
def _undone_unless_trained(run: _Run) -> Iterator[None]:
    """Run the block; when it fails before the run has trained a step into its directory (a model that does not fit
    in memory at its first step, say), remove what it wrote (``undo_failed_start``), so that the directory, and the
    lock's folder with it, is left as the start found it."""
    try:
        yield
    except BaseException:
        if run.writes:
            run.close()
            undo_failed_start(run.directory)
        raise



def train(
    config: RunConfig,
    run_dir: str | Path | None = None,
    *,
    resume: bool = True,
    progress: bool = False,
    on_step: Callable[[int, float | None], None] | None = None,
    time_limit_s: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    handle_signals: bool = True,
    lock: bool = True,
    report: Callable[[str], None] | None = None,
    metrics: RowMetrics | None = task_metrics,
    again: str | None = None,
) -> RunResult:
    """Train ``config``; with ``run_dir``, write the run files there and resume from its
    checkpoint when one exists (a finished run there is read back, its files left unwritten). ``on_step(step, loss)``
    is called after every optimiser step (``loss`` None for a batch that scored no position, as the history's
    ``train_loss``).

    ``time_limit_s`` stops at the first step boundary after that many seconds of this call:
    the checkpoint is written, no ``result.json`` (the run is unfinished), and the returned
    result has ``timed_out`` set; calling again resumes exactly where it stopped.

    A stop signal (SIGINT, SIGTERM, SIGHUP; unless ``handle_signals`` is false), or ``should_stop()``
    turning true, stops at the next step boundary: the checkpoint is written and
    ``TrainingInterrupted`` raised; calling again resumes exactly.

    A run directory is trained by one process at a time: another process holding it raises
    ``RunLocked`` (``lock=False``: the caller holds the lock). A start that fails before its first trained
    step (out of memory there, say) removes what it wrote, leaving the directory as it found it.

    ``report(line)`` receives a start line (parameters, device, steps, run directory) and one line per
    evaluation (``evaluation_line``), for a console. ``metrics(model, task, held_out)`` adds columns to
    every evaluation row: by default the task's own (``psattn.training.task_metrics``).

    A ``config`` that is not a ``RunConfig``, and an ``on_step``, ``should_stop``, ``report`` or ``metrics``
    that is neither None nor a function, are a TypeError before anything is written.

    Args:
        config: the run: model, task and optimisation.
        run_dir: where the run's files go (config.json, metrics.jsonl, checkpoint.pt, result.json);
            None trains in memory and writes nothing.
        resume: continue from the checkpoint in ``run_dir`` when there is one (False: start over).
        progress: show a progress bar.
        on_step: called as ``on_step(step, loss)`` after every optimiser step (loss None: the batch scored nothing).
        time_limit_s: checkpoint and stop after this many seconds.
        should_stop: polled every step; True checkpoints and stops.
        handle_signals: turn SIGINT/SIGTERM/SIGHUP into a checkpoint and a stop.
        lock: take the run directory's lock (False: the caller holds it).
        report: receives the start line and one line per evaluation.
        metrics: the extra columns of every evaluation row (None: none).
        again: what a stop's line says to run to resume (default: "the same command again", or
            "train(..., resume=True)" when ``resume`` is false; ``psattn train --restart`` names its own flag).

    Returns:
        A ``RunResult``: final and best held-out accuracy, the emergence step, steps taken, seconds, and
        every evaluation row in ``history``.

    Examples:
        >>> from psattn.experiments.configs import small_config
        >>> from psattn.training.trainer import train
        >>> config = small_config("key_only", 1.0, steps=20, early_stop=False, batch_size=8, device="cpu")
        >>> result = train(config)  # no run directory: nothing is written
        >>> result.steps, [row["step"] for row in result.history]
        (20, [0, 20])
    """
    if not isinstance(config, RunConfig):  # an AttributeError on .task
        raise TypeError(f"train takes a RunConfig (RunConfig.from_dict(data)), got {type(config).__name__}")
    for name, hook in (("on_step", on_step), ("should_stop", should_stop), ("report", report), ("metrics", metrics)):
        if hook is not None and not callable(hook):  # a TypeError after the first step, the run files written
            raise TypeError(f"{name} must be a function or None, got {type(hook).__name__}")
    if time_limit_s is not None and not time_limit_s >= 0:
        raise ValueError(f"time_limit_s must be a non-negative number of seconds, got {time_limit_s!r}")
    called = time.perf_counter()
    # a task config of its own: a text task opens its corpus once per object (TextConfig.tokens), so each
    # call sees the corpus as it is now, and every step of the call the same one
    config = dataclasses.replace(config, task=dataclasses.replace(config.task))
    t = config.train
    if t.threads is not None:
        torch.set_num_threads(t.threads)
    ddp = setup_distributed(resolve_device(t.device).type)
    device = resolve_device(t.device, ddp.local_rank)
    check_fits(config, device)  # before anything is allocated or written (see psattn.training.memory)
    run_dir = None if run_dir is None else Path(run_dir)
    locked = run_lock(run_dir) if lock and run_dir is not None and ddp.is_main else contextlib.nullcontext()
    with locked:  # one process per run directory (see psattn.training.lock)
        fresh = not (resume and run_dir is not None and (run_dir / CHECKPOINT).exists())
        extensions = check_run_dir(run_dir, config, resume) if run_dir is not None else []
        check_vocabulary(config)
        if t.tensorboard:
            summary_writer_class()  # installed, before anything is written
        run = _Run(config, run_dir, ddp, device, extensions, metrics)  # data resolved, model built: nothing written yet
        if run_dir is not None and not fresh:  # the checkpoint must still be this config's, on this data and schedule
            bound = read_binding(run_dir / CHECKPOINT)
            check_binding(run_dir, config, run_dir / CHECKPOINT, bound)
            check_extensions(run_dir, run_dir / CHECKPOINT, bound, extensions)
            check_budget(run_dir, run_dir / CHECKPOINT, bound, config, extensions)
        with _undone_unless_trained(run):  # a start that fails leaves the directory as it found it
            if run_dir is not None:
                write_run_files(run_dir, config, ddp.is_main, fresh=fresh, extensions=extensions)
            timed_out, stop = False, StopFlag()

            def interrupted(signum: int) -> TrainingInterrupted:
                rerun = again or ("the same command again" if resume else "train(..., resume=True)")
                hint = (f"checkpoint written in {run_dir}; run {rerun} to resume" if run_dir is not None
                        else "no run directory, nothing kept")
                return TrainingInterrupted(f"{signal.Signals(signum).name} at step {run.state.step}: {hint}",
                                           signum, run.state.step)

            with stop.installed() if handle_signals else contextlib.nullcontext():
                run.start_or_resume(resume)  # a signal in its step-0 evaluation is honoured at the first step boundary
                say = report if report is not None and ddp.is_main else (lambda line: None)
                say(f"{'resuming' if run.state.step else 'training'} {config.name}: {run.model.num_parameters():,} parameters "
                    f"on {device}, step {run.state.step} of {t.steps}" + (f", run directory {run_dir}" if run_dir else ""))
                bar = progress_bar(total=t.steps, initial=run.state.step, enabled=progress and ddp.is_main, desc=config.name,
                                   leave=False)
                run.model.train()
                start = time.perf_counter()
                while not run.finished():
                    loss = run.train_step()
                    if on_step is not None:  # reads the loss anyway
                        run.raise_if_diverged()
                        on_step(run.state.step, loss.item() if run.scored_last else None)  # 0.0 over no position
                    bar.update(1)
                    if run.state.step % t.eval_every == 0 or run.state.step == t.steps:
                        run.raise_if_diverged()
                        loss = mean_over_ranks(loss, ddp)  # the global batch's loss, for the log
                        # a batch that scored no position (full-sequence induction rows without a repeat) has no loss
                        train_loss = loss.item() if run.scored_last else None
                        row = run.evaluate_and_log(train_loss, run.state.seconds + time.perf_counter() - start)
                        bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{row['eval_accuracy']:.3f}")
                        say(evaluation_line(row, t.steps))
                    done = run.stops_early()
                    over_time = (time_limit_s is not None and run.state.step < t.steps and not done
                                 and time.perf_counter() - called >= time_limit_s)
                    if should_stop is not None and not stop.requested and should_stop():
                        stop.signum = signal.SIGTERM
                    # read once: a signal landing after this is honoured at the next boundary; under DDP every rank
                    # stops at the step where any rank saw one or ran out of time (docs/scale-out.md)
                    timed_out, signum = agree_on_stop(over_time, stop.signum, ddp)
                    stopping = signum is not None
                    if run.state.step % t.checkpoint_every == 0 or done or run.state.step == t.steps or stopping or timed_out:
                        run.raise_if_diverged()  # a diverged model is never saved
                        run.state.seconds += time.perf_counter() - start
                        start = time.perf_counter()
                        run.checkpoint()
                    if signum is not None:  # checkpointed above, after raise_if_diverged
                        bar.close()
                        raise interrupted(signum)
                    if timed_out:
                        log.info("time limit reached at step %d; checkpoint written, rerun to resume", run.state.step)
                        break
                # a signal after the last step's look: above all one while a finished run's checkpoint loads, when no
                # step is left to take (the loop never ran); its checkpoint is this step's, as at a step boundary
                _, signum = agree_on_stop(False, stop.signum, ddp)
                if signum is not None:
                    bar.close()
                    raise interrupted(signum)
                run.raise_if_diverged()  # the loop ends at a checkpoint, whose seconds are the run's
        bar.close()
        run.close()
        result = RunResult.of(run.state, t.steps, timed_out)
        if run.writes and not timed_out:  # a finished run read again holds this result already: not rewritten
            write_result(run.directory, result.summary())
        barrier(ddp)
        return result


def train_again(config: RunConfig, run_dir: str | Path, **kwargs: Any) -> RunResult:
    """``train`` ``config`` into ``run_dir`` as a command with no --restart runs it (``psattn demo``, the Bode run
    of ``psattn theory report``): the run there resumes where a stop cut it short, or is reused once finished, when
    it is of ``config``, and a run of another config there is trained anew; either way a stop's line says to run the
    same command again, which resumes it. A run there that ``train`` refuses to go on with (``RunRefused``: a
    checkpoint that does not read, a finished run without one, ...) is refused with this command's way to train it
    anew: delete ``run_dir``, or write elsewhere."""
    run_dir = Path(run_dir)
    saved = run_dir / CONFIG
    try:
        return train(config, run_dir, resume=not saved.exists() or holds_same_run(saved, config),
                     again="the same command again", **kwargs)
    except RunRefused as err:
        raise err.with_anew(f"delete {run_dir} and run the same command again to train it anew, or give it another "
                            "--out") from None
