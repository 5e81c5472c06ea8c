"""Held-out accuracy and loss of a model (``evaluate``, what training logs), and the score of a trained
run on held-out data of its own task, or of another compatible task or corpus (what ``psattn eval`` runs)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from psattn.jsonfile import read_json
from psattn.models.decoder import DecoderLM
from psattn.models.device import model_device
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch
from psattn.tasks.registry import task_name
from psattn.tasks.text import TextConfig, every_window
from psattn.training.config import RunConfig, apply_overrides, check_overrides
from psattn.training.memory import check_evaluation_fits
from psattn.training.run_dir import eval_batch, load_trained
from psattn.training.task_metrics import task_metrics

#: more held-out rows than this, and ``evaluate_run`` says what it scores before it starts
NOTED_ROWS = 1024


@torch.no_grad()
def evaluate(model: DecoderLM, batch: TaskBatch, chunk: int = 256) -> tuple[float, float]:
    """(accuracy, loss) over the scored positions of ``batch``, scored ``chunk`` rows at a time; ValueError when it
    scores none (both would read 0.0, the loss a perfect one), as ``psattn.tasks.accuracy`` says, or when ``chunk``
    is not a positive integer; TypeError when ``batch`` is not a ``TaskBatch``."""
    if not isinstance(batch, TaskBatch):  # an AttributeError on .scored
        raise TypeError(f"evaluate scores a TaskBatch (TaskBatch(inputs, targets)), got {type(batch).__name__}")
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral):
        raise TypeError(f"chunk must be a positive integer (rows scored at once), got {chunk!r}")
    if chunk < 1:  # range() or a ZeroDivisionError
        raise ValueError(f"chunk must be a positive integer (rows scored at once), got {chunk!r}")
    if not bool(batch.scored.any()):
        rows = f"{len(batch)} row{'s' * (len(batch) != 1)}"
        raise ValueError(f"the batch ({rows}) has no scored positions, so its accuracy and loss would mean nothing: "
                         "score rows that hold some")
    was_training = model.training
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    try:
        for start in range(0, len(batch), chunk):
            inputs, targets = batch.inputs[start : start + chunk], batch.targets[start : start + chunk]
            scored = targets != IGNORE_INDEX
            logits = model(inputs, scored=scored)  # (N, V)
            correct += int((logits.argmax(-1) == targets[scored]).sum())
            total += int(scored.sum())
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # a half-precision loss is off by 0.4%
            loss_sum += float(F.cross_entropy(logits, targets[scored], reduction="sum"))
    finally:
        model.train(was_training)
    return correct / total, loss_sum / total


def evaluate_run(run_dir: str | Path, overrides: Sequence[str] = (), *, corpus: str | None = None,
                 rows: int | None = None, device: str = "cpu",
                 report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Held-out accuracy and loss of ``run_dir``'s model (its last checkpoint) on ``rows`` held-out rows
    (default: the run's eval_size) of its task changed by ``overrides`` (``task.field=value``), plus the
    task's own metrics (bits per byte, ICL score and copy measures for text; head scores for induction).
    ``corpus`` (or ``task.corpus=...``) scores a text run on another corpus. A text run is always scored
    on ids of its own tokenizer (its tokenizer.json); the result's ``data_changed`` lists what of the
    scored text differs from what the run trained on (its data.json), and ``rows_capped`` says when
    ``rows`` asked for more windows than the held-out text holds (then every window is scored once), and
    ``longer_than_trained`` when ``task.seq_len`` was raised past the length the run trained on.
    ``device``: where the model runs (``"auto"``: CUDA when available), whichever device it trained on.
    ``report(line)`` receives a line saying what is scored before more than ``NOTED_ROWS`` rows (minutes on a CPU).
    ``rows`` that is not a positive integer is a ValueError; ``overrides`` that are not a list of strings a TypeError."""
    check_overrides(overrides)
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, numbers.Integral)):
        raise TypeError(f"rows must be a positive integer or None (the run's eval_size), got {rows!r}")
    if rows is not None and rows < 1:
        raise ValueError(f"rows must be a positive integer or None (the run's eval_size), got {rows!r}")
    run_dir = Path(run_dir)
    model = load_trained(run_dir, device)
    config = RunConfig.from_file(run_dir / "config.json")
    trained_len = getattr(config.task, "seq_len", None)
    if any(not item.startswith("task.") for item in overrides):
        raise ValueError(f"eval changes the task only (task.field=value), got {list(overrides)}")
    text = task_name(config.task) == "text"
    overrides = list(overrides)
    if text:
        overrides, corpus = _own_tokenizer(run_dir, config, overrides, corpus)
    elif corpus is not None:
        raise ValueError(f"--corpus scores text runs; {run_dir} trained on {task_name(config.task)!r}")
    if overrides:
        config = apply_overrides(config, overrides)
        if getattr(config.task, "vocab_size", 0) > model.config.vocab_size:
            raise ValueError(f"the task's vocabulary ({config.task.vocab_size}) exceeds the model's "
                             f"({model.config.vocab_size})")
    capped = None
    if rows is not None:
        task = config.task
        held = len(task.tokens().eval) - task.seq_len if isinstance(task, TextConfig) else rows
        if rows > held:
            capped, rows = rows, max(held, 1)
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, eval_size=rows))
    check_evaluation_fits(config, model_device(model))
    if capped is not None and isinstance(config.task, TextConfig):  # every held-out window, each once
        batch = every_window(config.task).to(model_device(model))
    else:
        batch = eval_batch(config).to(model_device(model))
    if report is not None and len(batch) > NOTED_ROWS:
        report(f"scoring {len(batch):,} held-out rows of {batch.inputs.shape[1]} tokens on {model_device(model)}")
    accuracy, loss = evaluate(model, batch)
    result = {"run_dir": str(run_dir), "task": config.task.__class__.__name__, "task_name": task_name(config.task),
              "task_config": dataclasses.asdict(config.task),
              "rows": len(batch), "accuracy": accuracy, "loss": loss}
    if capped is not None:
        result["rows_capped"] = {"asked": capped, "held_out_windows": rows}
    scored_len = getattr(config.task, "seq_len", None)
    if trained_len is not None and scored_len is not None and scored_len > trained_len:  # length generalisation
        result["longer_than_trained"] = {"trained": trained_len, "scored": scored_len}
    if isinstance(config.task, TextConfig):
        result["data_changed"] = _data_changed(run_dir, config.task.tokens().fingerprint)
    result.update(task_metrics(model, config.task, batch))
    return result


