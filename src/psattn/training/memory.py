"""Whether a run fits in memory, decided from its config before anything is allocated or written.

Training holds the weights, their gradients and AdamW's two moments (four fp32 copies of every
parameter; the parameter count is ``preset_parameter_count``'s arithmetic) plus one batch's
activations: per layer the residual stream, the projections and the MLP, and the attention scores and
probabilities (B·H·T² each), then the logits and their gradient (B·T·V each). The held-out set is drawn
once on the host, where the task's sampler peaks at ``DRAW_BYTES_PER_TOKEN``, then kept on the device
(its inputs and targets, int64) and evaluated in chunks of 256 rows without gradients.
A run whose estimate exceeds ``MARGIN`` of the memory available now (on a GPU: free device memory; on
the CPU: the kernel's MemAvailable, within a cgroup's limit) is refused in one line with the numbers:
a run that cannot fit would otherwise be killed by the kernel's OOM killer without a word, after
putting the whole machine under memory pressure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch

from psattn.models.presets import preset_parameter_count
from psattn.processes import host_available_bytes
from psattn.training.config import RunConfig

Model = TypeVar("Model", bound=torch.nn.Module)
GIB = 2**30
MARGIN = 0.8  # refuse what needs more than this share of the available memory
FP32, INT64 = 4, 8
EVAL_CHUNK = 256  # rows per forward pass of psattn.training.evaluation.evaluate
#: the host memory a task's sampler peaks at, per token drawn: 0.16 to 0.32 KiB measured over the four synthetic
#: tasks' samplers at lengths 64 to 256 and vocabularies 64 to 256 (2026-12-04, peak RSS of 50,000 rows)
DRAW_BYTES_PER_TOKEN = 384


@dataclass(frozen=True)
class MemoryEstimate:
    """What training a config needs, in bytes (``estimate``)."""

    parameters: int
    state_bytes: int  # weights, gradients, AdamW moments
    activation_bytes: int  # the larger of a training step's and an evaluation chunk's
    held_out_bytes: int = 0  # the held-out rows' inputs and targets, kept on the device
    drawing_bytes: int = 0  # the host's peak while the held-out rows are drawn
    evaluation_bytes: int = 0  # an evaluation chunk's activations (forward only)

    @property
    def total_bytes(self) -> int:
        """Model state, activations and the held-out set together."""
        return self.state_bytes + self.activation_bytes + self.held_out_bytes


def estimate(config: RunConfig) -> MemoryEstimate:
    """The bytes ``config`` needs to train, from its fields alone (an estimate, not a bound)."""
    m = config.model
    parameters = preset_parameter_count(m)
    assert m.d_mlp is not None  # filled in by ModelConfig
    T = getattr(config.task, "seq_len", 64) + 1  # the longest rows a task draws
    per_token_layer = 8 * m.d_model + 2 * m.d_mlp  # residual, norms, q, k, v, output; MLP up and activation

    def activations(rows: int, backward: bool) -> int:
        layers = m.n_layers * (rows * T * per_token_layer + 2 * rows * m.n_heads * T * T)
        logits = rows * T * m.vocab_size * (2 if backward else 1)
        return FP32 * (layers + logits)

    step = activations(config.train.batch_size, backward=True)
    evaluation = activations(min(EVAL_CHUNK, config.train.eval_size), backward=False)
    tokens = config.train.eval_size * T
    return MemoryEstimate(parameters, 4 * FP32 * parameters, max(step, evaluation), 2 * INT64 * tokens,
                          DRAW_BYTES_PER_TOKEN * tokens, evaluation)


def available_bytes(device: torch.device) -> int | None:
    """Memory free for this process on ``device`` now, or None where it cannot be read."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    return host_available_bytes() if device.type == "cpu" else None


