"""The paper's particle experiment (arXiv 2605.30229) as a list of configs, and a runner writing a JSON summary.

Baseline USA against five labelled kernels, for n ∈ {64, 128, 256} particles on S², run to τ = 20.
Parameter choices (the summaries give none; these make the predicted shapes easy to see):

- rope:             ω = 2π/n, so positions 0..n−1 go once around: x*(s) = R(s)ᵀ y* is a latitude circle.
- generalised_rope: planes (0,1) then (1,2), frequencies (2π/n, 4π/n): a wavy closed curve.
- prefix:           4 prompts in contiguous blocks, random orthogonal gauges (seed 0): 4 clusters.
- distance_bias:    λ = 2/n, so ``c ∈ [e^{−2}, 1]`` is non-negative: collapses (spectral dichotomy).
- cosine_toeplitz:  ω = 2π/n, sign-changing c: a non-collapsed state (a great circle at the maximum).

The first configs of ``paper_configs(ns=(64,))`` are the baseline USA kernel, then RoPE's.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import signal
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from psattn.files import atomic_write
from psattn.meanfield.config import KernelConfig, SimulationConfig
from psattn.meanfield.memory import GIB, MARGIN
from psattn.meanfield.simulate import Trajectory, simulate
from psattn.processes import StopSignal, host_available_bytes, signals_unwind, stop_signals_held
from psattn.progress import progress_bar
from psattn.provenance import provenance

logger = logging.getLogger(__name__)

PAPER_KERNELS = ("usa", "rope", "generalised_rope", "prefix", "distance_bias", "cosine_toeplitz")


def paper_kernel(name: str, n: int) -> KernelConfig:
    """The kernel of the paper experiment for n particles (parameters in the module docstring)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2:  # n = 0: a ZeroDivisionError
        raise ValueError(f"n must be an integer ≥ 2 (particles), got {n!r}")
    turn = 2 * math.pi / n
    kernels = {
        "usa": KernelConfig("usa"),
        "rope": KernelConfig("rope", frequencies=(turn,)),
        "generalised_rope": KernelConfig("generalised_rope", planes=((0, 1), (1, 2)), frequencies=(turn, 2 * turn)),
        "prefix": KernelConfig("prefix", n_prompts=4, gauge_seed=0),
        "distance_bias": KernelConfig("distance_bias", decay=2.0 / n),
        "cosine_toeplitz": KernelConfig("cosine_toeplitz", omega=turn),
    }
    if name not in kernels:
        raise ValueError(f"unknown paper kernel {name!r}; choose one of {PAPER_KERNELS}")
    return kernels[name]


def paper_configs(
    ns: Sequence[int] = (64, 128, 256),
    kernels: Sequence[str] = PAPER_KERNELS,
    tau: float = 20.0,
    beta: float = 1.0,
    d: int = 3,
    dynamics: str = "usa",
    integrator: str = "rk4",
    dt: float = 0.1,
    seed: int = 0,
    batch: int = 1,
) -> list[SimulationConfig]:
    """One config per (n, kernel), n outer."""
    return [
        SimulationConfig(
            n=n, d=d, beta=beta, kernel=paper_kernel(name, n), dynamics=dynamics, integrator=integrator,
            dt=dt, tau=tau, seed=seed, batch=batch,
        )
        for n in ns
        for name in kernels
    ]


def run_name(config: SimulationConfig) -> str:
    """A simulation's folder name: kernel and particle count."""
    return f"{config.kernel.name}_n{config.n}"


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op threads (small systems run fastest on one)."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1):
        raise ValueError(f"threads must be an integer ≥ 1 or None, got {count!r}")  # torch: 'expects a positive integer'
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # strict JSON has no NaN


def _series(t: torch.Tensor) -> list:
    return [[_finite(float(v)) for v in row] for row in t.tolist()] if t.ndim == 2 else [_finite(float(v)) for v in t]


def summarise(traj: Trajectory) -> dict[str, Any]:
    """A JSON-ready record of one run: config, integrator report, diagnostics, final state of batch 0."""
    config = traj.config
    return {
        "name": run_name(config),
        "config": config.to_dict(),
        "frame": traj.frame,
        "integrator": config.integrator,
        "step_size": traj.step_size,
        "steps": traj.times.shape[0] - 1,
        "energy_check": traj.energy_check.summary(),
        "energy_monotone": traj.energy_check.monotone,
        "final": {name: _series(series[-1]) for name, series in traj.diagnostics.items()},  # per batch element
        "record_times": traj.record_times.tolist(),
        "diagnostics": {name: _series(series) for name, series in traj.diagnostics.items()},  # (R, B)
        "energy": _series(traj.energy[_record_indices(traj)]),  # (R, B) at the record times
        "labels": traj.labels.tolist(),
        "final_state": traj.x[0].tolist(),  # (n, d), batch element 0
    }


def _record_indices(traj: Trajectory) -> torch.Tensor:
    return torch.round(traj.record_times / traj.step_size).long()


