"""Language-model metrics on held-out text, logged at every evaluation of a text run.

- loss in nats per token, and bits per byte (nats / ln 2 / UTF-8 bytes of the predicted tokens),
  which compares models across tokenizers;
- the loss at every position of the context (the curve against position);
- the in-context-learning score of Olsson et al. (2022): mean loss late in the context minus mean
  loss early in it. With a context of T tokens, "early" is positions [T/16, T/8) and "late" is
  [7T/8, T) (at T = 256: 16-31 and 224-255); negative means later tokens are predicted better;
- repeated random tokens: a run R of T/2 tokens drawn uniformly from the ids that the first 2^20 tokens of
  the training text use, then R again; the loss on each copy and every head's induction score (attention
  from a token of the second copy to the token after its occurrence in the first copy; Olsson et al. call
  it the prefix-matching score) and previous-token score;
- a repeated passage: a held-out passage of T/2 tokens shown twice; the loss on each copy (the most
  direct measure of copying in context) and every head's prefix-matching score on it, the same
  attention read on the passage (where a token that recurs within the passage makes a head that
  follows its most recent occurrence score lower: ``psattn.models.heads``); the text phase-change rule
  reads this one (``psattn.experiments.phase_change`` says why).
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from psattn.models.heads import repeat_scores
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch
from psattn.tasks.text import windows


def icl_window(seq_len: int) -> tuple[range, range]:
    """(early, late) positions of the in-context-learning score for a context of ``seq_len`` (>= 3, so that
    they do not overlap)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, Integral):
        raise TypeError(f"seq_len must be an integer >= 3 (the in-context-learning score's context), got {seq_len!r}")
    if seq_len < 3:
        raise ValueError(f"the in-context-learning score needs a context of at least 3 positions, got {seq_len!r}")
    early = range(max(1, -(-seq_len // 16)), max(2, -(-seq_len // 8)))  # the integers in [T/16, T/8): ceilings
    late = range(seq_len - max(1, seq_len // 8), seq_len)
    return early, late


def icl_score(position_loss: Tensor) -> float:
    """Mean loss over the late positions minus mean loss over the early ones of ``position_loss`` (T,), a tensor."""
    if not isinstance(position_loss, Tensor):  # was "'list' object has no attribute 'dim'"
        raise TypeError(f"icl_score's position_loss must be a torch.Tensor (T,), got {type(position_loss).__name__}")
    if position_loss.dim() != 1:  # a (B, T) loss was read as B positions
        raise ValueError(f"position_loss must be the mean loss at each position (T,), got shape {tuple(position_loss.shape)}")
    early, late = icl_window(len(position_loss))
    return float(position_loss[list(late)].mean() - position_loss[list(early)].mean())


@torch.no_grad()
def token_losses(model, batch: TaskBatch, chunk: int = 64) -> Tensor:
    """(B, T) next-token loss in nats at every position of ``batch`` (all positions scored), for
    psattn's models and transformers causal LMs alike; ``chunk`` rows at a time."""
    if isinstance(chunk, bool) or not isinstance(chunk, Integral):
        raise TypeError(f"chunk must be an integer >= 1 (rows per forward pass), got {chunk!r}")
    if chunk < 1:  # 0: range()'s error; -1: torch.cat's
        raise ValueError(f"chunk must be an integer >= 1 (rows per forward pass), got {chunk!r}")
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(batch), chunk):
            result = model(batch.inputs[start : start + chunk])
            logits = getattr(result, "logits", result)  # (b, T, V); transformers models return an output object
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # a half-precision loss is off by 0.4%
            # (b, T, V) -> (b, V, T), the classes second as cross_entropy takes them; the losses (b, T)
            out.append(F.cross_entropy(logits.transpose(1, 2), batch.targets[start : start + chunk], reduction="none"))
    finally:  # a forward pass that raises leaves a training model in training mode too
        model.train(was_training)
    return torch.cat(out)  # (B, T)


def bits_per_byte(losses: Tensor, targets: Tensor, token_bytes: np.ndarray) -> float:
    """Total nats over ``losses`` (B, T) as bits per UTF-8 byte of the ``targets`` they predict; positions whose
    target is ``IGNORE_INDEX`` (unscored) count neither their loss nor bytes. ``losses`` and ``targets`` are tensors
    (a TypeError says so), the targets integer token ids; ``token_bytes``, a 1-D array (or a TypeError), holds each
    token id's length in bytes."""
    for name, t in (("losses", losses), ("targets", targets)):  # was "'float' object has no attribute 'shape'"
        if not isinstance(t, Tensor):
            raise TypeError(f"bits_per_byte's {name} must be a torch.Tensor (B, T), got {type(t).__name__}")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:  # an IndexError in torch
        raise TypeError(f"bits_per_byte's targets must be integer token ids, got {targets.dtype}")
    table = np.asarray(token_bytes) if isinstance(token_bytes, (np.ndarray, list, tuple)) else None
    if table is None or table.ndim != 1 or table.dtype.kind not in "iuf":  # None was "has no len()"
        raise TypeError("bits_per_byte's token_bytes must be a 1-D array of each token id's length in bytes "
                        f"(the tokenizer's token_bytes()), got {type(token_bytes).__name__}"
                        + (f" of shape {table.shape} and dtype {table.dtype}" if table is not None else ""))
    if losses.shape != targets.shape:  # the sums would be of different tokens
        raise ValueError(f"losses {tuple(losses.shape)} and targets {tuple(targets.shape)} must have one shape")
    scored = targets != IGNORE_INDEX  # (B, T); an index of -100 read the bytes of token V - 100
    ids = targets[scored]  # (N,)
    if len(ids) and not 0 <= int(ids.min()) <= int(ids.max()) < len(table):
        raise ValueError(f"targets must be token ids in [0, {len(table)}) (the tokenizer's) or {IGNORE_INDEX}, "
                         f"got ids from {int(ids.min())} to {int(ids.max())}")
    nbytes = torch.as_tensor(table, device=targets.device)[ids].sum()
    if int(nbytes) == 0:  # a clamped denominator read 0.0 bits per byte, a perfect score
        raise ValueError(f"targets {tuple(targets.shape)} score no bytes (every one is {IGNORE_INDEX} or a token of no "
                         "bytes), so bits per byte would mean nothing: score targets that hold some")
    return float(losses[scored].sum() / math.log(2) / nbytes)


def random_repeats(vocabulary: Tensor, rows: int, half: int, generator: torch.Generator) -> Tensor:
    """(rows, 2 * half) rows R + R, R drawn uniformly from ``vocabulary`` (token ids)."""
    if len(vocabulary) == 0:
        raise ValueError("random_repeats needs at least one token id in vocabulary to draw from, got none")
    index = torch.randint(0, len(vocabulary), (rows, half), generator=generator, device=generator.device)  # (rows, half)
    run = vocabulary[index.to(vocabulary.device)]  # (rows, half)
    return torch.cat([run, run], dim=1)  # (rows, 2 * half)


def passage_repeats(stream: np.ndarray, rows: int, half: int, generator: torch.Generator) -> Tensor:
    """(rows, 2 * half) rows P + P, P a passage of ``half`` tokens of ``stream``."""
    starts = torch.randint(0, len(stream) - half, (rows,), generator=generator, device=generator.device).cpu().numpy()
    passage = windows(stream, starts, half)  # (rows, half)
    return torch.cat([passage, passage], dim=1)  # (rows, 2 * half)


def text_metrics(model, config, held_out: TaskBatch, *, probe_rows: int = 16, seed: int = 0) -> dict[str, Any]:
    """Every metric above, as one flat dict (the extra columns of a text run's metrics.jsonl)."""
    corpus = config.tokens()
    losses = token_losses(model, held_out)  # (B, T)
    position = losses.mean(0)  # (T,)
    half = config.seq_len // 2
    g = torch.Generator().manual_seed(seed)
    vocabulary = torch.from_numpy(np.unique(np.asarray(corpus.train[: 1 << 20])).astype(np.int64))
    rand = repeat_scores(model, random_repeats(vocabulary, probe_rows, half, g), half)
    passage = repeat_scores(model, passage_repeats(corpus.eval, probe_rows, half, g), half)
    return {
        "bits_per_byte": bits_per_byte(losses, held_out.targets, corpus.token_bytes),
        "icl_score": icl_score(position),
        "position_loss": [round(float(x), 4) for x in position],
        "random_first_loss": rand.first_copy_loss,
        "random_second_loss": rand.second_copy_loss,
        "induction_score": rand.induction.tolist(),
        "previous_token_score": rand.previous_token.tolist(),
        "passage_first_loss": passage.first_copy_loss,
        "passage_second_loss": passage.second_copy_loss,
        "prefix_matching_score": passage.induction.tolist(),
    }
