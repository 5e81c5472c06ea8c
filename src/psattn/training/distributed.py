"""Data-parallel training under ``torchrun`` (PyTorch DDP: gloo on CPU, NCCL on CUDA).

Every rank draws the same global batch from the step's generator and keeps its own slice of rows,
so N processes with a global batch of B see exactly the rows one process sees. The loss of a shard
is its summed cross-entropy divided by the number of scored positions in the *global* batch, times
N; DDP's gradient average then equals the single-process gradient of the global mean loss.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from psattn.tasks.batch import IGNORE_INDEX, TaskBatch


@dataclass(frozen=True)
class Distributed:
    """This process's place in a ``torchrun`` job (rank 0 of 1 when not distributed)."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup_distributed(device_type: str) -> Distributed:
    """Join the process group that ``torchrun`` describes in the environment (a no-op alone)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Distributed()
    if not dist.is_initialized():
        # on CUDA, NCCL for the model's tensors and gloo for the host's (agree_on_stop)
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(name: str, local_rank: int = 0, what: str = "train.device") -> torch.device:
    """The torch device ``name`` means: ``auto`` is CUDA when available; ``cuda`` is this rank's GPU. The
    error for CUDA where there is none, or for a name torch does not know, names the setting ``what``
    (``--device`` for a trained model's)."""
    if not isinstance(name, str):  # 3 was read as cuda:3, then refused as a ValueError
        raise TypeError(f"{what} must be cpu, cuda, cuda:N or auto, got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = f"cuda:{local_rank}"
    try:
        device = torch.device(name)
    except RuntimeError:  # torch's own words list twenty device types
        raise ValueError(f"{what} must be cpu, cuda, cuda:N or auto, got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        hint = "; use --device cpu or auto" if what == "--device" else ""
        raise ValueError(f"{what}={name!r} but CUDA is not available{hint}")
    return device


def teardown_distributed(wait: bool = True) -> None:
    """Leave the process group, if one was joined: every rank waits for the others (unless not ``wait``), then
    the group is destroyed (a process that exits with the group alive can abort in the backend's threads).
    A rank that leaves on an error of its own must not wait: the others are in a step's collectives, not in
    the barrier, and would never meet it; torchrun ends them once this one has exited."""
    if dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()


def shard(batch: TaskBatch, ctx: Distributed) -> TaskBatch:
    """This rank's rows of the global batch."""
    if not ctx.enabled:
        return batch
    B = len(batch)
    if B % ctx.world_size:
        raise ValueError(f"train.batch_size ({B}) must be divisible by the number of processes ({ctx.world_size})")
    rows = slice(ctx.rank * B // ctx.world_size, (ctx.rank + 1) * B // ctx.world_size)
    return TaskBatch(batch.inputs[rows], batch.targets[rows])


def shard_loss(logits: Tensor, targets: Tensor, scored_global: int, ctx: Distributed) -> Tensor:
    """Summed cross-entropy of the shard / scored positions of the global batch * world size.
    ``logits`` (..., V) and ``targets`` (...) are aligned: (B, T, V) and (B, T), or (N, V) and (N,)."""
    # (..., V) -> (M, V) and (...) -> (M,), M the positions
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                            ignore_index=IGNORE_INDEX, reduction="sum")
    return total * (ctx.world_size / max(scored_global, 1))


def mean_over_ranks(value: Tensor, ctx: Distributed) -> Tensor:
    """The average of a scalar over ranks (the global loss); the value itself alone."""
    if not ctx.enabled:
        return value
    value = value.detach().clone()
    dist.all_reduce(value)
    return value / ctx.world_size


def agree_on_stop(timed_out: bool, signum: int | None, ctx: Distributed) -> tuple[bool, int | None]:
    """What every rank does after this step: stop for the time limit if any rank's ran out, and for the stop
    signal any rank has seen (the highest number when several). A signal sent to each rank lands at a
    different point of its step, and a rank that stopped alone would wait in the checkpoint's barrier while
    the others went on. One all-reduce of a host tensor: on CUDA it goes through the process group's gloo
    backend, so agreeing never waits for the device's queued work."""
    if not ctx.enabled:
        return timed_out, signum
    value = torch.tensor([int(timed_out), signum or 0], dtype=torch.int64, device="cpu")  # (2,) on the host
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value[0]), int(value[1]) or None


def barrier(ctx: Distributed) -> None:
    """Wait for every rank (nothing when not distributed)."""
    if ctx.enabled:
        dist.barrier()
