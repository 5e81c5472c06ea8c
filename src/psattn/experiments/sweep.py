"""Run a list of configs in parallel worker processes, or on a Ray cluster; skip those already
finished.

Each config trains into ``out_dir/<config.name>``. A config whose ``result.json`` exists is not run
again, and an interrupted one resumes from its checkpoint, so rerunning a sweep only does the work
that is left. Each run is trained under its directory's lock (``psattn.training.lock``), so two
sweeps on the same directory at once never train a run twice: one waits and finds it finished. With
``ray_address`` (``"local"`` starts a Ray instance on this machine, ``"auto"`` joins the running cluster,
anything else is a cluster address) each run is a Ray task of one CPU
(one GPU too when the config asks for CUDA); results land in the same directories, which must be
on a file system every node sees.

A stop signal (SIGINT, SIGTERM, SIGHUP) to the sweep's process reaches its workers: running runs
checkpoint at their next step, queued ones are not started, and the sweep raises
``TrainingInterrupted``; the same call then resumes them all. A second signal kills the workers at
once (one waiting on another sweep's run lock cannot stop at a step), and each run resumes from its
last checkpoint. On Ray a stop signal stops the tasks at once, each run at its last checkpoint, and raises
``TrainingInterrupted`` too. A worker whose sweep's process is gone (killed with SIGKILL, which no handler sees)
checkpoints its run at the next step and exits, instead of training on and then waiting for work forever.
A worker killed on its own (SIGKILL from the out-of-memory killer; on Ray, at each of Ray's retries) ends the
sweep with ``WorkerLost``, which names its run: the same call resumes it from its last checkpoint.
``run_within`` runs a sweep in pieces instead: one run after another in this process (or ``workers``
at a time, in worker processes that share the machine's GPU), for a given number of seconds, after
which the runs in progress checkpoint and the rest wait for the next call.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tqdm import tqdm

from psattn.progress import progress_bar
from psattn.training.checkpoint import RunRefused
from psattn.training.config import RUNTIME_FIELDS, RunConfig, config_differences, holds_same_run, with_train_fields
from psattn.training.lock import run_lock
from psattn.training.memory import check_side_by_side
from psattn.training.run_dir import RunResult, load_result, with_data_paths
from psattn.training.signals import (
    STOP_SIGNALS,
    TrainingDiverged,
    TrainingInterrupted,
    WorkerLost,
    on_stop_signals,
    stop_signals_blocked,
    stop_signals_held,
)
from psattn.training.trainer import train

log = logging.getLogger(__name__)
_STOP = None  # in a worker process: the sweep's stop flag
_SWEEP_PID: int | None = None  # in a worker process: the sweep's process, its parent


def _init_worker(stop, sweep_pid: int) -> None:
    """Workers leave stop signals to the sweep's process, which passes a stop on through ``stop``. A worker
    starts with them blocked (``_run_in_pool``): one sent to the group while it starts is ignored, not fatal."""
    global _STOP, _SWEEP_PID
    _STOP, _SWEEP_PID = stop, sweep_pid
    # the bars' lock, of this process alone (a spawned worker shares no lock with the others anyway): tqdm's own
    # is a semaphore, which a worker killed with SIGKILL left behind, and the sweep ended with a warning about it
    tqdm.set_lock(threading.RLock())
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _orphaned() -> bool:
    """Whether this worker's sweep process is gone (the worker was handed to another parent)."""
    return _SWEEP_PID is not None and os.getppid() != _SWEEP_PID


def _stop_requested() -> bool:
    """A worker's stop check: the sweep passed a stop on, or is gone."""
    return (_STOP is not None and bool(_STOP.value)) or _orphaned()


def train_unless_finished(config: RunConfig, run_dir: str | Path, **kwargs) -> None:
    """Train ``config`` in ``run_dir`` unless it is finished there. Waits while another process
    (another sweep on the same directory) trains it, then finds it finished: no run is trained twice."""
    with run_lock(run_dir, wait=True):
        if load_result(run_dir) is not None:
            _check_run_dir(config, Path(run_dir))  # another sweep may have begun it under another config meanwhile
            log.info("%s: finished by another process", run_dir)
            return
        log.info("%s: training", run_dir)
        train_in_sweep(config, run_dir, **kwargs)


