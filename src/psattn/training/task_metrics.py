"""The task's own columns of every evaluation row (``train``'s default ``metrics``, and ``psattn eval``'s):
bits per byte, ICL score and copy measures for text runs (``psattn.models.lm_eval``), every head's
previous-token and induction score for induction runs (``psattn.models.heads``); none for the others."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psattn.models.heads import head_scores
from psattn.models.lm_eval import text_metrics
from psattn.tasks.batch import TaskBatch
from psattn.tasks.registry import task_name

#: (model, task config, held-out batch) -> extra columns of an evaluation row
RowMetrics = Callable[[Any, Any, TaskBatch], dict[str, Any]]


def induction_head_metrics(model, task, held_out) -> dict[str, Any]:
    """Every head's previous-token and induction score on [BOS] + R + R rows (see ``psattn.models.heads``)."""
    scores = head_scores(model, vocab_size=task.vocab_size)
    return {"previous_token_score": scores.previous_token.tolist(), "induction_score": scores.induction.tolist()}


#: task name -> (model, task config, held-out batch) -> extra columns of every evaluation row
TASK_METRICS: dict[str, RowMetrics] = {"text": text_metrics, "induction": induction_head_metrics}


def task_metrics(model, task, held_out: TaskBatch) -> dict[str, Any]:
    """The columns ``TASK_METRICS`` gives ``task``'s kind ({} for a task without any)."""
    extra = TASK_METRICS.get(task_name(task))
    return {} if extra is None else extra(model, task, held_out)