def check_fits(config: RunConfig, device: torch.device) -> MemoryEstimate:
    """Refuse (ValueError, one line with the numbers) a run that cannot fit in ``device``'s memory."""
    need = estimate(config)
    free = available_bytes(device)
    if free is not None and need.total_bytes > MARGIN * free:
        raise ValueError(
            f"this run does not fit in memory on {device}: training it needs about {need.total_bytes / GIB:.1f} GiB "
            f"({need.parameters:,} parameters: {need.state_bytes / GIB:.1f} GiB of weights, gradients and AdamW "
            f"moments; {need.activation_bytes / GIB:.1f} GiB of activations; {need.held_out_bytes / GIB:.1f} GiB of "
            f"held-out rows), and {free / GIB:.1f} GiB is available; make it smaller (model.d_model, model.n_layers, "
            "model.vocab_size, train.batch_size, task.seq_len, train.eval_size)")
    check_held_out_fits(config)
    return need


def check_side_by_side(configs: list[RunConfig], workers: int) -> None:
    """Refuse (ValueError, one line with the numbers) ``workers`` runs of ``configs`` trained at once when
    the largest of them could not fit side by side in their device's memory: each run's own check
    (``check_fits``) sees the whole device free when they start together."""
    from psattn.training.distributed import resolve_device

    by_device: dict[torch.device, list[int]] = {}
    for config in configs:
        by_device.setdefault(resolve_device(config.train.device), []).append(estimate(config).total_bytes)
    for device, needs in by_device.items():
        need, free = sum(sorted(needs, reverse=True)[:workers]), available_bytes(device)
        if free is not None and need > MARGIN * free:
            raise ValueError(f"{min(workers, len(needs))} of these runs side by side need about {need / GIB:.1f} GiB "
                             f"on {device}, and {free / GIB:.1f} GiB is available: use fewer workers")


def check_held_out_fits(config: RunConfig) -> None:
    """Refuse (ValueError, one line) a held-out set of ``config.train.eval_size`` rows whose drawing would
    not fit in the host's memory (``psattn train``, ``psattn eval --rows``)."""
    need, free = estimate(config).drawing_bytes, available_bytes(torch.device("cpu"))
    if free is not None and need > MARGIN * free:
        raise ValueError(f"drawing {config.train.eval_size:,} held-out rows needs about {need / GIB:.1f} GiB of host "
                         f"memory, and {free / GIB:.1f} GiB is available: ask for fewer rows (train.eval_size, or "
                         "eval --rows)")


def check_evaluation_fits(config: RunConfig, device: torch.device) -> None:
    """Refuse (ValueError, one line with the numbers) scoring ``config.train.eval_size`` held-out rows on
    ``device`` when an evaluation chunk's forward activations and the held-out rows would not fit beside the
    model already there (``psattn eval``), after checking the rows' drawing (``check_held_out_fits``)."""
    check_held_out_fits(config)
    need = estimate(config)
    total, free = need.evaluation_bytes + need.held_out_bytes, available_bytes(device)
    if free is not None and total > MARGIN * free:
        raise ValueError(
            f"scoring {config.train.eval_size:,} held-out rows of task.seq_len={getattr(config.task, 'seq_len', '?')} "
            f"does not fit in memory on {device}: it needs about {total / GIB:.1f} GiB "
            f"({need.evaluation_bytes / GIB:.1f} GiB of activations for a chunk of "
            f"{min(EVAL_CHUNK, config.train.eval_size)} rows, {need.held_out_bytes / GIB:.1f} GiB of held-out rows), "
            f"and {free / GIB:.1f} GiB is available: ask for a shorter task.seq_len or fewer rows (eval --rows)")


def placed(model: Model, device: torch.device) -> Model:
    """``model`` moved to ``device``; a ValueError naming the fix, in one line, when it does not fit there
    (the allocator's message, where ``check_fits`` could not tell beforehand)."""
    try:
        return model.to(device)
    except (MemoryError, RuntimeError) as err:
        if not isinstance(err, MemoryError) and "memory" not in str(err).lower() and "alloc" not in str(err).lower():
            raise
        raise ValueError(f"the model does not fit in memory on {device} ({_first_line(err)}); "
                         "make it smaller (model.d_model, model.n_layers, model.vocab_size)") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]
