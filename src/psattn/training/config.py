"""Typed configuration of a training run: model, task and optimisation, nested into one RunConfig.

Precedence: dataclass defaults, then a JSON file, then ``key.sub=value`` command-line overrides
(``apply_overrides``). The resolved config is written into every run directory.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from psattn.fields import check_choices, from_fields, plain_numbers
from psattn.jsonfile import DuplicateKey, loads, read_json
from psattn.models.config import ModelConfig
from psattn.tasks.registry import TASKS, TaskConfig, canonical_task_section, make_task_config, task_name
from psattn.training.shipped import shipped_configs

#: the largest learning rate (and weight decay) accepted: AdamW moves each weight by about lr a step,
#: so anything larger only destroys the model, and 1e300 would overflow float32 at the first step
MAX_LR = 10.0
#: the most intra-op threads a run may ask for (torch's thread pool fails, or the process dies, long before a
#: hundred million; a config is portable, so the bound is not this machine's core count)
MAX_THREADS = 1024
#: torch.compile's modes, which ``train.compile`` may name ("reduce-overhead" replays each step's kernels
#: as CUDA graphs, for models too small to keep a GPU busy between launches; on a CPU it is the default)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class TrainConfig:
    """AdamW with linear warm-up then cosine decay, gradient clipping, periodic evaluation. A field of another
    type is a TypeError that names it (``train.steps must be a positive integer, got 2.5``), one outside its range
    a ValueError (``train.lr must be a positive number up to 10``); read from a file (``RunConfig.from_dict``),
    both are ValueErrors."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_size: int = 512
    # held-out accuracy that defines the emergence step; 0.8 because a one-layer model at CPU scale
    # saturates at 0.90-0.94 on full-sequence induction, where 0.9 would turn seed noise into success
    threshold: float = 0.8
    early_stop: bool = True  # stop once held-out accuracy reaches the threshold ...
    early_stop_evals: int = 1  # ... at this many consecutive evaluations
    checkpoint_every: int = 100
    seed: int = 0
    threads: int | None = None  # torch.set_num_threads; None leaves the default
    device: str = "auto"  # "auto" (CUDA when available), "cpu", "cuda" or "cuda:N"
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast (GPU presets)
    compile: bool | str = False  # torch.compile the model: true (its default mode) or a mode of COMPILE_MODES
    tensorboard: bool = False  # also write every metrics row to <run dir>/tensorboard (the tensorboard extra)

    def __post_init__(self):
        plain_numbers(self)  # np.float32(0.5) was refused as "train.threshold must lie in (0, 1], got 0.5"
        check_choices(self, "train")
        for name in ("steps", "batch_size", "eval_every", "eval_size", "checkpoint_every", "early_stop_evals"):
            _refuse_unless(getattr(self, name), _is_int, lambda v: v > 0, f"train.{name} must be a positive integer")
        for name in ("warmup_steps", "seed"):
            _refuse_unless(getattr(self, name), _is_int, lambda v: v >= 0, f"train.{name} must be a non-negative integer")
        if self.seed >= 2**32:  # a step's batch is drawn from the seed (seed << 32) + step, which must fit 64 bits
            raise ValueError(f"train.seed must be below 2**32 = {2**32}, got {self.seed}")
        if self.threads is not None:
            _refuse_unless(self.threads, _is_int, lambda v: 0 < v <= MAX_THREADS,
                           f"train.threads must be an integer from 1 to {MAX_THREADS} or null")
        for name in ("early_stop", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"train.{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.compile, bool) and self.compile not in COMPILE_MODES:
            error = ValueError if isinstance(self.compile, str) else TypeError
            raise error(f"train.compile must be true, false or one of torch.compile's modes {list(COMPILE_MODES)}, "
                        f"got {self.compile!r}")
        try:
            betas = None if isinstance(self.betas, (str, bytes)) else tuple(self.betas)
        except TypeError:  # not a sequence: 0.9
            betas = None
        if betas is None or not all(isinstance(b, numbers.Real) and not isinstance(b, bool) for b in betas):
            raise TypeError(f"train.betas must be two numbers in [0, 1), got {self.betas!r}")
        self.betas = tuple(float(b) for b in betas)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"train.betas must be two numbers in [0, 1), got {self.betas!r}")
        _refuse_unless(self.lr, _is_number, lambda v: 0 < v <= MAX_LR, f"train.lr must be a positive number up to "
                       f"{MAX_LR:g} (AdamW moves every weight by about lr a step)")
        _refuse_unless(self.weight_decay, _is_number, lambda v: 0 <= v <= MAX_LR,
                       f"train.weight_decay must be a number in [0, {MAX_LR:g}]")
        _refuse_unless(self.threshold, _is_number, lambda v: 0.0 < v <= 1.0, "train.threshold must lie in (0, 1]")
        _refuse_unless(self.min_lr_ratio, _is_number, lambda v: 0.0 <= v <= 1.0, "train.min_lr_ratio must lie in [0, 1]")
        if not isinstance(self.device, str):
            raise TypeError(f"train.device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        if not re.fullmatch(r"cpu|cuda|auto|cuda:[0-9]+", self.device):
            raise ValueError(f"train.device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        _refuse_unless(self.grad_clip, _is_number, lambda v: 0 < v < float("inf"),
                       "train.grad_clip must be a positive finite number")


def _refuse_unless(value, of_type: Callable[[Any], bool], in_range: Callable[[Any], bool], takes: str) -> None:
    """Refuse ``value`` with ``takes`` (a field and what it takes) and the value: a TypeError unless ``of_type(value)``,
    a ValueError unless ``in_range(value)``."""
    if not of_type(value):
        raise TypeError(f"{takes}, got {value!r}")
    if not in_range(value):
        raise ValueError(f"{takes}, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class RunConfig:
    """One training run: a model trained on a task. ``task`` is a registered task config.

    Built from dataclasses or from plain values (``from_dict``, ``from_file``: a JSON file or a shipped
    config's name); ``apply_overrides`` applies ``section.field=value`` strings as ``--set`` does. A section of
    another type is a TypeError built in Python (``RunConfig(model="x")``) and a ValueError read from a file
    (``the model section must be a JSON object``).

    Examples:
        >>> from psattn.training.config import RunConfig, apply_overrides
        >>> config = RunConfig.from_dict({"task": {"name": "induction", "vocab_size": 16, "seq_len": 32},
        ...                               "model": {"vocab_size": 16, "d_model": 32, "n_heads": 2}})
        >>> config = apply_overrides(config, ["model.attention.variant=key_only", "train.steps=100"])
        >>> config.model.attention.variant, config.train.steps, config.to_dict()["task"]["name"]
        ('key_only', 100, 'induction')
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=lambda: make_task_config("induction"))
    train: TrainConfig = field(default_factory=TrainConfig)
    name: str = "run"

    def __post_init__(self):
        if not isinstance(self.name, str):  # it names the run in its result, its report lines and a sweep's tables
            raise TypeError(f"RunConfig's name must be a string, got {reprlib.repr(self.name)}")
        if isinstance(self.model, dict):
            self.model = _section("model", ModelConfig.from_dict, self.model)
        if isinstance(self.train, dict):
            self.train = _section("train", from_fields, TrainConfig, self.train, "train")
        for name, kind in (("model", ModelConfig), ("train", TrainConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"RunConfig's {name} must be a {kind.__name__} or a dict of its fields, "
                                f"got {reprlib.repr(getattr(self, name))}")
        if isinstance(self.task, dict):
            fields = dict(self.task)
            if not isinstance(fields.get("name"), str):
                raise ValueError(f"task needs a 'name', one of {sorted(TASKS)}")
            self.task = _section("task", make_task_config, fields.pop("name"), **fields)
        elif not any(type(self.task) is config_cls for config_cls, _ in TASKS.values()):
            raise TypeError(f"RunConfig's task must be a registered task's config (make_task_config) or a dict with "
                            f"a 'name', got {reprlib.repr(self.task)}")
        vocab = getattr(self.task, "vocab_size", None)
        if vocab is not None and vocab > self.model.vocab_size:
            raise ValueError(
                f"task vocabulary ({vocab}) exceeds the model's vocab_size ({self.model.vocab_size})"
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a run directory's config.json holds."""
        return {
            "name": self.name,
            "model": self.model.to_dict(),
            "task": {"name": task_name(self.task), **dataclasses.asdict(self.task)},
            "train": dataclasses.asdict(self.train),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Build from plain values (a parsed JSON document); anything malformed raises ValueError."""
        if not isinstance(data, dict):
            raise ValueError(f"a run config must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - {"name", "model", "task", "train"}
        if unknown:
            raise ValueError(f"unknown run config sections {sorted(unknown)}; expected name, model, task, train")
        if not isinstance(data.get("name", ""), str):
            raise ValueError(f"the run name must be a string, got {data['name']!r}")
        for section in ("model", "task", "train"):  # a config object is taken as built in Python
            value = data.get(section, {})
            if not isinstance(value, dict) and not dataclasses.is_dataclass(value):
                with_name = " with a 'name'" if section == "task" else ""
                raise ValueError(f"the {section} section must be a JSON object{with_name}, got {reprlib.repr(value)}")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        """The config in JSON file ``path``, or the shipped example of that name (``mqar``; see
        ``shipped_configs``) when no such file exists (a folder of that name, such as the run directory
        of ``--config mqar --run-dir mqar``, is no config file)."""
        shipped = shipped_configs()
        if not Path(path).is_file() and str(path) in shipped:
            path = shipped[str(path)]
        if not Path(path).exists() and Path(path).name == str(path) and not Path(path).suffix:  # a name, not a path
            raise ValueError(f"config file {path} does not exist, nor is it a shipped config's name "
                             f"({', '.join(shipped)}; psattn configs lists them)")
        return cls.from_dict(read_json(path, what="config file", object_only=True))


def canonical_config(data: Any) -> Any:
    """A saved config (parsed JSON, or a checkpoint's binding record) with older spellings of its task's
    values read as today's (``canonical_task_section``); anything else is returned as it is."""
    if isinstance(data, dict) and isinstance(data.get("task"), dict):
        return {**data, "task": canonical_task_section(data["task"])}
    return data


#: train fields that say where and how a run executes, not what it trains: a trained run may continue
#: under other values (resumed on a GPU, with more threads, compiled); it then continues from the same
#: checkpoint, bit for bit only where the arithmetic is the same
RUNTIME_FIELDS = ("checkpoint_every", "threads", "device", "compile", "tensorboard")


def with_train_fields(config: RunConfig, source: RunConfig, fields: tuple[str, ...]) -> RunConfig:
    """``config`` with the train ``fields`` taken from ``source``'s."""
    taken = {name: getattr(source.train, name) for name in fields}
    return dataclasses.replace(config, train=dataclasses.replace(config.train, **taken))


def holds_same_run(path: str | Path, config: RunConfig) -> bool:
    """Whether the config.json at ``path`` describes ``config``: compared as parsed configs, so an
    older spelling of the same run matches (a model section written before ``init`` existed was
    initialised N(0, 0.02), the default then)."""
    try:
        saved = json.loads(Path(path).read_text())
        if isinstance(saved.get("model"), dict):
            saved["model"].setdefault("init", 0.02)
        return RunConfig.from_dict(saved).to_dict() == config.to_dict()
    except (ValueError, TypeError, AttributeError):
        return False


def config_differences(path: str | Path, config: RunConfig, limit: int = 3) -> str:
    """The first ``limit`` fields in which the config.json at ``path`` differs from ``config``, as
    "train.batch_size (saved 64, now 32)", for error messages."""
    try:
        saved = canonical_config(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        return "an unreadable config.json"
    diffs: list[str] = []

    def walk(old, new, where):
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                walk(old.get(key), new.get(key), f"{where}.{key}" if where else key)
        elif old != new and not (isinstance(old, list) and isinstance(new, tuple) and list(new) == old):
            diffs.append(f"{where} (saved {old!r}, now {new!r})")

    walk(saved, config.to_dict(), "")
    return ", ".join(diffs[:limit]) + (f" and {len(diffs) - limit} more" if len(diffs) > limit else "")


def _section(section: str, build, *args, **kwargs):
    """``build(*args, **kwargs)``, with a value of the wrong type reported as a ValueError naming the section."""
    try:
        return build(*args, **kwargs)
    except (TypeError, AttributeError, KeyError, OverflowError) as err:
        raise ValueError(f"malformed {section} section: {err}") from None



def apply_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply ``section.field=value`` strings (values parsed as JSON, else kept as text), e.g.
    ``model.attention.gamma=0.8``, ``train.steps=500``, ``task.seq_len=32``.

    ``task.name=X`` switches to task X with X's own defaults (whatever its position among the
    overrides), and the model's vocabulary follows X's unless ``model.vocab_size`` is given too; so
    does it follow ``task.vocab_size=N`` (``--set task.tokenizer=bpe task.vocab_size=1024`` sizes
    both). Overrides apply whatever their order, so two that set the same field (``model.d_model=64
    model.d_model=32``, or ``model={...} model.d_model=32``) are refused. A ``config`` that is not a ``RunConfig``,
    or ``overrides`` that are not a list of strings (one string, say), is a TypeError."""
    if not isinstance(config, RunConfig):  # an AttributeError on .to_dict
        raise TypeError(f"apply_overrides takes a RunConfig, got {type(config).__name__}")
    check_overrides(overrides)
    data = config.to_dict()
    data["model"].setdefault("d_head", None)  # a field, which to_dict leaves out at its default
    parsed = [_parse_override(item) for item in overrides]
    for i, (key, _, item) in enumerate(parsed):
        for earlier, _, other in parsed[:i]:
            if key[:len(earlier)] == earlier[:len(key)]:  # the same field, or a section and a field of it
                field_ = ".".join(key if len(key) > len(earlier) else earlier)
                raise ValueError(f"overrides {other!r} and {item!r} both set {field_}; keep the one you mean")
    switch = [value for key, value, _ in parsed if key == ["task", "name"]]
    if switch and switch[-1] != data["task"]["name"]:
        task = make_task_config(switch[-1])
        data["task"] = dataclasses.asdict(task) | {"name": switch[-1]}
        vocab = getattr(task, "vocab_size", None)  # a field, or derived from the task's fields
        if vocab is not None and not any(key == ["model", "vocab_size"] for key, _, _ in parsed):
            data["model"]["vocab_size"] = vocab
    for parts, value, item in parsed:
        node = data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise ValueError(f"override {item!r}: {part!r} is not a config section")
            node = node[part]
        if parts[-1] not in node:
            raise ValueError(f"override {item!r}: unknown field {parts[-1]!r}; known: {sorted(node)}")
        node[parts[-1]] = value
    vocab_given = any(key == ["task", "vocab_size"] for key, _, _ in parsed)
    if vocab_given and not any(key == ["model", "vocab_size"] for key, _, _ in parsed):
        data["model"]["vocab_size"] = data["task"]["vocab_size"]  # the model's vocabulary follows the task's
    return RunConfig.from_dict(data)


def check_overrides(overrides: Any) -> None:
    """A TypeError unless ``overrides`` is a list (or tuple) of ``section.field=value`` strings: one string was
    read character by character ("override 't' must look like section.field=value")."""
    if not isinstance(overrides, list | tuple) or not all(isinstance(item, str) for item in overrides):
        raise TypeError(f"overrides must be a list of 'section.field=value' strings, got {reprlib.repr(overrides)}")


def _parse_override(item: str) -> tuple[list[str], Any, str]:
    key, sep, raw = item.partition("=")
    if not sep:
        raise ValueError(f"override {item!r} must look like section.field=value")
    if key == "name":  # a run's name is text as typed (name=7 names run "7"), never empty
        if not raw.strip():
            raise ValueError(f"override {item!r} gives an empty run name; name=NAME names the run")
        return [key], raw, item
    try:
        value = loads(raw)
    except json.JSONDecodeError:
        value = float(raw) if raw.strip().lower() in _NON_FINITE else raw  # so that checks say "not finite"
    except DuplicateKey as err:
        raise ValueError(f"override {item!r} gives the key {err.args[0]!r} twice in one object; "
                         "keep the one you mean") from None
    return key.split("."), value, item


_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


__all__ = ["RUNTIME_FIELDS", "RunConfig", "TrainConfig", "apply_overrides", "canonical_config", "config_differences",
           "holds_same_run", "with_train_fields"]
