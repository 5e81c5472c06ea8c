"""Training loop: AdamW, warm-up + cosine schedule, clipping, held-out evaluation, emergence step,
atomic checkpoints and exact resumption.

Determinism: parameters are initialised from ``train.seed``; the training batch of step s is drawn
from a generator seeded by (seed, s) alone, and the held-out set from (seed, "eval"), so a resumed
run sees exactly the batches an uninterrupted run would. Under ``torchrun`` the same code trains
data-parallel (see ``.distributed``); only rank 0 writes. A run directory holds::

    config.json   the resolved RunConfig        meta.json     seed, versions, git revision, date
    metrics.jsonl one line per evaluation (step 0 first; wall seconds and tokens seen in each)
    checkpoint.pt model, optimiser, schedule, history
    result.json   the final summary
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from psattn.jsonfile import read_json
from psattn.models.decoder import DecoderLM
from psattn.models.heads import head_scores
from psattn.progress import progress_bar
from psattn.provenance import provenance
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch
from psattn.tasks.registry import sample_task, task_name
from psattn.text.metrics import text_metrics
from psattn.training.binding import binding, check_binding, check_vocabulary, read_binding, record_data_once
from psattn.training.checkpoint import (
    load_checkpoint,
    load_model_weights,
    write_json,
    write_jsonl,
    write_text,
)
from psattn.training.config import RunConfig, config_differences, holds_same_run
from psattn.training.distributed import Distributed, any_rank, barrier, mean_over_ranks, setup_distributed, shard, shard_loss
from psattn.training.lock import run_lock
from psattn.training.memory import check_fits
from psattn.training.signals import TrainingInterrupted, on_stop_signals
from psattn.training.state import TrainState

log = logging.getLogger(__name__)


def induction_head_metrics(model, task, held_out) -> dict[str, Any]:
    """Every head's previous-token and induction score on [BOS] + R + R rows (see ``psattn.models.heads``)."""
    scores = head_scores(model, vocab_size=task.vocab_size)
    return {"previous_token_score": scores.previous_token.tolist(), "induction_score": scores.induction.tolist()}