def write_summary(runs: list[dict[str, Any]], out_dir: str | Path, failed: Sequence[dict[str, Any]] = (),
                  interrupted: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write out_dir/summary.json whole: the run records, the configs that failed (``failed_run``), the config a
    stop interrupted (``interrupted_run``; None when none was) and their provenance (versions, git revision,
    machine, and the seed when every run has the same one; None otherwise)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    named = [*runs, *failed, *([interrupted] if interrupted else [])]
    seeds = {run["config"]["seed"] for run in named}  # "seed": null beside config.json's seed of the same run
    summary = {**provenance(seeds.pop() if len(seeds) == 1 else None), "runs": runs, "failed": list(failed),
               "interrupted": interrupted}
    # streamed to the file: its text, which took three times the records' memory again as one string, is never held
    chunks = json.JSONEncoder(indent=1, allow_nan=False).iterencode(summary)
    atomic_write(out / "summary.json", lambda f: f.writelines(chunk.encode() for chunk in chunks))
    return summary


class ExperimentsFailed(ValueError):
    """Some configs of ``run_experiments`` raised; its summary.json holds the others' runs and names these.

    ``failure``: one line naming the first failed config and its error; ``failed``: the failed records; ``kept``: what
    was kept (the summary's path). It pickles with these, as a multiprocessing pool sends it back."""

    def __init__(self, failure: str, failed: list[dict[str, Any]], kept: str) -> None:
        super().__init__(f"{failure}; {kept}")
        self.failure, self.failed, self.kept = failure, failed, kept

    def __reduce__(self):  # rebuilt from its fields across processes (a multiprocessing pool): args is the message only
        return type(self), (self.failure, self.failed, self.kept)


def failed_run(index: int, config: SimulationConfig, err: Exception) -> dict[str, Any]:
    """A JSON-ready record of a config that raised: its place in the list (from 0), name, config and one-line error."""
    error = " ".join(str(err).split()) or type(err).__name__
    return {"index": index, "name": run_name(config), "config": config.to_dict(), "error": error}


class ExperimentsInterrupted(KeyboardInterrupt):
    """A stop signal (Ctrl-C, SIGTERM or SIGHUP) stopped ``run_experiments``; its summary.json holds the runs that had
    finished and names this one.

    ``where``: when it came (``during run 3 of 5 (rope_n64)``); ``interrupted``: the record of the config it stopped
    (``interrupted_run``), None when it came after the last run; ``kept``: what was kept (the summary's path);
    ``signum``: the signal (the message begins with its name unless it is Ctrl-C's SIGINT). It pickles with these."""

    def __init__(self, where: str, interrupted: dict[str, Any] | None, kept: str, signum: int = signal.SIGINT) -> None:
        super().__init__(("" if signum == signal.SIGINT else f"{signal.Signals(signum).name} ") + f"{where}; {kept}")
        self.where, self.interrupted, self.kept, self.signum = where, interrupted, kept, signum

    def __reduce__(self):  # as ExperimentsFailed's
        return type(self), (self.where, self.interrupted, self.kept, self.signum)


def interrupted_run(index: int, config: SimulationConfig) -> dict[str, Any]:
    """A JSON-ready record of the config a stop interrupted: its place in the list (from 0), name and config (it
    and the configs after it did not run)."""
    return {"index": index, "name": run_name(config), "config": config.to_dict()}


def _check_kept_records(configs: Sequence[SimulationConfig]) -> None:
    """Refuse, in one line, a list whose runs do not fit in the memory free for them beside the summary records
    of the runs before them, which ``run_experiments`` keeps until it writes summary.json (a run's own memory check
    counts its record alone): the smallest ``available_memory`` their callers gave, else what the host has free now.
    A config too large alone is left to its own check, which refuses it at its run."""
    given = [config.given_memory for config in configs if config.given_memory is not None]
    available = min(given) if given else host_available_bytes()
    if available is None:
        return
    kept = need = 0
    for config in configs:
        steps = config.step_size()[1]
        alone = config.memory_bytes(steps)
        if alone > MARGIN * available:
            continue
        need, kept = max(need, kept + alone), kept + config.record_bytes(steps)
    if need > MARGIN * available:
        raise ValueError(f"the runs do not fit in memory together: the summary keeps every run's record (its "
                         f"diagnostics as Python numbers, {kept / GIB:,.1f} GiB for these {len(configs)}) until it is "
                         f"written, and a run beside the records before it needs up to {need / GIB:,.1f} GiB, and "
                         f"{available / GIB:.1f} GiB is available; run the configs in shorter lists, or with fewer "
                         "n_records or a smaller batch")


def run_experiments(
    configs: Sequence[SimulationConfig], out_dir: str | Path, threads: int | None = 1, progress: bool = False
) -> dict[str, Any]:
    """Run every config and write out_dir/summary.json; returns the same summary.

    A config that raises (its state overflowed, say) does not stop the others: the summary is written with the
    runs that finished and, under "failed", each failed config with its one-line error, and then
    ``ExperimentsFailed`` is raised, naming the first (the first error other than a ValueError, such as running out
    of memory, is raised as it came instead, once the summary is written). Ctrl-C (KeyboardInterrupt) stops the list: the
    summary is written all the same, naming under "interrupted" the config it stopped (None when none was), and
    ``ExperimentsInterrupted``, a KeyboardInterrupt, is raised; SIGTERM and SIGHUP do the same (in the main thread,
    where their handlers are the default, which would end the process without a summary), and the exception's
    ``signum`` says which came; a second stop before or while the summary is written waits until it is whole. A rerun runs every
    config again and replaces the summary. An item of configs that is
    no SimulationConfig, or an out_dir that cannot be made (a file in its way), is refused before the first run, and
    so is a list whose runs do not fit in the memory free for them (the ``available_memory`` the configs were made with,
    else the host's free memory) beside the summary records of the runs before them.
    progress: show a tqdm bar over the configs (on stderr).
    """
    configs = list(configs)  # counted and indexed to name a failed or interrupted run: a generator's were lost
    for index, config in enumerate(configs):  # before the runs: recording one that failed raised, losing the others
        if not isinstance(config, SimulationConfig):
            raise TypeError(f"run_experiments takes SimulationConfigs; config {index + 1} of {len(configs)} is a "
                            f"{type(config).__name__} (SimulationConfig(**fields) makes one)")
    _check_kept_records(configs)
    runs, failed, errors, stop = [], [], [], None
    # SIGTERM and SIGHUP, which ended the process on the spot, stop it as Ctrl-C; a second stop (a scheduler's own
    # deadline) waits until the summary is whole, and then ends the process
    with signals_unwind(end=False):
        with torch_threads(threads), progress_bar(configs, desc="mean-field runs", unit="run", enabled=progress,
                                                  leave=False) as bar:  # closed, also by Ctrl-C, before a word is said
            Path(out_dir).mkdir(parents=True, exist_ok=True)  # before the runs: a file in its way lost them all at the end
            try:
                for index, config in enumerate(bar):
                    try:
                        traj = simulate(config)
                    except Exception as err:  # recorded, and raised once the others have run
                        traceback.clear_frames(err.__traceback__)  # the tensors of the run that raised, freed now
                        failed.append(failed_run(index, config, err))
                        errors.append(err)
                        logger.warning("run %d of %d (%s) failed: %s", index + 1, len(configs), run_name(config),
                                       failed[-1]["error"])
                        continue
                    record = summarise(traj)
                    del traj  # its states are not held while the next config runs
                    logger.info("%s: spread %.3g, aligned %.3g, %s", record["name"],
                                record["final"]["marginal_spread"][0], record["final"]["fraction_aligned"][0],
                                record["energy_check"])
                    runs.append(record)
            except KeyboardInterrupt as err:  # the runs that finished are kept, as when a config fails
                stop = err
        done = len(runs) + len(failed)  # configs run in order: the one stopped is the next
        interrupted = interrupted_run(done, configs[done]) if stop is not None and done < len(configs) else None
        with stop_signals_held():  # a first stop as it is written waits until it is whole too
            summary = write_summary(runs, out_dir, failed, interrupted)
    kept = f"{Path(out_dir) / 'summary.json'} holds the {len(runs)} that finished"
    if stop is not None:
        if type(stop) not in (KeyboardInterrupt, StopSignal):  # a stop that says more (its own message): as it came
            raise stop
        where = f"during run {done + 1} of {len(configs)} ({run_name(configs[done])})" if interrupted else "after its last run"
        kept += f", under \"failed\" the {len(failed)} that failed" if failed else ""
        kept += ", and names this one under \"interrupted\"" if interrupted else ""
        raise ExperimentsInterrupted(where, interrupted, kept, getattr(stop, "signum", signal.SIGINT)) from None
    bug = next((err for err in errors if not isinstance(err, ValueError)), None)
    if bug is not None:  # a bug, or out of memory: as it came, also after a refusal
        raise bug
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        failure = f"run {first['index'] + 1} of {len(configs)} ({first['name']}) failed{more}: {first['error']}"
        raise ExperimentsFailed(failure, failed, f"{kept} and, under \"failed\", the {len(failed)} that failed") \
            from errors[0]
    return summary


def save_states(traj: Trajectory, path: str | Path) -> Path:
    """Save the recorded states of batch element 0 (needs ``keep_states``) for ``plots.animate_states``.

    The .npz holds states (R, n, d), record_times (R,), labels (n,) and the run name; it is written whole
    (``psattn.files``): a save cut short keeps the file already there.
    """
    if traj.states is None:
        raise ValueError("the run kept no states; set keep_states=True in its config")
    out, states = Path(path), traj.states[:, 0].numpy()  # (R, B, n, d) -> (R, n, d)
    atomic_write(out, lambda f: np.savez_compressed(f, states=states, record_times=traj.record_times.numpy(),
                                                    labels=traj.labels.numpy(), name=np.array(run_name(traj.config))))
    return out
