"""How closely one runtime's outputs follow another's, and the task quality of any runtime's logits:
top-1 agreement and KL under teacher forcing, agreement of greedy continuations, next-token
accuracy, and held-out bits per byte and ICL score of text runs."""

from __future__ import annotations

import numpy as np
import torch

from psattn.models.lm_eval import bits_per_byte, icl_score
from psattn.tasks.batch import TaskBatch
from psattn.tasks.batch import accuracy as task_accuracy


def text_quality(logits: np.ndarray, batch: TaskBatch, token_bytes: np.ndarray) -> dict[str, float]:
    """Held-out bits per byte and ICL score of text-task logits (B, T, V), from any runtime; logits of another
    shape than the batch's (B, T) and a vocabulary are a ValueError."""
    if np.ndim(logits) != 3 or np.shape(logits)[:2] != tuple(batch.targets.shape):  # torch's size errors named neither
        raise ValueError(f"logits must be (B, T, V) = ({', '.join(map(str, batch.targets.shape))}, V) for this batch, "
                         f"got shape {np.shape(logits)}")
    # (B, T, V) -> (B, V, T), the classes second as cross_entropy takes them
    losses = torch.nn.functional.cross_entropy(torch.from_numpy(logits).transpose(1, 2).float(), batch.targets,
                                               reduction="none")  # (B, T)
    return {"bits_per_byte": bits_per_byte(losses, batch.targets, token_bytes), "icl_score": icl_score(losses.mean(0))}


def _check_pair(reference: np.ndarray, other: np.ndarray, what: str, ndim: int) -> None:
    """A ValueError unless both are arrays of one shape with ``ndim`` axes: NumPy broadcast a batch of one
    against a batch of two, and the agreement counted one row twice."""
    a, b = np.shape(reference), np.shape(other)
    if a != b or len(a) != ndim:
        raise ValueError(f"reference and other must be {what} of one shape, got {a} and {b}")


def teacher_forced_agreement(reference: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """How closely ``other`` logits (B, T, V) follow ``reference`` ones on the same inputs, over every
    position of every row: the fraction with the same top-1 token, and the mean KL divergence
    KL(reference || other) of the next-token distributions, in nats. Logits of two shapes, or not (B, T, V),
    are a ValueError."""
    _check_pair(reference, other, "logits (B, T, V)", 3)
    ref = torch.from_numpy(reference).double().log_softmax(-1)
    oth = torch.from_numpy(other).double().log_softmax(-1)
    kl = (ref.exp() * (ref - oth)).sum(-1)  # (B, T)
    return {"top1_agreement": float((reference.argmax(-1) == other.argmax(-1)).mean()), "kl_nats": float(kl.mean()),
            "positions": int(kl.numel())}


def greedy_agreement(reference: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """Greedy continuations (B, N) of the same prompts: the fraction of tokens equal, and the mean
    fraction of each continuation before its first difference (one early divergence changes
    everything after it, so the two differ most when the runtimes are close). Continuations of two shapes, or
    not (B, N), are a ValueError."""
    _check_pair(reference, other, "continuations (B, N)", 2)
    same = reference == other  # (B, N)
    before = np.where(same.all(1), same.shape[1], (~same).argmax(1)) / same.shape[1]  # (B,)
    return {"tokens_agree": float(same.mean()), "prefix_agree": float(before.mean()), "prompts": int(same.shape[0])}


def accuracy(logits: np.ndarray, batch: TaskBatch) -> float:
    """``psattn.tasks.batch.accuracy`` of a runtime's NumPy logits (B, T, V) on the batch's scored positions."""
    return task_accuracy(torch.from_numpy(np.ascontiguousarray(logits)), batch)