#: task name -> (model, task config, held-out batch) -> extra columns of every evaluation row
TASK_METRICS: dict[str, Callable[..., dict[str, Any]]] = {"text": text_metrics, "induction": induction_head_metrics}


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class RunResult:
    """What ``train`` returns: accuracies, the emergence step, steps, seconds and every evaluation row."""
    final_accuracy: float
    best_accuracy: float
    emergence_step: int | None  # first evaluated step with held-out accuracy >= threshold
    steps: int  # optimiser steps taken
    stopped_early: bool
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False  # stopped by ``time_limit_s``; the checkpoint resumes it

    def to_dict(self) -> dict[str, Any]:
        """The form result.json holds."""
        return asdict(self)


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator that draws the training batch of ``step``."""
    return torch.Generator().manual_seed((seed << 32) + step)


def seed_step_randomness(seed: int, step: int) -> None:
    """Seed dropout's generators (CPU and every CUDA device) from (seed, step), so a resumed run
    draws what the uninterrupted run drew, on any device, with no generator state to save."""
    torch.manual_seed((seed << 32) + (1 << 30) + step)


def at_threshold_streak(history: list[dict[str, Any]], threshold: float) -> int:
    """How many of the latest evaluations in a row reached ``threshold`` held-out accuracy (the step-0
    row, taken before any training, never counts)."""
    streak = 0
    for row in reversed(history):
        if row["step"] == 0 or row["eval_accuracy"] < threshold:
            break
        streak += 1
    return streak


def eval_batch(config: RunConfig) -> TaskBatch:
    """The run's held-out batch: ``eval_size`` rows of its task's held-out split, from its seed alone."""
    generator = torch.Generator().manual_seed((config.train.seed << 32) + (1 << 31) - 1)
    return sample_task(config.task, config.train.eval_size, generator, split="eval")


def build_model(config: RunConfig) -> DecoderLM:
    """The run's initial model, built on the CPU from the run's seed, so that its weights are the same
    on every device it is then moved to."""
    torch.manual_seed(config.train.seed)
    with torch.device("cpu"):
        return DecoderLM(config.model)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The torch device ``name`` means: ``auto`` is CUDA when available; ``cuda`` is this rank's GPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = f"cuda:{local_rank}"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"train.device={name!r} but CUDA is not available")
    return device


def load_trained(run_dir: str | Path, device: str | torch.device = "cpu") -> DecoderLM:
    """The model of a run directory, with the weights of its last checkpoint, in eval mode, on ``device``
    (``"auto"``: CUDA when available), whichever device it trained on; refused when the checkpoint's
    binding disagrees with the run's config, tokenizer or data record (see ``psattn.training.binding``).

    Examples:
        >>> import tempfile
        >>> from psattn.experiments.configs import small_config
        >>> from psattn.training.trainer import load_trained, train
        >>> run = tempfile.mkdtemp()
        >>> _ = train(small_config("key_only", 1.0, steps=10, early_stop=False, batch_size=8, device="cpu"), run)
        >>> model = load_trained(run)  # the folder alone rebuilds it
        >>> model.config.layer_attention_configs()[0].variant, model.training
        ('key_only', False)
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise ValueError(f"{run_dir} is not a run directory (no config.json)")
    config = RunConfig.from_file(run_dir / "config.json")
    path = run_dir / "checkpoint.pt"
    state = load_checkpoint(path, keys=("model",))
    bound = state.get("binding")
    tokens = getattr(config.task, "tokens", None)
    if bound is None and tokens is not None and not (run_dir / "data.json").exists():
        record_data_once(run_dir, tokens().fingerprint)  # a run from before data records
    check_binding(run_dir, config, path, bound)
    with torch.device("cpu"):
        model = DecoderLM(config.model)
    load_model_weights(model, state["model"], path, run_dir / "config.json")
    return model.to(resolve_device(device) if isinstance(device, str) else device).eval()


