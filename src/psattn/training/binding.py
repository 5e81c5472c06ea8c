"""What a checkpoint's weights are bound to: the config that built the model, and the data it read.

Weights mean something only with the model and task they were trained for and, on text, with the
tokenizer that turned text into their ids, and with the optimisation that took them there. So every
checkpoint records its ``binding``: the model and task sections of the run's config and the training
fields that shape its weights and history (``BOUND_TRAIN``), with their SHA-256 (compared field by field when the digests
differ, so a field added to psattn's configs since, which the record lacks, is no mismatch), the
SHA-256 of the run's ``tokenizer.json``,
the data record of ``data.json`` (corpus, tokenizer and token checksums), the schedule extensions of
``meta.json`` it trained under (a run asked for more steps, see ``psattn.training.schedule``) and the budget
``train.steps`` its cosine decay ends at (``check_budget``: ``train`` resuming refuses another, unless an extension
asks for more steps). Loading a checkpoint
(``psattn train`` resuming, ``eval``, ``generate``, ``export``, ``footprint``) compares that record
with the run directory's files and refuses any mismatch in one line that names the field and both
values. A task's corpus and tokenizer are bound by content (the data record's checksums), not by the
path that named them, so a run directory whose corpus moved is still the same run. A value recorded under
an older spelling (the induction form ``"full"``, now ``"all_positions"``) reads as today's.

A checkpoint written before checkpoints carried a binding (``binding`` absent) cannot be checked
against its config; its next save adds one. A text run from before runs recorded their data gets its
``data.json`` written once, from the data it is opened with, with a warning saying so.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from psattn.files import write_json
from psattn.jsonfile import read_json
from psattn.tasks.registry import task_name
from psattn.training.checkpoint import CheckpointRefused, unreadable
from psattn.training.config import RunConfig, canonical_config

log = logging.getLogger(__name__)

#: task fields that name files whose contents the data record binds (moving the corpus changes nothing)
BOUND_BY_CONTENT = ("corpus", "tokenizer")

#: the train fields a checkpoint's weights and metrics history depend on; not the budget (``steps`` grows when
#: a run is extended), when the run stops early (which may change, see ``check_run_dir``), nor where or how it
#: runs (device, threads, compile, checkpoint cadence, TensorBoard)
BOUND_TRAIN = ("batch_size", "lr", "weight_decay", "betas", "warmup_steps", "min_lr_ratio", "grad_clip", "eval_every",
               "eval_size", "threshold", "seed", "precision")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bound_sections(config: RunConfig) -> dict[str, Any]:
    """The parts of ``config`` that define what the weights are: its model and task sections, and the
    train fields in ``BOUND_TRAIN``."""
    data = config.to_dict()
    task = {"name": task_name(config.task), **{k: v for k, v in data["task"].items() if k not in BOUND_BY_CONTENT}}
    return {"model": config.model.to_dict(), "task": task, "train": {k: data["train"][k] for k in BOUND_TRAIN}}


def _digest(sections: dict[str, Any]) -> str:
    return _sha256(json.dumps(sections, sort_keys=True).encode())


def binding(config: RunConfig, data: dict[str, str] | None = None,
            extensions: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The binding a checkpoint of ``config`` carries; ``data``: a text run's data record (its
    data.json, whose ``tokenizer_sha256`` is that of the run's tokenizer.json); ``extensions``: the
    schedule extensions the run trains under (its meta.json's)."""
    sections = bound_sections(config)
    return {"config_sha256": _digest(sections), "config": sections,
            "tokenizer_sha256": None if data is None else data["tokenizer_sha256"], "data": data,
            "extensions": [dict(extension) for extension in extensions], "steps": config.train.steps}


