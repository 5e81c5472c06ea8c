"""Timing by ratios: run the contenders interleaved so that machine noise hits them alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def wall_seconds(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes on the wall clock."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved_medians(fns: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 1,
                        measure: Callable[[Callable[[], object]], float] = wall_seconds) -> dict[str, float]:
    """Median seconds per call of each function, calls interleaved round-robin after ``warmup``
    untimed rounds; ``measure(fn)`` times one call (the wall clock, or a GPU's events)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(measure(fn))
    return {name: statistics.median(t) for name, t in times.items()}
