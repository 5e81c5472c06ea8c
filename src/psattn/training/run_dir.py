"""A run directory: what it holds, the checks before a run writes into it, and what is read back
from it (the trained model, its tokenizer, the result, the held-out batch). A run directory holds::

    config.json    the resolved RunConfig        meta.json     seed, versions, git revision, date
    metrics.jsonl  one line per evaluation (step 0 first; wall seconds and tokens seen in each): the history
    checkpoint.pt  model, optimiser, schedule, step, history (``TrainState``), bound to config and data
    result.json    the final summary (``RunResult.summary``: all but the history), written when the run finishes
    tokenizer.json, data.json  a text run's tokenizer and the fingerprint of the data it trains on

Only ``train`` writes a run directory, through ``check_run_dir`` then ``write_run_files``; every
reader (export, the transformers bridge, the command line, the studies) reads it through here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from psattn.files import append_line, temporary_files, write_json, write_jsonl, write_text
from psattn.jsonfile import read_json, read_jsonl
from psattn.models.decoder import DecoderLM
from psattn.provenance import provenance
from psattn.tasks.batch import TaskBatch
from psattn.tasks.registry import sample_task, task_name
from psattn.textdata.tokenizer import Tokenizer, load_tokenizer
from psattn.training.binding import BOUND_BY_CONTENT, check_binding, record_data_once
from psattn.training.checkpoint import RunRefused, load_checkpoint, load_model_weights
from psattn.training.config import (
    RUNTIME_FIELDS,
    RunConfig,
    canonical_config,
    config_differences,
    holds_same_run,
    with_train_fields,
)
from psattn.training.distributed import resolve_device
from psattn.training.schedule import lr_factor
from psattn.training.seeds import HELD_OUT, stream_generator
from psattn.training.state import TrainState, at_threshold_streak

log = logging.getLogger(__name__)

#: the files of a run directory
CONFIG, META, METRICS, CHECKPOINT, RESULT = "config.json", "meta.json", "metrics.jsonl", "checkpoint.pt", "result.json"
TOKENIZER, DATA, TENSORBOARD = "tokenizer.json", "data.json", "tensorboard"


def run_files(run_dir: str | Path) -> list[Path]:
    """The files a run directory holds of the run itself (what no export may replace)."""
    return [Path(run_dir) / name for name in (CONFIG, META, METRICS, CHECKPOINT, RESULT, TOKENIZER, DATA)]


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
    diverged_at: int | None = None  # the step whose loss was not finite: the run's steps and saved state end before it

    def to_dict(self) -> dict[str, Any]:
        """Every field, the history included."""
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """What result.json holds: every field but the history, which metrics.jsonl holds."""
        return {k: v for k, v in asdict(self).items() if k != "history"}

    @classmethod
    def of(cls, state: TrainState, budget: int, timed_out: bool = False, diverged_at: int | None = None,
           diverged: bool | None = None) -> RunResult:
        """The result of a run whose training state is ``state``, with a budget of ``budget`` steps;
        ``diverged_at``: the step whose loss was not finite, where the run ended (its steps). ``diverged=True``,
        its former spelling, means ``diverged_at=state.step`` (with a DeprecationWarning)."""
        if diverged is not None:
            warnings.warn("RunResult.of's diverged is now diverged_at (the step)", DeprecationWarning, stacklevel=2)
            diverged_at = state.step if diverged else diverged_at
        accs = [row["eval_accuracy"] for row in state.history if row["step"] > 0]  # the trained model's
        steps = state.step if diverged_at is None else diverged_at
        return cls(final_accuracy=accs[-1] if accs else 0.0, best_accuracy=max(accs, default=0.0),
                   emergence_step=state.emergence_step, steps=steps, stopped_early=steps < budget,
                   seconds=state.seconds, history=state.history, timed_out=timed_out, diverged_at=diverged_at)


#: what every loaded result holds (see ``RunResult``): result.json's summary and the history
RESULT_KEYS = {"final_accuracy", "best_accuracy", "emergence_step", "steps", "history"}


def load_result(run_dir: str | Path) -> dict[str, Any] | None:
    """The saved result of a finished run: its result.json, its evaluation rows under "history" (from
    metrics.jsonl, or from result.json itself where an older run wrote them there) and its config under
    "config"; None when the run has not finished, or not started: a folder that does not exist is not an error."""
    run_dir = Path(run_dir)
    path = run_dir / RESULT
    if not path.exists():
        return None
    try:
        result = json.loads(path.read_text())
        if isinstance(result, dict) and "history" not in result:
            result["history"] = read_jsonl(run_dir / METRICS, what="metrics")
    except (ValueError, UnicodeDecodeError):
        result = None
    if not _is_result(result):
        # what a full disk or a hand edit leaves: the run is trained again from its checkpoint, which
        # (the run being finished) rewrites the result without a step
        log.warning("%s is not a run result; the run will be finished again from its checkpoint", path)
        path.unlink()
        return None
    result["config"] = canonical_config(read_json(run_dir / CONFIG, what="run config", object_only=True))
    return result


def _is_result(result: Any) -> bool:
    """Whether ``result`` is what a finished run writes: accuracies in [0, 1], whole step counts, and a
    history of metrics rows (anything else is what a full disk or a hand edit left)."""
    if not isinstance(result, dict) or not RESULT_KEYS <= result.keys():
        return False

    def accuracy(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    history = result["history"]
    return (accuracy(result["final_accuracy"]) and accuracy(result["best_accuracy"]) and count(result["steps"])
            and (result["emergence_step"] is None or count(result["emergence_step"]))
            and isinstance(history, list) and bool(history)
            and all(isinstance(row, dict) and count(row.get("step")) for row in history))

def eval_batch(config: RunConfig) -> TaskBatch:
    """The run's held-out batch: ``eval_size`` rows of its task's held-out split, from its seed alone. Refused
    (ValueError) when it scores no position (full-sequence induction scores only repeats, which short rows of a
    large vocabulary may lack): its accuracy and loss "over the scored positions" would read 0.0, a perfect loss."""
    generator = stream_generator(config.train.seed, HELD_OUT)
    batch = sample_task(config.task, config.train.eval_size, generator, split="eval")
    if not bool(batch.scored.any()):
        rows = f"{len(batch)} row{'' if len(batch) == 1 else 's'}"
        raise ValueError(f"the held-out batch ({rows} of the {task_name(config.task)} task) scores no "
                         "position, so its accuracy and loss would mean nothing: score more rows (train.eval_size, "
                         "or psattn eval --rows), or give rows more to score (a longer task.seq_len, a smaller task.vocab_size)")
    return batch

def build_model(config: RunConfig) -> DecoderLM:
    """The run's initial model, built on the CPU from the run's seed, so that its weights are the same
    on every device it is then moved to."""
    torch.manual_seed(config.train.seed)
    with torch.device("cpu"):
        return DecoderLM(config.model)

def load_trained(run_dir: str | Path, device: str | torch.device = "cpu") -> DecoderLM:
    """The model of a run directory, with the weights of its last checkpoint, in eval mode, on ``device``
    (cpu, cuda, cuda:N, ``"auto"``: CUDA when available, or a ``torch.device``; a name torch does not know is a
    ValueError, what is not a name a TypeError), whichever device it trained on; refused when the checkpoint's
    binding disagrees with the run's config, tokenizer or data record (see ``psattn.training.binding``).

    Examples:
        >>> import tempfile
        >>> from psattn.experiments.configs import small_config
        >>> from psattn.training import load_trained, train
        >>> run = tempfile.mkdtemp()
        >>> _ = train(small_config("key_only", 1.0, steps=10, early_stop=False, batch_size=8, device="cpu"), run)
        >>> model = load_trained(run)  # the folder alone rebuilds it
        >>> model.config.layer_attention_configs()[0].variant, model.training
        ('key_only', False)
    """
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG).is_file():
        raise ValueError(f"{run_dir} is not a run directory (no config.json)")
    config = RunConfig.from_file(run_dir / CONFIG)
    path = run_dir / CHECKPOINT
    state = load_checkpoint(path, keys=("model",))
    bound = state.get("binding")
    tokens = getattr(config.task, "tokens", None)
    if bound is None and tokens is not None and not (run_dir / DATA).exists():
        record_data_once(run_dir, tokens().fingerprint)  # a run from before data records
    check_binding(run_dir, config, path, bound)
    with torch.device("cpu"):
        model = DecoderLM(config.model)
    load_model_weights(model, state["model"], path, run_dir / CONFIG)
    return model.to(device if isinstance(device, torch.device) else resolve_device(device, what="--device")).eval()

def run_tokenizer(run_dir: str | Path) -> Tokenizer:
    """The tokenizer of a text run's directory (its tokenizer.json); ValueError for a run without one, and for a
    folder that is not a run directory."""
    if not (Path(run_dir) / CONFIG).is_file():  # it said "only runs of the text task can generate text"
        raise ValueError(f"{run_dir} is not a run directory (no config.json)")
    path = Path(run_dir) / TOKENIZER
    if not path.exists():
        if _task_name(Path(run_dir)) == "text":  # a text run restored from a saved summary keeps no tokenizer
            raise ValueError(f"{run_dir} is a text run without its tokenizer.json (a run restored from a saved summary, "
                             "such as those of docs/results, keeps neither it nor the checkpoint): train the run to "
                             "use its tokenizer")
        raise ValueError(f"{run_dir} has no tokenizer.json: only runs of the text task can generate text")
    return load_tokenizer(path)


def _task_name(run_dir: Path) -> str | None:
    """The task named by ``run_dir``'s config.json, or None when it cannot be read."""
    try:
        task = read_json(run_dir / CONFIG, what="run config", object_only=True).get("task")
    except (OSError, ValueError):
        return None
    return task.get("name") if isinstance(task, dict) else None

