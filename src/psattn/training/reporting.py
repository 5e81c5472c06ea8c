"""What a run reports as it trains: one console line per evaluation and a last one about the run,
and TensorBoard scalars (``train.tensorboard``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from psattn.training.config import RunConfig

if TYPE_CHECKING:
    from psattn.training.run_dir import RunResult


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


def board_scalars(board, row: dict[str, Any]) -> None:
    """Write an evaluation row's numbers (not its per-position or per-head lists) to a TensorBoard writer."""
    for key, value in row.items():
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
            board.add_scalar(key, value, row["step"])
    board.flush()


def tensorboard_writer(log_dir: Path, purge_step: int | None = None):
    """A ``torch.utils.tensorboard.SummaryWriter`` into ``log_dir``; ``purge_step``: TensorBoard hides the
    events written before at this step or later (a resumed run passes the step after its checkpoint's)."""
    return summary_writer_class()(log_dir=str(log_dir), purge_step=purge_step)


def summary_writer_class():
    """TensorBoard's ``SummaryWriter``, or an ImportError naming the extra that installs it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ImportError("train.tensorboard needs TensorBoard: pip install 'phase-space-attention[tensorboard]'") from err
    return SummaryWriter
