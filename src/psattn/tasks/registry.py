"""Task names -> (config class, sampler), and config construction by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from psattn.fields import from_fields
from psattn.tasks import associative_recall, induction, multihop, random_offset, text
from psattn.tasks.batch import TaskBatch

Sampler = Callable[..., TaskBatch]
#: the config of any registered task
TaskConfig = (induction.InductionConfig | random_offset.RandomOffsetConfig | multihop.MultiHopConfig
              | associative_recall.AssociativeRecallConfig | text.TextConfig)

TASKS: dict[str, tuple[type, Sampler]] = {
    "induction": (induction.InductionConfig, induction.sample),
    "random_offset": (random_offset.RandomOffsetConfig, random_offset.sample),
    "multihop": (multihop.MultiHopConfig, multihop.sample),
    "mqar": (associative_recall.AssociativeRecallConfig, associative_recall.sample),
    "text": (text.TextConfig, text.sample),
}


#: older spellings of task field values, by task and field: a config saved before a rename reads as today's
ALIASES: dict[str, dict[str, dict[str, str]]] = {"induction": {"form": induction.FORM_ALIASES}}


def canonical_task_section(section: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config's task section (a JSON object with a ``name``) with older spellings of its values
    replaced by today's, e.g. the induction form ``"full"`` by ``"all_positions"``."""
    aliases = ALIASES.get(section.get("name"), {})  # type: ignore[arg-type]
    return {key: aliases[key].get(value, value) if key in aliases and isinstance(value, str) else value
            for key, value in section.items()}


def _lookup(name: str) -> tuple[type, Sampler]:
    if not isinstance(name, str) or name not in TASKS:  # a list raised "unhashable type"
        raise ValueError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name]


def make_task_config(name: str, **overrides: Any) -> TaskConfig:
    """The config of task ``name`` with defaults replaced by ``overrides``."""
    config_cls, _ = _lookup(name)
    return from_fields(config_cls, overrides, f"task {name!r}")


def task_name(config: TaskConfig) -> str:
    """The registry name of a task config instance."""
    for name, (config_cls, _) in TASKS.items():
        if type(config) is config_cls:
            return name
    raise TypeError(f"{type(config).__name__} is not a registered task config; known tasks: {sorted(TASKS)}")


def sample_task(config: TaskConfig, batch_size: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
    """Sample from whichever registered task ``config`` configures."""
    _, sampler = TASKS[task_name(config)]
    return sampler(config, batch_size, generator, split)