def check_run_dir(run_dir: Path, config: RunConfig, resume: bool) -> list[dict[str, Any]]:
    """What ``run_dir`` allows ``config`` to do, checked before anything is written: the run's schedule
    extensions (its meta.json's, plus one when ``config`` asks a trained run for more steps and nothing
    else). A directory holding a run with another config is refused, naming the differing fields, unless
    ``resume`` is false (a restart from step 0); one holding only the config of a failed start is no
    run to protect."""
    config_path = run_dir / CONFIG
    if config_path.exists():
        _refuse_a_foreign_config(run_dir)
    if not config_path.exists() or not holds_progress(run_dir) or not resume:
        return []  # nothing to protect, or a restart from step 0 (--restart), which replaces what is there
    tokens = getattr(config.task, "tokens", None)
    if tokens is not None and (run_dir / DATA).exists():  # other data is refused before the tokenizer is judged
        check_same_data(run_dir, tokens().fingerprint)
    extensions = read_meta(run_dir).get("extensions", [])
    if not holds_same_run(config_path, config):  # its data moved: still the same run
        config = with_data_paths(config, RunConfig.from_file(config_path))
    if holds_same_run(config_path, config):
        _refuse_to_train_a_finished_run_again(run_dir)
        _check_stopping_rule(run_dir, config, more_steps=False)  # config.json's rule may have been edited by hand
        return extensions
    saved = RunConfig.from_file(config_path)
    if holds_same_run(config_path, with_train_fields(config, saved, RUNTIME_FIELDS)):  # it only runs elsewhere
        _refuse_to_train_a_finished_run_again(run_dir)
        _check_stopping_rule(run_dir, config, more_steps=False)
        log.info("continuing %s with %s", run_dir, config_differences(config_path, config, limit=len(RUNTIME_FIELDS)))
        return extensions
    # what else may change on a trained run: its budget (it grows), and when it stops early (which changes no step before)
    more_steps = with_train_fields(config, saved, ("steps", "early_stop", "early_stop_evals", *RUNTIME_FIELDS))
    checkpoint = run_dir / CHECKPOINT
    if holds_same_run(config_path, more_steps) and config.train.steps >= saved.train.steps:
        _check_stopping_rule(run_dir, config, more_steps=config.train.steps > saved.train.steps)
    if holds_same_run(config_path, more_steps) and config.train.steps == saved.train.steps:
        if not checkpoint.exists():
            raise RunRefused(f"{run_dir} has no checkpoint.pt to continue from, so it cannot train on under another "
                             "early-stopping rule")
        log.info("continuing %s with train.early_stop=%s, train.early_stop_evals=%d", run_dir, config.train.early_stop,
                 config.train.early_stop_evals)
        return extensions
    last = extensions[-1] if extensions else {}
    if (last.get("steps_before"), last.get("steps_after")) == (saved.train.steps, config.train.steps) \
            and holds_same_run(config_path, more_steps) and checkpoint.exists():
        return extensions  # this extension's meta.json was written and a kill cut off its config.json
    if holds_same_run(config_path, more_steps) and config.train.steps > saved.train.steps and checkpoint.exists():
        at = load_checkpoint(checkpoint, keys=("step",))["step"]
        start = lr_factor(saved.train, extensions)(at)
        log.info("extending %s from %d to %d steps at step %d (learning rate factor %.3f, decaying to %g)",
                 run_dir, saved.train.steps, config.train.steps, at, start, config.train.min_lr_ratio)
        return [*extensions, {"at_step": at, "steps_before": saved.train.steps, "steps_after": config.train.steps,
                              "lr_factor_at": start}]
    if holds_same_run(config_path, more_steps) and config.train.steps > saved.train.steps:
        raise RunRefused(f"{run_dir} has no checkpoint.pt to continue from (its metrics or result remain), so it cannot "
                         f"grow from {saved.train.steps} to {config.train.steps} steps")
    raise RunRefused(
        f"{run_dir} holds a run with a different config: {config_differences(config_path, config)}. "
        "On a trained run only train.steps may grow, and train.early_stop, train.early_stop_evals and where it runs "
        f"({', '.join('train.' + name for name in RUNTIME_FIELDS)}) change (it continues)"
    )


