"""Score a trained run on held-out data of its own task, or of another compatible task or corpus
(what ``psattn eval`` runs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psattn.models.device import model_device
from psattn.tasks.registry import task_name
from psattn.training.config import RunConfig, apply_overrides
from psattn.training.trainer import TASK_METRICS, eval_batch, evaluate, load_trained


def evaluate_run(run_dir: str | Path, overrides: Sequence[str] = (), *, corpus: str | None = None,
                 rows: int | None = None, device: str = "cpu") -> dict[str, Any]:
    """Held-out accuracy and loss of ``run_dir``'s model (its last checkpoint) on ``rows`` held-out rows
    (default: the run's eval_size) of its task changed by ``overrides`` (``task.field=value``), plus the
    task's own metrics (bits per byte, ICL score and copy measures for text; head scores for induction).
    ``corpus`` scores a text run on another corpus, tokenized with the run's own tokenizer. ``device``:
    where the model runs (``"auto"``: CUDA when available), whichever device it trained on."""
    run_dir = Path(run_dir)
    model = load_trained(run_dir, device)
    config = RunConfig.from_file(run_dir / "config.json")
    if any(not item.startswith("task.") for item in overrides):
        raise ValueError(f"eval changes the task only (task.field=value), got {list(overrides)}")
    if corpus is not None:
        if task_name(config.task) != "text":
            raise ValueError(f"--corpus scores text runs; {run_dir} trained on {task_name(config.task)!r}")
        overrides = [*overrides, f"task.corpus={corpus}", f"task.tokenizer={(run_dir / 'tokenizer.json').resolve()}"]
    if overrides:
        config = apply_overrides(config, list(overrides))
        if getattr(config.task, "vocab_size", 0) > model.config.vocab_size:
            raise ValueError(f"the task's vocabulary ({config.task.vocab_size}) exceeds the model's "
                             f"({model.config.vocab_size})")
    if rows is not None:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, eval_size=rows))
    batch = eval_batch(config).to(model_device(model))
    accuracy, loss = evaluate(model, batch)
    result = {"run_dir": str(run_dir), "task": config.task.__class__.__name__, "task_config": dataclasses.asdict(config.task),
              "rows": len(batch), "accuracy": accuracy, "loss": loss}
    extra = TASK_METRICS.get(task_name(config.task))
    if extra is not None:
        result.update(extra(model, config.task, batch))
    return result


def format_evaluation(result: dict[str, Any]) -> str:
    """A few readable lines of ``evaluate_run``'s result."""
    lines = [f"{result['run_dir']} on {result['rows']} held-out rows of {result['task_config']}"]
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
                f"layer {i + 1} {max(layer):.3f}" for i, layer in enumerate(result[key])))
    return "\n".join(lines)