def _own_tokenizer(run_dir: Path, config: RunConfig, overrides: list[str],
                   corpus: str | None) -> tuple[list[str], str | None]:
    """The overrides that score a text run with its own tokenizer: ``task.corpus=X`` is ``--corpus X``;
    the tokenizer and its vocabulary cannot change; a run not trained on bytes reads its tokenizer.json."""
    kept = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key in ("task.tokenizer", "task.vocab_size"):
            raise ValueError(f"eval scores a text run with its own tokenizer ({run_dir / 'tokenizer.json'}), so "
                             f"{key} cannot change; --corpus scores another corpus with it")
        if key == "task.corpus":
            if corpus is not None and corpus != value:
                raise ValueError(f"two corpora given: --corpus {corpus} and {item}")
            corpus = value
        else:
            kept.append(item)
    if corpus is not None:
        kept.append(f"task.corpus={corpus}")
    if getattr(config.task, "tokenizer", "byte") != "byte":  # a trained or given tokenizer: the run's own copy, never retrained
        path = run_dir / "tokenizer.json"
        if not path.is_file():
            raise ValueError(f"{run_dir} has no tokenizer.json: its ids cannot be scored with its own tokenizer")
        kept.append(f"task.tokenizer={path.resolve()}")
    return kept, corpus


def _data_changed(run_dir: Path, fingerprint: dict[str, str]) -> list[str]:
    """What of the scored text (its corpus, held-out tokens) differs from what the run trained on."""
    path = run_dir / "data.json"
    if not path.is_file():
        return []
    recorded = read_json(path, what="data record", object_only=True)
    return [name for name in ("corpus", "eval") if recorded.get(f"{name}_sha256") != fingerprint.get(f"{name}_sha256")]


def _best(scores: list[float]) -> float:
    """The largest of ``scores``; NaN when any is NaN, wherever it sits (``max`` kept a NaN only in first place)."""
    return math.nan if any(math.isnan(s) for s in scores) else max(scores)


def format_evaluation(result: dict[str, Any]) -> str:
    """A few readable lines of ``evaluate_run``'s result."""
    task = f"the {result['task_name']} task " if "task_name" in result else ""  # results of older versions lack it
    lines = [f"{result['run_dir']} on {result['rows']} held-out rows of {task}{result['task_config']}"]
    changed = result.get("data_changed")
    if changed:  # "eval" alone: the run's own corpus, split otherwise (task.eval_fraction, task.split)
        what = " and ".join({"corpus": "the corpus", "eval": "the held-out text"}[name] for name in changed)
        why = ("another corpus, or its corpus changed since" if "corpus" in changed
               else "another held-out split, which may hold text the run trained on")
        lines.append(f"  not the data the run trained on: {what} differ{'s' * (len(changed) == 1)} from its "
                     f"data.json's ({why})")
    if "rows_capped" in result:
        lines.append(f"  {result['rows_capped']['asked']:,} rows asked; the held-out text holds "
                     f"{result['rows_capped']['held_out_windows']:,} windows, so each is scored once")
    if "longer_than_trained" in result:
        longer = result["longer_than_trained"]
        lines.append(f"  sequences of {longer['scored']} tokens, longer than the {longer['trained']} the run trained on: "
                     "this measures length generalisation")
    if "bits_per_byte" in result:
        gain = result["passage_first_loss"] - result["passage_second_loss"]
        lines.append(f"  bits per byte {result['bits_per_byte']:.3f}, loss {result['loss']:.3f} nats per token, "
                     f"ICL score {result['icl_score']:+.3f}, passage copy gain {gain:.2f}, "
                     f"next-token accuracy {result['accuracy']:.3f}")
    else:
        lines.append(f"  held-out accuracy {result['accuracy']:.3f}, loss {result['loss']:.3f} nats per scored position")
    for key in ("induction_score", "prefix_matching_score", "previous_token_score"):
        if key in result:
            lines.append(f"  best {key.replace('_', ' ')}: " + ", ".join(
                f"layer {i + 1} {_best(layer):.3f}" for i, layer in enumerate(result[key])))
    return "\n".join(lines)