def lr_factor(train, extensions: Sequence[dict[str, Any]] = ()) -> Callable[[int], float]:
    """The learning-rate multiplier of each step: linear warm-up, then cosine decay to ``min_lr_ratio``
    at ``train.steps``. A run extended to more steps (``extensions``, recorded in its meta.json) keeps
    its schedule up to the step it was extended at, then decays by a new cosine from the factor it had
    there to ``min_lr_ratio`` at its new last step: nothing it already trained changes, and a finished
    run continues at its final learning rate."""
    horizon = extensions[0]["steps_before"] if extensions else train.steps

    def base(step: int) -> float:
        if step < train.warmup_steps:
            return (step + 1) / train.warmup_steps
        progress = (step - train.warmup_steps) / max(1, horizon - train.warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return train.min_lr_ratio + (1.0 - train.min_lr_ratio) * cosine

    def factor(step: int) -> float:
        for extension in reversed(extensions):
            at, end, start = extension["at_step"], extension["steps_after"], extension["lr_factor_at"]
            if step >= at:
                progress = (step - at) / max(1, end - at)
                return train.min_lr_ratio + (start - train.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return base(step)

    return factor


def build_optimizer(model: torch.nn.Module, train, extensions: Sequence[dict[str, Any]] = ()
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with weight decay on matrices only, and the schedule of ``lr_factor``."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train.lr, betas=train.betas,
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(train, extensions))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over scored positions; logits (..., V) are aligned with targets (...)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)


@torch.no_grad()
def evaluate(model: DecoderLM, batch: TaskBatch, chunk: int = 256) -> tuple[float, float]:
    """(accuracy, loss) over the scored positions of ``batch``."""
    was_training = model.training
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    for start in range(0, len(batch), chunk):
        inputs, targets = batch.inputs[start : start + chunk], batch.targets[start : start + chunk]
        scored = targets != IGNORE_INDEX
        logits = model(inputs, output_mask=scored)  # (N, V)
        correct += int((logits.argmax(-1) == targets[scored]).sum())
        total += int(scored.sum())
        loss_sum += float(F.cross_entropy(logits, targets[scored], reduction="sum"))
    model.train(was_training)
    return correct / max(total, 1), loss_sum / max(total, 1)


class _StopFlag:
    """Turns a stop signal into a request honoured at the next step boundary (then checkpoint, raise)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def installed(self):
        return on_stop_signals(lambda signum, _frame: setattr(self, "signum", signum))


def check_run_dir(run_dir: Path, config: RunConfig, resume: bool) -> list[dict[str, Any]]:
    """What ``run_dir`` allows ``config`` to do, checked before anything is written: the run's schedule
    extensions (its meta.json's, plus one when ``config`` asks a trained run for more steps and nothing
    else). A directory holding a run with another config is refused, naming the differing fields, unless
    ``resume`` is false (a restart from step 0); one holding only the config of a failed start is no
    run to protect."""
    config_path = run_dir / "config.json"
    if not config_path.exists() or not _holds_progress(run_dir) or not resume:
        return []  # nothing to protect, or a restart from step 0 (--restart), which replaces what is there
    extensions = _read_meta(run_dir).get("extensions", [])
    if holds_same_run(config_path, config):
        return extensions
    saved = RunConfig.from_file(config_path)
    more_steps = dataclasses.replace(config, train=dataclasses.replace(config.train, steps=saved.train.steps))
    checkpoint = run_dir / "checkpoint.pt"
    if holds_same_run(config_path, more_steps) and config.train.steps > saved.train.steps and checkpoint.exists():
        at = load_checkpoint(checkpoint, keys=("step",))["step"]
        start = lr_factor(saved.train, extensions)(at)
        log.info("extending %s from %d to %d steps at step %d (learning rate factor %.3f, decaying to %g)",
                 run_dir, saved.train.steps, config.train.steps, at, start, config.train.min_lr_ratio)
        return [*extensions, {"at_step": at, "steps_before": saved.train.steps, "steps_after": config.train.steps,
                              "lr_factor_at": start}]
    if holds_same_run(config_path, more_steps) and config.train.steps > saved.train.steps:
        raise ValueError(f"{run_dir} has no checkpoint.pt to continue from (its metrics or result remain), so it cannot "
                         f"grow from {saved.train.steps} to {config.train.steps} steps; use --restart to train it anew "
                         "with the new steps, or another directory")
    raise ValueError(
        f"{run_dir} holds a run with a different config: {config_differences(config_path, config)}. "
        "Only train.steps may grow on a trained run (it continues); use another directory, or --restart"
    )


def _read_meta(run_dir: Path) -> dict[str, Any]:
    try:
        meta = read_json(run_dir / "meta.json", what="run metadata", object_only=True)
    except ValueError:
        return {}
    return meta


def _write_run_files(run_dir: Path, config: RunConfig, is_main: bool = True, fresh: bool = False,
                     extensions: Sequence[dict[str, Any]] = ()) -> None:
    """Write config.json and meta.json (with the schedule's ``extensions``), after ``check_run_dir``.
    An existing run keeps its meta.json unless ``fresh`` (a restart from step 0) or extended."""
    config_path = run_dir / "config.json"
    if is_main:  # temporary files of writes cut short by a kill (this process holds the run's lock)
        for stale in run_dir.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
    tokens = getattr(config.task, "tokens", None)
    if config_path.exists() and not _holds_progress(run_dir):
        log.info("%s holds a config but no training yet; starting it afresh", run_dir)
        fresh = True  # a failed start left only its config: nothing to protect
    extended = not fresh and list(extensions) != _read_meta(run_dir).get("extensions", [])
    if config_path.exists() and not fresh:
        if tokens is not None:
            check_same_data(run_dir, tokens().fingerprint)
        if not extended:
            return
    if not is_main:
        return
    write_json(config_path, config.to_dict())
    if extended:
        (run_dir / "result.json").unlink(missing_ok=True)  # the run is unfinished again
        write_json(run_dir / "meta.json", {**_read_meta(run_dir), "extensions": list(extensions)})
        return
    if tokens is not None:  # a text run keeps its tokenizer, so the directory alone can generate
        write_text(run_dir / "tokenizer.json", tokens().tokenizer.to_json())
        write_json(run_dir / "data.json", tokens().fingerprint)
    write_json(run_dir / "meta.json", provenance(config.train.seed))


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


def _holds_progress(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds anything of a run that trained: a checkpoint, a result, or metrics."""
    metrics = run_dir / "metrics.jsonl"
    return ((run_dir / "checkpoint.pt").exists() or (run_dir / "result.json").exists()
            or (metrics.exists() and metrics.stat().st_size > 0))


def check_same_data(run_dir: Path, fingerprint: dict[str, str]) -> None:
    """Refuse to resume a text run on data other than what it started on (its data.json). A run from
    before runs recorded their data gets its data.json now (``record_data_once``), unless its
    tokenizer.json already shows the data changed; a missing data.json beside a checkpoint that
    records its data is refused by ``check_binding`` before this."""
    path = run_dir / "data.json"
    if not path.exists():
        tokenizer = run_dir / "tokenizer.json"
        if tokenizer.is_file() and hashlib.sha256(tokenizer.read_bytes()).hexdigest() != fingerprint["tokenizer_sha256"]:
            raise ValueError(f"{run_dir} started on other data: its tokenizer.json is not the tokenizer of the data it "
                             "would resume on. Use --restart to start over on the new data, or another run directory")
        record_data_once(run_dir, fingerprint)
        return
    recorded = read_json(path, what="data record", object_only=True)
    changed = [k.removesuffix("_sha256") for k in sorted(set(recorded) | set(fingerprint))
               if recorded.get(k) != fingerprint.get(k)]
    if changed:
        raise ValueError(
            f"{run_dir} started on other data: the {', '.join(changed)} changed since (data.json records "
            "what it trained on). Resuming would continue on different tokens; use --restart to start over "
            "on the new data, or another run directory"
        )


class _Run:
    """One run's moving parts (model, optimiser, schedule, held-out batch) and the state a checkpoint
    keeps (a ``TrainState``), with the four things the loop does to them:
    start or resume, take a step, evaluate and log, checkpoint."""

    def __init__(self, config: RunConfig, run_dir: Path | None, ddp: Distributed, device: torch.device,
                 extensions: Sequence[dict[str, Any]] = ()):
        self.config, self.t, self.ddp, self.run_dir = config, config.train, ddp, run_dir
        self.ckpt_path = None if run_dir is None else run_dir / "checkpoint.pt"
        self.writes = run_dir is not None and ddp.is_main
        try:
            self.model = build_model(config).to(device)
        except (MemoryError, RuntimeError) as err:  # the allocator's message, as one line
            if not isinstance(err, MemoryError) and "memory" not in str(err).lower() and "alloc" not in str(err).lower():
                raise
            raise ValueError(f"the model does not fit in memory on {device} ({_one_line(err)}); "
                             "make it smaller (model.d_model, model.n_layers, model.vocab_size)") from None
        self.optimizer, self.schedule = build_optimizer(self.model, self.t, extensions)
        self.forward = _forward_fn(self.model, config, ddp, device)
        self.device = device
        self.held_out = eval_batch(config).to(device)
        self.metrics = TASK_METRICS.get(task_name(config.task))
        self.tokens_per_step = self.t.batch_size * getattr(config.task, "seq_len", 0)
        self.state = TrainState(self.model, self.optimizer, self.schedule)  # what a checkpoint holds
        tokens = getattr(config.task, "tokens", None)
        self.binding = binding(config, None if tokens is None else tokens().fingerprint)  # what it is bound to
        self.board = None  # a TensorBoard writer, opened by start_or_resume when train.tensorboard is set

    @property
    def directory(self) -> Path:
        """The run directory, where there is one (``writes``, a checkpoint path)."""
        assert self.run_dir is not None
        return self.run_dir

    def start_or_resume(self, resume: bool) -> None:
        """Load the checkpoint when resuming from one (metrics.jsonl is cut back to it); otherwise clear
        what an earlier run left in the directory and log the untrained model as the step-0 row."""
        if resume and self.ckpt_path is not None and self.ckpt_path.exists():
            self.state.load(self.ckpt_path, self.directory / "config.json")
            if self.writes:
                write_jsonl(self.directory / "metrics.jsonl", self.state.history)  # drop lines written after the checkpoint
            log.info("resumed %s at step %d", self.run_dir, self.state.step)
        elif self.writes:  # a fresh start: nothing of an earlier run in this directory may survive
            write_jsonl(self.directory / "metrics.jsonl", [])
            for stale in ("result.json", "checkpoint.pt"):
                (self.directory / stale).unlink(missing_ok=True)
            shutil.rmtree(self.directory / "tensorboard", ignore_errors=True)
        if self.t.tensorboard and self.writes:
            self.board = tensorboard_writer(self.directory / "tensorboard", purge_step=self.state.step or None)
        if not self.state.history:
            self.evaluate_and_log(None, self.state.seconds)

    def train_step(self) -> torch.Tensor:
        """One optimiser step on the batch of (seed, step); returns this rank's loss."""
        t = self.t
        batch = sample_task(self.config.task, t.batch_size, step_generator(t.seed, self.state.step))
        if self.config.model.dropout > 0:  # the only randomness of a step after its batch
            seed_step_randomness(t.seed, self.state.step)
        scored = int((batch.targets != IGNORE_INDEX).sum())
        mine = shard(batch, self.ddp).to(self.device)
        loss = self.forward(mine.inputs, mine.targets, scored)
        if not torch.isfinite(mean_over_ranks(loss, self.ddp)):
            kept = "no checkpoint yet" if self.ckpt_path is None or not self.ckpt_path.exists() else f"{self.ckpt_path} is kept"
            raise TrainingDiverged(f"loss became {loss.item()} at step {self.state.step}; stopping ({kept})")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
        self.optimizer.step()
        self.schedule.step()
        self.state.step += 1
        return loss

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
            with open(self.directory / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if self.board is not None:  # the row's numbers (not the per-position or per-head lists)
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.board.add_scalar(key, value, self.state.step)
            self.board.flush()
        if self.state.emergence_step is None and self.state.step > 0 and acc >= self.t.threshold:
            self.state.emergence_step = self.state.step
        return row

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

    def result(self, timed_out: bool) -> RunResult:
        accs = [row["eval_accuracy"] for row in self.state.history if row["step"] > 0]  # the trained model's
        return RunResult(
            final_accuracy=accs[-1] if accs else 0.0, best_accuracy=max(accs, default=0.0),
            emergence_step=self.state.emergence_step, steps=self.state.step, stopped_early=self.state.step < self.t.steps,
            seconds=self.state.seconds, history=self.state.history, timed_out=timed_out,
        )


def train(
    config: RunConfig,
    run_dir: str | Path | None = None,
    *,
    resume: bool = True,
    progress: bool = False,
    on_step: Callable[[int, float], None] | None = None,
    time_limit_s: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    handle_signals: bool = True,
    lock: bool = True,
    report: Callable[[str], None] | None = None,
) -> RunResult:
    """Train ``config``; with ``run_dir``, write the run files there and resume from its
    checkpoint when one exists. ``on_step(step, loss)`` is called after every optimiser step.

    ``time_limit_s`` stops at the first step boundary after that many seconds of this call:
    the checkpoint is written, no ``result.json`` (the run is unfinished), and the returned
    result has ``timed_out`` set; calling again resumes exactly where it stopped.

    A stop signal (SIGINT, SIGTERM, SIGHUP; unless ``handle_signals`` is false), or ``should_stop()``
    turning true, stops at the next step boundary: the checkpoint is written and
    ``TrainingInterrupted`` raised; calling again resumes exactly.

    A run directory is trained by one process at a time: another process holding it raises
    ``RunLocked`` (``lock=False``: the caller holds the lock).

    ``report(line)`` receives a start line (parameters, device, steps, run directory) and one line per
    evaluation (``evaluation_line``), for a console.

    Args:
        config: the run: model, task and optimisation.
        run_dir: where the run's files go (config.json, metrics.jsonl, checkpoint.pt, result.json);
            None trains in memory and writes nothing.
        resume: continue from the checkpoint in ``run_dir`` when there is one (False: start over).
        progress: show a progress bar.
        on_step: called as ``on_step(step, loss)`` after every optimiser step.
        time_limit_s: checkpoint and stop after this many seconds.
        should_stop: polled every step; True checkpoints and stops.
        handle_signals: turn SIGINT/SIGTERM/SIGHUP into a checkpoint and a stop.
        lock: take the run directory's lock (False: the caller holds it).
        report: receives the start line and one line per evaluation.

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
        fresh = not (resume and run_dir is not None and (run_dir / "checkpoint.pt").exists())
        extensions = check_run_dir(run_dir, config, resume) if run_dir is not None else []
        check_vocabulary(config)
        if t.tensorboard:
            summary_writer_class()  # installed, before anything is written
        run = _Run(config, run_dir, ddp, device, extensions)  # data resolved, model built: nothing written yet
        if run_dir is not None and not fresh:  # the checkpoint must still be this config's, on this data
            check_binding(run_dir, config, run_dir / "checkpoint.pt", read_binding(run_dir / "checkpoint.pt"))
        if run_dir is not None:
            _write_run_files(run_dir, config, ddp.is_main, fresh=fresh, extensions=extensions)
        run.start_or_resume(resume)
        say = report if report is not None and ddp.is_main else (lambda line: None)
        say(f"{'resuming' if run.state.step else 'training'} {config.name}: {run.model.num_parameters():,} parameters on "
            f"{device}, step {run.state.step} of {t.steps}" + (f", run directory {run_dir}" if run_dir is not None else ""))
        timed_out, stop = False, _StopFlag()
        bar = progress_bar(total=t.steps, initial=run.state.step, enabled=progress and ddp.is_main, desc=config.name, leave=False)
        run.model.train()
        with stop.installed() if handle_signals else contextlib.nullcontext():
            start = time.perf_counter()
            while run.state.step < t.steps and not run.stops_early():
                loss = run.train_step()
                if on_step is not None:
                    on_step(run.state.step, loss.item())
                bar.update(1)
                if run.state.step % t.eval_every == 0 or run.state.step == t.steps:
                    loss = mean_over_ranks(loss, ddp)  # the global batch's loss, for the log
                    row = run.evaluate_and_log(loss.item(), run.state.seconds + time.perf_counter() - start)
                    bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{row['eval_accuracy']:.3f}")
                    say(evaluation_line(row, t.steps))
                done = run.stops_early()
                if time_limit_s is not None and run.state.step < t.steps and not done:
                    timed_out = any_rank(time.perf_counter() - called >= time_limit_s, ddp, device)
                if should_stop is not None and not stop.requested and should_stop():
                    stop.signum = signal.SIGTERM
                if run.state.step % t.checkpoint_every == 0 or done or run.state.step == t.steps or stop.requested or timed_out:
                    run.state.seconds += time.perf_counter() - start
                    start = time.perf_counter()
                    run.checkpoint()
                if stop.signum is not None:  # stop.requested
                    bar.close()
                    hint = (f"checkpoint written in {run_dir}; run the same command again to resume" if run_dir is not None
                            else "no run directory, nothing kept")
                    raise TrainingInterrupted(f"{signal.Signals(stop.signum).name} at step {run.state.step}: {hint}",
                                              stop.signum, run.state.step)
                if timed_out:
                    log.info("time limit reached at step %d; checkpoint written, rerun to resume", run.state.step)
                    break
            run.state.seconds += time.perf_counter() - start
        bar.close()
        run.close()
        result = run.result(timed_out)
        if run.writes and not timed_out:
            write_json(run.directory / "result.json", result.to_dict())
        barrier(ddp)
        return result


def evaluation_line(row: dict[str, Any], steps: int) -> str:
    """One console line for an evaluation row: bits per byte and ICL score for text, accuracy otherwise."""
    head = f"step {row['step']}/{steps}: "
    if "bits_per_byte" in row:
        what = f"held-out bits per byte {row['bits_per_byte']:.3f}, ICL score {row['icl_score']:+.3f}"
    else:
        what = f"held-out accuracy {row['eval_accuracy']:.3f}"
    return head + what + f", loss {row['eval_loss']:.3f} ({row['seconds']:.0f} s)"


def summary_line(result: RunResult, config: RunConfig) -> str:
    """The console's last line about a run: what it measured and, if it stopped early, why."""
    last = result.history[-1] if result.history else {}
    if "bits_per_byte" in last:
        what = f"held-out bits per byte {last['bits_per_byte']:.3f}, ICL score {last['icl_score']:+.3f}"
    else:
        emergence = "not reached" if result.emergence_step is None else f"step {result.emergence_step}"
        what = (f"final held-out accuracy {result.final_accuracy:.3f}, emergence (accuracy >= "
                f"{config.train.threshold:g}) {emergence}")
    t = config.train
    if result.stopped_early and not result.timed_out:
        return (f"stopped early at step {result.steps} of {t.steps}: held-out accuracy stayed at or above "
                f"{t.threshold:g} for {t.early_stop_evals} evaluation{'s' * (t.early_stop_evals > 1)} "
                f"(train.early_stop=false trains the whole budget); {what}")
    return f"trained {result.steps} steps: {what}"


def tensorboard_writer(log_dir: Path, purge_step: int | None = None):
    """A ``torch.utils.tensorboard.SummaryWriter`` into ``log_dir``; ``purge_step``: a resumed run drops
    the events an interrupted one wrote after its checkpoint."""
    return summary_writer_class()(log_dir=str(log_dir), purge_step=purge_step)


def summary_writer_class():
    """TensorBoard's ``SummaryWriter``, or an ImportError naming the extra that installs it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError("train.tensorboard needs TensorBoard: pip install 'phase-space-attention[tensorboard]'") from err
    return SummaryWriter


def _forward_fn(model: DecoderLM, config: RunConfig, ddp: Distributed, device: torch.device):
    """(inputs, targets, scored positions of the global batch) -> this rank's loss, with DDP,
    bf16 autocast and torch.compile as configured."""
    t = config.train
    net: torch.nn.Module = model
    if t.compile:
        net = torch.compile(net)  # type: ignore[assignment]  # an OptimizedModule (torch types the result as a callable)
    if ddp.enabled:
        net = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None)
    bf16 = t.precision == "bf16"

    def forward(inputs, targets, scored: int):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if t.compile:  # a data-dependent shape would break the compiled graph
                return shard_loss(net(inputs), targets, scored, ddp)
            keep = targets != IGNORE_INDEX
            logits = net(inputs, output_mask=keep)  # (N, V): the scored positions only
        return shard_loss(logits, targets[keep], scored, ddp)

    return forward