def with_data_paths(config: RunConfig, saved: RunConfig) -> RunConfig:
    """``config`` with its task's corpus and tokenizer named as ``saved`` names them: a run is bound to its data by
    content, not by the paths that name it (see ``psattn.training.binding``), so a corpus that moved leaves the same
    run (``check_same_data`` and the checkpoint's binding refuse other data)."""
    if type(config.task) is not type(saved.task):
        return config
    named = {name: getattr(saved.task, name) for name in BOUND_BY_CONTENT if hasattr(config.task, name)}
    return dataclasses.replace(config, task=dataclasses.replace(config.task, **named)) if named else config


def _refuse_to_train_a_finished_run_again(run_dir: Path) -> None:
    """Refuse (``RunRefused``) a run that finished (a result.json of a run that did not diverge) and has lost its
    checkpoint: resuming would train it from step 0 and replace its metrics and result."""
    if (run_dir / CHECKPOINT).exists():
        return
    try:
        result = json.loads((run_dir / RESULT).read_text())
    except (OSError, ValueError):  # missing, or not a result: nothing finished to keep
        return
    if isinstance(result, dict) and RESULT_KEYS - {"history"} <= result.keys() and result.get("diverged_at") is None:
        raise RunRefused(f"{run_dir} holds a finished run ({result['steps']} steps, its result.json) but no checkpoint.pt: "
                         "there is nothing to resume, and training it again would replace its metrics and result")


