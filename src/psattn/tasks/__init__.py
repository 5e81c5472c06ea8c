"""Synthetic tasks (induction, the two negative controls and associative recall) and real text.

Every sampler is ``sample(config, batch_size, generator, split="train") -> TaskBatch``,
a pure function of the config, the generator's state and the split. A synthetic row starts
with BOS = 0, and its split is a function of its tokens, so train and eval rows never coincide
(see ``psattn.tasks.split``). A text row is a window of the training or the held-out text,
which are different stretches of each document (or different documents), with no BOS: no
held-out window is a training window, but its tokens may occur in the training text too
(a licence header, a common idiom).
"""

from psattn.tasks.associative_recall import AssociativeRecallConfig
from psattn.tasks.batch import IGNORE_INDEX, TaskBatch, accuracy
from psattn.tasks.induction import InductionConfig, induction_targets
from psattn.tasks.multihop import MultiHopConfig
from psattn.tasks.random_offset import RandomOffsetConfig
from psattn.tasks.registry import TASKS, TaskConfig, make_task_config, sample_task, task_name
from psattn.tasks.split import EVAL_BUCKETS, SPLITS, in_split, row_hash

__all__ = [
    "EVAL_BUCKETS",
    "IGNORE_INDEX",
    "SPLITS",
    "TaskConfig",
    "TASKS",
    "AssociativeRecallConfig",
    "InductionConfig",
    "MultiHopConfig",
    "RandomOffsetConfig",
    "TaskBatch",
    "accuracy",
    "in_split",
    "induction_targets",
    "make_task_config",
    "row_hash",
    "sample_task",
    "task_name",
]