def read_binding(path: str | Path) -> dict[str, Any] | None:
    """The binding stored in the checkpoint at ``path`` (None for one written before bindings existed),
    read without loading its weights into memory."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # torch raises many types for a bad file
        raise unreadable(Path(path), err) from None
    found = state.get("binding") if isinstance(state, dict) else None
    return found if isinstance(found, dict) else None


def first_difference(old: Any, new: Any, where: str = "", *, common: bool = False) -> tuple[str, Any, Any] | None:
    """The first field (dotted path) at which two nested JSON values differ, with both values;
    ``common``: of the fields both have (a field added to the config since, at its default, or one
    removed, is no difference in the weights)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [k for k in old if k in new] if common else [*old, *(k for k in new if k not in old)]
        for key in keys:  # in the config's own order
            found = first_difference(old.get(key), new.get(key), f"{where}.{key}" if where else key, common=common)
            if found is not None:
                return found
        return None
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        old, new = list(old), list(new)
    return None if old == new else (where, old, new)


def _short(value: Any) -> str:
    """A value for a message: hashes cut to 12 digits, anything else as Python writes it."""
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"
    return repr(value)


def check_binding(run_dir: Path, config: RunConfig, checkpoint: Path, bound: dict[str, Any] | None) -> None:
    """Refuse (``CheckpointRefused``) when the checkpoint's ``bound`` record disagrees with ``config``
    (the run's config.json), the run's tokenizer.json or its data.json; also when a text run's
    tokenizer.json is not the one its data.json records. Nothing is checked against the config of a
    checkpoint older than bindings."""
    config_path = run_dir / "config.json"
    if bound is not None:
        now = bound_sections(config)
        found = (None if bound.get("config_sha256") == _digest(now)
                 else first_difference(canonical_config(bound.get("config")), now, common=True))
        if found is not None:
            field, old, new = found
            if not config_path.is_file():  # the config came from elsewhere (the defaults, --config)
                raise CheckpointRefused(f"{checkpoint} holds weights trained with {field} = {_short(old)}, but the "
                                        f"config given says {_short(new)}, and {run_dir} has no config.json",
                                        "restore it (or give the run's config)")
            raise CheckpointRefused(f"{checkpoint} holds weights trained with {field} = {_short(old)}, but {config_path} "
                                    f"says {_short(new)}: {config_path.name} no longer describes these weights", "restore it")
    tokenizer_path, data_path = run_dir / "tokenizer.json", run_dir / "data.json"
    tokenizer = _sha256(tokenizer_path.read_bytes()) if tokenizer_path.is_file() else None
    if bound is not None and bound.get("tokenizer_sha256") is not None and tokenizer != bound["tokenizer_sha256"]:
        raise CheckpointRefused(f"{tokenizer_path} is not the tokenizer {checkpoint} was trained with (SHA-256 "
                                f"{_short(tokenizer)}, the checkpoint's {_short(bound['tokenizer_sha256'])})", "restore it")
    recorded = read_json(data_path, what="data record", object_only=True) if data_path.is_file() else None
    if bound is not None and bound.get("data") is not None:
        if recorded is None:
            raise CheckpointRefused(f"{run_dir} has a checkpoint but no data.json (the record of the data its weights "
                                    f"were trained on, which {checkpoint.name} carries too)", "restore it")
        field, old, new = first_difference(bound["data"], recorded) or ("", None, None)
        if field:
            raise CheckpointRefused(f"{data_path} records {field} = {_short(new)}, but {checkpoint} was trained on "
                                    f"{_short(old)}: the data record no longer describes these weights", "restore it")
    if recorded is not None and tokenizer is not None and tokenizer != recorded.get("tokenizer_sha256"):
        raise CheckpointRefused(f"{tokenizer_path} is not the tokenizer {data_path.name} records (SHA-256 "
                                f"{_short(tokenizer)}, recorded {_short(recorded.get('tokenizer_sha256'))})", "restore it")