def _refuse_a_foreign_config(run_dir: Path) -> None:
    """Refuse (ValueError) a directory whose config.json is not a run config, not even a half-made one: another
    program's (a Hugging Face model's folder, a project's), which a run's config.json would replace."""
    try:
        data = read_json(run_dir / CONFIG, what="run config", object_only=True)
        unknown = sorted(set(data) - {"name", "model", "task", "train"})
        if not unknown:
            return
        reason = f"its keys {unknown[:4]} are no run config's sections"
    except ValueError as err:
        reason = str(err)
    raise ValueError(f"{run_dir} holds a config.json that is not a psattn run's ({reason}); a run would replace it: "
                     "name another run directory")


def _check_stopping_rule(run_dir: Path, config: RunConfig, more_steps: bool) -> None:
    """Refuse ``config``'s early stopping when the run, replayed over its checkpoint's history under it,
    would have stopped before the checkpoint (the run would then not be the one config.json describes), or,
    when ``more_steps`` are asked, would stop at once (they would train nothing)."""
    t, checkpoint = config.train, run_dir / CHECKPOINT
    if not t.early_stop or not checkpoint.exists():
        return
    state = load_checkpoint(checkpoint, keys=("step", "history"))  # what the run resumes from
    at, rows = state["step"], state["history"]
    stop = next((row["step"] for i, row in enumerate(rows)
                 if row["step"] > 0 and at_threshold_streak(rows[:i + 1], t.threshold) >= t.early_stop_evals), None)
    if stop is not None and stop < at:
        raise RunRefused(
            f"{run_dir} trained to step {at}, but stopping early as asked (after {t.early_stop_evals} evaluation(s) at "
            f"{t.threshold}) it would have stopped at step {stop}: continuing under that rule would leave a run its "
            "config.json does not describe", "keep the rule")
    if stop == at and more_steps:
        raise ValueError(
            f"{run_dir} reached its early-stopping rule at step {at}, its held-out accuracy at the threshold "
            f"({t.threshold}), and train.early_stop would stop it at once: more steps train nothing. Add "
            "train.early_stop=false to train on to the budget")


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The run's ``meta.json`` as a dict; empty when it is missing or unreadable."""
    try:
        meta = read_json(run_dir / META, what="run metadata", object_only=True)
    except ValueError:
        return {}
    return meta