def train_in_sweep(config: RunConfig, run_dir: str | Path, **kwargs) -> RunResult:
    """``train`` ``config`` in ``run_dir``, whose lock the caller holds, as a sweep does: a run there that ``train``
    refuses to go on with (``RunRefused``) is refused with a sweep's way to train it anew, which has no --restart."""
    try:
        return train(config, run_dir, lock=False, **kwargs)
    except RunRefused as err:
        raise err.with_anew(f"delete {run_dir} to train it anew when the sweep runs again, or write to another "
                            "output directory") from None


def _run_one(config_dict: dict[str, Any], run_dir: str, deadline: float | None = None) -> str | None:
    """Train one config in a worker. With a ``deadline`` (``time.monotonic()``, the same clock in every
    process) the run stops there, checkpointed, and one whose loss stops being finite is an outcome:
    its message is returned (None otherwise). A worker whose sweep is gone exits after the run's
    checkpoint: no one would read its result, and the pool's queue would keep it waiting for work."""
    try:
        return _train_one(config_dict, run_dir, deadline)
    finally:
        if _orphaned():
            log.warning("%s: the sweep's process is gone; checkpointed, exiting", run_dir)
            logging.shutdown()
            os._exit(1)


def _train_one(config_dict: dict[str, Any], run_dir: str, deadline: float | None) -> str | None:
    if _STOP is not None and _stop_requested():  # queued before the stop: leave it unstarted
        raise TrainingInterrupted("not started", signal.SIGTERM)
    config = RunConfig.from_dict(config_dict)
    stops = dict(should_stop=None if _STOP is None else _stop_requested, handle_signals=_STOP is None)
    if deadline is None:
        train_unless_finished(config, run_dir, **stops)
        return None
    left = deadline - time.monotonic()
    if left <= 0:  # the piece's time is up: the run waits for the next piece
        return None
    try:
        train_unless_finished(config, run_dir, time_limit_s=left, **stops)
    except TrainingDiverged as err:  # recorded in the run's result: the sweep goes on
        log.warning("%s", err)
        return str(err)
    return None


def estimated_cost(config: RunConfig) -> float:
    """Relative training cost of a run (steps x tokens per step x multiply-adds per token), used to
    start the longest runs first so that no worker idles at the end of a sweep."""
    m = config.model
    tokens = config.train.batch_size * getattr(config.task, "seq_len", 64)
    per_token = m.n_layers * 12 * m.d_model ** 2 + m.vocab_size * m.d_model  # attention + MLP, and the head
    stops_early = 0.5 if config.train.early_stop else 1.0  # a guess: such runs often end half way
    return stops_early * config.train.steps * tokens * per_token


def unique_configs(configs: list[RunConfig]) -> list[RunConfig]:
    """``configs`` with repeats (same name, same config) dropped, in order; experiments share runs
    this way. Two different configs under one name are refused."""
    by_name: dict[str, RunConfig] = {}
    for c in configs:
        if c.name in by_name and by_name[c.name].to_dict() != c.to_dict():
            raise ValueError(f"two different configs are named {c.name!r}")
        by_name.setdefault(c.name, c)
    return list(by_name.values())


