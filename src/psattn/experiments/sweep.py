"""Run a list of configs in parallel worker processes; skip those already finished.

Each config trains into ``out_dir/<config.name>``. A config whose ``result.json`` exists is not run
again, and an interrupted one resumes from its checkpoint, so rerunning a sweep only does the work
that is left.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..training.config import RunConfig
from ..training.trainer import train

log = logging.getLogger(__name__)


def load_result(run_dir: str | Path) -> dict[str, Any] | None:
    """The saved result of a finished run (with its config under "config"), or None."""
    run_dir = Path(run_dir)
    path = run_dir / "result.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    result["config"] = json.loads((run_dir / "config.json").read_text())
    return result


def _run_one(config_dict: dict[str, Any], run_dir: str) -> str:
    config = RunConfig.from_dict(config_dict)
    train(config, run_dir)
    return config.name


def run_sweep(
    configs: list[RunConfig],
    out_dir: str | Path,
    *,
    workers: int | None = None,
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Train every config not yet finished, ``workers`` at a time (default: one per core);
    returns the saved results of all configs, keyed by name."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError("config names must be unique within a sweep")
    out_dir = Path(out_dir)
    todo = [c for c in configs if load_result(out_dir / c.name) is None]
    log.info("%d of %d runs already finished in %s", len(configs) - len(todo), len(configs), out_dir)
    workers = workers or os.cpu_count() or 1
    if todo and workers == 1:
        for config in tqdm(todo, desc="runs", disable=not progress):
            train(config, out_dir / config.name)
    elif todo:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context) as pool:
            futures = [pool.submit(_run_one, c.to_dict(), str(out_dir / c.name)) for c in todo]
            for future in tqdm(as_completed(futures), total=len(futures), desc="runs", disable=not progress):
                future.result()
    return {name: load_result(out_dir / name) for name in names}