def check_extensions(run_dir: Path, checkpoint: Path, bound: dict[str, Any] | None,
                     extensions: Sequence[dict[str, Any]]) -> None:
    """Refuse (``CheckpointRefused``) to resume under schedule ``extensions`` (meta.json's, and the one a run
    asked for more steps adds) that do not begin with those the checkpoint trained under: a meta.json lost
    or edited since would change the learning rate of every step to come. A checkpoint from before
    extensions were bound is not checked."""
    trained = None if bound is None else bound.get("extensions")
    if trained is None or [dict(e) for e in extensions[:len(trained)]] == trained:
        return

    def schedule(found: Sequence[dict[str, Any]]) -> str:
        return ", then ".join(f"{e['steps_before']} to {e['steps_after']} steps at step {e['at_step']}" for e in found) or "none"

    meta = run_dir / "meta.json"
    raise CheckpointRefused(f"{checkpoint} trained on a schedule extended from {schedule(trained)}, but {meta} records "
                            f"{'extensions ' if extensions[:len(trained)] else ''}{schedule(extensions[:len(trained)])}: "
                            "resuming would change the learning rate of every step to come", "restore it")


def check_budget(run_dir: Path, checkpoint: Path, bound: dict[str, Any] | None, config: RunConfig,
                 extensions: Sequence[dict[str, Any]]) -> None:
    """Refuse (``CheckpointRefused``) to resume under a ``train.steps`` the checkpoint's schedule was not made for.
    The cosine decay ends at ``train.steps`` (``psattn.training.schedule.lr_factor``), so a budget edited in
    config.json (or given without it) would change the learning rate of every step to come; a run asked for
    more steps instead records an extension (``extensions`` beyond the checkpoint's own, from the budget it
    trained under), which keeps the schedule of the steps taken. A checkpoint from before budgets were bound
    is not checked."""
    trained = None if bound is None else bound.get("steps")
    if trained is None:
        return
    new = extensions[len(bound.get("extensions") or []):]  # type: ignore[union-attr]  # bound is a dict here
    budget = new[0]["steps_before"] if new else config.train.steps  # what the schedule goes on from
    if budget == trained:
        return
    config_path = run_dir / "config.json"
    where = f"{config_path} says" if config_path.is_file() else f"the config given says (and {run_dir} has no config.json)"
    raise CheckpointRefused(f"{checkpoint} trained on a learning-rate schedule for train.steps = {trained}, but {where} "
                            f"{budget}: resuming would change the learning rate of every step to come",
                            f"restore train.steps = {trained} and ask for more steps with a larger one (psattn train "
                            "--set train.steps=N, which keeps the schedule of the steps taken)")


def check_vocabulary(config: RunConfig) -> None:
    """Refuse a text run whose tokenizer has more ids than the model has embeddings (a tokenizer file
    given by path carries its own vocabulary, whatever ``task.vocab_size`` says); warn when a BPE
    learned fewer ids than ``task.vocab_size`` asked (a small corpus has fewer merges to learn)."""
    tokens = getattr(config.task, "tokens", None)
    if tokens is None:
        return
    size = tokens().tokenizer.vocab_size
    asked = getattr(config.task, "vocab_size", size)
    if getattr(config.task, "tokenizer", None) == "bpe" and size < asked:
        log.warning("the BPE tokenizer learned %s ids from this corpus, fewer than task.vocab_size=%s asked: the "
                    "model's other outputs are never targets; set task.vocab_size=%s (and model.vocab_size) to match",
                    f"{size:,}", asked, size)
    if size > config.model.vocab_size:
        raise ValueError(f"the tokenizer {getattr(config.task, 'tokenizer', '')} has {size:,} ids, more than the "
                         f"model's vocabulary of {config.model.vocab_size:,}: set model.vocab_size={size} (or use a "
                         "smaller tokenizer)")


def record_data_once(run_dir: Path, data: dict[str, str]) -> None:
    """Write the data.json of a text run from before runs recorded their data (its checkpoint carries
    no binding), from ``data``, the data it is opened with; said in a warning, since what it trained
    on before cannot be checked."""
    log.warning("%s predates data records: data.json now records the data it is opened with (corpus %s); "
                "what it trained on before cannot be checked", run_dir, data.get("corpus_sha256", "?")[:12])
    write_json(run_dir / "data.json", data)