def run_sweep(
    configs: list[RunConfig],
    out_dir: str | Path,
    *,
    workers: int | None = None,
    progress: bool = True,
    ray_address: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Train every config not yet finished, the most expensive first, ``workers`` at a time (default:
    one per core) or on Ray; returns the saved results of all configs, keyed by name. Refused before any run
    starts: ``configs`` that are not a list of ``RunConfig`` (TypeError), ``workers`` that is not a positive
    integer, two configs of one name, a name that is not a plain folder name, and a run folder of
    ``out_dir`` that holds another config (ValueError)."""
    _check_configs(configs)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    names = [c.name for c in configs]
    out_dir = Path(out_dir)
    _check_out_dir(configs, out_dir)
    todo = sorted((c for c in configs if load_result(out_dir / c.name) is None), key=estimated_cost, reverse=True)
    log.info("%d of %d runs already finished in %s", len(configs) - len(todo), len(configs), out_dir)
    workers = workers or os.cpu_count() or 1
    if todo and ray_address is not None:
        _run_on_ray(todo, out_dir, ray_address, workers, progress)
    elif todo and workers == 1:
        for config in progress_bar(todo, desc="runs", enabled=progress):
            train_unless_finished(config, out_dir / config.name)
    elif todo:
        _run_in_pool(todo, out_dir, min(workers, len(todo)), progress)
    results = {}
    for name in names:
        result = load_result(out_dir / name)
        if result is None:  # a run that ended without its result (say, Ray workers that do not share out_dir)
            raise RuntimeError(f"{out_dir / name} holds no result after the sweep")
        results[name] = result
    return results


def _runs_elsewhere(saved: Path, config: RunConfig) -> bool:
    """Whether the run saved at ``saved`` is ``config`` but for where it runs (``RUNTIME_FIELDS``: a sweep
    begun on the CPU and continued on a GPU) and where its data lies (``with_data_paths``), which the run
    continues under."""
    try:
        held = RunConfig.from_file(saved)
        return holds_same_run(saved, with_data_paths(with_train_fields(config, held, RUNTIME_FIELDS), held))
    except (OSError, ValueError):
        return False


def _check_configs(configs: list[RunConfig]) -> None:
    """A TypeError unless ``configs`` is a list (or tuple) of ``RunConfig``: one config was "not iterable", and
    a config's dict had "no attribute 'name'"."""
    if not isinstance(configs, list | tuple):
        raise TypeError(f"configs must be a list of RunConfig (a sweep of one run is [config]), got {type(configs).__name__}")
    for config in configs:
        if not isinstance(config, RunConfig):
            raise TypeError(f"configs must be a list of RunConfig (RunConfig.from_dict(data)), got a list holding "
                            f"{type(config).__name__}")


def _check_out_dir(configs: list[RunConfig], out_dir: Path) -> None:
    """Refuse repeated names, and a run directory of ``out_dir`` that holds another config under a name."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError("config names must be unique within a sweep")
    for name in names:  # each run writes into out_dir/<name>, and nowhere else
        if name in ("", ".", "..") or Path(name).name != name or "\\" in name:
            raise ValueError(f"run name {name!r} is not a plain folder name; a sweep writes each run into "
                             f"{out_dir}/<name> and nowhere else")
    for c in configs:
        _check_run_dir(c, out_dir / c.name)


def _check_run_dir(config: RunConfig, run_dir: Path) -> None:
    """Refuse a ``run_dir`` that holds another config than ``config``."""
    saved = run_dir / "config.json"
    if saved.exists() and not holds_same_run(saved, config) and not _runs_elsewhere(saved, config):
        raise ValueError(
            f"{saved.parent} holds a run with a different config than {config.name!r} (it differs in "
            f"{config_differences(saved, config)}; perhaps from an earlier version of the plan): delete that "
            "directory to train it again, or write to another output directory")


def run_within(configs: list[RunConfig], out_dir: str | Path, time_limit_s: float, *, progress: bool = True,
               workers: int = 1) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Train the unfinished configs one after another in this process, in the given order, until
    ``time_limit_s`` seconds have passed: the run then in progress checkpoints at its next step and
    stops, and no other starts (the same call later resumes it). For a sweep in pieces on one GPU.
    With ``workers`` > 1, that many worker processes take the configs in the same order, each one run
    at a time, and all stop at the same moment (on one GPU they share it: more runs in flight where one
    alone leaves it idle between its kernels). A run whose loss stops being finite ends there (its
    result records the step) and the next one starts; ``TrainingDiverged`` is raised after the last,
    naming them. Returns the saved results of the finished configs (diverged ones included), keyed by
    name, and the names of the rest. ``configs`` that are not a list of ``RunConfig`` are a TypeError."""
    _check_configs(configs)
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ValueError(f"the time limit must be a positive number of seconds, got {time_limit_s!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    out_dir = Path(out_dir)
    _check_out_dir(configs, out_dir)
    todo = [c for c in configs if load_result(out_dir / c.name) is None]
    if workers > 1 and len(todo) > 1:
        check_side_by_side(todo, workers)
        deadline = time.monotonic() + time_limit_s
        diverged = _run_in_pool(todo, out_dir, min(workers, len(todo)), progress, deadline=deadline)
    else:
        diverged = _run_in_order(todo, out_dir, time.monotonic() + time_limit_s, progress)
    if diverged:
        more = f" (and {len(diverged) - 1} more runs diverged; their results record where)" if len(diverged) > 1 else ""
        raise TrainingDiverged(diverged[0] + more)
    results = {c.name: load_result(out_dir / c.name) for c in configs}
    return {k: v for k, v in results.items() if v is not None}, [k for k, v in results.items() if v is None]


def _run_in_order(configs: list[RunConfig], out_dir: Path, deadline: float, progress: bool) -> list[str]:
    """``run_within`` in this process: the configs one after another until ``deadline``
    (``time.monotonic()``); returns the messages of the runs that diverged."""
    diverged: list[str] = []
    for config in progress_bar(configs, desc="runs", enabled=progress):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        run_dir = out_dir / config.name
        with run_lock(run_dir, wait=True):
            _check_run_dir(config, run_dir)
            if load_result(run_dir) is None:
                log.info("%s: training (%.0f s left)", run_dir, left)
                try:
                    if train_in_sweep(config, run_dir, time_limit_s=left).timed_out:
                        break
                except TrainingDiverged as err:  # an outcome, recorded in the run's result: go on with the next
                    log.warning("%s", err)
                    diverged.append(str(err))
    return diverged


def _run_in_pool(configs: list[RunConfig], out_dir: Path, workers: int, progress: bool,
                 deadline: float | None = None) -> list[str]:
    """Worker processes, one run each at a time, taking the configs in order. A stop signal to this
    process is passed on to the workers: runs not yet started are cancelled, running ones checkpoint at
    their next step and stop, and ``TrainingInterrupted`` is raised here once they have; a Ctrl-C after that
    (a second or more later) kills the workers and raises it at once (a second SIGTERM or SIGHUP, as from a
    scheduler's own deadline, leaves them to checkpoint). With a
    ``deadline`` (``time.monotonic()``), runs stop there and none starts after it; returns the messages
    of the runs that diverged (``_run_one``), in the order of ``configs``. A run that fails otherwise
    stops the others as a stop signal would (checkpointed) before its error is raised."""
    context = multiprocessing.get_context("spawn")
    # the stop flag is a byte of shared memory, without a lock: a worker killed while it held an Event's lock (which
    # each step's stop check takes) left it held, and the sweep and the other workers waited on it forever
    stop, diverged = context.RawValue("b", 0), {}
    stopped: list[int] = []  # the stop signals that came
    futures: list = []
    pools: list[ProcessPoolExecutor] = []  # the pool, once there is one
    first: list[float] = []  # when the first stop signal came

    def halt():  # running runs checkpoint at their next step and stop; queued ones never start
        stop.value = 1
        for future in futures:
            future.cancel()

    def forward(signum, _frame):
        if stopped and (signum != signal.SIGINT or time.monotonic() - first[0] < 1):
            return  # one stop sent twice (timeout: to the process and its group), or a scheduler's own: checkpointing
        stopped.append(signum)
        first.append(time.monotonic())
        name = signal.Signals(signum).name
        if len(stopped) == 1:  # a second signal must not re-enter halt() (the futures' locks)
            _say(f"{name}: the running runs checkpoint at their next step and stop; press Ctrl-C again to stop the "
                 "workers at once")
            halt()
            return
        for pool in pools:  # a worker ignores stop signals: kill it
            for process in list((pool._processes or {}).values()):  # None once the pool has shut down
                process.kill()
        raise TrainingInterrupted(f"{name} again: the workers were killed without checkpointing (each run resumes "
                                  "from its last checkpoint); run the same command again to resume", signum)

    # the handlers stay while the pool shuts down, which waits for the running runs to checkpoint
    with on_stop_signals(forward), ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                       initializer=_init_worker, initargs=(stop, os.getpid())) as pool:
        pools.append(pool)
        try:
            with stop_signals_blocked():  # the workers start with them blocked, until _init_worker ignores them
                futures += [pool.submit(_run_one, c.to_dict(), str(out_dir / c.name), deadline) for c in configs]
            processes = dict(pool._processes or {})  # pid -> worker, all started by now
            pending = set(futures)
            with progress_bar(total=len(futures), desc="runs", enabled=progress) as bar:
                while pending:
                    done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        if future.cancelled():
                            continue
                        try:
                            message = future.result()
                        except TrainingInterrupted:
                            if not stopped:
                                raise
                        except BrokenProcessPool:  # a worker was killed (SIGKILL): the pool fails every run left
                            raise _worker_lost(configs, out_dir, processes) from None
                        else:
                            if message is not None:
                                diverged[futures.index(future)] = message
                        bar.update(1)
                    pending = {f for f in pending if not f.cancelled()}  # a cancelled run never completes
        except BaseException:
            with stop_signals_held():  # a signal's handler would wait on the lock halt() holds
                halt()
            raise
    if stopped:
        name = signal.Signals(stopped[0]).name
        raise TrainingInterrupted(f"{name}: the sweep's running runs were checkpointed and the rest not started; "
                                  "run the same command again to resume", stopped[0])
    return [diverged[i] for i in sorted(diverged)]


def _worker_lost(configs: list[RunConfig], out_dir: Path, processes: dict) -> WorkerLost:
    """The error of a pool whose worker ended without a word: which signal, which run (its lock file keeps the pid of
    the worker that last held it)."""
    deadline = time.monotonic() + 1  # its exit code shows once the pool's thread or this one has reaped it
    while not (dead := {pid: p.exitcode for pid, p in processes.items() if p.exitcode not in (None, 0)}) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    lost = [c.name for c in configs if load_result(out_dir / c.name) is None and _lock_holder(out_dir / c.name) in dead]
    codes = sorted(set(dead.values()))
    how = " and ".join(signal.Signals(-c).name if c < 0 and -c in signal.valid_signals() else f"exit code {c}"
                       for c in codes) or "an unknown cause"
    runs = f"training {', '.join(lost)}" if lost else "of the sweep"
    return WorkerLost(f"a worker process {runs} was ended by {how} (SIGKILL is what the out-of-memory killer sends); "
                      "the other running runs were checkpointed and the rest not started: run the same command again "
                      "to resume, each run from its last checkpoint")


def _lock_holder(run_dir: Path) -> int | None:
    """The pid in ``run_dir/.lock`` (the process that last held the run's lock), or None."""
    try:
        return int((run_dir / ".lock").read_text().strip())
    except (OSError, ValueError):
        return None


def _say(message: str) -> None:
    """``message`` on stderr from a signal handler (``print`` may be in the middle of a write it would re-enter)."""
    os.write(2, f"{message}\n".encode())


def _run_on_ray(configs: list[RunConfig], out_dir: Path, address: str, workers: int, progress: bool) -> None:
    try:
        import ray
    except ImportError:
        raise ImportError("running sweeps on Ray needs the ray extra: pip install 'phase-space-attention[ray]'") from None
    started_here = not ray.is_initialized()
    # ray.init installs its own SIGTERM handler (sys.exit) and leaves it after ray.shutdown: the caller's come back
    handlers = _stop_handlers() if started_here else {}
    if started_here:
        if address == "local":
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    stopped: list[int] = []  # the stop signals that came
    try:
        tasks = []
        for c in configs:
            wants_gpu = c.train.device.startswith("cuda") or (c.train.device == "auto" and _cluster_has_gpus(ray))
            gpus = 1 if wants_gpu else 0
            if gpus and address == "local" and not _cluster_has_gpus(ray):  # a cluster's autoscaler may add one
                raise ValueError(f"{c.name} asks for train.device={c.train.device!r}, and this machine's Ray instance has "
                                 "no GPU, so its task would wait forever: set train.device to 'cpu' or 'auto', or "
                                 "run on a cluster with GPUs")
            task = ray.remote(num_cpus=1, num_gpus=gpus)(_run_one)
            tasks.append(task.remote(c.to_dict(), str((out_dir / c.name).resolve())))
        names = {task: c.name for task, c in zip(tasks, configs, strict=True)}
        pending = list(tasks)
        # a stop signal ends the wait (Ray's own handler, once ray.init has run, aborted on SIGTERM with a C++ trace);
        # ray.wait turns the handler's exception into a KeyboardInterrupt, so the handler notes which signal came
        def stop(signum, _frame):
            stopped.append(signum)
            raise KeyboardInterrupt

        with on_stop_signals(stop), progress_bar(total=len(tasks), desc="runs (ray)", enabled=progress) as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                try:
                    ray.get(done)
                except ray.exceptions.RayTaskError as err:  # its text is the worker's traceback: raise the run's error
                    if isinstance(getattr(err, "cause", None), Exception):
                        raise err.cause from None
                    raise
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError,
                        ray.exceptions.NodeDiedError) as err:  # the worker itself died, on every retry Ray made
                    raise WorkerLost(f"the Ray worker training {names[done[0]]} died ({type(err).__name__}: killed, "
                                     "say by the out-of-memory killer, each time Ray retried it); the other runs were "
                                     "stopped: run the same command again to resume, each run from its last "
                                     "checkpoint") from None
                bar.update(len(done))
    except KeyboardInterrupt:
        if not stopped:
            raise
        raise TrainingInterrupted(f"{signal.Signals(stopped[0]).name}: the sweep's Ray tasks were stopped, each run at "
                                  "its last checkpoint; run the same command again to resume", stopped[0]) from None
    finally:
        if started_here:
            ray.shutdown()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)


def _stop_handlers() -> dict[int, Any]:
    """The Python handlers of SIGINT and SIGTERM, where they can be set again (in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    return {signum: handler for signum, handler in handlers.items() if handler is not None}  # None: set outside Python


def _cluster_has_gpus(ray) -> bool:
    return ray.cluster_resources().get("GPU", 0) > 0
