"""The training loss: cross-entropy over the scored positions, and the step's forward pass under
DDP, bf16 autocast and ``torch.compile`` as the run's config asks."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from psattn.models.decoder import DecoderLM
from psattn.models.scored import Scored
from psattn.tasks.batch import IGNORE_INDEX
from psattn.training.config import RunConfig, TrainConfig
from psattn.training.distributed import Distributed, shard_loss
from psattn.training.transfer import DeviceBatch


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored positions (targets other than ``IGNORE_INDEX``); logits (..., V) are
    aligned with targets (...). NaN when no position is scored (a mean over none)."""
    # (..., V) -> (M, V) and (...) -> (M,), M the positions
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)


#: whether a compiled step on a GPU computes every position's logits (``computes_every_logit``); False makes it
#: compute the scored positions alone, as on a CPU, for ``benchmarks/gpu_check.py`` to time both on one GPU
EVERY_LOGIT_WHEN_COMPILED_ON_GPU = True


def computes_every_logit(t: TrainConfig, device: torch.device) -> bool:
    """Whether a training step computes the logits of every position: a compiled step on a GPU, whose graph then
    keeps the shapes of every step alike (CUDA graphs, in ``reduce-overhead`` and ``max-autotune``, replay the
    shapes they recorded; the default mode's GPU timings in docs/kernel.md were measured so). Every other step,
    eager or compiled on a CPU, computes the scored positions alone (the last block's queries and MLP, and the LM
    head); a compiled one compiles their count as a dynamic size."""
    return device.type == "cuda" and bool(t.compile) and EVERY_LOGIT_WHEN_COMPILED_ON_GPU


def dynamic_counts(scored: Scored) -> None:
    """Mark the sizes of ``scored`` that change from batch to batch (N and Tq) dynamic for torch.compile, which
    otherwise compiles the first batch's sizes and then again for the second's."""
    for x in (scored.flat, scored.filled_flat):  # (N,)
        torch._dynamo.maybe_mark_dynamic(x, 0)
    for x in (scored.first, scored.filled):  # (B, Tq)
        torch._dynamo.maybe_mark_dynamic(x, 1)


def forward_fn(model: DecoderLM, config: RunConfig, ddp: Distributed, device: torch.device):
    """(this rank's batch on the device, the number of scored positions of the global batch) -> this
    rank's loss, with DDP, bf16 autocast and torch.compile as configured."""
    t = config.train
    net: torch.nn.Module = model
    if t.compile:  # true: torch.compile's default mode
        mode = "default" if t.compile is True else t.compile
        net = torch.compile(net, mode=mode)  # type: ignore[assignment]  # an OptimizedModule (torch types the result as a callable)
    if ddp.enabled:
        net = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None)
    bf16 = t.precision == "bf16"
    every_logit = computes_every_logit(t, device)

    def forward(batch: DeviceBatch, scored: int):
        with torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            if every_logit:  # a compiled step on a GPU: the shapes of every step alike
                return shard_loss(net(batch.inputs), batch.targets, scored, ddp)
            if t.compile and batch.scored is not None:
                dynamic_counts(batch.scored)
            logits = net(batch.inputs, scored=batch.scored)  # (N, V): the scored positions only
        return shard_loss(logits, batch.scored_targets, scored, ddp)

    return forward
