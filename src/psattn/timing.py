"""Timing by ratios: run the contenders interleaved so that machine noise hits them alike; and the
operations a call dispatches, the count a step bound by kernel launches pays for."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping

from torch.utils._python_dispatch import TorchDispatchMode

#: aten operations that allocate or alias without computing: no kernel runs for them
NOT_COMPUTING = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_unsafe_view",
                           "lift_fresh"})


def wall_seconds(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes on the wall clock."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved_medians(fns: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 1,
                        measure: Callable[[Callable[[], object]], float] = wall_seconds) -> dict[str, float]:
    """Median seconds per call of each function, calls interleaved after ``warmup`` untimed rounds, every
    other round in reverse order (A B, B A, ...) so that no function always runs first or right after
    another; ``measure(fn)`` times one call (the wall clock, or a GPU's events)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for round_ in range(repeats):
        for name, fn in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(measure(fn))
    return {name: statistics.median(t) for name, t in times.items()}


class _Dispatched(TorchDispatchMode):
    """Counts the computing aten operations dispatched inside it, by name."""

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in NOT_COMPUTING:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def dispatched_operations(fn: Callable[[], object]) -> Counter[str]:
    """The aten operations one call of ``fn`` dispatches that compute, by name, counted below autograd (the
    backward's too), views and allocations left out: on a GPU each launches at least one kernel. The count
    is the same on every device and machine, where a step's host time is not."""
    with _Dispatched() as mode:
        fn()
    return mode.counts