def write_run_files(run_dir: Path, config: RunConfig, is_main: bool = True, fresh: bool = False,
                     extensions: Sequence[dict[str, Any]] = ()) -> None:
    """Write config.json and meta.json (with the schedule's ``extensions``), after ``check_run_dir``.
    An existing run keeps its meta.json unless ``fresh`` (a restart from step 0) or extended."""
    config_path = run_dir / CONFIG
    if is_main:  # temporary files of psattn's writes cut short by a kill (this process holds the run's lock)
        for stale in (tmp for path in run_files(run_dir) for tmp in temporary_files(path)):
            stale.unlink(missing_ok=True)
    tokens = getattr(config.task, "tokens", None)
    if config_path.exists() and not holds_progress(run_dir):
        log.info("%s holds a config but no training yet; starting it afresh", run_dir)
        fresh = True  # a failed start left only its config: nothing to protect
    extended = not fresh and (list(extensions) != read_meta(run_dir).get("extensions", [])
                              or bool(extensions) and not holds_same_run(config_path, config))  # or cut short
    # a trained run continuing under another early-stopping rule or elsewhere (check_run_dir allowed nothing else)
    new_rule = not fresh and not extended and config_path.exists() and not holds_same_run(config_path, config)
    if config_path.exists() and not fresh:
        if tokens is not None:
            check_same_data(run_dir, tokens().fingerprint)
        if not (extended or new_rule):
            return
    if not is_main:
        return
    if new_rule:
        saved = RunConfig.from_file(config_path)
        if not holds_same_run(config_path, with_data_paths(with_train_fields(config, saved, RUNTIME_FIELDS), saved)):
            (run_dir / RESULT).unlink(missing_ok=True)  # another stopping rule: the run is unfinished again
        write_json(config_path, config.to_dict())  # (where it runs, or where its data lies, changes no result)
        return
    if extended:  # in this order, so that a kill between two writes leaves what check_run_dir resumes
        (run_dir / RESULT).unlink(missing_ok=True)  # the run is unfinished again
        write_json(run_dir / META, {**read_meta(run_dir), "extensions": list(extensions)})
        write_json(config_path, config.to_dict())
        return
    held_text = _is_text_run(config_path)  # before this run's config replaces it
    write_json(config_path, config.to_dict())
    if tokens is not None:  # a text run keeps its tokenizer, so the directory alone can generate
        write_text(run_dir / TOKENIZER, tokens().tokenizer.to_json())
        write_json(run_dir / DATA, tokens().fingerprint)
    elif held_text:  # another task restarted where a text run was: its tokenizer and data record go with it
        for name in (TOKENIZER, DATA):
            (run_dir / name).unlink(missing_ok=True)
    write_json(run_dir / META, provenance(config.train.seed))


def _is_text_run(config_path: Path) -> bool:
    """Whether ``config_path`` is the config.json of a text run (False when it is missing or unreadable)."""
    try:
        return read_json(config_path, what="run config", object_only=True).get("task", {}).get("name") == "text"
    except (ValueError, AttributeError):
        return False

