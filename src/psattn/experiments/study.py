"""What a declared study is: the runs it trains, its table and its verdict.

Every study, from the variant table to the GPU sweeps, is one ``Study``: ``plan(mode)`` gives the run
configs of a plan (``quick``, CPU scale, or ``full``, the paper-scale presets), ``table(results)`` the
study's table as markdown lines from its finished runs (keyed by run name, as ``run_sweep`` and
``load_result`` give them), and ``verdict(results)`` its conclusion, a clause a line, read off the same
runs. A study without a table or a verdict says so with None. ``report(results, runs, mode)`` is what
else the study reads off its run directories ``runs`` (figures, attention statistics, a report page),
as lines to print. The registry of studies is ``psattn.experiments.declared``; ``psattn sweep NAME``
runs one, the reproduction runs most of them (``psattn.experiments.reproduce``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psattn.training.config import RunConfig

MODES = ("quick", "full")

#: finished runs keyed by run name: each its result, with "config" and "history"
Results = dict[str, dict[str, Any]]


def check_mode(mode: str) -> str:
    """``mode`` when it names a plan; ValueError otherwise."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    return mode


@dataclass(frozen=True)
class Study:
    """One declared study: its plans, and what it reads off its finished runs."""

    name: str
    plan: Callable[[str], list[RunConfig]]  # mode -> the run configs of that plan
    title: str | None  # the table's heading
    table: Callable[[Results], list[str]] | None  # finished runs -> the table's markdown lines
    verdict: Callable[[Results], list[str]] | None = None  # finished runs -> the conclusion, a clause a line
    report: Callable[[Results, Path, str], list[str]] | None = None  # (runs, their directory, mode) -> lines
    shows_divergence: bool = False  # its table and verdict say which runs diverged (others would count them as failed)