def holds_progress(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds anything of a run that trained: a checkpoint, a result, or metrics."""
    metrics = run_dir / METRICS
    return ((run_dir / CHECKPOINT).exists() or (run_dir / RESULT).exists()
            or (metrics.exists() and metrics.stat().st_size > 0))


def check_same_data(run_dir: Path, fingerprint: dict[str, str]) -> None:
    """Refuse to resume a text run on data other than what it started on (its data.json). A run from
    before runs recorded their data gets its data.json now (``record_data_once``), unless its
    tokenizer.json already shows the data changed; a missing data.json beside a checkpoint that
    records its data is refused by ``check_binding`` before this."""
    path = run_dir / DATA
    if not path.exists():
        tokenizer = run_dir / TOKENIZER
        if tokenizer.is_file() and hashlib.sha256(tokenizer.read_bytes()).hexdigest() != fingerprint["tokenizer_sha256"]:
            raise RunRefused(f"{run_dir} started on other data: its tokenizer.json is not the tokenizer of the data it "
                             "would resume on")
        record_data_once(run_dir, fingerprint)
        return
    recorded = read_json(path, what="data record", object_only=True)
    changed = [k.removesuffix("_sha256") for k in sorted(set(recorded) | set(fingerprint), key=_data_order)
               if recorded.get(k) != fingerprint.get(k)]
    if changed:
        words = [_DATA_WORDS.get(name, name) for name in changed]
        what = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
        raise RunRefused(
            f"{run_dir} started on other data: {what} differ{'s' * (len(changed) == 1)} from what the run trained "
            "on (its data.json), and resuming would continue on different tokens"
        )


_DATA_WORDS = {"corpus": "the corpus", "tokenizer": "its tokenizer", "eval": "its held-out text",
               "train": "its training text"}  # what data.json's records are of


def _data_order(key: str) -> tuple[int, str]:
    """data.json's keys in the order ``check_same_data`` names them (``_DATA_WORDS``'), others after."""
    name = key.removesuffix("_sha256")
    return (list(_DATA_WORDS).index(name) if name in _DATA_WORDS else len(_DATA_WORDS), name)


def clear_run_files(run_dir: Path) -> None:
    """What a fresh start (step 0) does to ``run_dir``: nothing of an earlier run survives there (its
    metrics, result, checkpoint and TensorBoard events)."""
    write_jsonl(run_dir / METRICS, [])
    for stale in (RESULT, CHECKPOINT):
        (run_dir / stale).unlink(missing_ok=True)
    shutil.rmtree(run_dir / TENSORBOARD, ignore_errors=True)


def undo_failed_start(run_dir: Path) -> None:
    """Remove what a start that failed before its first trained step wrote (config.json, meta.json, metrics.jsonl
    and its step-0 row, a text run's tokenizer.json and data.json, TensorBoard events): a run that does not fit in
    memory at its first step leaves the directory as the start found it, not a run that a smaller model there is
    refused beside. A directory holding anything trained (a checkpoint, a result, a metrics row past step 0) is left
    as it is."""
    if (run_dir / CHECKPOINT).exists() or (run_dir / RESULT).exists():
        return
    try:
        rows = [json.loads(line) for line in (run_dir / METRICS).read_text().splitlines()]
    except FileNotFoundError:
        rows = []
    except (OSError, ValueError):  # not what this start wrote
        return
    if any(not isinstance(row, dict) or row.get("step") != 0 for row in rows):
        return
    for name in (CONFIG, META, METRICS, TOKENIZER, DATA):
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / TENSORBOARD, ignore_errors=True)


def write_history(run_dir: Path, history: list[dict[str, Any]]) -> None:
    """Make the run's metrics.jsonl hold ``history`` (a resumed checkpoint's): lines written after the
    checkpoint are dropped, and a file a full disk cut short is made whole. A file that already holds
    exactly ``history`` (a finished run read again) is left as it is, unwritten."""
    text = "".join(json.dumps(row) + "\n" for row in history).encode()  # as append_metrics_row writes each row
    path = run_dir / METRICS
    with contextlib.suppress(OSError):
        if path.read_bytes() == text:
            return
    write_jsonl(path, history)


def write_result(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write ``summary`` (``RunResult.summary``) as the run's result.json, unless it already holds exactly that
    (a finished run read again is not rewritten)."""
    path = run_dir / RESULT
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_bytes()) == summary:
            return
    write_json(path, summary)


def append_metrics_row(run_dir: Path, row: dict[str, Any]) -> None:
    """Add one evaluation row to the run's metrics.jsonl."""
    append_line(run_dir / METRICS, json.dumps(row) + "\n")
